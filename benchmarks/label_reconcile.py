"""Teachers that name the same class differently (issue 32): do `kamal labels` proposals find the pairs, and
what does reconciling them do to the student?

Each setting is a pair of teachers over debian-topics' topics10 classes under names of their own: synonyms
(sound/audio, games/gaming; mail/email, net/network) beside decoys with related names that are different
classes (net/web, math/science, network/web), and one nested pair (a coarse `science` that also covers math,
beside a teacher with `math`). Teachers are trained in one workspace (minilm-l3, 64 tokens, 2 epochs, each on
its own sample of the train split) and added to a fresh one as folders; the unlabelled pool is the dev split
(rows no teacher trained on), the test rows 600 of the test split. The README's path, then:

- `kamal labels --json`: the proposals, scored against the truth (precision and recall of `same` at the
  default threshold, and of `nested`); also on the README walk's teachers (no shared class: every `same`
  proposal there is a false one), when benchmarks/work holds them;
- students (`kamal amalgamate`, defaults) with no reconciliation, with the proposals applied (`kamal labels
  merge` for each `same` proposal, and each `nested` one into its coarse class) and with the true mapping,
  all scored on the test rows with every alias mapped to its true class (`kamal predict --json`), so that
  no reconciliation is charged only for the probability it splits, not for names;
- `kamal extend` of the README walk's default student with a teacher whose labels are renamed copies of old
  ones (audio, gaming, network), with and without merging them first.

    python benchmarks/label_reconcile.py [--seed S ...] [--students] [--extend] [--steps N]

Prints markdown tables; workspaces stay under benchmarks/work/ (rerun: cached steps are skipped).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import DEFAULT_DATA, WORK, Workspace, load_split, percent, sample, write_rows  # noqa: E402
from readme_walk import fresh, with_teachers_and_data  # noqa: E402

# teacher -> {its label: the topics10 classes it covers}
SETTINGS = {
    "synonyms": {
        "a": {"admin": ["admin"], "games": ["games"], "graphics": ["graphics"], "mail": ["mail"],
              "math": ["math"], "sound": ["sound"]},
        "b": {"net": ["net"], "science": ["science"], "text": ["text"], "web": ["web"],
              "audio": ["sound"], "gaming": ["games"]},
    },
    "synonyms-2": {
        "a": {"admin": ["admin"], "games": ["games"], "graphics": ["graphics"], "email": ["mail"],
              "network": ["net"]},
        "b": {"mail": ["mail"], "net": ["net"], "science": ["science"], "sound": ["sound"], "text": ["text"],
              "web": ["web"]},
    },
    "nested": {
        "a": {"admin": ["admin"], "games": ["games"], "graphics": ["graphics"], "sound": ["sound"],
              "science": ["science", "math"]},
        "b": {"mail": ["mail"], "math": ["math"], "net": ["net"], "text": ["text"], "web": ["web"]},
    },
}


def truth(setting: dict) -> dict:
    """The true relations between the two teachers' labels: same pairs, nested (coarse, fine) pairs, and the
    class each label's rows are scored as (a coarse label's classes all score as the coarse label)."""
    a, b = setting["a"], setting["b"]
    same, nested = set(), set()
    for la, ca in a.items():
        for lb, cb in b.items():
            if set(ca) == set(cb):
                same.add(frozenset((la, lb)))
            elif set(cb) < set(ca):
                nested.add((la, lb))
            elif set(ca) < set(cb):
                nested.add((lb, la))
    # every topics10 class -> the name it is scored as: a coarse label's name for its classes, else the
    # class's own name
    scored = {}
    for labels in (a, b):
        for label, classes in labels.items():
            for c in classes:
                if len(classes) > 1 or c not in scored:
                    scored[c] = label if len(classes) > 1 else c
    # every label name -> its scoring class
    name_class = {}
    for labels in (a, b):
        for label, classes in labels.items():
            name_class[label] = scored[classes[0]]
    return {"same": same, "nested": nested, "scored": scored, "name_class": name_class}


def teacher_folders(setting_name: str, seed: int) -> dict[str, str]:
    """The setting's two teachers, trained elsewhere: name -> folder."""
    return train_elsewhere(WORK / f"labels-source-{setting_name}-{seed}", SETTINGS[setting_name],
                           {name: f"{setting_name}-{name}-{seed}" for name in SETTINGS[setting_name]}, seed)


