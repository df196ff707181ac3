"""kamal's default student beside what a user would try instead, under both protocols (issue 31).

Teachers are trained in one workspace and added to another as folders; every student is trained on MUKI's transfer
set (the teachers' own texts) and the realistic one (rows no teacher saw), after `kamal synthesize` and a bare
`kamal probe`. Labelled sets are added only after every student is trained, as test sets. A run merges into the
stored section: protocols and seeds it did not run keep their stored figures.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

import corpora
import cross_lingual
from common import AT_DEFAULTS, DEFAULT_DATA, DOMAIN_PROMPT, HALF_A, HALF_B, PROFILES, RESULTS, WORK, Bench, Workspace, \
    load_split, markdown, pct, sample, stored_settings, summarize, write_results, write_rows

# (label, method, options, other amalgamate arguments)
ROWS = [
    ("vanilla-kd", "vanilla-kd", (), ()),
    ("uhc", "uhc", (), ()),
    ("muki-hard as published (paper=true)", "muki-hard", ("paper=true",), ()),
    ("kamal's default (muki-hard, no options)", "muki-hard", (), ()),
    ("kamal's default, --init merge", "muki-hard", (), ("--init", "merge"))]
DEFAULT_ROW = ROWS[3]
DEFAULT = DEFAULT_ROW[0]
# In the names of kamal's default rows: their target, smooth=auto (earlier students, without it, are not reused)
DEFAULT_TARGET = "sm10"  # smooth=auto, 10 neighbours (a short tag: names are at most 64 characters)
MERGES = ("task-arithmetic", "ties", "average")
GENERATED = "synth"
GENERATED_PER_CLASS = 20
PROTOCOLS = {  # name: (transfer dataset, its labelled copy added afterwards, what the tables call it)
    "muki": ("transfer", "teacher-rows", "MUKI's protocol (the teachers' own texts)"),
    "realistic": ("pool", "pool-gold", "realistic (rows no teacher saw)")}
SELECTION_DATA = [("test", "test rows"), ("teacher-rows", "the teachers' own rows (MUKI's transfer)"),
                  ("pool-gold", "rows no teacher saw (realistic transfer)"), (GENERATED, "generated")]


@dataclass(frozen=True)
class Setting:
    """Where a setting's teachers come from and what its students learn from and are tested on."""
    key: str                                                 # the students' workspace
    teachers: tuple[str, ...]
    source: Callable[[Bench], Workspace]                     # trains the teachers (unless done), returns their workspace
    rows: Callable[[Bench, str], list[dict]]                 # a protocol's transfer rows, with their gold labels
    tests: Callable[[Bench], dict[str, list[dict]]]          # labelled test sets, the headline first
    supervised: Callable[[Bench, str, int], dict[str, dict]]  # (protocol, seed): the reference's metrics per test set
    base: str | None = None                                  # the students' base (None: the profile's)
    student: tuple[str, ...] = ()                            # more amalgamate arguments for every student
    prompt: str | None = DOMAIN_PROMPT                       # synthesize --prompt (None: kamal's own)
    role: str = "tune"                                       # tune: rules were chosen on it; confirm: never looked at
    head_reference: Callable[[Bench, int], dict] | None = None  # seed -> a head on frozen vectors of the pool's gold
    methods: tuple[str, ...] = tuple(r[0] for r in ROWS)     # the ROWS it trains (their labels)
    reference: Callable[[Bench], Workspace] = lambda bench: bench.workspace("supervised")  # supervised references' home


def topics(source_key: str, key: str, teachers: dict) -> Setting:
    """A debian-topics setting: {teacher: (labels, base or None[, epochs])} trained in source_key's workspace."""
    def source(bench: Bench) -> Workspace:
        ws = bench.workspace(source_key)
        for name, (labels, base, *epochs) in teachers.items():
            bench.teacher(ws, name, labels, base=base, epochs=epochs[0] if epochs else None)
        return ws

    return Setting(key, tuple(teachers), source, _protocol_rows, _topics_tests, _topics_supervised,
                   head_reference=lambda bench, seed: supervised(bench, "realistic", seed, head=True))


def corpus_setting(corpus: str, teachers: dict, role: str) -> Setting:
    """A setting from a package-shipped corpus (benchmarks/corpora.py): {teacher: (labels, base or None[, epochs])}
    trained on the corpus's teacher rows in a workspace of their own; the pool and test rows of their labels only."""
    known = {label for labels, *_ in teachers.values() for label in labels}

    def part(bench: Bench, name: str) -> list[dict]:
        n = bench.profile.test_rows if name == "test" else bench.profile.transfer_rows
        return [r for r in corpora.splits(corpus)[name] if r["label"] in known][:n]  # n None: all

    def source(bench: Bench) -> Workspace:
        ws = bench.init(WORK / f"{bench.profile.name}-{corpus}-teachers")
        _write(ws, "labelled", part(bench, "teachers"), True, "eval")
        for name, (labels, base, *epochs) in teachers.items():
            bench.teacher(ws, name, labels, base=base, epochs=epochs[0] if epochs else None)
        return ws

    def reference_workspace(bench: Bench) -> Workspace:
        ws = bench.init(WORK / f"{bench.profile.name}-{corpus}-supervised")
        _write(ws, "test", part(bench, "test"), True, "test")
        return ws

    return Setting(f"protocols-{corpus}", tuple(teachers), source,
                   lambda bench, protocol: part(bench, "teachers" if protocol == "muki" else "pool"),
                   lambda bench: {"test": part(bench, "test")},
                   lambda bench, protocol, seed: {"test": supervised(bench, protocol, seed, ws=reference_workspace(
                       bench), rows=part(bench, "pool" if protocol == "realistic" else "teachers"))},
                   prompt=None, role=role, methods=tuple(r[0] for r in ROWS if "--init" not in r[3]), reference=reference_workspace,
                   head_reference=lambda bench, seed: supervised(bench, "realistic", seed, head=True, ws=reference_workspace(
                       bench), rows=part(bench, "pool")))


