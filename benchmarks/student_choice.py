"""Which student to train: cost and accuracy of the student choices side by side, on default-student settings'
realistic protocol; kamal's default method trains each choice from the same cached teacher outputs, beside the ensemble
and supervised references on the pool's gold labels. A time is the whole command. A run of one setting keeps the
others' figures. python benchmarks/run.py student-choice [--settings genre] [--choices 'head;l3']"""

from __future__ import annotations

import argparse
import time

import default_student as ds
from common import markdown, pct, stored_settings, summarize, write_results

L6, BUDGET = ("--max-length", "128"), ("--steps", "600", "--lr", "1e-4", "--batch-size", "32", "--seed")
# (key, what the table calls it, amalgamate arguments beyond kamal's default budget); settings as data
CHOICES = [
    ("l3", "fine-tune minilm-l3, 64 tokens (the bench's student)", ("--student", "minilm-l3", "--max-length", "64")),
    ("l6", "fine-tune minilm-l6, 128 tokens (kamal's default base)", ("--student", "minilm-l6", *L6)),
    ("head-rates", "head on frozen minilm-l6, 128 tokens (--fit head)", ("--student", "minilm-l6", *L6, "--fit", "head")),
    ("head-all", "minilm-l6 head, then fine-tune, 128 tokens (--fit head-then-all)",
     ("--student", "minilm-l6", *L6, "--fit", "head-then-all"))]
# supervised references on the pool's gold labels: (key, what the table calls it, train-teacher arguments)
REFERENCES = [("sup-head", "supervised: head on frozen minilm-l6, 128 tokens (--fit head)", ("--base", "minilm-l6", *L6, "--fit", "head")),
              ("sup-l6", "supervised: fine-tune minilm-l6, 128 tokens", ("--base", "minilm-l6", *L6))]


def _timed(call) -> tuple[object, float]:
    started = time.perf_counter()
    return call(), time.perf_counter() - started


def _student(bench, setting, ws, key: str, arguments: tuple[str, ...]) -> tuple[str, float | None]:
    """kamal's default student with these arguments (unless trained before); its name and command seconds."""
    _, method, options, _ = ds.DEFAULT_ROW
    if key == "l3":  # the bench's own student: default-student's default row, trained there once
        return ds.train_default(bench, setting, ws), None
    name, teachers = f"choice-{key}-s{bench.seeds[0]}", [a for t in setting.teachers for a in ("--teacher", t)]
    if ws.has_student(name):
        return name, None
    ds.withdraw_labelled(bench, setting, ws)
    bench.say(f"amalgamate {name}")
    return name, _timed(lambda: ws("amalgamate", "--method", method, "--name", name, "--data", "pool", *teachers, *BUDGET,
                                   str(bench.seeds[0]), *arguments, quiet=True))[1]


def _reference(bench, setting, key: str, arguments: tuple[str, ...]) -> tuple[dict, float | None]:
    """A supervised reference on the pool's gold labels (train-teacher in the setting's reference workspace)."""
    rows, ws = setting.rows(bench, "realistic"), setting.reference(bench)
    ds._write(ws, "pool-gold", rows, True, "eval")
    name, seconds, labels = f"{key}-pool-s{bench.seeds[0]}", None, ",".join(sorted({r["label"] for r in rows}))
    if not ws.has_teacher(name):
        bench.say(f"supervised reference {name}")
        seconds = _timed(lambda: ws("train-teacher", "pool-gold", "--labels", labels, "--name", name, *BUDGET,
                                    str(bench.seeds[0]), *arguments, quiet=True))[1]
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
    records, figures = {s["name"]: s for s in ws.json("students")}, {}
    for key, label, _ in wanted:
        name, seconds = trained[key]
        metrics, train = ws.json("eval", name, "--data", "test"), records[name]["train"]
        figures[key] = {"label": label, "accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                        "train_seconds": train["seconds"], "command_seconds": seconds, "steps": train["steps"]}
    for key, label, arguments in [r for r in REFERENCES if choices is None or r[0] in choices]:
        metrics, seconds = _reference(bench, setting, key, arguments)
        figures[key] = {"label": label, "accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                        "command_seconds": seconds}
    for key, label in (("ensemble", "teachers' ensemble"), ("zero-shot", "zero-shot: nearest label name in minilm-l6, no teacher")):
        found = ws.json("eval", "--baseline", key, "--data", "test")
        figures[key] = {"label": label, **{k: found[k] for k in ("accuracy", "macro_f1")}}
    stored, title = stored_settings(bench), next(t for t in ds.SETTINGS if bench.runs(t))
    for key, f in figures.items():  # a student or reference trained before keeps the minutes its command took
        f["command_seconds"] = f.get("command_seconds") or stored.get(title, {}).get("figures", {}).get(key, {}).get("command_seconds")
    stored[title] = {"seed": seed, "figures": {**stored.get(title, {}).get("figures", {}), **figures}}
    write_results(bench, {"settings": stored}, "\n\n".join(_table(t, stored[t]) for t in ds.SETTINGS if t in stored))


def _table(title: str, stored: dict) -> str:
    rows = []
    for key in [k for k in [c[0] for c in CHOICES + REFERENCES] + ["ensemble", "zero-shot"] if k in stored["figures"]]:
        f = stored["figures"][key]
        rows.append([f["label"], pct(summarize([f["accuracy"]])), pct(summarize([f["macro_f1"]])),
                     f"{f['command_seconds'] / 60:.1f}" if f.get("command_seconds") else "-",
                     f"{f['train_seconds']:.0f}" if f.get("train_seconds") is not None else "-"])
    return (f"**{title}**, realistic protocol, seed {stored['seed']}; students: kamal's default (muki-hard, no "
            "options), at most 600 steps with early stopping, lr 1e-4, batch 32.\n\n"
            + markdown(["student", "accuracy %", "macro-F1 %", "command minutes", "training seconds"], rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="run.py student-choice", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="two teachers", help="a default-student setting (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--choices", help="keys separated by ';' (default: every choice and reference): "
                        + ", ".join(k for k, *_ in CHOICES + REFERENCES))
    args = parser.parse_args(argv)
    run([args.settings], args.seed, args.choices.split(";") if args.choices else None)