def train_elsewhere(root: Path, teachers: dict, salts: dict[str, str], seed: int) -> dict[str, str]:
    """Teachers ({name: {its label: the topics10 classes it covers}}) trained in their own workspace, each on
    its own 2,000-row sample of the train split (salts[name]) relabelled with its names: name -> folder."""
    source = fresh(root)
    known = {d["name"] for d in source.json("data")}
    train = load_split(DEFAULT_DATA, "train")
    for name, labels in teachers.items():
        data = f"private-{name}"
        if data not in known:
            owner = {c: label for label, classes in labels.items() for c in classes}
            rows = [{"text": r["text"], "label": owner[r["label"]]}
                    for r in sample(train, 2000, salts[name]) if r["label"] in owner]
            source("add-data", write_rows(source.root / "data" / f"{data}.jsonl", rows, True), "--name", data,
                   "--role", "eval", quiet=True)
        if not source.has_teacher(name):
            source("train-teacher", data, "--labels", ",".join(labels), "--name", name, "--epochs", 2,
                   "--seed", seed, quiet=True)
    return {t["name"]: t["path"] for t in source.json("teachers")}


def prepare(setting_name: str, seed: int) -> Workspace:
    """A fresh workspace with the setting's teachers added as folders, the pool and the test rows, probed."""
    ws = with_teachers_and_data(WORK / f"labels-{setting_name}-{seed}", teacher_folders(setting_name, seed), seed)
    ws("probe", "--data", "pool", quiet=True)
    return ws


def scored(pairs: set, found: set) -> dict:
    right = len(pairs & found)
    return {"true": len(pairs), "proposed": len(found), "right": right,
            "precision": right / len(found) if found else None, "recall": right / len(pairs) if pairs else None}


def proposals(ws: Workspace, truth_of: dict | None) -> dict:
    """`kamal labels --json` against the truth: same pairs (unordered) and nested (coarse, fine) pairs."""
    view = ws.json("labels")
    same = {frozenset(p["labels"]) for p in view["proposals"] if p["kind"] == "same"}
    nested = {tuple(p["labels"]) for p in view["proposals"] if p["kind"] == "nested"}
    truth_of = truth_of or {"same": set(), "nested": set()}
    return {"same": scored(truth_of["same"], same), "nested": scored(truth_of["nested"], nested),
            "proposals": view["proposals"]}


