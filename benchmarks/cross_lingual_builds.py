"""The cross-lingual pair's default student on other builds of its teachers (issue 31).

cross-lingual-builds: each build trains both teachers with another seed in a folder of its own
(KAMAL_BENCH_WORK/cross-lingual-builds/teacher-seed-N, reused when run again) and walks default-student's realistic
protocol. A build is its teachers' seed and their weights' fingerprint (the same seed made again need not train the
same teachers). cross-lingual-peers: default-student's trained rows for the pair on one build; each student's figures
go to the build's peers-PROTOCOL-sSEED.json as soon as it is evaluated, and every run merges them by build.
Nothing here imports common at the top: it reads KAMAL_BENCH_WORK when imported, which a build points first.
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
PEERS_STEM = "cross-lingual-peers-quick"  # <!-- bench:cross-lingual-peers -->
SCORES = ("mc-dropout", "entropy", "max-prob", "energy", "rmd", "prototype", "rmd+prototype")
TESTS = ("test", "test-en", "test-zh")
KEYS = ("vanilla-kd", "uhc", "paper", "default", "init-merge")  # default_student.ROWS, in its order
BUILDS = Path(os.environ.get("KAMAL_BENCH_WORK", HERE / "work")) / "cross-lingual-builds"


@functools.cache  # hashes some 180 MB a build: once per folder per process
def teachers_fingerprint(folder: Path) -> str | None:
    """A build's identity: its teachers' weights (the same seed in a fresh folder need not train the same)."""
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
    check = transfer_check(workspace, store, teachers, store.dataset("pool"), None, encoder=DEFAULT_ENCODER, device="cpu")
    return {} if check is None else {t["teacher"]: t for t in check.as_json()["teachers"]}


def render_builds(builds: list[dict]) -> str:
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


def builds_main(argv: list[str] | None = None) -> None:
    """The cross-lingual pair's default student on other builds of its teachers (issue 31)."""
    parser = argparse.ArgumentParser(prog="run.py cross-lingual-builds", description=__doc__.splitlines()[0])
    parser.add_argument("--teacher-seeds", default="0,2,3", help="comma-separated teachers' training seeds")
    parser.add_argument("--student-tag", default="", help="train the default again as realistic-default-TAG (a "
                        "build's default at other code); the build's figures are the tagged student's")
    parser.add_argument("--render", action="store_true", help="only merge the builds' folders into the stored table")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process: one build, its figures' file
    args = parser.parse_args(argv)
    if args.one is not None:
        figures = one_build(args.one, args.student_tag)
        folder = Path(os.environ["KAMAL_BENCH_WORK"])
        (folder / "build.json.tmp").write_text(json.dumps(figures, indent=2) + "\n")
        (folder / "build.json.tmp").replace(folder / "build.json")
        return
    work = BUILDS
    for seed in [] if args.render else [int(s) for s in args.teacher_seeds.split(",")]:
        folder = work / f"teacher-seed-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        print(f"build with teacher seed {seed} in {folder}", flush=True)
        env = {**os.environ, "KAMAL_BENCH_WORK": str(folder)}
        code = subprocess.run([sys.executable, str(HERE / "run.py"), "cross-lingual-builds", "--one", str(seed),
                               "--student-tag", args.student_tag],
                              env=env).returncode
        if code != 0:
            sys.exit(f"the build with teacher seed {seed} failed (exit {code}); its folder is kept: {folder}")
    builds = known_builds(work)
    ordered = [builds[key] for key in sorted(builds)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{STEM}.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "builds": ordered},
                                                     indent=2, sort_keys=True) + "\n")
    table = render_builds(ordered)
    (RESULTS / f"{STEM}.md").write_text(f"<!-- cross-lingual-builds, quick mode, {time.strftime('%Y-%m-%d')} -->\n{table}\n")
    print(table)


