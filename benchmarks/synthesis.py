"""Data-free amalgamation figures: steered generation (speed, faithfulness) and students on generated text.

synthesis-speed: token steering (the paper's) against chunk steering (kamal's) and plain generation,
side by side in one run, with smollm2-135m and the two-halves teachers: texts per minute at a stated
length and m, the share of time in the LM and in the teacher, the steering teacher's mean p(class),
and the share a judge (a classifier fine-tuned on the real labels of all ten topics) assigns to the
class a text was steered to.

data-free (two teachers) and data-free-three (three): `kamal synthesize` for every teacher, then students
trained on the generated text beside the same methods on the real transfer text, and the ensemble.
"""

from __future__ import annotations

import time

from common import DOMAIN_PROMPT as PROMPT
from common import Bench, markdown, pct, summarize, write_results
from scenarios import two_teacher_workspace

LENGTH = 32
# (row label, strength lambda, mode, top-m, chunk tokens, chunk candidates)
CONFIGS = [
    ("plain (lambda 0), m 20", 0.0, "token", 20, 8, 8),
    ("token steering, lambda 1, m 20", 1.0, "token", 20, 8, 8),
    ("token steering, lambda 3, m 20", 3.0, "token", 20, 8, 8),
    ("chunk steering, lambda 1, 8 candidates x 8 tokens, m 20", 1.0, "chunk", 20, 8, 8),
    ("chunk steering, lambda 3, 8 candidates x 8 tokens, m 20", 3.0, "chunk", 20, 8, 8),
]


def _judge(bench: Bench):
    """The supervised classifier over all ten topics (the benchmarks' upper bound), as a judge."""
    from kamalcli.models.loading import load_classifier, load_tokenizer

    metrics = bench.supervised(1)
    ws = bench.workspace("supervised")
    [teacher] = [t for t in ws.json("teachers") if t["name"] == "supervised-s1"]
    model, tokenizer = load_classifier(teacher["path"]), load_tokenizer(teacher["path"])
    return model, tokenizer, teacher["labels"], metrics["accuracy"]


def _judge_labels(judge, texts: list[str]) -> list[str]:
    import torch

    model, tokenizer, labels, _ = judge
    with torch.inference_mode():
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
        return [labels[i] for i in model(**encoded).logits.argmax(-1).tolist()]


def synthesis_speed(bench: Bench, classes_per_teacher: int = 5, batch: int = 8) -> None:
    from types import SimpleNamespace

    import numpy as np

    from kamalcli.models.bases import resolve_lm_source
    from kamalcli.synth.steering import SteeringConfig, generate
    from kamalcli.synth.synthesize import load_models

    ws = two_teacher_workspace(bench)
    teachers = [SimpleNamespace(**t) for t in ws.json("teachers") if t["name"] in ("half-a", "half-b")]
    judge = _judge(bench)
    lm, scorers = load_models(resolve_lm_source("smollm2-135m"), teachers, 64, "cpu")
    rows, payload = [], {}
    for label_row, strength, mode, m, chunk, candidates in CONFIGS:
        config = SteeringConfig(strength, m, 0.9, LENGTH, mode, chunk, candidates)
        texts, wanted, steering_p, seconds, lm_s, teacher_s, tokens = [], [], [], 0.0, 0.0, 0.0, 0
        for teacher in teachers:
            for class_index, label in enumerate(teacher.labels[:classes_per_teacher]):
                bench.say(f"{label_row}: {teacher.name} / {label}")
                started = time.perf_counter()
                out, timing = generate(lm, scorers[teacher.name], class_index, [PROMPT.format(label=label)] * batch,
                                       config, seed=class_index)
                seconds += time.perf_counter() - started
                lm_s, teacher_s, tokens = lm_s + timing.lm_seconds, teacher_s + timing.teacher_seconds, tokens + timing.new_tokens
                texts += out
                wanted += [label] * len(out)
                steering_p += np.exp(scorers[teacher.name].log_probs(out)[:, class_index].numpy()).tolist()
        judged = _judge_labels(judge, texts)
        result = {
            "texts": len(texts), "seconds": seconds, "texts_per_minute": 60 * len(texts) / seconds,
            "new_tokens": tokens, "lm_share": lm_s / seconds, "teacher_share": teacher_s / seconds,
            "steering_p": float(np.mean(steering_p)),
            "judge_agrees": float(np.mean([a == b for a, b in zip(judged, wanted)])),
            "examples": texts[:: batch][:4],
        }
        payload[label_row] = result
        rows.append([label_row, f"{result['texts_per_minute']:.1f}", f"{100 * result['lm_share']:.0f}",
                     f"{100 * result['teacher_share']:.0f}", f"{result['steering_p']:.3f}",
                     f"{100 * result['judge_agrees']:.1f}"])
    table = markdown(["generation", "texts / min", "LM time %", "teacher time %", "steering teacher p(class)",
                      "judge agrees %"], rows)
    table += (f"\n\nsmollm2-135m, {LENGTH} new tokens at most, top-p 0.9; "
              f"{classes_per_teacher} classes of each of the two teachers (minilm-l3, five topics each), {batch} "
              f"texts per class generated together; 2-core CPU shared with other jobs. Judge: the same base "
              f"fine-tuned on the labelled train split of all ten topics ({100 * judge[3]:.1f}% on the test split).")
    write_results(bench, {"configs": payload, "length": LENGTH, "prompt": PROMPT, "judge_accuracy": judge[3]}, table)