def accuracy(ws: Workspace, student: str, name_class: dict) -> tuple[float, float]:
    """The student's test accuracy with every label name scored as its true class (aliases mapped), and as
    `kamal eval` scores it: a prediction counts when it is the gold label's name, or one of the student's own
    aliases of it (the names it was trained with)."""
    rows = [json.loads(line) for line in (ws.root / "data" / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    texts = ws.root / "data" / "test-texts.txt"
    texts.write_text("".join(" ".join(r["text"].split()) + "\n" for r in rows), encoding="utf-8")
    predicted = [p["label"] for p in ws.json("predict", student, "--file", texts)]
    gold = [name_class.get(r["label"], r["label"]) for r in rows]
    mapped = sum(g == name_class.get(p, p) for g, p in zip(gold, predicted)) / len(gold)
    own = next(s for s in ws.json("students") if s["name"] == student)["label_aliases"]
    by_name = sum(own.get(r["label"], r["label"]) == own.get(p, p) for r, p in zip(rows, predicted)) / len(rows)
    return mapped, by_name


def merged(ws: Workspace, groups: list[list[str]]) -> None:
    for group in groups:
        ws("labels", "merge", *group, quiet=True)


def split_all(ws: Workspace) -> None:
    for one in ws.json("labels")["classes"]:
        ws("labels", "split", one["name"], quiet=True)


def students(ws: Workspace, setting_name: str, seed: int, steps: int | None) -> dict:
    """No reconciliation, the `same` proposals applied, the true mapping; each scored with aliases mapped."""
    truth_of = truth(SETTINGS[setting_name])
    split_all(ws)
    found = [p["labels"] for p in ws.json("labels")["proposals"] if p["kind"] == "same"]
    oracle = [sorted(pair) for pair in truth_of["same"]] + [list(pair) for pair in truth_of["nested"]]
    plans = {"none": [], "proposals": found, "oracle": oracle}
    out = {}
    budget = ("--steps", steps) if steps else ()
    for plan, groups in plans.items():
        name = student_name(groups)  # the same merges train the same student (same seed, same data): one name
        split_all(ws)
        merged(ws, groups)
        if not ws.has_student(name):
            ws("probe", "--data", "pool", quiet=True)
            ws("amalgamate", "--method", "muki-hard", "--name", name, "--seed", seed, *budget, quiet=True)
        classes = len(next(s for s in ws.json("students") if s["name"] == name)["labels"])
        mapped, by_name = accuracy(ws, name, truth_of["name_class"])
        out[plan] = {"student": name, "accuracy": mapped, "by_name": by_name, "merges": groups, "classes": classes}
    split_all(ws)
    return out


def student_name(groups: list[list[str]]) -> str:
    return "none" if not groups else "merged-" + "-".join(sorted("_".join(sorted(g)) for g in groups))


RENAMED = {"audio": ["sound"], "gaming": ["games"], "network": ["net"]}  # a new teacher's renamed copies


def extend(seed: int, steps: int | None) -> dict:
    """The README walk's default student grown with a teacher whose labels are renamed copies of old ones."""
    source = WORK / f"walk-{seed}-synth0"
    if not (source / ".kamal").is_dir():
        raise SystemExit(f"no {source}: run `python benchmarks/readme_walk.py --seed {seed}` first")
    root = WORK / f"labels-extend-{seed}"
    if not root.is_dir():
        shutil.copytree(source, root, symlinks=True)
        shutil.rmtree(root / ".kamal" / "locks", ignore_errors=True)
    ws = Workspace(root)
    folders = train_elsewhere(WORK / f"labels-source-renamed-{seed}", {"c": RENAMED}, {"c": f"renamed-{seed}"}, seed)
    if not ws.has_teacher("c"):
        ws("add-teacher", folders["c"], "--name", "c", quiet=True)
    name_class = {alias: classes[0] for alias, classes in RENAMED.items()}
    budget = ("--steps", steps) if steps else ()
    mapped, by_name = accuracy(ws, "default", name_class)
    out = {"before": {"accuracy": mapped, "by_name": by_name}}
    for name, merge in (("grown", False), ("refined", True)):
        split_all(ws)
        if merge:
            merged(ws, [[classes[0], alias] for alias, classes in RENAMED.items()])
        if not ws.has_student(name):
            ws("probe", "--data", "pool", quiet=True)
            ws("extend", "default", "--teacher", "c", "--name", name, "--seed", seed, *budget,
               *(("--refine",) if merge else ()), quiet=True)
        classes = len(next(s for s in ws.json("students") if s["name"] == name)["labels"])
        mapped, by_name = accuracy(ws, name, name_class)
        out[name] = {"accuracy": mapped, "by_name": by_name, "classes": classes}
    split_all(ws)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, action="append", help="repeatable (default: 1)")
    parser.add_argument("--setting", action="append", choices=sorted(SETTINGS), help="repeatable (default: all)")
    parser.add_argument("--prepare-only", action="store_true", help="train and probe the teachers, nothing else")
    parser.add_argument("--students", action="store_true", help="also train and score the students")
    parser.add_argument("--extend", action="store_true", help="also extend the README walk's default student")
    parser.add_argument("--steps", type=int, help="the students' step budget (default: kamal's)")
    args = parser.parse_args()
    results = {}
    print("| setting | seed | same: proposed / right / true | same P / R | nested: proposed / right / true |")
    print("|---|---|---|---|---|")
    for seed in args.seed or [1]:
        for setting in args.setting or sorted(SETTINGS):
            started = time.perf_counter()
            ws = prepare(setting, seed)
            if args.prepare_only:
                print(f"{setting} seed {seed}: prepared in {time.perf_counter() - started:.0f} s", flush=True)
                continue
            split_all(ws)
            found = proposals(ws, truth(SETTINGS[setting]))
            results[(setting, seed)] = {"proposals": found}
            s, n = found["same"], found["nested"]
            print(f"| {setting} | {seed} | {s['proposed']} / {s['right']} / {s['true']} | {percent(s['precision'])} / "
                  f"{percent(s['recall'])} | {n['proposed']} / {n['right']} / {n['true']} |", flush=True)
        control = WORK / f"walk-{seed}-synth0"
        if not args.prepare_only and (control / ".kamal").is_dir():
            found = proposals(Workspace(control), None)
            s, n = found["same"], found["nested"]
            print(f"| README walk (no shared class) | {seed} | {s['proposed']} / 0 / 0 | - | "
                  f"{n['proposed']} / 0 / 0 |", flush=True)
    for (setting, seed), result in results.items():
        for p in result["proposals"]["proposals"]:
            print(f"  {setting} seed {seed}: {p['kind']} {p['labels']} score {p['score']:.2f} names {p['names']:.2f}"
                  f" kappa {p['behaviour']['kappa'] if p['behaviour'] else '-'}")
    if args.students:
        print("\n| setting | seed | plan (student) | merges | classes | accuracy % (aliases mapped) | accuracy % (by name) |")
        print("|---|---|---|---|---|---|---|")
        for seed in args.seed or [1]:
            for setting in args.setting or sorted(SETTINGS):
                for plan, r in students(prepare(setting, seed), setting, seed, args.steps).items():
                    print(f"| {setting} | {seed} | {plan} ({r['student']}) | {r['merges'] or '-'} | {r['classes']} | "
                          f"{percent(r['accuracy'])} | {percent(r['by_name'])} |", flush=True)
    if args.extend:
        print("\n| seed | student | classes | accuracy % (aliases mapped) | accuracy % (by name) |")
        print("|---|---|---|---|---|")
        for seed in args.seed or [1]:
            for name, r in extend(seed, args.steps).items():
                print(f"| {seed} | {name} | {r.get('classes', 10)} | {percent(r['accuracy'])} | {percent(r['by_name'])} |",
                      flush=True)


if __name__ == "__main__":
    main()