def teacher_rows(bench: Bench) -> list[dict]:
    """The rows every teacher of the source workspaces trained on (common.Bench._add_data's sample)."""
    return _teacher_rows(bench.data_dir, bench.profile.transfer_rows)


def pool_rows(bench: Bench) -> list[dict]:
    """As many rows as the teachers', none of them a teacher's: the train split's other rows, then dev."""
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


def _topics_supervised(bench: Bench, protocol: str, seed: int) -> dict[str, dict]:
    return {"test": supervised(bench, protocol, seed)}


def _topics_tests(bench: Bench) -> dict[str, list[dict]]:
    return {"test": sample(load_split(bench.data_dir, "test"), bench.profile.test_rows, "test")}


SETTINGS = {
    "two teachers {5,5}": topics("two-halves", "protocols-two-halves", {"half-a": (HALF_A, None),
                                                                          "half-b": (HALF_B, None)}),
    "three teachers {2,3,5}": topics("teachers-3", "protocols-teachers-3", {
        "t1-mail-math": (["mail", "math"], None), "t2-games-graphics-sound": (["games", "graphics", "sound"], None),
        "t3-admin-net-science-text-web": (["admin", "net", "science", "text", "web"], None)}),
    "four teachers {2,2,2,4}": topics("teachers-4", "protocols-teachers-4", {
        "t1-mail-math": (["mail", "math"], None), "t2-games-graphics": (["games", "graphics"], None),
        "t3-sound-text": (["sound", "text"], None), "t4-admin-net-science-web": (["admin", "net", "science", "web"], None)}),
    "heterogeneous minilm-l6 + minilm-l3": topics("heterogeneous", "protocols-heterogeneous", {
        "a-l6": (HALF_A, "minilm-l6"), "b-l3": (HALF_B, "minilm-l3")}),
    # MUKI's Table 5: English debian topics and Chinese product-review sentiment, multilingual-e5-small's first layers
    "cross-lingual en-topics + zh-sentiment": Setting(
        "protocols-cross-lingual", cross_lingual.TEACHERS, cross_lingual.teachers_workspace,
        cross_lingual.protocol_rows, cross_lingual.test_sets, cross_lingual.supervised, base=cross_lingual.BASE,
        student=cross_lingual.STUDENT, prompt=None),
    # issue 64's wider bench: kinds unlike debian-topics, from text packages ship (benchmarks/corpora.py)
    "sentiment: five grades of valence {2,3}": corpus_setting("vader-valence", {
        "grades-negative": (["strongly negative", "negative"], None),
        "grades-neutral-positive": (["neutral", "positive", "strongly positive"], None)}, role="tune"),
    "genre: books of the King James Bible {3,3}": corpus_setting("kjv-genre", {
        "old-law-history-wisdom": (["law", "history", "wisdom and poetry"], None),
        "prophets-gospels-epistles": (["prophets", "gospels", "epistles"], None)}, role="confirm"),
    "intent: a weather skill and a date-time skill {7,7}": corpus_setting("ovos-intents", {
        "weather-skill": (["hourly forecast", "daily forecast", "hourly temperature", "high temperature",
                           "low temperature", "several days forecast", "weekend forecast"], None),
        "date-time-skill": (["what time is it", "what time will it be", "date future weekend", "date last weekend",
                             "what month is it", "weekday for date", "current date"], None)}, role="confirm"),
    "word senses: three unequal teachers, minilm-l6 + minilm-l3 {2,4,6}": corpus_setting("wordnet-supersense", {
        "living-l6": (["animal", "plant"], "minilm-l6"),
        "matter-l3": (["food", "body", "substance", "location"], None),
        "abstract-l3-1ep": (["artifact", "person", "communication", "cognition", "act", "time"], None, 1)},
        role="confirm"),
    "verb senses: two teachers of four verb classes {4,4}": corpus_setting("wordnet-verbs", {
        "moving-l3": (["motion", "contact", "body", "competition"], None),
        "minding-l3": (["communication", "cognition", "change", "possession"], None)}, role="confirm"),
    "outlets: six health-news outlets' tweets {3,3}": corpus_setting("health-outlets", {
        "bbc-goodhealth-kaiser": (["bbc", "good health", "kaiser health news"], None),
        "npr-everyday-reuters": (["npr", "everyday health", "reuters"], None)}, role="confirm"),
}


def _write(ws: Workspace, name: str, rows: list[dict], labelled: bool, role: str) -> None:
    if not any(d["name"] == name for d in ws.json("data")):
        ws("add-data", write_rows(ws.root / "data" / f"{name}.jsonl", rows, labelled), "--name", name, "--role", role, quiet=True)


def student_workspace(bench: Bench, setting: Setting) -> Workspace:
    """The setting's teachers added as folders to a workspace of its own; both transfer sets, unlabelled."""
    source = setting.source(bench)
    ws = bench.init(WORK / f"{bench.profile.name}-{setting.key}")
    folders = {t["name"]: t["path"] for t in source.json("teachers")}
    for name in setting.teachers:
        if not ws.has_teacher(name):
            ws("add-teacher", folders[name], "--name", name, quiet=True)
    for protocol, (transfer, *_) in PROTOCOLS.items():
        if protocol in bench.protocols:
            _write(ws, transfer, setting.rows(bench, protocol), labelled=False, role="transfer")
    return ws


def labelled_afterwards(bench: Bench, setting: Setting, ws: Workspace) -> None:
    """The labelled sets (the test sets, then each transfer set with its gold labels), added once every student is
    trained, as test sets, then probed."""
    gold = {gold: setting.rows(bench, p) for p, (_, gold, _) in PROTOCOLS.items() if p in bench.protocols}
    for name, rows in {**setting.tests(bench), **gold}.items():
        _write(ws, name, rows, True, "test")
    ws("probe", quiet=True)


