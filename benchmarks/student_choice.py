"""Which student to train: cost and accuracy of the student choices side by side, on a default-student setting's
realistic protocol (teachers added as folders, a pool they never saw, `kamal synthesize`, a bare `kamal probe`, test
rows added afterwards). kamal's default method (muki-hard, no options) trains each choice from the same cached teacher
outputs; beside them the teachers' ensemble and supervised references on the pool's gold labels. A time is the
whole `kamal amalgamate` (or train-teacher) command. python benchmarks/run.py student-choice [--choices 'head;l3']"""

from __future__ import annotations

import argparse
import time

import default_student as ds
from common import markdown, pct, summarize, write_results

# (key, what the table calls it, amalgamate arguments beyond kamal's default budget); settings as data
CHOICES = [
    ("l3", "fine-tune minilm-l3, 64 tokens (the bench's student)", ("--student", "minilm-l3", "--max-length", "64")),
    ("l6", "fine-tune minilm-l6, 128 tokens (kamal's default base)", ("--student", "minilm-l6", "--max-length", "128")),
    ("head-rates", "head on frozen minilm-l6, 128 tokens (--fit head)",
     ("--student", "minilm-l6", "--max-length", "128", "--fit", "head")),
    ("head-all", "minilm-l6 head, then fine-tune, 128 tokens (--fit head-then-all)",
     ("--student", "minilm-l6", "--max-length", "128", "--fit", "head-then-all")),
]
# supervised references on the pool's gold labels: (key, what the table calls it, train-teacher arguments)
REFERENCES = [
    ("sup-head", "supervised: head on frozen minilm-l6, 128 tokens (--fit head)",
     ("--base", "minilm-l6", "--max-length", "128", "--fit", "head")),
    ("sup-l6", "supervised: fine-tune minilm-l6, 128 tokens",
     ("--base", "minilm-l6", "--max-length", "128")),
]


def _timed(call) -> tuple[object, float]:
    started = time.perf_counter()
    return call(), time.perf_counter() - started


def _student(bench, setting, ws, key: str, arguments: tuple[str, ...]) -> tuple[str, float | None]:
    """kamal's default student with these arguments (unless trained before); its name and command seconds."""
    _, method, options, _ = ds.DEFAULT_ROW
    name = f"choice-{key}-s{bench.seeds[0]}"
    if ws.has_student(name):
        return name, None
    ds.withdraw_labelled(bench, setting, ws)
    bench.say(f"amalgamate {name}")
    teachers = [a for t in setting.teachers for a in ("--teacher", t)]
    _, seconds = _timed(lambda: ws("amalgamate", "--method", method, "--name", name, "--data", "pool", *teachers,
                                   "--steps", "600", "--lr", "1e-4", "--batch-size", "32", "--seed",
                                   str(bench.seeds[0]), *arguments, quiet=True))
    return name, seconds


def _reference(bench, key: str, arguments: tuple[str, ...]) -> tuple[dict, float | None]:
    """A supervised reference on the pool's gold labels (train-teacher in the supervised workspace)."""
    ws = bench.workspace("supervised")
    rows = ds.pool_rows(bench)
    ds._write(ws, "pool-gold", rows, True, "eval")
    name = f"{key}-pool-s{bench.seeds[0]}"
    seconds = None
    if not ws.has_teacher(name):
        bench.say(f"supervised reference {name}")
        labels = ",".join(sorted({r["label"] for r in rows}))
        _, seconds = _timed(lambda: ws("train-teacher", "pool-gold", "--labels", labels, "--name", name, "--steps",
                                       "600", "--lr", "1e-4", "--batch-size", "32", "--seed", str(bench.seeds[0]),
                                       *arguments, quiet=True))
    return ws.json("eval", "--baseline", f"teacher:{name}", "--data", "test"), seconds


def run(settings: list[str], seed: int, choices: list[str] | None) -> None:
    bench, setting = ds.realistic_setting(settings[0], seed)
    bench.scenario = "student-choice"
    ws = ds.student_workspace(bench, setting)
    ds.withdraw_labelled(bench, setting, ws)
    ds.generated_and_probed(bench, setting, ws)
    wanted = [c for c in CHOICES if choices is None or c[0] in choices]
    order = sorted(wanted, key=lambda c: choices.index(c[0]) if choices else 0)  # trained in the order asked
    trained = {key: _student(bench, setting, ws, key, arguments) for key, _, arguments in order}
    ds.labelled_afterwards(bench, setting, ws)
    records = {s["name"]: s for s in ws.json("students")}
    rows, figures = [], {}
    for key, label, _ in wanted:
        name, seconds = trained[key]
        metrics = ws.json("eval", name, "--data", "test")
        train = records[name]["train"]
        figures[key] = {"label": label, "accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                        "train_seconds": train["seconds"], "command_seconds": seconds, "steps": train["steps"]}
    for key, label, arguments in [r for r in REFERENCES if choices is None or r[0] in choices]:
        metrics, seconds = _reference(bench, key, arguments)
        figures[key] = {"label": label, "accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                        "command_seconds": seconds}
    for key, label in (("ensemble", "teachers' ensemble"), ("zero-shot", "zero-shot: nearest label name in minilm-l6, no teacher")):
        found = ws.json("eval", "--baseline", key, "--data", "test")
        figures[key] = {"label": label, **{k: found[k] for k in ("accuracy", "macro_f1")}}
    for key, f in figures.items():
        minutes = f"{f['command_seconds'] / 60:.1f}" if f.get("command_seconds") else "-"
        trained_s = f"{f['train_seconds']:.0f}" if f.get("train_seconds") is not None else "-"
        rows.append([f["label"], pct(summarize([f["accuracy"]])), pct(summarize([f["macro_f1"]])), minutes, trained_s])
    title = next(t for t in ds.SETTINGS if bench.runs(t))
    table = (f"**{title}**, realistic protocol, seed {seed}; students: kamal's default (muki-hard, no options), "
             "at most 600 steps with early stopping, lr 1e-4, batch 32.\n\n"
             + markdown(["student", "accuracy %", "macro-F1 %", "command minutes", "training seconds"], rows))
    write_results(bench, {"setting": title, "figures": figures}, table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="run.py student-choice", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="two teachers", help="the default-student setting (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--choices", help="keys separated by ';' (default: every choice and reference): "
                        + ", ".join(k for k, *_ in CHOICES + REFERENCES))
    args = parser.parse_args(argv)
    run([args.settings], args.seed, args.choices.split(";") if args.choices else None)
