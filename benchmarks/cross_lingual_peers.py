"""The default-student table's trained rows for the cross-lingual pair, on a build of cross_lingual_builds.py (issue 31).

default-student's cross-lingual rows were trained before today's default; rerunning that setting whole (its own
teachers, every peer, both protocols, several seeds) is about six hours on 2 CPU cores. This trains its rows on a
build that cross_lingual_builds.py made and left as it is (teachers added as folders, generated text, a bare probe,
the labelled sets already there as test sets, which no student decides by): vanilla-kd, uhc, muki-hard as published,
kamal's default and the default from the merged encoder, each by the command default-student runs, on the protocol's
transfer set (MUKI's: the teachers' own rows; realistic: the pool no teacher saw), then `kamal eval` on the test rows,
overall and per language. A row's student already trained in the build at this code can stand in for it
(`--reuse default=NAME`; refused unless its run was the row's command on this protocol's transfer set and seed): the
table names every student.

    python benchmarks/cross_lingual_peers.py --teacher-seed 3 --protocol realistic --seed 2 --reuse default=default-s2

KAMAL_BENCH_WORK as for cross_lingual_builds.py. Each student's figures are written as soon as it is evaluated, to
the build's peers-PROTOCOL-sSEED.json (read again before each write, so that two processes can train rows of one
protocol and seed at once); every run merges them, row by row, into the stored
benchmarks/results/cross-lingual-peers-quick.{json,md} (docs/benchmarks.md: `python benchmarks/run.py docs`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
STEM = "cross-lingual-peers-quick"  # a docs/benchmarks.md block: <!-- bench:cross-lingual-peers -->
TESTS = ("test", "test-en", "test-zh")
KEYS = ("vanilla-kd", "uhc", "paper", "default", "init-merge")  # default_student.ROWS, in its order
BUILDS = Path(os.environ.get("KAMAL_BENCH_WORK", HERE / "work")) / "cross-lingual-builds"


def train_rows(teacher_seed: int, protocol: str, seed: int, keys: list[str], reuse: dict[str, str]) -> Path:
    """Each row's student (trained unless done or reused) and its accuracy per test set, saved after each."""
    folder = BUILDS / f"teacher-seed-{teacher_seed}"
    if not (folder / "build.json").is_file():
        sys.exit(f"no build with teacher seed {teacher_seed} in {folder}: run cross_lingual_builds.py first")
    os.environ["KAMAL_BENCH_WORK"] = str(folder)  # default_student's workspaces are the build's
    import cross_lingual
    import default_student as ds
    from cross_lingual_builds import read_build

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
        print(f"{student}: " + " / ".join(f"{100 * a:.1f}" for a in figures["rows"][key]["accuracy"].values()),
              flush=True)
    return out


def stand_in(ws, student: str, method: str, options: tuple, extra: tuple, data: str, seed: int) -> None:
    """Refuse a reused student whose run is not the row's command: another method, options, --init, transfer set or
    seed (what the default's own decisions were is the code's, which this cannot check)."""
    run = next((r for r in ws.json("runs") if r["kind"] == "amalgamate" and r["name"] == student
                and r["status"] == "done"), None)
    if run is None:
        sys.exit(f"--reuse {student}: no finished amalgamate run of that name in {ws.root}")
    from kamalcli.students.plan import canonical_init

    params = run["params"]
    init = extra[extra.index("--init") + 1] if "--init" in extra else None
    wanted = {"method": method, "options": list(options), "init": canonical_init(init),
              "data": data, "seed": seed}
    found = {"method": params["method"], "options": params["options"], "init": params.get("init"), "data": params["data"],
             "seed": params["train"]["seed"]}
    if found != wanted:
        sys.exit(f"--reuse {student}: trained with {found}, the row is {wanted}")


def stored_reference() -> dict:
    """default-student's stored figures for the pair, whose supervised reference (the base fine-tuned on the transfer
    set's gold labels) no build's teachers change."""
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
    from cross_lingual_builds import build_key

    return *build_key(run), run["protocol"], run["seed"]


def merged_runs() -> list[dict]:
    """The stored runs, each row replaced or added by the builds' peers files, run by run: a build here adds its new
    rows beside the stored ones of the same build (its teachers' seed and fingerprint) without losing them."""
    from cross_lingual_builds import teachers_fingerprint

    stored = RESULTS / f"{STEM}.json"
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
    """Each build's own figures (the ensemble's accuracies): its build.json where the build is here, else the stored
    cross_lingual_builds.py results."""
    from cross_lingual_builds import known_builds

    figures = known_builds(BUILDS)
    missing = sorted(keys - set(figures))
    if missing:
        sys.exit(f"no figures for the builds {missing} (teacher seed, teachers): run cross_lingual_builds.py first")
    return figures


def render(runs: list[dict], builds: dict[tuple[int, str], dict]) -> str:
    """One table per protocol: a row per method, a column per build (and student seed)."""
    # common is imported here, never at the top: it reads KAMAL_BENCH_WORK when imported, which train_rows first
    # points at the build's folder
    from common import markdown, percent
    from cross_lingual_builds import build_key, build_label

    reference = stored_reference()

    def accuracies(values) -> str:
        return " / ".join(percent(x) for x in values)

    def cell(run: dict, key: str) -> str:
        row = run["rows"].get(key)
        if row is None:
            return "not run"
        return (f"{accuracies(row['accuracy'][t] for t in TESTS)} (`{row['student']}`, step {row['best_step']} of "
                f"{row['steps']})")

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher-seed", type=int, default=3, help="the build (cross_lingual_builds.py's teacher seed)")
    parser.add_argument("--protocol", choices=("muki", "realistic"), default="realistic")
    parser.add_argument("--seed", type=int, default=1, help="the students' seed")
    parser.add_argument("--rows", default=",".join(KEYS), help=f"comma-separated, of {', '.join(KEYS)}")
    parser.add_argument("--reuse", action="append", default=[], metavar="ROW=STUDENT",
                        help="a row's student already trained in the build at this code")
    parser.add_argument("--render", action="store_true", help="only render what the builds hold")
    args = parser.parse_args()
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
    from cross_lingual_builds import build_key

    runs = merged_runs()
    builds = build_figures({build_key(r) for r in runs})
    RESULTS.mkdir(parents=True, exist_ok=True)
    table = render(runs, builds)
    (RESULTS / f"{STEM}.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "runs": runs}, indent=2,
                                                     sort_keys=True) + "\n")
    (RESULTS / f"{STEM}.md").write_text(f"<!-- cross-lingual-peers, quick mode, {time.strftime('%Y-%m-%d')} -->\n"
                                        f"{table}\n")
    print(table)


if __name__ == "__main__":
    main()