def withdraw_labelled(bench: Bench, setting: Setting, ws: Workspace) -> None:
    """Before new students train: every eval set (auto would judge by it) leaves, a cut run's gold rows too."""
    for name in [d["name"] for d in ws.json("data") if d["role"] == "eval"]:
        bench.say(f"kamal remove-data {name} (labelled: no student may be tuned on it)")
        ws("remove-data", name, quiet=True)


# the supervised reference a user makes in a minute: a logistic head on the default base's frozen sentence vectors
HEAD_REFERENCE = ("--base", "minilm-l6", "--max-length", "128", "--fit", "head")


def supervised(bench: Bench, protocol: str, seed: int, default_budget: bool = True, head: bool = False,
               ws: Workspace | None = None, rows: list[dict] | None = None) -> dict:
    """The base fine-tuned on the transfer set's gold labels (head: HEAD_REFERENCE instead), in a workspace of its
    own (debian-topics' unless ws; rows: the transfer set, debian-topics' pool unless given)."""
    if protocol == "muki" and ws is None and not head:
        return bench.supervised(seed, default_budget=default_budget)
    ws = ws or bench.workspace("supervised")
    rows = pool_rows(bench) if rows is None else rows
    data = "pool-gold" if protocol == "realistic" else "teacher-gold"
    _write(ws, data, rows, True, "eval")
    name = f"supervised-{'head-' if head else ''}{'pool' if protocol == 'realistic' else 'teacher-rows'}-s{seed}"
    name += f"-{AT_DEFAULTS}" if default_budget else ""
    if head and ws.has_teacher(f"sup-head-pool-s{seed}"):  # student-choice's: the same rows, base and settings
        name = f"sup-head-pool-s{seed}"
    if not ws.has_teacher(name):
        bench.say(f"supervised {'head ' if head else ''}on the {data} labels, seed {seed}")
        labels = sorted({r["label"] for r in rows})
        epochs = None if default_budget else bench.profile.student_epochs
        train = bench.profile.train_args(epochs, seed)
        if head:  # its own base and length
            at = train.index("--max-length")
            train = [*HEAD_REFERENCE, *train[:at], *train[at + 2:]]
        ws("train-teacher", data, "--labels", ",".join(labels), "--name", name,
           *(train if head else ("--base", bench.profile.base, *train)), quiet=True)
    return ws.json("eval", "--baseline", f"teacher:{name}", "--data", "test")


def realistic_setting(words: str, seed: int = 1) -> tuple[Bench, Setting]:
    """The quick bench for the one setting whose title starts with `words`, realistic protocol, one seed."""
    bench = Bench("default-student", PROFILES["quick"], DEFAULT_DATA, [seed], settings=[words], protocols=["realistic"])
    return bench, next(s for title, s in SETTINGS.items() if bench.runs(title))


def train_default(bench: Bench, setting: Setting, ws: Workspace, data: str = PROTOCOLS["realistic"][0],
                  name: str | None = None, tag: str = "") -> str:
    """kamal's default student as run_setting trains it (with a tag: realistic-default-TAG); its name."""
    _, method, options, extra = DEFAULT_ROW
    name = f"realistic-default-{tag}" if tag else (name or _name("realistic", DEFAULT))  # names: 64 characters
    return bench.train_student(ws, name, method, list(setting.teachers), bench.seeds[0],
                               options, base=setting.base, data=data, extra=(*extra, *setting.student),
                               default_budget=True)


def _name(protocol: str, label: str) -> str:
    tag = f" {DEFAULT_TARGET}" if label.startswith("kamal's default") else ""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{protocol} {label} {AT_DEFAULTS}{tag}".replace("'s", "")).strip("-")


def _fixed(ws: Workspace, teachers: tuple[str, ...], tests: list[str]) -> dict[str, dict[str, dict | None]]:
    """Rows that train nothing, the same under both protocols, per test set (a merge refused: None)."""
    def measured(which: str) -> dict[str, dict | None]:
        try:
            return {t: ws.json("eval", "--baseline", which, "--data", t) for t in tests}
        except SystemExit:  # teachers of different bases: kamal refuses the merge in one line
            return {t: None for t in tests}

    named = [(f"teacher {t}", f"teacher:{t}") for t in teachers] + [("ensemble", "ensemble")]
    named += [(f"merge: {m}", f"merge:{m}") for m in MERGES] + PEERS
    return {label: measured(which) for label, which in named}


# label-free peers with no teacher: label names in templates, and muki-hard's prior (the generated text's prototypes)
PEERS = [("zero-shot: label names in minilm-l6", "zero-shot"), ("prior alone: prototypes of the generated text",
                                                                  f"prior:{GENERATED}")]


def _per_test(values: list[dict | None], tests: list[str]) -> dict[str, dict] | None:
    """Accuracy per test set beyond the headline, summarized over seeds."""
    if len(tests) < 2 or any(v is None or None in v.values() for v in values):
        return None
    return {t: summarize([v[t]["accuracy"] for v in values]) for t in tests[1:]}


def generated_and_probed(bench: Bench, setting: Setting, ws: Workspace) -> None:
    """As the README walks it: `kamal synthesize` (once), then a bare `kamal probe`."""
    if not any(d["name"] == GENERATED for d in ws.json("data")):
        bench.say(f"kamal synthesize --per-class {GENERATED_PER_CLASS}")
        prompt = ("--prompt", setting.prompt) if setting.prompt else ()
        ws("synthesize", "--name", GENERATED, "--per-class", GENERATED_PER_CLASS, "--seed", 1, *prompt, quiet=True)
    bench.say("kamal probe (transfer sets and generated text)")
    ws("probe", quiet=True)


