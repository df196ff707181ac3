"""The cross-lingual pair's default student on other builds of its teachers (issue 31).

On one machine at fixed code, the pair's teachers rebuild row for row: rebuilt in a fresh folder at the stored seed,
they gave the stored build's every figure. Across machines they need not: at teacher seed 2 the builds made on
2026-11-27 and on 2026-11-29 agree figure for figure (ensemble 31.0%, RMD right on 72.5% of the pool), while the one
made on 2026-11-28, on a machine whose packages were installed afresh, trained other teachers (31.2%, 79.5%), with no
change to how teachers train. So a build is told apart by its teachers' fingerprint as well as their seed. The
earlier builds, each made with the code of its day, differed, and one of them broke
the default (docs/benchmarks.md). So that the decisions can be seen on teachers other than one build's, each build
here trains both teachers with another seed (`cross_lingual.TEACHER_SEED`), in a folder of its own, then walks what
default-student walks on the realistic protocol: the teachers added to a fresh workspace as folders, `kamal
synthesize` (kamal's prompt), a bare `kamal probe`, the default student (seed 1,
on the 2,000 pool rows no teacher saw, kamal's defaults), and only then the labelled sets as test sets. Per build:
the ensemble, `score=auto`'s pick, the prior's check and the teachers whose RMD refit=auto fitted again on the
pool, how often each score picks the right teacher on the pool
(its gold copy, read only to measure) and on the generated rows (balanced over teachers), and the default's
accuracy overall and per language.

    python benchmarks/cross_lingual_builds.py --teacher-seeds 0,2,3
    python benchmarks/cross_lingual_builds.py --teacher-seeds 2 --student-tag TAG  # the default again, at this code

Each build lives in KAMAL_BENCH_WORK (default benchmarks/work)/cross-lingual-builds/teacher-seed-N and is reused when
run again. Results merge by build into benchmarks/results/cross-lingual-builds-quick.{json,md}: a build is its teachers'
seed and their weights' fingerprint, since the same seed made again in a fresh folder need not train the same
teachers (`--render` merges the folders' figures without running anything). About 35 minutes a
build on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
STEM = "cross-lingual-builds-quick"  # a docs/benchmarks.md block: <!-- bench:cross-lingual-builds -->
SCORES = ("mc-dropout", "entropy", "max-prob", "energy", "rmd", "prototype", "rmd+prototype")


@functools.cache  # hashes some 180 MB a build: once per folder per process
def teachers_fingerprint(folder: Path) -> str | None:
    """A build's identity: its teachers' weights. The same seed in a fresh folder need not train the same teachers
    (the seed-2 build made again on another machine did not), so figures are kept per build, not per seed."""
    weights = {}
    for path in sorted(folder.glob("*/.kamal/artifacts/teachers/*/model.safetensors")):
        weights.setdefault(path.parent.name, path)
    if not weights:
        return None
    digest = hashlib.sha256()
    for name, path in sorted(weights.items()):
        digest.update(name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:8]


def build_key(build: dict) -> tuple[int, str]:
    """How builds are told apart: the teachers' seed, then their fingerprint ("" for builds stored before it)."""
    return build["teacher_seed"], build.get("teachers") or ""


def build_label(build: dict) -> str:
    return f"{build['teacher_seed']}" + (f", teachers {build['teachers']}" if build.get("teachers") else "")


def read_build(folder: Path) -> dict:
    """A build folder's figures, with its teachers' fingerprint (computed here for a build.json written before it)."""
    figures = json.loads((folder / "build.json").read_text())
    figures.setdefault("teachers", teachers_fingerprint(folder))
    return figures


def known_builds(work: Path) -> dict[tuple[int, str], dict]:
    """The stored builds' figures, each replaced by its folder's where the build is in work, and the folders' others."""
    stored = RESULTS / f"{STEM}.json"
    builds = {build_key(b): b for b in json.loads(stored.read_text())["builds"]} if stored.is_file() else {}
    for folder in sorted(work.glob("teacher-seed-*")):
        if (folder / "build.json").is_file():
            build = read_build(folder)
            builds[build_key(build)] = build
    return builds


def one_build(teacher_seed: int, tag: str = "") -> dict:
    """In a process whose KAMAL_BENCH_WORK is this build's folder: the walk above, its figures."""
    sys.path.insert(0, str(HERE))
    import cross_lingual
    import default_student as ds

    cross_lingual.TEACHER_SEED = teacher_seed
    bench, setting = ds.realistic_setting("cross-lingual")
    ws = ds.student_workspace(bench, setting)
    ds.generated_and_probed(bench, setting, ws)
    student = ds.train_default(bench, setting, ws, tag=tag)
    ds.labelled_afterwards(bench, setting, ws)
    tests = list(setting.tests(bench))
    selection = {(s["data"], s["score"]): s for s in ws.json("report")["selection"]}
    trained = next(s for s in ws.json("students") if s["name"] == student)["train"]["objective"]
    return {
        "teacher_seed": teacher_seed, "teachers": teachers_fingerprint(Path(os.environ["KAMAL_BENCH_WORK"])),
        "student": student,
        "ensemble": {t: ws.json("eval", "--baseline", "ensemble", "--data", t)["accuracy"] for t in tests},
        "default": {t: ws.json("eval", student, "--data", t)["accuracy"] for t in tests},
        "score": trained["score"], "commit": trained["commit"], "prior": trained["prior"],
        "refit": trained.get("refit", []),
        "check": pool_check(ws.root, list(setting.teachers)),
        "pool": {score: selection[("pool-gold", score)]["accuracy"] for score in SCORES
                 if ("pool-gold", score) in selection},
        "generated_balanced": {score: selection[(ds.GENERATED, score)].get("balanced") for score in SCORES
                               if (ds.GENERATED, score) in selection},
    }


