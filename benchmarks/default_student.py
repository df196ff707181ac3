"""kamal's default student beside what a user would try instead, under both protocols (issue 31).

Teachers are trained in one workspace and added to another as folders (`kamal add-teacher`): kamal never
sees their training rows. That workspace holds two unlabelled transfer sets, and every student is trained
on each:
- MUKI's protocol: the teachers' own training texts, labels removed (what the paper and its code do);
- the realistic protocol: as many rows none of the teachers trained on (other rows of the train split, then
  the dev split): what a user has.
Before any student, `kamal synthesize` writes text naming the domain and `kamal probe` runs bare, as the
README walks it. Labelled data (the test rows, the teachers' rows and the pool with their gold labels) is
added only after every student is trained: score=auto and commit=auto judge by labelled figures in the
workspace, so a test set present while they decide would tune them on it.

Rows: the supervised reference on each transfer set's gold labels (same budget), each teacher, the
ensemble, the teachers' encoders merged in weight space (each merge method), vanilla-kd, uhc, muki-hard as
published, kamal's default and the default from the merged encoder (`--init merge`); then every score's
selection accuracy on the test rows, on each transfer set (gold labels added afterwards) and on the
generated rows.

    python benchmarks/run.py default-student [--settings 'two teachers'] [--seeds 1,2]
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from common import DOMAIN_PROMPT, HALF_A, HALF_B, RESULTS, WORK, Bench, Workspace, load_split, markdown, pct, \
    sample, summarize, write_results, write_rows

# (label, method, options, other amalgamate arguments)
ROWS = [
    ("vanilla-kd", "vanilla-kd", (), ()),
    ("uhc", "uhc", (), ()),
    ("muki-hard as published (paper=true)", "muki-hard", ("paper=true",), ()),
    ("kamal's default (muki-hard, no options)", "muki-hard", (), ()),
    ("kamal's default, --init merge", "muki-hard", (), ("--init", "merge")),
]
DEFAULT = ROWS[3][0]
MERGES = ("task-arithmetic", "ties", "average")
GENERATED = "synth"
GENERATED_PER_CLASS = 20
PROTOCOLS = {  # name: (transfer dataset, its labelled copy added afterwards, what the tables call it)
    "muki": ("transfer", "teacher-rows", "MUKI's protocol (the teachers' own texts)"),
    "realistic": ("pool", "pool-gold", "realistic (rows no teacher saw)"),
}
SELECTION_DATA = [("test", "test rows"), ("teacher-rows", "the teachers' own rows (MUKI's transfer)"),
                  ("pool-gold", "rows no teacher saw (realistic transfer)"), (GENERATED, "generated")]
SETTINGS = {
    # title: (source workspace, student workspace, {teacher: (labels, base or None[, epochs])})
    "two teachers {5,5}": ("two-halves", "protocols-two-halves", {"half-a": (HALF_A, None), "half-b": (HALF_B, None)}),
    "three teachers {2,3,5}": ("teachers-3", "protocols-teachers-3", {
        "t1-mail-math": (["mail", "math"], None), "t2-games-graphics-sound": (["games", "graphics", "sound"], None),
        "t3-admin-net-science-text-web": (["admin", "net", "science", "text", "web"], None)}),
    "four teachers {2,2,2,4}": ("teachers-4", "protocols-teachers-4", {
        "t1-mail-math": (["mail", "math"], None), "t2-games-graphics": (["games", "graphics"], None),
        "t3-sound-text": (["sound", "text"], None), "t4-admin-net-science-web": (["admin", "net", "science", "web"], None)}),
    "heterogeneous minilm-l6 + minilm-l3": ("heterogeneous", "protocols-heterogeneous", {
        "a-l6": (HALF_A, "minilm-l6"), "b-l3": (HALF_B, "minilm-l3")}),
}


def teacher_rows(bench: Bench) -> list[dict]:
    """The rows every teacher of the source workspaces trained on (common.Bench._add_data's sample)."""
    return _teacher_rows(bench.data_dir, bench.profile.transfer_rows)


def pool_rows(bench: Bench) -> list[dict]:
    """As many rows as the teachers' (all the rest under --full), none of them a teacher's: the train split's
    other rows, then the dev split."""
    return _pool_rows(bench.data_dir, bench.profile.transfer_rows)


@lru_cache
def _teacher_rows(data_dir: Path, n: int | None) -> list[dict]:
    return sample(load_split(data_dir, "train"), n, "transfer")


@lru_cache
def _pool_rows(data_dir: Path, n: int | None) -> list[dict]:
    seen = {r["text"] for r in _teacher_rows(data_dir, n)}
    rest = [r for split in ("train", "dev") for r in load_split(data_dir, split) if r["text"] not in seen]
    return sample(rest, n, "pool")


def _protocol_rows(bench: Bench, protocol: str) -> list[dict]:
    return teacher_rows(bench) if protocol == "muki" else pool_rows(bench)


def _write(ws: Workspace, name: str, rows: list[dict], labelled: bool, role: str) -> None:
    if not any(d["name"] == name for d in ws.json("data")):
        ws("add-data", write_rows(ws.root / "data" / f"{name}.jsonl", rows, labelled), "--name", name,
           "--role", role, quiet=True)


def student_workspace(bench: Bench, source_key: str, key: str, teachers: dict) -> Workspace:
    """Teachers trained in `source_key`, added here as folders; both transfer sets, unlabelled; no labelled data."""
    source = bench.workspace(source_key)
    for name, (labels, base, *epochs) in teachers.items():
        bench.teacher(source, name, labels, base=base, epochs=epochs[0] if epochs else None)
    root = WORK / f"{bench.profile.name}-{key}"
    if not (root / ".kamal").is_dir():
        from kamalcli.cli import cli

        cli.main(["init", str(root)], prog_name="kamal", standalone_mode=False)
        bench._configure(root)
    ws = Workspace(root)
    folders = {t["name"]: t["path"] for t in source.json("teachers")}
    for name in teachers:
        if not ws.has_teacher(name):
            ws("add-teacher", folders[name], "--name", name, quiet=True)
    for protocol, (transfer, *_) in PROTOCOLS.items():
        _write(ws, transfer, _protocol_rows(bench, protocol), labelled=False, role="transfer")
    return ws


def labelled_afterwards(bench: Bench, ws: Workspace) -> None:
    """The labelled sets, added once every student is trained, then probed (RMD fitted as before: on the
    generated text)."""
    _write(ws, "test", sample(load_split(bench.data_dir, "test"), bench.profile.test_rows, "test"), True, "eval")
    for protocol, (_, gold, _) in PROTOCOLS.items():
        _write(ws, gold, _protocol_rows(bench, protocol), True, "eval")
    ws("probe", quiet=True)


def supervised(bench: Bench, protocol: str, seed: int) -> dict:
    """The same base fine-tuned on the transfer set's gold labels, kamal's step budget, in a workspace of its
    own (the students' never holds these labels while they train)."""
    if protocol == "muki":
        return bench.supervised(seed, default_budget=True)
    ws = bench.workspace("supervised")
    rows = pool_rows(bench)
    _write(ws, "pool-gold", rows, True, "eval")
    name = f"supervised-pool-s{seed}-budget"
    if not ws.has_teacher(name):
        bench.say(f"supervised on the pool's gold labels, seed {seed}")
        labels = sorted({r["label"] for r in rows})
        ws("train-teacher", "pool-gold", "--labels", ",".join(labels), "--name", name, "--base", bench.profile.base,
           *bench.profile.train_args(None, seed), quiet=True)
    return ws.json("eval", "--baseline", f"teacher:{name}", "--data", "test")


def _name(protocol: str, label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{protocol} {label}".replace("'s", "")).strip("-")


def _fixed(ws: Workspace, teachers: list[str]) -> dict[str, dict | None]:
    """Rows that train nothing, the same under both protocols (a merge refused: None)."""
    rows = {f"teacher {t}": ws.json("eval", "--baseline", f"teacher:{t}", "--data", "test") for t in teachers}
    rows["ensemble"] = ws.json("eval", "--baseline", "ensemble", "--data", "test")
    for merge in MERGES:
        try:
            rows[f"merge: {merge}"] = ws.json("eval", "--baseline", f"merge:{merge}", "--data", "test")
        except SystemExit:  # teachers of different bases: kamal refuses the merge in one line
            rows[f"merge: {merge}"] = None
    return rows


def run_setting(bench: Bench, title: str, source_key: str, key: str, teachers: dict, protocols: list[str]) -> dict:
    ws = student_workspace(bench, source_key, key, teachers)
    wanted = {_name(p, label) + f"-s{seed}" for p in protocols for label, *_ in ROWS for seed in bench.seeds}
    if any(d["name"] == "test" for d in ws.json("data")) and wanted - {s["name"] for s in ws.json("students")}:
        raise SystemExit(f"{ws.root} already holds labelled data, which new students would be tuned on "
                         "(score=auto reads it): train them in a fresh workspace (move that one away)")
    references = {p: [supervised(bench, p, seed) for seed in bench.seeds] for p in protocols}
    if not any(d["name"] == GENERATED for d in ws.json("data")):
        bench.say(f"kamal synthesize --per-class {GENERATED_PER_CLASS} (prompt naming the domain)")
        ws("synthesize", "--name", GENERATED, "--per-class", GENERATED_PER_CLASS, "--seed", 1,
           "--prompt", DOMAIN_PROMPT, quiet=True)
    bench.say("kamal probe (transfer sets and generated text; no labelled data in the workspace yet)")
    ws("probe", quiet=True)
    names = list(teachers)
    trained = {(protocol, label): [bench.train_student(ws, _name(protocol, label), method, names, seed, options,
                                                       data=PROTOCOLS[protocol][0], extra=extra,
                                                       default_budget=True)
                                   for seed in bench.seeds]
               for protocol in protocols for label, method, options, extra in ROWS}
    labelled_afterwards(bench, ws)
    figures = {"fixed": _fixed(ws, names), "students": {}, "supervised": {}}
    for (protocol, label), students in trained.items():
        results = [bench.student_metrics(ws, s) for s in students]
        figures["students"].setdefault(protocol, {})[label] = {
            "accuracy": summarize([r["accuracy"] for r in results]),
            "macro_f1": summarize([r["macro_f1"] for r in results]),
            "best_step": [r["best_step"] for r in results], "steps": [r["steps"] for r in results],
            "objective": [r["objective"] for r in results]}
    for protocol, results in references.items():
        figures["supervised"][protocol] = {"accuracy": summarize([r["accuracy"] for r in results]),
                                           "macro_f1": summarize([r["macro_f1"] for r in results])}
    figures["selection"] = [s for s in ws.json("report")["selection"]
                            if s["data"] in dict(SELECTION_DATA)]
    figures["section"] = section(title, bench.seeds, protocols, figures)
    return figures


def _cells(summary: dict | None) -> list[str]:
    return ["-", "-"] if summary is None else [pct(summary["accuracy"]), pct(summary["macro_f1"])]


def _summary(metrics: dict | None) -> dict | None:
    return None if metrics is None else {k: summarize([metrics[k]]) for k in ("accuracy", "macro_f1")}


def _selection_cell(s: dict | None) -> str:
    if s is None or s["accuracy"] is None:
        return "-"
    return f"{100 * s['accuracy']:.1f}" + (f" ({s['auroc']:.3f})" if s["auroc"] is not None else "")


def section(title: str, seeds: list[int], protocols: list[str], figures: dict) -> str:
    headers = ["method"] + [f"{PROTOCOLS[p][2]}: {m}" for p in protocols for m in ("accuracy %", "macro-F1 %")]
    rows = [["supervised on the transfer set's gold labels, same budget",
             *[c for p in protocols for c in _cells(figures["supervised"][p])]]]
    fixed = figures["fixed"]  # teachers, ensemble, merges (in that order: the stored JSON sorts its keys)
    order = [k for k in fixed if k.startswith("teacher ")] + ["ensemble"] + [f"merge: {m}" for m in MERGES]
    rows += [[label, *_cells(_summary(fixed[label])) * len(protocols)] for label in order]
    rows += [[label, *[c for p in protocols for c in _cells(figures["students"][p][label])]]
             for label, *_ in ROWS]
    by_data = {}
    for s in figures["selection"]:
        if s["score"].startswith("auto"):  # the report's pick now that labelled data is there, not the students'
            continue
        by_data.setdefault(s["score"], {})[s["data"]] = s
    selection = markdown(["selects the right teacher % (AUROC)", *(t for _, t in SELECTION_DATA)],
                         [[score, *(_selection_cell(cells.get(d)) for d, _ in SELECTION_DATA)]
                          for score, cells in by_data.items()])
    default = figures["students"][protocols[-1]][DEFAULT]["objective"][0] or {}  # what it trained with
    decided = [default["auto"]["line"]] if isinstance(default.get("auto"), dict) else []
    decided += [f"commit {default['commit']}" if "commit" in default else "",
                f"prior: {default.get('prior', 'none')}."]
    verdicts = []
    for p in protocols:
        d = figures["students"][p][DEFAULT]["accuracy"]["mean"]
        e = figures["fixed"]["ensemble"]["accuracy"]
        s = figures["supervised"][p]["accuracy"]["mean"]
        verdicts.append(f"{PROTOCOLS[p][2]}: default - ensemble {100 * (d - e):+.1f} points (target >= 0), "
                        f"default - supervised {100 * (d - s):+.1f} (target >= -5)")
    kept = "; ".join(f"{PROTOCOLS[p][2]}, {label}: {'/'.join(map(str, f['best_step']))} of "
                     f"{'/'.join(map(str, f['steps']))}" for p in protocols for label, *_ in ROWS
                     for f in [figures["students"][p][label]])
    return (f"**{title}** (seeds {','.join(map(str, seeds))})\n\n" + markdown(headers, rows)
            + "\n\nTargets. " + "; ".join(verdicts) + "."
            + "\n\nThe default student (last protocol, first seed) decided: " + " ".join(d for d in decided if d)
            + "\n\n" + selection + f"\n\nEarly stopping kept step (of steps trained): {kept}.")


def default_student(bench: Bench) -> None:
    """Every setting `--settings` names (all by default), under the protocols `--protocol` names (both by
    default); the other settings keep their last figures."""
    protocols = bench.protocols
    payload = {}
    for title, (source_key, key, teachers) in SETTINGS.items():
        if bench.runs(title):
            payload[title] = {**run_setting(bench, title, source_key, key, teachers, protocols),
                              "seeds": bench.seeds, "protocols": protocols}
    # read now, not at the start: another run of this scenario (other settings) may have finished meanwhile
    results = RESULTS / f"{bench.scenario}-{bench.profile.name}.json"
    earlier = json.loads(results.read_text()) if results.is_file() else {}
    for title in SETTINGS:
        if title not in payload and "protocols" in earlier.get(title, {}):  # not the old format
            figures = earlier[title]
            payload[title] = {**figures, "section": section(title, figures["seeds"], figures["protocols"], figures)}
    intro = (f"Teachers trained in one workspace, added to another as folders. Generated text first: `kamal "
             f"synthesize --name {GENERATED} --per-class {GENERATED_PER_CLASS} --seed 1 --prompt \"{DOMAIN_PROMPT}\"`, "
             "then `kamal probe`; labelled data is added only after every student is trained. Runs with `--settings` "
             "merge into this file: the comment above describes the last run, each setting names its own seeds.")
    write_results(bench, payload, "\n\n".join([intro, *(payload[t]["section"] for t in SETTINGS if t in payload)]))


SCENARIOS = {"default-student": default_student}