def train_rows(teacher_seed: int, protocol: str, seed: int, keys: list[str], reuse: dict[str, str]) -> Path:
    """Each row's student (trained unless done or reused) and its accuracy per test set, saved after each."""
    folder = BUILDS / f"teacher-seed-{teacher_seed}"
    if not (folder / "build.json").is_file():
        sys.exit(f"no build with teacher seed {teacher_seed} in {folder}: run the suite cross-lingual-builds first")
    os.environ["KAMAL_BENCH_WORK"] = str(folder)  # default_student's workspaces are the build's
    import cross_lingual
    import default_student as ds
    cross_lingual.TEACHER_SEED = teacher_seed
    bench, setting = ds.realistic_setting("cross-lingual", seed)
    ws = ds.student_workspace(bench, setting)
    out = folder / f"peers-{protocol}-s{seed}.json"
    teachers = read_build(folder)["teachers"]
    rows = dict(zip(KEYS, ds.ROWS, strict=True))
    assert rows["default"][0] == ds.DEFAULT, "KEYS no longer follow default_student.ROWS"
    for key in keys:
        label, method, options, extra = rows[key]
        if key in reuse:
            student = reuse[key]
            stand_in(ws, student, method, options, extra, ds.PROTOCOLS[protocol][0], seed)
        else:
            student = bench.train_student(ws, f"peers-{protocol}-{key}", method, list(setting.teachers), seed, options,
                                          base=setting.base, data=ds.PROTOCOLS[protocol][0],
                                          extra=(*extra, *setting.student), default_budget=True)
        train = next((s["train"] for s in ws.json("students") if s["name"] == student), None)
        if train is None:
            sys.exit(f"--reuse {key}={student}: no such student in {ws.root}")
        row = {"label": label, "student": student, "reused": key in reuse,
               "accuracy": {t: ws.json("eval", student, "--data", t)["accuracy"] for t in TESTS},
               "best_step": train["best_step"], "steps": train["steps"]}
        # read just before writing: another process may have added a row to this file since this one started
        figures = json.loads(out.read_text()) if out.is_file() else {"teacher_seed": teacher_seed,
                                                                        "protocol": protocol, "seed": seed, "rows": {}}
        figures["teachers"] = teachers
        figures["rows"][key] = row
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(figures, indent=2) + "\n")
        tmp.replace(out)
        print(f"{student}: " + " / ".join(f"{100 * a:.1f}" for a in figures["rows"][key]["accuracy"].values()), flush=True)
    return out


def stand_in(ws, student: str, method: str, options: tuple, extra: tuple, data: str, seed: int) -> None:
    """Refuse a reused student whose run is not the row's command (method, options, --init, data, seed)."""
    run = next((r for r in ws.json("runs") if r["kind"] == "amalgamate" and r["name"] == student and r["status"] == "done"), None)
    if run is None:
        sys.exit(f"--reuse {student}: no finished amalgamate run of that name in {ws.root}")
    from kamalcli.students.plan import canonical_init
    params = run["params"]
    init = extra[extra.index("--init") + 1] if "--init" in extra else None
    wanted = {"method": method, "options": list(options), "init": canonical_init(init), "data": data, "seed": seed}
    found = {"method": params["method"], "options": params["options"], "init": params.get("init"), "data": params["data"],
             "seed": params["train"]["seed"]}
    if found != wanted:
        sys.exit(f"--reuse {student}: trained with {found}, the row is {wanted}")


def stored_reference() -> dict:
    """default-student's stored figures for the pair: its supervised reference, which no build changes."""
    stored = RESULTS / "default-student-quick.json"
    return json.loads(stored.read_text()).get("cross-lingual en-topics + zh-sentiment", {}) if stored.is_file() else {}


def supervised(figures: dict, protocol: str, seed: int) -> list[float] | None:
    """The stored reference's accuracies per test set under this protocol and seed, if there is one."""
    seeds = figures.get("seeds_by_protocol", {}).get(protocol, [])
    if seed not in seeds:
        return None
    i, reference = seeds.index(seed), figures["supervised"][protocol]
    return [reference["accuracy"]["values"][i], *(reference["per_test"][t]["values"][i] for t in TESTS[1:])]


def run_key(run: dict) -> tuple:
    return *build_key(run), run["protocol"], run["seed"]


def merged_runs() -> list[dict]:
    """The stored runs, each row replaced or added by the builds' peers files, run by run."""
    stored = RESULTS / f"{PEERS_STEM}.json"
    runs = {}
    for run in json.loads(stored.read_text())["runs"] if stored.is_file() else []:
        runs[run_key(run)] = run
    for path in sorted(BUILDS.glob("teacher-seed-*/peers-*.json")):
        run = json.loads(path.read_text())
        run["teachers"] = run.get("teachers") or teachers_fingerprint(path.parent)
        key = run_key(run)
        runs[key] = {**run, "rows": {**runs.get(key, {}).get("rows", {}), **run["rows"]}}
    return [runs[key] for key in sorted(runs)]


