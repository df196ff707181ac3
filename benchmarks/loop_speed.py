"""Training-loop throughput of each feature-level method against muki-hard's output-only objective.

Same student, same rows, same step count, one process, methods interleaved per
repeat; on whatever device is given (cpu or cuda). The models have MiniLM-L6's
shape with random weights and the rows are random token ids: speed depends on
shapes, not on values, so nothing needs downloading and a GPU machine without
the model packages can run it.

    python benchmarks/loop_speed.py [--device cuda] [--rows 2048] [--length 64] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def minilm_like(num_labels: int, layers: int = 6, seed: int = 0):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=layers, num_attention_heads=12,
                        intermediate_size=1536, num_labels=num_labels)
    return BertForSequenceClassification(config).eval()


class RandomSources:
    """FeatureSources over random features: cached arrays memory-mapped like the probe's, teachers in the loop."""

    def __init__(self, teachers, encoded, rows: int, device: str, folder: Path):
        self.teachers, self.encoded, self.rows, self.device, self.folder = teachers, encoded, rows, device, folder

    def shapes(self):
        from kamalcli.methods.features import TeacherShape

        return tuple(TeacherShape(f"t{i}", 6, 384) for i in range(len(self.teachers)))

    def misaligned(self):
        return []

    def cached(self, layers):
        from kamalcli.methods.features import feature_key

        out = {}
        for i, wanted in layers.items():
            for layer in wanted:
                path = self.folder / f"f{i}-{layer}.npy"
                array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(self.rows, 384))
                array[:] = np.random.default_rng(i).standard_normal((self.rows, 384)).astype(np.float16)
                array.flush()
                out[feature_key(i, layer)] = np.load(path, mmap_mode="r")
        return out

    def in_loop(self, layers, models=None):
        from kamalcli.methods.features import InLoopTeachers

        per_teacher = [tuple(layers.get(i, ())) for i in range(len(self.teachers))]
        return InLoopTeachers(self.teachers, [self.encoded] * len(self.teachers), per_teacher, self.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch

    from kamalcli.models.batching import Encoded
    from kamalcli.labels import LabelSpace
    from kamalcli.methods import get_method
    from kamalcli.methods.base import FeatureContext, TeacherOutputs
    from kamalcli.train.loop import TrainConfig, train

    rng = np.random.default_rng(0)
    encoded = Encoded([rng.integers(1000, 30000, size=args.length) for _ in range(args.rows)], 0, True)
    space = LabelSpace.from_teachers([("t0", [f"a{i}" for i in range(5)]), ("t1", [f"b{i}" for i in range(5)])])
    logits = tuple(rng.standard_normal((args.rows, 5)).astype(np.float32) for _ in range(2))
    confidence = {"mc-dropout": rng.random((args.rows, 2))}
    outputs = TeacherOutputs(space, ("t0", "t1"), logits, confidence)
    teachers = [minilm_like(5, seed=1), minilm_like(5, seed=2)]
    variants = [("muki-hard", []), ("cfl", []), ("dfa", ["features=pooled"]), ("mt-bert", ["features=pooled"]),
                ("dfa", []), ("mt-bert", [])]
    config = TrainConfig(epochs=1, batch_size=args.batch_size, lr=1e-4, max_length=args.length, device=args.device,
                         checkpoint_every=10**9)
    seconds: dict[str, list[float]] = {}
    teacher_share: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for repeat in range(args.repeats):
            for name, options in variants:
                label = name + (f" ({', '.join(options)})" if options else "")
                method = get_method(name)
                chosen = method.parse(options)
                if method.level == "feature":
                    sources = RandomSources(teachers, encoded, args.rows, args.device, folder)
                    context = FeatureContext(outputs, sources, 6, 384, None, 0, args.batch_size, lambda m: None)
                    objective = method.build(context, chosen)
                else:
                    objective = method.build(outputs, chosen)
                student = minilm_like(len(space), seed=3)
                started = time.perf_counter()
                train(student, encoded, objective, config, folder / f"run-{repeat}-{label}", description=label)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                seconds.setdefault(label, []).append(time.perf_counter() - started)
                stream = getattr(objective.auxiliary, "stream", None)
                if stream is not None:
                    teacher_share[label] = stream.seconds / seconds[label][-1]
    base = min(seconds["muki-hard"])
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu ({torch.get_num_threads()} threads)"
    print(f"\n{args.rows} rows x {args.length} tokens, batch {args.batch_size}, MiniLM-L6 shapes, {device}; best of {args.repeats}\n")
    print("| method | rows/s | time / muki-hard | teachers' forward share |")
    print("|---|---|---|---|")
    for label, values in seconds.items():
        best = min(values)
        share = f"{100 * teacher_share[label]:.0f}%" if label in teacher_share else "-"
        print(f"| {label} | {args.rows / best:.0f} | {best / base:.2f}x | {share} |")


if __name__ == "__main__":
    main()