def run_setting(bench: Bench, setting: Setting, protocols: list[str]) -> dict:
    ws = student_workspace(bench, setting)
    rows = [r for r in ROWS if r[0] in setting.methods]
    wanted = {_name(p, label) + f"-s{seed}" for p in protocols for label, *_ in rows for seed in bench.seeds}
    if wanted - {s["name"] for s in ws.json("students")}:
        withdraw_labelled(bench, setting, ws)
    tests = list(setting.tests(bench))
    references = {p: [setting.supervised(bench, p, seed) for seed in bench.seeds] for p in protocols}
    heads = [setting.head_reference(bench, seed) for seed in bench.seeds] if setting.head_reference else []
    generated_and_probed(bench, setting, ws)
    trained = {(protocol, label): [bench.train_student(ws, _name(protocol, label), method, list(setting.teachers),
                                                       seed, options, base=setting.base, data=PROTOCOLS[protocol][0],
                                                       extra=(*extra, *setting.student), default_budget=True)
                                   for seed in bench.seeds]
               for protocol in protocols for label, method, options, extra in rows}
    labelled_afterwards(bench, setting, ws)
    fixed = _fixed(ws, setting.teachers, tests)
    figures = {"fixed": {label: by_test[tests[0]] for label, by_test in fixed.items()},
               "fixed_per_test": {label: _per_test([by_test], tests) for label, by_test in fixed.items()},
               "tests": tests, "students": {}, "supervised": {}}
    for (protocol, label), students in trained.items():
        results = [bench.student_metrics(ws, s, tests[0]) for s in students]
        others = [{t: ws.json("eval", s, "--data", t) for t in tests} for s in students] if len(tests) > 1 else []
        figures["students"].setdefault(protocol, {})[label] = {
            "accuracy": summarize([r["accuracy"] for r in results]),
            "macro_f1": summarize([r["macro_f1"] for r in results]),
            "per_test": _per_test(others, tests),
            "best_step": [r["best_step"] for r in results], "steps": [r["steps"] for r in results],
            "objective": [r["objective"] for r in results]}
    for protocol, results in references.items():
        figures["supervised"][protocol] = {"accuracy": summarize([r[tests[0]]["accuracy"] for r in results]),
                                           "macro_f1": summarize([r[tests[0]]["macro_f1"] for r in results]),
                                           "per_test": _per_test(results, tests)}
    if heads:
        figures["supervised_head"] = {k: summarize([h[k] for h in heads]) for k in ("accuracy", "macro_f1")}
    figures["student_lr"] = trained_lr(ws, [s for students in trained.values() for s in students])
    figures["selection"] = [s for s in ws.json("report")["selection"] if s["data"] in dict(SELECTION_DATA)]
    return figures  # default_student renders its section, once merged with the stored protocols


def trained_lr(ws: Workspace, students: list[str]) -> list[float]:
    """The learning rates the students' runs record (one, unless students from other runs were mixed in)."""
    runs = {r["name"]: r for r in ws.json("runs") if r["kind"] == "amalgamate" and r["status"] == "done"}
    return sorted({runs[name]["params"]["train"]["lr"] for name in students if name in runs})


def _rate(figures: dict) -> str:
    """What the section says of the students' learning rate (runs before it was recorded: the profile's 3e-4)."""
    from kamalcli.settings import TRAIN
    rates = figures.get("student_lr")
    if not rates:
        return "students at the quick profile's lr 3e-4"
    return "students at lr " + ", ".join(f"{r:g}" for r in rates) + (" (kamal's default)" if rates == [TRAIN.lr] else "")


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
    head = figures.get("supervised_head")  # the realistic pool's gold labels only
    rows += [["supervised: logistic head on frozen minilm-l6 vectors of the pool's gold labels",
              *[c for p in protocols for c in (_cells(head) if p == "realistic" else ["-", "-"])]]] if head else []
    fixed = figures["fixed"]  # teachers, ensemble, merges, peers (in that order: the stored JSON sorts its keys)
    order = [k for k in fixed if k.startswith("teacher ")] + ["ensemble"] + [f"merge: {m}" for m in MERGES]
    order += [label for label, _ in PEERS if label in fixed]
    rows += [[label, *_cells(_summary(fixed[label])) * len(protocols)] for label in order]
    rows += [[label, *[c for p in protocols for c in _cells(figures["students"][p].get(label))]] for label, *_ in ROWS
             if label in figures["students"][protocols[0]]]
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
    decided += [f"commit {default['commit']}" if "commit" in default else "", f"prior: {default.get('prior', 'none')}."]
    verdicts = [_verdict(p, figures) for p in protocols]
    kept = "; ".join(f"{PROTOCOLS[p][2]}, {label}: {'/'.join(map(str, f['best_step']))} of "
                     f"{'/'.join(map(str, f['steps']))}" for p in protocols for label, *_ in ROWS
                     if label in figures["students"][p] for f in [figures["students"][p][label]])
    role = f"{figures['role']} setting; " if "role" in figures else ""
    return (f"**{title}** ({role}{_seeds(seeds, figures)}; {_rate(figures)})\n\n" + markdown(headers, rows)
            + _per_test_table(protocols, figures, order) + "\n\nTargets. " + "; ".join(verdicts) + "."
            + "\n\nThe default student (last protocol, first seed) decided: " + " ".join(d for d in decided if d)
            + "\n\n" + selection + f"\n\nEarly stopping kept step (of steps trained): {kept}.")