def _synthesized(bench: Bench, ws, name: str, teachers: list[str], per_class: int, strength: float, mode: str) -> None:
    if any(d["name"] == name for d in ws.json("data")):
        return
    bench.say(f"synthesize {name}: {per_class} per class, lambda {strength}, {mode} steering")
    ws("synthesize", "--name", name, "--per-class", per_class, "--strength", strength, "--steer", mode,
       "--max-new-tokens", LENGTH, "--prompt", PROMPT, *[a for t in teachers for a in ("--teacher", t)], quiet=True)


# muki-hard selects with RMD fitted on the generated text: what a user without data has. (Without --rmd-fit,
# score=auto would fit RMD on the teachers' training rows, which these benchmark teachers, trained by kamal, have.)
# score=rmd: these rows measure RMD alone, as they did before score=auto fused it with the prototype score.
SYNTH_RMD = ("--rmd-fit", "synth")
DATA_FREE_METHODS = [("muki-hard", ("score=rmd",), SYNTH_RMD), ("vanilla-kd", (), ()), ("uhc", (), ()),
                     ("stratanet", (), ())]


def data_free(bench: Bench) -> None:
    """Two teachers over the halves of topics10: students on generated text against the same methods on
    real transfer text, and where the RMD Gaussians are fitted."""
    ws = two_teacher_workspace(bench)
    table, payload, synth = _data_free_rows(bench, ws, ["half-a", "half-b"], DATA_FREE_METHODS)
    rmd = _rmd_fits(bench, ws, synth)
    table += "\n\nRMD teacher selection on the test split, by where the Gaussians were fitted:\n\n" + markdown(
        ["Gaussians fitted on", "selects the right teacher %", "AUROC"],
        [[k, f"{100 * v['accuracy']:.1f}", f"{v['auroc']:.3f}"] for k, v in rmd.items()])
    write_results(bench, {"rows": payload, "synth": synth["provenance"], "rmd_selection": rmd}, table)


THIRDS = {"third-a": ["admin", "games", "graphics"], "third-b": ["mail", "math", "net"],
          "third-c": ["science", "sound", "text", "web"]}


def data_free_three(bench: Bench) -> None:
    """Three teachers {3, 3, 4} over topics10: every data-free method on generated against real text."""
    ws = bench.workspace("three-thirds")
    for name, labels in THIRDS.items():
        bench.teacher(ws, name, labels)
    table, payload, synth = _data_free_rows(bench, ws, list(THIRDS), DATA_FREE_METHODS)
    write_results(bench, {"rows": payload, "synth": synth["provenance"]}, table)