def pool_check(root: Path, names: list[str]) -> dict:
    """The prior's check as kamal amalgamate makes it on --data pool: per teacher, kappa and whether it passes."""
    from kamalcli.probe.prior_check import transfer_check
    from kamalcli.probe.prototypes import DEFAULT_ENCODER
    from kamalcli.workspace.folder import find_workspace
    from kamalcli.workspace.store import Store

    workspace = find_workspace(str(root))
    store = Store.open(workspace)
    teachers = [t for t in store.teachers() if t.name in names]
    check = transfer_check(workspace, store, teachers, store.dataset("pool"), None, encoder=DEFAULT_ENCODER,
                           device="cpu")
    return {} if check is None else {t["teacher"]: t for t in check.as_json()["teachers"]}


def render(builds: list[dict]) -> str:
    from common import markdown, percent

    def check(b: dict) -> str:
        def placed(t: str) -> str:
            share = b["check"][t].get("placed")
            return "" if share is None else f", {percent(share)}% placed"

        return " / ".join(f"{b['check'][t]['kappa']:.2f}{placed(t)}" + ("" if b["check"][t]["clear"] else " (fails)")
                          for t in ("en-topics", "zh-sentiment") if t in b["check"]) or "not made"

    decisions = markdown(
        ["teacher seed", "ensemble %", "score=auto", "the pick on the pool %", "on the generated rows, balanced %",
         "prior's check on the pool: kappa, rows placed among the teacher's labels (en-topics / zh-sentiment)",
         "commit, prior", "RMD refitted on the pool",
         "default % (all / English / Chinese)"],
        [[build_label(b), percent(b["ensemble"]["test"]), b["score"], percent(b["pool"].get(b["score"])),
          percent(b["generated_balanced"].get(b["score"])), check(b), f"{b['commit']}, {b['prior']}",
          (", ".join(b["refit"]) or "none") if "refit" in b else "- (before refit=auto)",
          " / ".join(percent(b["default"].get(t)) for t in ("test", "test-en", "test-zh"))] for b in builds])
    scores = markdown(["teacher seed", *SCORES],
                      [[build_label(b), *(f"{percent(b['pool'].get(s))} / {percent(b['generated_balanced'].get(s))}"
                                             for s in SCORES)] for b in builds])
    return (f"{decisions}\n\nHow often each score picks the right teacher, on the pool (gold read only to measure) / "
            f"on the generated rows balanced over teachers, %:\n\n{scores}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher-seeds", default="0,2,3", help="comma-separated teachers' training seeds")
    parser.add_argument("--student-tag", default="", help="train the default again as realistic-default-TAG (a "
                        "build's default at other code); the build's figures are the tagged student's")
    parser.add_argument("--render", action="store_true", help="only merge the builds' folders into the stored table")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process: one build, its figures' file
    args = parser.parse_args()
    if args.one is not None:
        figures = one_build(args.one, args.student_tag)
        folder = Path(os.environ["KAMAL_BENCH_WORK"])
        (folder / "build.json.tmp").write_text(json.dumps(figures, indent=2) + "\n")
        (folder / "build.json.tmp").replace(folder / "build.json")
        return
    work = Path(os.environ.get("KAMAL_BENCH_WORK", HERE / "work")) / "cross-lingual-builds"
    for seed in [] if args.render else [int(s) for s in args.teacher_seeds.split(",")]:
        folder = work / f"teacher-seed-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        print(f"build with teacher seed {seed} in {folder}", flush=True)
        env = {**os.environ, "KAMAL_BENCH_WORK": str(folder)}
        code = subprocess.run([sys.executable, __file__, "--one", str(seed), "--student-tag", args.student_tag],
                              env=env).returncode
        if code != 0:
            sys.exit(f"the build with teacher seed {seed} failed (exit {code}); its folder is kept: {folder}")
    builds = known_builds(work)
    sys.path.insert(0, str(HERE))
    ordered = [builds[key] for key in sorted(builds)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{STEM}.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "builds": ordered},
                                                     indent=2, sort_keys=True) + "\n")
    table = render(ordered)
    (RESULTS / f"{STEM}.md").write_text(f"<!-- cross-lingual-builds, quick mode, {time.strftime('%Y-%m-%d')} -->\n{table}\n")
    print(table)


if __name__ == "__main__":
    main()