def _verdict(protocol: str, figures: dict) -> str:
    """Issue 64's targets: the default against the best label-free peer (accuracy and macro-F1 each, >= +3 points)
    and against the stronger supervised reference (>= -5 on the confirm mean)."""
    students = figures["students"][protocol]
    peers = [{k: students[label][k]["mean"] for k in ("accuracy", "macro_f1")} for label, *_ in ROWS if label != DEFAULT
             and label in students
             and "init" not in label] + [m for label, m in figures["fixed"].items() if m is not None
                                         and not label.startswith("teacher ")]
    default = {k: students[DEFAULT][k]["mean"] for k in ("accuracy", "macro_f1")}
    supervised = [figures["supervised"][protocol]["accuracy"]["mean"]]
    if protocol == "realistic" and figures.get("supervised_head"):
        supervised.append(figures["supervised_head"]["accuracy"]["mean"])
    gaps = {k: 100 * (default[k] - max(p[k] for p in peers)) for k in default}
    return (f"{PROTOCOLS[protocol][2]}: default - best label-free peer {gaps['accuracy']:+.1f} accuracy, "
            f"{gaps['macro_f1']:+.1f} macro-F1 (targets >= +3); default - stronger supervised reference "
            f"{100 * (default['accuracy'] - max(supervised)):+.1f} (target >= -5 on the confirm mean)")


def _per_test_table(protocols: list[str], figures: dict, fixed_order: list[str]) -> str:
    """Accuracy on each test set beyond the headline (the cross-lingual setting's languages); empty if none."""
    tests = figures.get("tests", ["test"])[1:]
    if not tests:
        return ""

    def cells(per_test: dict | None) -> list[str]:
        return [pct(per_test[t]) if per_test else "-" for t in tests]

    rows = [["supervised on the transfer set's gold labels, same budget",
             *[c for p in protocols for c in cells(figures["supervised"][p]["per_test"])]]]
    rows += [[label, *cells(figures["fixed_per_test"][label]) * len(protocols)] for label in fixed_order]
    rows += [[label, *[c for p in protocols for c in cells(figures["students"][p][label]["per_test"])]] for label, *_ in ROWS
             if label in figures["students"][protocols[0]]]
    headers = ["accuracy % per test set"] + [f"{PROTOCOLS[p][2]}: {t}" for p in protocols for t in tests]
    return "\n\n" + markdown(headers, rows)


def with_stored_figures(figures: dict, earlier: dict) -> dict:
    """Merge a run into its stored section: protocols and seeds it did not run keep their figures."""
    if not earlier.get("protocols"):
        return figures
    stored_seeds = {p: earlier.get("seeds_by_protocol", {}).get(p, earlier["seeds"]) for p in earlier["protocols"]}
    seeds, students, supervised = {}, {}, {}
    for p in PROTOCOLS:
        if p in figures["protocols"] and p in stored_seeds and set(earlier["students"][p]) == set(figures["students"][p]):
            old, new = stored_seeds[p], figures["seeds"]
            seeds[p] = sorted(set(old) | set(new))
            students[p] = {label: _seed_union(earlier["students"][p][label], old, entry, new)
                           for label, entry in figures["students"][p].items()}
            supervised[p] = _seed_union(earlier["supervised"][p], old, figures["supervised"][p], new)
        elif p in figures["protocols"]:
            seeds[p], students[p], supervised[p] = figures["seeds"], figures["students"][p], figures["supervised"][p]
        elif p in stored_seeds:
            seeds[p], students[p], supervised[p] = stored_seeds[p], earlier["students"][p], earlier["supervised"][p]
    rates = sorted(set(earlier.get("student_lr", [])) | set(figures.get("student_lr", [])))
    return {**figures, "protocols": list(seeds), "seeds_by_protocol": seeds, "seeds": sorted(set().union(*seeds.values())),
            "students": students, "supervised": supervised, "student_lr": rates}


def _seed_union(stored: dict, stored_seeds: list[int], run: dict, run_seeds: list[int]) -> dict:
    """One row's figures over the union of its seeds, in seed order; the run's figures win for a seed in both."""
    by_seed = {seed: _one_seed(stored, i) for i, seed in enumerate(stored_seeds)}
    by_seed |= {seed: _one_seed(run, i) for i, seed in enumerate(run_seeds)}
    return _joined(run, [by_seed[seed] for seed in sorted(by_seed)])


def _one_seed(entry, i: int):
    """The i-th seed's part of a row: a summary's value, a per-seed list's item; None stays None."""
    if isinstance(entry, dict) and "values" in entry:
        return entry["values"][i]
    if isinstance(entry, dict):
        return {key: _one_seed(value, i) for key, value in entry.items()}
    return entry[i] if isinstance(entry, list) else entry


def _joined(template, parts: list):
    """The inverse of _one_seed over several seeds, shaped like template (a row of the run)."""
    if isinstance(template, dict) and "values" in template:
        return summarize(parts)
    if isinstance(template, dict):
        return {key: _joined(value, [part[key] for part in parts]) for key, value in template.items()}
    return list(parts) if isinstance(template, list) else template


def _seeds(seeds: list[int], figures: dict) -> str:
    by_protocol = figures.get("seeds_by_protocol")
    if not by_protocol or len({tuple(s) for s in by_protocol.values()}) == 1:
        return "seeds " + ",".join(map(str, seeds))
    return "; ".join(f"seed{'s' if len(s) > 1 else ''} {','.join(map(str, s))} under {PROTOCOLS[p][2]}" for p, s in by_protocol.items())