def _data_free_rows(bench: Bench, ws, teachers: list[str], methods, per_class: int = 20, strength: float = 3.0,
                    mode: str = "chunk") -> tuple[str, dict, dict]:
    """A student on the generated rows trains for as many epochs as make about one epoch of the real
    transfer rows (the same number of examples seen)."""
    import math
    from dataclasses import replace

    _synthesized(bench, ws, "synth", teachers, per_class, strength, mode)
    synth = next(d for d in ws.json("data") if d["name"] == "synth")
    epochs = math.ceil(bench.profile.transfer_rows / synth["rows"])
    on_synth = replace(bench, profile=replace(bench.profile, student_epochs=epochs))
    rows, payload = [], {}
    ensemble = bench.baseline(ws, "ensemble")
    rows.append(["ensemble (no training)", "-", f"{100 * ensemble['accuracy']:.1f}"])
    payload["ensemble"] = ensemble["accuracy"]
    for method, options, extra in methods:
        for data, runner in (("synth", on_synth), ("transfer", bench)):
            name = f"df-{method}{'-synthfit' if extra else ''}-{data}"
            results = [runner.student(ws, name, method, teachers, seed, options, data=data, extra=extra)
                       for seed in bench.seeds]
            acc = summarize([r["accuracy"] for r in results])
            payload[f"{method} on {data}"] = {"accuracy": acc, "train_seconds": [r["train_seconds"] for r in results],
                                              "objective": [r.get("objective") for r in results]}
            label = method + (" (RMD fitted on the generated text)" if extra else "")
            rows.append([label, "generated" if data == "synth" else "real transfer text", pct(acc)])
    table = markdown(["method", "trained on", "accuracy %"], rows)
    table += (f"\n\nTeachers: {', '.join(teachers)}. Generated: {synth['rows']} texts ({per_class} per class, "
              f"smollm2-135m, {mode} steering, lambda {strength:g}, {LENGTH} tokens), students {epochs} epochs on "
              f"them; real transfer text: {bench.profile.transfer_rows} rows of the train split without labels, 1 "
              f"epoch. Test: {bench.profile.test_rows} rows of the test split, ten topics. Students: "
              f"{bench.profile.base}.")
    return table, payload, synth


def _rmd_fits(bench: Bench, ws, synth: dict) -> dict:
    """RMD selection accuracy (test split) with Gaussians fitted on the teachers' training rows (ws), on the
    generated text, and on transfer rows the teachers are confident on (the same teachers registered without
    their training rows, in a workspace of their own)."""
    import pyarrow.parquet as pq

    def rmd_row(w):
        return next(s for s in w.json("report")["selection"] if s["data"] == "test" and s["score"] == "rmd")

    out = {"the teachers' training rows": rmd_row(ws)}
    other = bench.workspace("data-free-rmd")
    if not other.has_teacher("half-a"):
        for t in ws.json("teachers"):
            if t["name"] in ("half-a", "half-b"):
                other("add-teacher", t["path"], "--name", t["name"], quiet=True)
        table = pq.read_table(_dataset_path(ws, "synth"), columns=["text", "label"])
        copy = other.root / "data" / "synth.parquet"
        pq.write_table(table, copy)
        other("add-data", copy, "--name", "synth", "--label-column", "label", quiet=True)
    other("probe", "--data", "transfer", "--data", "test", "--mc-samples", "1", "--max-length",
          str(bench.profile.max_length), quiet=True)
    out["transfer rows the teacher is confident on (circular)"] = rmd_row(other)
    other("probe", "--data", "test", "--mc-samples", "1", "--max-length", str(bench.profile.max_length),
          "--rmd-fit", "synth", quiet=True)
    out["generated text (kamal synthesize)"] = rmd_row(other)
    return {k: {"accuracy": v["accuracy"], "auroc": v["auroc"]} for k, v in out.items()}


def _dataset_path(ws, name: str):
    import sqlite3

    with sqlite3.connect(ws.root / ".kamal" / "kamal.db") as conn:
        (path,) = conn.execute("SELECT path FROM datasets WHERE name = ?", [name]).fetchone()
    return ws.root / path


SCENARIOS = {"synthesis-speed": synthesis_speed, "data-free": data_free, "data-free-three": data_free_three}