def build_figures(keys: set[tuple[int, str]]) -> dict[tuple[int, str], dict]:
    """Each build's own figures: its build.json where the build is here, else the stored ones."""
    figures = known_builds(BUILDS)
    missing = sorted(keys - set(figures))
    if missing:
        sys.exit(f"no figures for the builds {missing} (teacher seed, teachers): run the suite cross-lingual-builds first")
    return figures


def render_peers(runs: list[dict], builds: dict[tuple[int, str], dict]) -> str:
    """One table per protocol: a row per method, a column per build (and student seed)."""
    # not at the top: common reads KAMAL_BENCH_WORK when imported, which train_rows points at the build first
    from common import markdown, percent
    reference = stored_reference()

    def accuracies(values) -> str:
        return " / ".join(percent(x) for x in values)

    def cell(run: dict, key: str) -> str:
        row = run["rows"].get(key)
        if row is None:
            return "not run"
        return f"{accuracies(row['accuracy'][t] for t in TESTS)} (`{row['student']}`, step {row['best_step']} of {row['steps']})"

    def reference_cell(protocol: str, seed: int) -> str:
        values = supervised(reference, protocol, seed)
        return "not stored" if values is None else accuracies(values)

    labels = {}
    for run in runs:
        labels |= {k: r["label"] for k, r in run["rows"].items()}
    protocols = {"muki": "MUKI's protocol: the transfer rows are the teachers' own",
                 "realistic": "Realistic protocol: the transfer rows are a pool no teacher saw"}
    parts = ["Accuracy % on the 1,200 test rows, all / English / Chinese (each student's name in its build, and the "
             "step early stopping kept)."]
    for protocol, title in protocols.items():
        chosen = [r for r in runs if r["protocol"] == protocol]
        if not chosen:
            continue
        headers = ["row", *(f"teacher seed {build_label(r)}, student seed {r['seed']}" for r in chosen)]
        table = [["supervised on the transfer set's gold labels, same budget (default-student's, stored: no teacher "
                  "in it)", *(reference_cell(protocol, r["seed"]) for r in chosen)],
                 ["ensemble", *(accuracies(builds[build_key(r)]["ensemble"][t] for t in TESTS) for r in chosen)]]
        table += [[labels[k], *(cell(r, k) for r in chosen)] for k in KEYS if k in labels]
        parts.append(f"{title}:\n\n{markdown(headers, table)}")
    return "\n\n".join(parts)


def peers_main(argv: list[str] | None = None) -> None:
    """The default-student table's trained rows for the cross-lingual pair, on a build of cross-lingual-builds."""
    parser = argparse.ArgumentParser(prog="run.py cross-lingual-peers", description=peers_main.__doc__.splitlines()[0])
    parser.add_argument("--teacher-seed", type=int, default=3, help="the build (cross-lingual-builds' teacher seed)")
    parser.add_argument("--protocol", choices=("muki", "realistic"), default="realistic")
    parser.add_argument("--seed", type=int, default=1, help="the students' seed")
    parser.add_argument("--rows", default=",".join(KEYS), help=f"comma-separated, of {', '.join(KEYS)}")
    parser.add_argument("--reuse", action="append", default=[], metavar="ROW=STUDENT",
                        help="a row's student already trained in the build at this code")
    parser.add_argument("--render", action="store_true", help="only render what the builds hold")
    args = parser.parse_args(argv)
    keys = [k for k in args.rows.split(",") if k]
    unknown = [k for k in keys if k not in KEYS]
    if unknown:
        sys.exit(f"unknown rows: {', '.join(unknown)} (rows: {', '.join(KEYS)})")
    if any("=" not in r for r in args.reuse):
        sys.exit("--reuse takes ROW=STUDENT, e.g. --reuse default=default-s2")
    reuse = dict(r.split("=", 1) for r in args.reuse)
    if set(reuse) - set(keys):
        sys.exit(f"--reuse names rows --rows leaves out: {', '.join(sorted(set(reuse) - set(keys)))}")
    if not args.render:
        train_rows(args.teacher_seed, args.protocol, args.seed, keys, reuse)
    runs = merged_runs()
    builds = build_figures({build_key(r) for r in runs})
    RESULTS.mkdir(parents=True, exist_ok=True)
    table = render_peers(runs, builds)
    (RESULTS / f"{PEERS_STEM}.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "runs": runs}, indent=2,
                                                     sort_keys=True) + "\n")
    (RESULTS / f"{PEERS_STEM}.md").write_text(f"<!-- cross-lingual-peers, quick mode, {time.strftime('%Y-%m-%d')} -->\n{table}\n")
    print(table)

