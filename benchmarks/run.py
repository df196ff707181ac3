"""Run a benchmark suite: python benchmarks/run.py SUITE [options] (SUITE --help: that suite's options).

Scenario suites share --quick | --full, --seeds, --settings, --protocol and --data-dir; results go to
benchmarks/results/SUITE-PROFILE.{json,md}, workspaces stay in benchmarks/work/ for reruns. Tool suites take options
of their own. `docs` (old name: `readme`) rewrites every <!-- bench:NAME --> block of docs/benchmarks.md from
benchmarks/results/NAME-full.md, else NAME-quick.md, else NAME.md, else the only NAME-*.md; every scenario run ends
with it.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

RESULTS = HERE / "results"
BENCHMARKS_DOC = HERE.parent / "docs" / "benchmarks.md"
# suite: (module, function(argv)), imported only when chosen (KAMAL_BENCH_WORK first, then common)
TOOLS = {
    "cross-lingual-builds": ("cross_lingual_builds", "builds_main"), "cross-lingual-peers": ("cross_lingual_builds", "peers_main"),
    "readme-walk": ("readme_walk", "main"), "student-choice": ("student_choice", "main"),
    "cpu-overhead": ("speed", "overhead_main"), "gpu-figures": ("speed", "gpu_figures_main"),
    "cuda-walk": ("speed", "cuda_walk_main"), "distributed-speed": ("speed", "distributed_speed_main"),
    "onnx-speed": ("speed", "onnx_speed_main"), "demo-data": ("common", "demo_data"),
}


def scenarios() -> dict:
    """Every scenario suite, in the order `all` runs them."""
    from default_student import SCENARIOS as DEFAULT_STUDENT
    from ner import SCENARIOS as NER
    from scenarios import SCENARIOS
    from speed import demo_time, speed
    from two_tasks import SCENARIOS as TWO_TASKS
    return {**DEFAULT_STUDENT, **SCENARIOS, **NER, **TWO_TASKS, "speed": speed, "demo-time": demo_time}


def result_for(name: str) -> Path | None:
    """The results file a docs block NAME shows: NAME-full.md, -quick.md, .md, else the only NAME-*.md."""
    found = next((p for p in (RESULTS / f"{name}-full.md", RESULTS / f"{name}-quick.md", RESULTS / f"{name}.md") if p.is_file()), None)
    others = sorted(RESULTS.glob(f"{name}-*.md"))
    return found or (others[0] if len(others) == 1 else None)


def update_docs(doc: Path = BENCHMARKS_DOC) -> list[str]:
    """Replace each <!-- bench:NAME --> block of doc with its result; the names of blocks none matches."""
    text = doc.read_text()
    missing = []
    for match in re.finditer(r"<!-- bench:([\w-]+) -->", text):
        name = match.group(1)
        path = result_for(name)
        if path is None:
            missing.append(name)
            continue
        body = path.read_text().strip()
        text = re.sub(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)",
                      lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text, flags=re.DOTALL)
    doc.write_text(text)
    return missing


def docs_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="run.py docs", description=update_docs.__doc__.splitlines()[0])
    parser.add_argument("--doc", type=Path, default=BENCHMARKS_DOC, help="the file to rewrite (default: %(default)s)")
    args = parser.parse_args(argv)
    for name in update_docs(args.doc):
        print(f"no results file for the block {name} (or several NAME-*.md): left as it is", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in TOOLS:
        module, function = TOOLS[argv[0]]
        raise SystemExit(getattr(importlib.import_module(module), function)(argv[1:]))
    if argv and argv[0] in ("docs", "readme"):
        return docs_main(argv[1:])
    from dataclasses import replace
    from common import DEFAULT_DATA, PROFILES, Bench
    every = scenarios()
    epilog = __doc__.split("\n\n", 1)[1] + f"\nScenario suites: {', '.join(every)}, all.\nTool suites: {', '.join(TOOLS)}.\n"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", metavar="SUITE", choices=[*every, "all", "docs", "readme", *TOOLS])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="profile", const="quick", help="about 15 minutes a scenario (default)")
    mode.add_argument("--full", action="store_const", dest="profile", const="full", help="every row: hours on a CPU")
    mode.add_argument("--smoke", action="store_const", dest="profile", const="smoke",
                      help="ner-table only: a few sentences, to check the plumbing")
    parser.add_argument("--seeds", default="1", help="student seeds, e.g. 1,2,3 (mean and std)")
    parser.add_argument("--settings", help="default-student and its suites: the settings whose title starts with "
                        "one of these, separated by ';' (e.g. 'two teachers;heterogeneous'); the others keep their last figures")
    parser.add_argument("--protocol", choices=["muki", "realistic", "both"], default="both",
                        help="default-student only: train on the teachers' own texts (MUKI's protocol), on rows no "
                             "teacher saw (realistic), or both side by side")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="a folder with topics10/{train,test}.jsonl")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = args.settings.split(";") if args.settings else None
    names = list(every) if args.scenario == "all" else [args.scenario]
    for name in names:
        profile = args.profile or "quick"
        if profile not in PROFILES and name != "ner-table":
            raise SystemExit(f"--{profile} is for ner-table only")
        # ner-table keeps its own settings per profile (benchmarks/ner.py); --smoke has no topics profile
        every[name](Bench(name, PROFILES.get(profile) or replace(PROFILES["quick"], name=profile), args.data_dir, seeds,
                          settings=settings, protocols=["muki", "realistic"] if args.protocol == "both" else [args.protocol]))
    update_docs()


if __name__ == "__main__":
    main()
