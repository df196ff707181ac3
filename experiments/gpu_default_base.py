"""kamal's default student base (minilm-l6 at 128 tokens) on the bench's settings, trained on a lent GPU.

On a 2-core CPU one such student takes about 45 minutes, so the benches train minilm-l3 at 64 tokens. This splits
one `kamal amalgamate` (and one `kamal train-teacher`, the supervised fine-tune) at the seam of the one training
loop: `dump` (here, on the CPU) runs the command up to kamalcli.train.loop.train and saves that call's arguments;
`train` (on the GPU machine) runs the same loop on them and writes the test rows' logits; `score` (here) reads them.

  python experiments/gpu_default_base.py dump        # writes .gpu/ (git-ignored through .git/info/exclude)
  (device) python3 experiments/gpu_default_base.py train .gpu $OUT
  python experiments/gpu_default_base.py score DIR   # the table
"""

from __future__ import annotations

import json
import pickle
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"two teachers": "two", "genre": "genre", "intent": "intent", "word senses": "senses"}  # title start: tag
ENCODER = "bert."  # the pretrained encoder's parameters; the rest (the head) is saved per dump


class Captured(Exception):
    pass


def _capture(path: Path, test_rows: list[dict] | None):
    """A stand-in for kamalcli.train.loop.train that saves its arguments and stops the command."""

    def train(model, encoded, objective, config, workdir, *, rows=None, selector=None, **_):
        from safetensors.torch import save_file

        from kamalcli.models.batching import encode

        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        encoder = ROOT / ".gpu" / "encoder.safetensors"
        if not encoder.exists():
            save_file({k: v.half() for k, v in state.items() if k.startswith(ENCODER)}, str(encoder))
        save_file({k: v for k, v in state.items() if not k.startswith(ENCODER)}, str(path.with_suffix(".head")))
        labels = [model.config.id2label[i] for i in range(len(model.config.id2label))]
        test = None
        if test_rows is not None:
            from transformers import AutoTokenizer
            tokenizer = AutoTokenizer.from_pretrained(_base_folder())
            test = {"encoded": encode(tokenizer, [r["text"] for r in test_rows], config.max_length, config=model.config),
                    "gold": [labels.index(r["label"]) for r in test_rows], "labels": labels}
        import cloudpickle  # the objective's loss is a closure

        with open(path, "wb") as f:
            cloudpickle.dump({"config": config, "encoded": encoded, "objective": objective, "rows": rows,
                         "selector": selector, "model_class": f"{type(model).__module__}:{type(model).__name__}",
                         "model_config": model.config.to_dict(), "test": test}, f)
        raise Captured(path.name)

    return train


def _base_folder() -> str:
    from kamalcli.models.bases import resolve_model_source
    return str(resolve_model_source("minilm-l6"))


def dump() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import default_student as ds
    from common import Workspace

    import kamalcli.train.loop as loop

    out = ROOT / ".gpu"
    out.mkdir(exist_ok=True)
    work = Path("/tmp/gpu-work")
    for words, tag in SETTINGS.items():
        bench, setting = ds.realistic_setting(words, 1)
        source = ds.WORK / f"{bench.profile.name}-{setting.key}"
        copy = work / source.name
        if not copy.exists():
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns("students"))
        ws = Workspace(copy)  # the copy holds the teachers (added as folders) and the transfer sets
        ds.withdraw_labelled(bench, setting, ws)
        ds.generated_and_probed(bench, setting, ws)
        tests = setting.tests(bench)["test"]
        _, method, options, extra = ds.DEFAULT_ROW
        original = loop.train
        try:
            loop.train = _capture(out / f"{tag}-default.pkl", tests)
            try:
                bench.train_student(ws, "gpu-l6", method, list(setting.teachers), 1, options, base="minilm-l6",
                                    data="pool", extra=(*extra, *setting.student, "--max-length", "128"),
                                    default_budget=True)
            except SystemExit:
                pass
            sup = bench.init(work / f"sup-{tag}")
            rows = setting.rows(bench, "realistic")
            ds._write(sup, "pool-gold", rows, True, "eval")
            loop.train = _capture(out / f"{tag}-supervised.pkl", tests)
            try:
                sup("train-teacher", "pool-gold", "--labels", ",".join(sorted({r["label"] for r in rows})), "--name",
                    "sup-l6", "--base", "minilm-l6", *bench.profile.train_args(None, 1), "--max-length", "128")
            except SystemExit:
                pass
        finally:
            loop.train = original
    for path in sorted(out.iterdir()):
        print(f"{path.name}: {path.stat().st_size / 2**20:.1f} MiB")


