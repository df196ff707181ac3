"""How often muki's pick names the right teacher, and its hard target the gold label, with the pick smoothed over
each row's k nearest rows (pick_smooth, kamalcli/probe/neighbours.py) and without.

For each workspace (a default-student or cross-lingual-builds one: teachers added as folders, generated text, the
transfer set and its gold copy): `kamal amalgamate --method muki-hard` runs with kamal's defaults, in a throwaway copy
of the workspace, up to the method's objective, so every decision (score=auto, the prior and its check, refit=auto)
is the one the default student makes, except that MUKI's hard target (commit=1) is asked for, since the pick is what
is measured. The teachers' outputs and options it was built from are kept and built again with pick_smooth=k; each
pick is compared with the teacher whose labels hold the gold label, and each target's argmax with the gold label
(the gold copy is read only to measure).
Trains nothing.

    python benchmarks/pick_smooth.py WORKSPACE... [--data pool --gold pool-gold] [--option refit=none]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import amalgamate_in_copy, markdown  # noqa: E402

NEIGHBOURS = (0, 5, 10, 20, 40)


class _Stop(Exception):
    pass


def default_outputs(root: Path, data: str, student: str, max_length: int, options: list[str]):
    """(teacher outputs, options) muki-hard's default builds its objective from, in a throwaway copy."""
    from kamalcli.methods import REGISTRY
    from kamalcli.workspace.folder import find_workspace
    from kamalcli.workspace.store import Store

    teachers = [t.name for t in Store.open(find_workspace(str(root))).teachers()]
    method = REGISTRY["muki-hard"]
    kept = {}

    def keep(outputs, options):
        kept["outputs"], kept["options"] = outputs, options
        raise _Stop()

    REGISTRY["muki-hard"] = replace(method, build=keep)
    try:
        result = amalgamate_in_copy(root, ["--method", "muki-hard", "--name", "picks", "--student", student,
                                           "--data", data, "--option", f"pick_smooth={max(NEIGHBOURS)}",
                                           "--option", "commit=1", "--max-length", str(max_length),
                                           *[a for o in options for a in ("--option", o)],
                                           *[a for t in teachers for a in ("--teacher", t)]])
    finally:
        REGISTRY["muki-hard"] = method
    if "outputs" not in kept:
        raise SystemExit(f"{root}: amalgamate stopped before its objective:\n{result.output[-2000:]}")
    return kept["outputs"], kept["options"]


def gold_of(root: Path, data: str, gold_name: str, outputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gold label index per row, (labels, teachers) ownership, the teacher owning each row's gold label), from the
    transfer set's gold copy, read only to measure."""
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.workspace.folder import find_workspace
    from kamalcli.workspace.store import Store

    store = Store.open(find_workspace(str(root)))
    gold_texts, gold_labels = load_dataset_rows(store.dataset(gold_name))
    if gold_texts != load_dataset_rows(store.dataset(data))[0]:
        raise SystemExit(f"{gold_name} is not {data} with labels")
    names = list(outputs.space.names)
    gold = np.array([names.index(label) for label in gold_labels])
    owns = np.stack([outputs.space.mask(t) for t in outputs.teachers], axis=1)
    return gold, owns, owns[gold].argmax(axis=1)


def workspaces_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every gold-measuring script over default-student workspaces takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("workspaces", nargs="+", type=Path)
    parser.add_argument("--data", default="pool")
    parser.add_argument("--gold", default="pool-gold")
    parser.add_argument("--student", default="minilm-l6", help="only decides the student's tokenizer here")
    parser.add_argument("--max-length", type=int, default=64)
    return parser


def measure(root: Path, data: str, gold_name: str, student: str, max_length: int, options: list[str]) -> str:
    from kamalcli.methods.muki import build_muki_hard

    outputs, chosen = default_outputs(root, data, student, max_length, options)
    gold, owns, owner = gold_of(root, data, gold_name, outputs)
    rows = []
    for k in NEIGHBOURS:
        objective = build_muki_hard(outputs, replace(chosen, pick_smooth=k))
        target = objective.arrays["target"]
        picked = owns[target.argmax(axis=1)].argmax(axis=1)
        right = picked == owner
        kappa = objective.info.get("pick_smooth", {}).get("kappa")
        rows.append([k, f"{100 * right.mean():.1f}",
                     " / ".join(f"{100 * right[owner == i].mean():.1f}" for i in range(len(outputs.teachers))),
                     f"{100 * (target.argmax(axis=1) == gold).mean():.1f}", "-" if kappa is None else f"{kappa:.2f}"])
    decided = (f"score {chosen.confidence_score}, prior {objective.info.get('prior', 'none')}"
               + "".join(f", {o}" for o in options))
    return (f"## {root.parent.name}/{root.name} ({decided}; {len(gold)} rows of {data})\n\n"
            + markdown(["pick_smooth", "picks the right teacher %", "per teacher (" + ", ".join(outputs.teachers) + ")",
                        "hard target names the gold label %", "neighbours' pick agreement (kappa)"], rows) + "\n")


def main() -> None:
    parser = workspaces_parser(__doc__.splitlines()[0])
    parser.add_argument("--option", action="append", default=[], help="an amalgamate option, e.g. refit=none")
    args = parser.parse_args()
    for root in args.workspaces:
        print(measure(root.resolve(), args.data, args.gold, args.student, args.max_length, args.option), flush=True)


if __name__ == "__main__":
    main()