def default_student(bench: Bench) -> None:
    """Every setting `--settings` names, under the protocols `--protocol` names; the others keep theirs."""
    protocols = bench.protocols
    payload = {}
    for title, setting in SETTINGS.items():
        if bench.runs(title):
            payload[title] = {**run_setting(bench, setting, protocols), "seeds": bench.seeds, "protocols": protocols,
                              "role": setting.role}
    # read now, not at the start: another run of this scenario (other settings) may have finished meanwhile
    results = RESULTS / f"{bench.scenario}-{bench.profile.name}.json"
    earlier = json.loads(results.read_text()) if results.is_file() else {}
    for title, figures in payload.items():
        merged = with_stored_figures(figures, earlier.get(title, {}))
        payload[title] = {**merged, "section": section(title, merged["seeds"], merged["protocols"], merged)}
    for title in SETTINGS:
        if title not in payload and "protocols" in earlier.get(title, {}):  # not the old format
            figures = earlier[title]
            payload[title] = {**figures, "section": section(title, figures["seeds"], figures["protocols"], figures)}
    intro = (f"Teachers trained in one workspace, added to another as folders. Generated text first: `kamal "
             f"synthesize --name {GENERATED} --per-class {GENERATED_PER_CLASS} --seed 1 --prompt \"{DOMAIN_PROMPT}\"` "
             f"({'; '.join(t for t, s in SETTINGS.items() if s.prompt is None)}: no `--prompt`, so kamal's default), "
             "then `kamal probe`; labelled data is added only after every student is trained, as test sets.")
    write_results(bench, payload, "\n\n".join([intro, *(payload[t]["section"] for t in SETTINGS if t in payload)]), merged=True)


# issue 64, item 4: each `auto` of the default replaced by its fixed alternative, one at a time (realistic protocol)
ABLATIONS = ["score=mc-dropout", "refit=none", "pick_smooth=0", "reweight=false", "commit=0", "commit=1", "prior=none", "smooth=0"]


def default_ablation(bench: Bench) -> None:
    """The default and its seven ablations on each setting `--settings` names; stored settings keep their figures."""
    stored = stored_settings(bench)
    _, method, options, extra = DEFAULT_ROW
    for title, setting in SETTINGS.items():
        if not bench.runs(title):
            continue
        ws = student_workspace(bench, setting)
        withdraw_labelled(bench, setting, ws)
        generated_and_probed(bench, setting, ws)
        names, teachers, seed = {None: train_default(bench, setting, ws)}, list(setting.teachers), bench.seeds[0]
        arguments = dict(base=setting.base, data=PROTOCOLS["realistic"][0], extra=(*extra, *setting.student),
                         default_budget=True)
        for ablation in ABLATIONS:  # one whose target and training are the default's is the default's student
            names[ablation] = bench.train_student(ws, "ablate-" + re.sub(r"[^A-Za-z0-9]+", "-", ablation), method, teachers,
                                                  seed, (*options, ablation), **arguments)
        same = {ablation for ablation in ABLATIONS if names[ablation] == names[None]}
        labelled_afterwards(bench, setting, ws)
        stored.setdefault(title, {"role": setting.role, "seeds": {}})["seeds"][str(seed)] = {
            key or "default": {**{k: ws.json("eval", name, "--data", "test")[k] for k in ("accuracy", "macro_f1")},
                               "same_as_default": key in same}
            for key, name in names.items()}
    write_results(bench, {"settings": stored}, ablation_table(stored), merged=True)


def ablation_table(stored: dict) -> str:
    """Accuracy points the default loses when one auto is fixed (negative: the auto helps), mean over seeds; the rule."""
    titles = [t for t in SETTINGS if t in stored]
    confirm = [t for t in titles if stored[t]["role"] == "confirm"]
    runs = lambda t, key: [s for s in stored[t]["seeds"].values() if key in s]  # noqa: E731
    cell = lambda t, k: f"{100 * np.mean([s['default'][k] for s in runs(t, 'default')]):.1f}"  # noqa: E731
    rows = [["kamal's default (accuracy / macro-F1 %)", *(f"{cell(t, 'accuracy')} / {cell(t, 'macro_f1')}" for t in titles), "", ""]]
    for ablation in ABLATIONS:  # a setting stored before an ablation existed: "-"
        ran = [t for t in titles if runs(t, ablation)]
        gain = {t: np.mean([100 * (s[ablation]["accuracy"] - s["default"]["accuracy"]) for s in runs(t, ablation)]) for t in ran}
        average = sum(gain[t] for t in confirm) / len(confirm) if confirm and set(confirm) <= set(ran) else None
        keep = "-" if average is None else "keep" if average < 0 and max(gain[t] for t in confirm) <= 1 else "drop"
        same = {t for t in ran if all(s[ablation].get("same_as_default") for s in runs(t, ablation))}
        cells = ["-" if t not in ran else f"{gain[t]:+.1f}" + " (same)" * (t in same) for t in titles]
        rows.append([ablation, *cells, "-" if average is None else f"{average:+.1f}", keep])
    headers = ["accuracy points against the default", *(f"{t} ({stored[t]['role']}; seeds {','.join(stored[t]['seeds'])})"
                                                         for t in titles), "confirm mean", "auto kept?"]
    return ("Each row fixes one `auto` of the default, on the realistic protocol, the mean over the seeds named; a "
            "negative figure is what the auto adds. Kept: it helps on the confirm mean and never costs more than 1 "
            "point on a confirm setting. (same): `kamal amalgamate --dry-run` found the same target and training as "
            "the default's, so the default's student stands for it.\n\n" + markdown(headers, rows))


