"""The README's path on text new to the teachers, with defaults, as a user walks it (issue 34's protocol).
Teachers trained elsewhere are added as folders, the dev split is the pool, then the README's commands in order."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import DEFAULT_DATA, HALF_A, HALF_B, RESULTS, WORK, Workspace, load_split, sample, write_rows  # noqa: E402

from kamalcli.synth.synthesize import LATER_CANDIDATES  # noqa: E402

BASE, LENGTH = "minilm-l3", 64
# (name, method, amalgamate's other arguments)
STUDENTS = (("default", "muki-hard", ()), ("vanilla", "vanilla-kd", ()))  # kamal's default: every option auto
MERGES = ("task-arithmetic", "ties", "average")
SUPERVISED = "supervised-pool-600"  # the student's budget: 600 steps at most, early stopping on held-out rows
ABLATIONS = {
    "commit0": ("default-commit0", "muki-hard", ("--option", "commit=0")),  # vanilla-kd's target (the prior's old rule)
    "no-prior": ("no-prior", "muki-hard", ("--option", "prior=none")),  # the default before the prototype prior
    "uhc": ("uhc", "uhc", ()),
    "paper": ("muki-paper", "muki-hard", ("--option", "paper=true")),  # MUKI as published
    "init-merge": ("default-init-merge", "muki-hard", ("--init", "merge")),  # the default from the merged encoder
    # data-free: the generated text is the transfer set (the prior's prototypes are then fitted on the same rows)
    "synth-only": ("synth-only", "muki-hard", ("--data", "synth")),
    "synth-only-no-prior": ("synth-only-no-prior", "muki-hard", ("--data", "synth", "--option", "prior=none")),
}


def fresh(root: Path) -> Workspace:
    from kamalcli.cli import cli
    from kamalcli.workspace.config import set_config_values
    if not (root / ".kamal").is_dir():
        cli.main(["init", str(root)], prog_name="kamal", standalone_mode=False)
        set_config_values(root / "kamal.toml", {("probe", "max_length"): str(LENGTH), ("train", "max_length"): str(LENGTH),
                                                ("train", "student"): f'"{BASE}"'})
    return Workspace(root)


def teachers(seed: int, halves=(("a", HALF_A), ("b", HALF_B)), root: Path | None = None) -> dict[str, str]:
    """Two teachers trained elsewhere (2,000 rows of the train split, each on its half): name -> folder."""
    source = fresh(root or WORK / f"walk-source-{seed}")
    if not any(d["name"] == "private" for d in source.json("data")):
        rows = sample(load_split(DEFAULT_DATA, "train"), 2000, f"private-{seed}")
        source("add-data", write_rows(source.root / "data" / "private.jsonl", rows, True), "--name", "private",
               "--role", "eval", quiet=True)
    for name, labels in halves:
        if not source.has_teacher(name):
            source("train-teacher", "private", "--labels", ",".join(labels), "--name", name, "--epochs", 2, "--seed", seed, quiet=True)
    return {t["name"]: t["path"] for t in source.json("teachers") if t["name"] in dict(halves)}


def with_teachers_and_data(root: Path, folders: dict[str, str], seed: int) -> Workspace:
    """A fresh workspace with the teachers as folders, the pool (the dev split) and 600 test rows."""
    ws = fresh(root)
    for name, folder in folders.items():
        if not ws.has_teacher(name):
            ws("add-teacher", folder, "--name", name, quiet=True)
    known = {d["name"] for d in ws.json("data")}
    if "pool" not in known:
        ws("add-data", write_rows(ws.root / "data" / "pool.jsonl", load_split(DEFAULT_DATA, "dev"), False), "--name", "pool", quiet=True)
    if "test" not in known:
        test = sample(load_split(DEFAULT_DATA, "test"), 600, f"test-{seed}")
        ws("add-data", write_rows(ws.root / "data" / "test.jsonl", test, True), "--name", "test", "--role", "test",
           quiet=True)  # measured on, never decided by (workspaces made before --role test hold it as eval)
    return ws


def supervised_on_pool(seed: int) -> dict:
    """The base fine-tuned on the pool's gold labels (600 steps at most), in the teachers' workspace."""
    source = fresh(WORK / f"walk-source-{seed}")
    known = {d["name"] for d in source.json("data")}
    if "pool-gold" not in known:
        source("add-data", write_rows(source.root / "data" / "pool-gold.jsonl", load_split(DEFAULT_DATA, "dev"), True),
               "--name", "pool-gold", "--role", "eval", quiet=True)
    if "test" not in known:
        test = sample(load_split(DEFAULT_DATA, "test"), 600, f"test-{seed}")
        source("add-data", write_rows(source.root / "data" / "test.jsonl", test, True), "--name", "test", "--role", "eval", quiet=True)
    if not source.has_teacher(SUPERVISED):
        labels = sorted({r["label"] for r in load_split(DEFAULT_DATA, "dev")})
        source("train-teacher", "pool-gold", "--labels", ",".join(labels), "--name", SUPERVISED, "--steps", 600, "--seed", seed, quiet=True)
    return source.json("eval", "--baseline", f"teacher:{SUPERVISED}", "--data", "test")


def walk(seed: int, synthesize: int, tag: str = "", ablation: tuple[str, ...] = (), contrast: bool = True,
         candidates: int = 8, students: bool = True, default_only: bool = False,
         later: int = LATER_CANDIDATES) -> dict:
    folders = teachers(seed)
    # --contrast and 8 candidates for every chunk (kamal's defaults before --later-candidates) keep the plain name
    steering = "" if not synthesize else (("" if contrast else "-paper") + ("" if candidates == 8 else f"-x{candidates}")
                                          + ("" if later == candidates else f"-later{later}"))
    ws = with_teachers_and_data(WORK / f"walk-{seed}-synth{synthesize}{steering}{tag}", folders, seed)
    known = {d["name"] for d in ws.json("data")}
    if synthesize and "synth" not in known:
        ws("synthesize", "--per-class", synthesize, "--name", "synth", "--prompt",
           "Write a one-sentence description of a Debian software package about {label}.",
           "--chunk-candidates", candidates, "--later-candidates", later, "--contrast" if contrast else "--no-contrast",
           quiet=True)
    timings = {}
    started = time.perf_counter()
    ws("probe", quiet=True)
    timings["probe"] = time.perf_counter() - started
    report = ws("report")
    rows = {}
    trained = STUDENTS[:1] if default_only else STUDENTS
    for name, method, arguments in (trained + tuple(ABLATIONS[a] for a in ablation)) * students:
        if not ws.has_student(name):
            started = time.perf_counter()
            ws("amalgamate", "--method", method, *arguments, "--name", name, "--seed", seed, quiet=True)
            timings[name] = time.perf_counter() - started
        rows[name] = ws.json("eval", name, "--data", "test")
    rows["ensemble"] = ws.json("eval", "--baseline", "ensemble", "--data", "test")
    for merge in MERGES:  # the zero-training peer: the teachers' encoders merged from their base (minilm-l3)
        rows[f"merge:{merge}"] = ws.json("eval", "--baseline", f"merge:{merge}", "--data", "test")
    rows["supervised on the pool"] = supervised_on_pool(seed)
    for name in folders:
        rows[f"teacher {name}"] = ws.json("eval", "--baseline", f"teacher:{name}", "--data", "test")
    student = next(s for s in ws.json("students") if s["name"] == "default")
    selection = {}  # data -> score -> (accuracy, AUROC): on the test rows (text new to the teachers) and generated
    for s in ws.json("report")["selection"]:
        selection.setdefault(s["data"], {})[s["score"]] = (s["accuracy"], s["auroc"] or float("nan"))
    return {"rows": rows, "timings": timings, "report": report, "selection": selection, "workspace": ws.root.name,
            "default_objective": student.get("train", {}).get(
        "objective", {})}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="run.py readme-walk", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--synthesize", type=int, default=0, metavar="N",
                        help="run `kamal synthesize --per-class N` first (the README's 'No text?' step)")
    parser.add_argument("--tag", default="", help="a suffix for the walk's workspace (to compare two versions)")
    parser.add_argument("--ablation", action="append", choices=list(ABLATIONS), default=[],
                        help="also train these (repeatable): muki-hard with commit=0 (vanilla-kd's target), with "
                             "prior=none, uhc, muki-hard paper=true, the default with --init merge, the default (with "
                             "and without its prior) on the generated text alone")
    parser.add_argument("--no-contrast", action="store_true",
                        help="synthesize with --no-contrast (each text steered by its own teacher alone, as the paper)")
    parser.add_argument("--chunk-candidates", type=int, default=8, help="synthesize --chunk-candidates")
    parser.add_argument("--later-candidates", type=int, default=LATER_CANDIDATES, help="synthesize --later-candidates (kamal's default)")
    parser.add_argument("--no-students", action="store_true", help="stop after the probe and the baselines")
    parser.add_argument("--default-only", action="store_true", help="of the students, the default (and the ablations)")
    args = parser.parse_args(argv)
    result = walk(args.seed, args.synthesize, args.tag, tuple(args.ablation), contrast=not args.no_contrast,
                  candidates=args.chunk_candidates, students=not args.no_students, default_only=args.default_only,
                  later=args.later_candidates)
    lines = [f"| on 600 test rows (seed {args.seed}, synthesize {args.synthesize}/class) | accuracy % | macro-F1 % |", "|---|---|---|"]
    lines += [f"| {name} | {100 * m['accuracy']:.1f} | {100 * m['macro_f1']:.1f} |" for name, m in result["rows"].items()]
    lines += ["", "| selects the right teacher (% of rows; AUROC) | " + " | ".join(result["selection"]) + " |",
              "|---|" + "---|" * len(result["selection"])]
    for score in sorted({k for v in result["selection"].values() for k in v}):
        cells = [result["selection"][data].get(score) for data in result["selection"]]
        lines.append(f"| {score} | " + " | ".join("-" if c is None else f"{100 * c[0]:.1f} ({c[1]:.3f})" for c in cells) + " |")
    lines += ["", f"timings (s): { {k: round(v) for k, v in result['timings'].items()} }",
              "", "default student's objective: " + json.dumps(result["default_objective"])[:600]]
    (RESULTS / f"readme-{result['workspace']}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