def train(source: str, dest: str) -> None:
    """On the GPU: every dump's loop, the test rows' logits, timings."""
    import dataclasses
    import importlib

    import numpy as np
    import torch
    from safetensors.torch import load_file

    from kamalcli.models.inference import predict_logits
    from kamalcli.train.loop import train as loop_train

    source_dir, out = Path(source), Path(dest)
    encoder = {k: v.float() for k, v in load_file(str(source_dir / "encoder.safetensors")).items()}
    import os

    smoke = {"steps": 2, "eval_every": 1} if os.environ.get("SMOKE") else {}  # a check of the plumbing, on a CPU
    summary = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__}
    begun, outputs = time.perf_counter(), {}
    for seed in (1, 2):  # the loop's seed (data order, dropout); the head's initial weights are the dump's
        for path in sorted(source_dir.glob("*.pkl")):
            longest = max([v["seconds"] for v in summary.values() if isinstance(v, dict)], default=0.0)
            if seed > 1 and time.perf_counter() - begun + 1.5 * longest > float(os.environ.get("BUDGET_S", 400)):
                break  # the call's time limit: the first seed of every setting comes back whole
            with open(path, "rb") as f:
                d = pickle.load(f)
            module, name = d["model_class"].split(":")
            cls = getattr(importlib.import_module(module), name)
            model = cls(cls.config_class.from_dict(d["model_config"]))
            missing, unexpected = model.load_state_dict({**encoder, **load_file(str(path.with_suffix(".head")))},
                                                        strict=False)
            device = "cuda" if torch.cuda.is_available() else "cpu"
            config = dataclasses.replace(d["config"], device=device, seed=seed, **smoke)
            if d["selector"] is not None:
                d["selector"].device = device
            stem = f"{path.stem}-s{seed}"
            started = time.perf_counter()
            result = loop_train(model, d["encoded"], d["objective"], config, Path("/tmp/work") / stem,
                                rows=d["rows"], selector=d["selector"], description=stem)
            seconds = time.perf_counter() - started
            logits = predict_logits(model, d["test"]["encoded"], batch_size=128, device=device)
            outputs[stem] = logits
            gold = np.asarray(d["test"]["gold"])
            summary[stem] = {"seconds": seconds, "steps": result.steps, "best_step": result.best_step,
                             "accuracy": float((logits.argmax(1) == gold).mean()), "missing": list(missing),
                             "unexpected": list(unexpected), "labels": d["test"]["labels"], "gold": gold.tolist()}
            print(stem, {k: v for k, v in summary[stem].items() if k not in ("labels", "gold")}, flush=True)
            (out / "summary.json").write_text(json.dumps(summary))
            np.savez(out / "logits.npz", **outputs)  # few files come back from the machine: one for every logit


def score(folder: str) -> None:
    import numpy as np

    summary = json.loads((Path(folder) / "summary.json").read_text())
    print(summary["device"], summary["torch"])
    for stem, s in summary.items():
        if not isinstance(s, dict):
            continue
        logits = np.load(Path(folder) / "logits.npz")[stem]
        gold, predicted = np.asarray(s["gold"]), logits.argmax(1)
        f1s = []
        for c in sorted(set(gold.tolist())):
            tp = ((predicted == c) & (gold == c)).sum()
            precision = tp / max((predicted == c).sum(), 1)
            recall = tp / max((gold == c).sum(), 1)
            f1s.append(0.0 if tp == 0 else 2 * precision * recall / (precision + recall))
        print(f"{stem:20s} accuracy {100 * (predicted == gold).mean():5.1f}  macro-F1 {100 * np.mean(f1s):5.1f}  "
              f"{s['seconds']:6.1f} s  steps {s['steps']} best {s['best_step']}")


if __name__ == "__main__":
    {"dump": lambda: dump(), "train": lambda: train(*sys.argv[2:4]), "score": lambda: score(sys.argv[2])}[sys.argv[1]]()