# issue 65: gold labels given as a user gives them: an eval set (probe measures on them) and `--gold`; the peers on them
GOLD_ROWS = (100,)                # labelled rows per student: every choice
GOLD_CHOICES = ("random", "mixed", "queue", "balanced", "diverse")  # random rows; label-queue --student DEFAULT's strategies
KAMAL_CHOICES = ("random", "mixed", "queue")  # kamal trains on these (4-10 minutes each on 2 cores); the others: stored
KAMAL_CURVE = (("kamal", "kamal"), ("kamal, the teachers' target", "teachers_target"), ("logistic peer", "logistic"))
CURVE_ROWS, CURVE_DRAWS = (25, 50, 200), {1: ("random", "queue"), 2: ("random", "mixed")}  # the labels curve: a seed, its choices
strategy_of = lambda choice: "disagree" if choice == "queue" else choice  # noqa: E731  (label-queue's default before: stored as queue)
GOLD_TABLE_ROWS = [("kamal's default with {} gold rows (an eval set, `--gold`)", "kamal"), ("... the teachers' target, the gold rows' "
                   "loss beside it (before they chose the target)", "teachers_target"), ("... with `--rmd-fit` too: the prior from the "
                   "gold rows alone (the guide's way before)", "rmd_fit"), ("the peer on the same rows: logistic regression to convergence "
                   "on minilm-l6 mean vectors", "logistic"), ("the peer on the same rows: SetFit (contrastive fine-tuning of minilm-l6, "
                   "then a logistic head; 20 pair iterations, 1 epoch)", "setfit")]


def gold_labels(bench: Bench) -> None:
    """kamal's default with GOLD_ROWS gold rows of the pool chosen each way, the peers on them, and no labels."""
    stored = stored_settings(bench)
    for title, setting in SETTINGS.items():
        if not bench.runs(title) or setting.head_reference is None or setting.key.startswith("protocols-cross"):
            continue
        ws = student_workspace(bench, setting)
        withdraw_labelled(bench, setting, ws)
        generated_and_probed(bench, setting, ws)
        unlabelled = train_default(bench, setting, ws)
        labelled_afterwards(bench, setting, ws)  # the test rows, once the label-free default is trained
        pool, tests, seed = {r["text"]: r for r in setting.rows(bench, "realistic")}, setting.tests(bench)["test"], str(bench.seeds[0])
        was = stored.get(title, {}).get("seeds", {}).get(seed, {})  # "all": the logistic peer on every pool row
        figures = {"rows": {}, "no labels": _test_cells(ws, unlabelled), "all": was.get("all") or logistic_peer([*pool.values()], tests)}
        stored.setdefault(title, {"role": setting.role, "seeds": {}})["seeds"][seed] = figures
        curve = [(n, c) for n in CURVE_ROWS for c in CURVE_DRAWS.get(bench.seeds[0], ())]
        for n, choice in [(n, c) for n in GOLD_ROWS for c in GOLD_CHOICES] + curve:  # another seed: GOLD_ROWS drawn again
            key, rows = f"{choice}-{n}", _gold_rows(bench, ws, pool, n, choice, unlabelled)
            kamal = _gold_student(bench, setting, ws, key, rows) if choice in KAMAL_CHOICES else None  # rmd_fit: stored
            stored_key, compared = was.get("rows", {}).get(key, {}), n in GOLD_ROWS and choice in KAMAL_CHOICES  # SetFit: 2-4 minutes
            figures["rows"][key] = {"kamal": _test_cells(ws, kamal) if kamal else stored_key.get("kamal"),
                                    "teachers_target": stored_key.get("teachers_target"),
                                    "rmd_fit": stored_key.get("rmd_fit"), "logistic": logistic_peer(rows, tests),
                                    "setfit": stored_key.get("setfit") or (setfit_peer(rows, tests, bench.seeds[0]) if compared else None),
                                    "classes": len({r["label"] for r in rows})}
            write_results(bench, {"settings": stored}, gold_table(stored), merged=True)  # a run cut short keeps what it measured


def _test_cells(ws: Workspace, student: str) -> dict:
    return {k: v for k, v in ws.json("eval", student, "--data", "test").items() if k in ("accuracy", "macro_f1")}


def _gold_rows(bench: Bench, ws: Workspace, pool: dict, n: int, choice: str, student: str) -> list[dict]:
    """n pool rows with their gold labels: random (seeded), or the ones `kamal label-queue` asks for."""
    if choice == "random":
        return sample(list(pool.values()), n, f"gold-{n}-s{bench.seeds[0]}")
    out = ws.root / "data" / f"{choice}-{n}.csv"
    if not out.is_file():
        ws("label-queue", "--data", PROTOCOLS["realistic"][0], "--n", n, "--out", out, "--student", student, "--strategy",
           strategy_of(choice), quiet=True)
    with open(out, newline="", encoding="utf-8") as f:
        return [pool[row["text"]] for row in csv.DictReader(f)]


def _gold_student(bench: Bench, setting: Setting, ws: Workspace, key: str, rows: list[dict]) -> str:
    """The default trained with the gold rows as a user gives them; the set withdrawn afterwards (an eval set would
    steer every later student's recipe)."""
    name, gold = f"gold-{key}-target", f"gold-{key}"  # target: the gold rows choose it (kamalcli/methods/gold_target.py)
    if ws.has_student(f"{name}-s{bench.seeds[0]}"):
        return f"{name}-s{bench.seeds[0]}"
    _write(ws, gold, rows, True, "eval")  # an earlier run's, cut short, left with withdraw_labelled
    bench.say(f"kamal probe; amalgamate {name} --gold {gold}")
    ws("probe", quiet=True)
    _, method, options, extra = DEFAULT_ROW
    name = bench.train_student(ws, name, method, list(setting.teachers), bench.seeds[0], options, base=setting.base,
                               data=PROTOCOLS["realistic"][0], default_budget=True, extra=(*extra, *setting.student, "--gold", gold))
    ws("remove-data", gold, quiet=True)
    return name


def logistic_peer(rows: list[dict], tests: list[dict], c: float = 10.0) -> dict:
    """Logistic regression to convergence (L-BFGS, L2 as scikit-learn's C) on frozen minilm-l6 mean vectors of the
    rows, measured on the test rows: stronger than HEAD_REFERENCE's short run on first-token states (measured on
    the confirm settings' pools), so the peer a careful user makes."""
    from kamalcli.methods.gold_target import logistic

    labels = sorted({r["label"] for r in rows})
    x = np.concatenate([_vectors(tuple(r["text"] for r in rows)), _vectors(tuple(r["text"] for r in tests))])
    gold = np.array([labels.index(r["label"]) for r in rows] + [-1] * len(tests))
    pred = logistic(x, gold, np.arange(len(rows)), len(labels), c)(np.arange(len(rows), len(x))).argmax(1)
    return _peer_cells([labels[i] for i in pred.tolist()], labels, tests)


