"""Where muki-hard's per-row weights put the loss: each teacher's share of it, under four weightings.

For each workspace, muki-hard's default objective is built as in pick_smooth.py (a throwaway copy, kamal's own
decisions, MUKI's hard target with the pick smoothed), then weighted four ways: MUKI's margin c_max - c_second
(reweight=true), that margin scaled to mean 1 within each picked teacher's rows (reweight=per-teacher, the default
since issue 31), no weights (reweight=false), and log |Y_i| of the picked teacher scaled to mean 1
(computed here only: a rule tried for issue 31 and not kept, docs/benchmarks.md). Per teacher, over the rows whose
gold label is one of its labels: the rows, their share of the summed weight, and their mean weight where the hard
target names the gold label and where it does not (does the weight tell a right target from a wrong one?), and the
effective sample size (sum w)^2 / sum w^2 of those rows as a share of them (do the weights rest on few rows?). The gold
copy is read only to measure. Trains nothing.

    python benchmarks/row_weights.py WORKSPACE... [--data pool --gold pool-gold]
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import markdown  # noqa: E402
from pick_smooth import default_outputs, gold_of, workspaces_parser  # noqa: E402

WEIGHTINGS = ("margin (reweight=true)", "margin within each picked teacher (reweight=per-teacher, the default)",
              "none (reweight=false)", "log of the picked teacher's class count")


def measure(root: Path, data: str, gold_name: str, student: str, max_length: int) -> str:
    from kamalcli.methods.muki import build_muki_hard

    outputs, chosen = default_outputs(root, data, student, max_length, [])
    gold, owns, owner = gold_of(root, data, gold_name, outputs)
    objective = build_muki_hard(outputs, replace(chosen, pick_smooth="auto", reweight=True))
    per_teacher = build_muki_hard(outputs, replace(chosen, pick_smooth="auto", reweight="per-teacher")).weights
    named = objective.arrays["target"].argmax(axis=1)
    right = named == gold
    picked = owns[named].argmax(axis=1)
    classes = np.log([len(outputs.space.blocks[t]) for t in outputs.teachers])[picked]
    rows = []
    for weighting, weights in zip(WEIGHTINGS, (objective.weights, per_teacher, np.ones(len(gold)),
                                                 classes / classes.mean())):
        for i, teacher in enumerate(outputs.teachers):
            mine = owner == i
            rows.append([weighting, teacher, int(mine.sum()), f"{weights[mine].sum() / weights.sum():.3f}",
                         f"{weights[mine].mean() / weights.mean():.2f}", f"{100 * right[mine].mean():.1f}",
                         f"{weights[mine & right].mean() / weights.mean():.2f}",
                         f"{weights[mine & ~right].mean() / weights.mean():.2f}",
                         f"{100 * weights[mine].sum() ** 2 / (weights[mine] ** 2).sum() / mine.sum():.0f}"])
    return (f"## {root.parent.name}/{root.name} ({len(gold)} rows of {data})\n\n"
            + markdown(["weights", "gold label's teacher", "rows", "share of the weight",
                        "mean weight (all rows: 1)", "hard target right %", "mean weight, target right",
                        "mean weight, target wrong", "effective rows %"], rows) + "\n")


def main() -> None:
    args = workspaces_parser(__doc__.splitlines()[0]).parse_args()
    for root in args.workspaces:
        print(measure(root.resolve(), args.data, args.gold, args.student, args.max_length), flush=True)


if __name__ == "__main__":
    main()
