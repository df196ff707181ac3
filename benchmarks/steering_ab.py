"""Steering's time against plain generation, side by side with kamal's steering code of an earlier commit.

The README walk's teachers (readme_walk.py, seed S), smollm2-135m, every other class of each teacher, 8 prompts a
batch naming the domain; plain generation and chunk steering with kamal's defaults (8 candidates, --contrast), each
with the working tree's kamalcli/synth/steering.py and with the one of commit REV (read with `git show`), taking
turns class by class so that a slow spell of a shared machine falls on both alike.

    python benchmarks/steering_ab.py [--before REV] [--seed S]

REV defaults to the commit before finished texts left the batch (a8677a5^).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

from common import REPO  # noqa: E402
from steering import generate_class, walk_models  # noqa: E402

PER_CLASS = 8


def load_before(rev: str):
    source = subprocess.run(["git", "show", f"{rev}:kamalcli/synth/steering.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "steering_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("steering_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["steering_before"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="a8677a5^")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    from kamalcli.synth import steering as after
    from kamalcli.synth.synthesize import steering_scorer

    versions = {"before": load_before(args.before), "after": after}
    teachers, lm, scorers = walk_models(args.seed)
    steer_by = steering_scorer(scorers, teachers, True)
    seconds: dict[tuple[str, str], float] = {}
    units = [(t, i, label) for t in teachers for i, label in enumerate(t.labels)][::2]
    for turn, (teacher, index, label) in enumerate(units):
        scorer, column = steer_by(SimpleNamespace(teacher=teacher.name, label=label, class_index=index))
        order = list(versions) if turn % 2 == 0 else list(reversed(versions))
        for kind, strength in (("plain", 0.0), ("steered", 3.0)):
            for version in order:
                _, took = generate_class(versions[version], lm, scorer, column, label, index, 8, strength, PER_CLASS,
                                         args.seed)
                seconds[version, kind] = seconds.get((version, kind), 0.0) + took
    texts = PER_CLASS * len(units)
    for version in versions:
        plain, steered = seconds[version, "plain"] / texts, seconds[version, "steered"] / texts
        print(f"{version} ({args.before if version == 'before' else 'working tree'}): plain {plain:.2f} s/text, "
              f"steered {steered:.2f} s/text, {steered / plain:.2f}x plain")
    print(f"after / before: steered {seconds['after', 'steered'] / seconds['before', 'steered']:.2f}, "
          f"plain {seconds['after', 'plain'] / seconds['before', 'plain']:.2f} ({texts} texts each)")


if __name__ == "__main__":
    main()