@lru_cache(maxsize=2)  # the test rows': encoded once a setting, not once a peer
def _vectors(texts: tuple[str, ...]) -> np.ndarray:
    from kamalcli.probe.encoder import text_vectors
    return text_vectors("minilm-l6", list(texts), 128)


def setfit_peer(rows: list[dict], tests: list[dict], seed: int) -> dict | None:
    """SetFit (Tunstall et al. 2022: contrastive fine-tuning of minilm-l6 on pairs of the rows, then a logistic head)
    in the paper's setting: 20 pair iterations, one epoch, batch 16. None where setfit is not installed (the bench's
    alone: `pip install setfit==1.2.0`)."""
    import tempfile
    try:
        from datasets import Dataset
        from setfit import SetFitModel, Trainer, TrainingArguments
    except ImportError:
        print("setfit is not installed (pip install -e '.[bench]'): the SetFit cells stay '-'", flush=True)
        return None
    from kamalcli.models.bases import resolve_model_source

    model = SetFitModel.from_pretrained(str(resolve_model_source("minilm-l6")))
    model.model_body.max_seq_length = 128
    with tempfile.TemporaryDirectory() as out:
        arguments = TrainingArguments(output_dir=out, batch_size=16, num_epochs=1, num_iterations=20, seed=seed, report_to="none")
        Trainer(model=model, args=arguments, train_dataset=Dataset.from_list([{k: r[k] for k in ("text", "label")} for r in rows])).train()
    return _peer_cells(list(model.predict([r["text"] for r in tests])), sorted({r["label"] for r in rows}), tests)


def _peer_cells(predicted: list[str], labels: list[str], tests: list[dict]) -> dict:
    from kamalcli.train.metrics import classification_metrics

    index = lambda label: labels.index(label) if label in labels else -1  # noqa: E731  (a class the rows lack)
    metrics = classification_metrics(np.asarray([index(p) for p in predicted]), np.asarray([index(r["label"]) for r in tests]), labels)
    return {k: metrics[k] for k in ("accuracy", "macro_f1")}


def gold_table(stored: dict) -> str:
    """Accuracy / macro-F1 per setting (the mean over the seeds that have it): no labels, each gold-row choice's rows."""
    titles = [t for t in SETTINGS if t in stored]
    mean = lambda ms: {k: np.mean([m[k] for m in ms if m]) for k in ("accuracy", "macro_f1")} if any(ms) else None  # noqa: E731
    cell = lambda m: f"{100 * m['accuracy']:.1f} / {100 * m['macro_f1']:.1f}" if m else "-"  # noqa: E731
    seeds = lambda t: stored[t]["seeds"].values()  # noqa: E731
    rows = [["kamal's default, no labels", *(cell(mean([s["no labels"] for s in seeds(t)])) for t in titles)]]
    for choice, key in ((c, f"{c}-{n}") for n in GOLD_ROWS for c in GOLD_CHOICES):
        for label, part in GOLD_TABLE_ROWS:
            rows.append([label.format(f"{strategy_of(choice)} {key.rsplit('-', 1)[1]}"),
                         *(cell(mean([s["rows"].get(key, {}).get(part) for s in seeds(t)])) for t in titles)])
    headers = ["accuracy / macro-F1 %", *(f"{t} ({stored[t]['role']}; seeds {','.join(stored[t]['seeds'])})" for t in titles)]
    return ("The gold rows are pool rows with their labels, given as a user gives them: added as an eval set (probe measures the "
            "selection scores on them) and `--gold` (their loss; the prior's prototypes read them beside the generated text, or alone "
            "where it fails the check); realistic protocol; a seed is a draw of the random rows and the students' seed (queued rows: "
            "chosen once), a cell the mean over the seeds that have it; SetFit on the random, mixed and disagree rows (if installed).\n\n"
            + markdown(headers, rows) + "\n\n" + gold_curve(stored))


def gold_curve(stored: dict) -> str:
    """Accuracy against the number of gold rows, random or queued, for kamal and the logistic peer (on every pool row too)."""
    sizes, rows, choices = sorted({*GOLD_ROWS, *CURVE_ROWS}), [], dict.fromkeys(c for cs in CURVE_DRAWS.values() for c in cs)
    mean = lambda ms: f"{100 * np.mean([m['accuracy'] for m in ms]):.1f}" if ms else "-"  # noqa: E731
    for title in (t for t in SETTINGS if t in stored):
        seeds = stored[title]["seeds"].values()
        for who, part, choice in [(w, p, c) for w, p in KAMAL_CURVE for c in choices]:
            got = lambda n: [s["rows"][f"{choice}-{n}"][part] for s in seeds if s["rows"].get(f"{choice}-{n}", {}).get(part)]  # noqa: E731
            cells = [mean(got(n)) for n in sizes] + [mean([s["all"] for s in seeds if s.get("all") and part == "logistic"])]
            rows += [[f"{title.split(':')[0]}: {who}, {strategy_of(choice)} rows", mean([s["no labels"] for s in seeds])
                      if part != "logistic" else "-", *cells]] if any(c != "-" for c in cells) else []
    return ("The labels curve: accuracy % on the test rows against the number of gold rows (the mean over the seeds that have it; "
            "0: kamal's default without labels; all: every pool row).\n\n" + markdown(["gold rows", "0", *map(str, sizes), "all"], rows))


SCENARIOS = {"default-student": default_student, "default-ablation": default_ablation, "gold-labels": gold_labels}
