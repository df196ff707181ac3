"""Run a benchmark scenario: python benchmarks/run.py SCENARIO [--quick | --full] [--seeds 1,2,3].

Scenarios: default-student (kamal's default beside its peers, teachers added as folders; --protocol muki,
realistic or both), muki-table, selection, more-teachers, heterogeneous, extension, feature-table,
compression, feature-speed, rl-kd-compression, rl-kd-amalgamation, rl-kd-four, speed, probe-speed
(the probe's part of speed alone), demo-time (the demo with the exact and the default probe; speed includes it),
synthesis-speed, data-free, data-free-three, cross-lingual, ner-table (People's Daily NER, MUKI's Table 6;
--smoke checks its plumbing), all.
Results go to benchmarks/results/SCENARIO-PROFILE.{json,md}; `docs` (old name: `readme`) copies
the latest tables into docs/benchmarks.md. Workspaces (teachers, probe caches, students) are
kept in benchmarks/work/ so a rerun or another scenario reuses them.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cross_lingual import SCENARIOS as CROSS_LINGUAL  # noqa: E402
from default_student import SCENARIOS as DEFAULT_STUDENT  # noqa: E402
from common import DEFAULT_DATA, PROFILES, REPO, RESULTS, Bench  # noqa: E402
from scenarios import SCENARIOS  # noqa: E402
from speed import demo_time, probe_speed, speed  # noqa: E402
from synthesis import SCENARIOS as SYNTHESIS  # noqa: E402
from ner import SCENARIOS as NER  # noqa: E402

ALL = {**DEFAULT_STUDENT, **SCENARIOS, **SYNTHESIS, **CROSS_LINGUAL, **NER, "speed": speed, "probe-speed": probe_speed,
       "demo-time": demo_time}


BENCHMARKS_DOC = REPO / "docs" / "benchmarks.md"


def update_docs() -> None:
    """Replace each <!-- bench:NAME --> ... <!-- /bench:NAME --> block of docs/benchmarks.md with the newest result."""
    doc = BENCHMARKS_DOC
    text = doc.read_text()
    for match in re.finditer(r"<!-- bench:([\w-]+) -->", text):
        name = match.group(1)
        for profile in ("full", "quick"):
            path = RESULTS / f"{name}-{profile}.md"
            if path.is_file():
                body = path.read_text().strip()
                text = re.sub(rf"(<!-- bench:{name} -->\n).*?(<!-- /bench:{name} -->)",
                              lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text, flags=re.DOTALL)
                break
    doc.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=[*ALL, "all", "docs", "readme"])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="profile", const="quick", help="about 15 minutes a scenario (default)")
    mode.add_argument("--full", action="store_const", dest="profile", const="full", help="every row: hours on a CPU")
    mode.add_argument("--smoke", action="store_const", dest="profile", const="smoke",
                      help="ner-table only: a few sentences, to check the plumbing")
    parser.add_argument("--seeds", default="1", help="student seeds, e.g. 1,2,3 (mean and std)")
    parser.add_argument("--settings", help="default-student only: the settings whose title holds one of these "
                        "words, separated by ';' (e.g. 'two teachers;heterogeneous'); the others keep their last figures")
    parser.add_argument("--protocol", choices=["muki", "realistic", "both"], default="both",
                        help="default-student only: train on the teachers' own texts (MUKI's protocol), on rows no "
                             "teacher saw (realistic), or both side by side")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="a folder with topics10/{train,test}.jsonl")
    args = parser.parse_args()
    if args.scenario in ("docs", "readme"):
        update_docs()
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = args.settings.split(";") if args.settings else None
    names = list(ALL) if args.scenario == "all" else [args.scenario]
    for name in names:
        profile = args.profile or "quick"
        if profile not in PROFILES and name != "ner-table":
            raise SystemExit(f"--{profile} is for ner-table only")
        # ner-table keeps its own settings per profile (benchmarks/ner.py); --smoke has no topics profile
        ALL[name](Bench(name, PROFILES.get(profile) or replace(PROFILES["quick"], name=profile), args.data_dir, seeds,
                         settings=settings, protocols=["muki", "realistic"] if args.protocol == "both" else [args.protocol]))
    update_docs()


if __name__ == "__main__":
    main()
