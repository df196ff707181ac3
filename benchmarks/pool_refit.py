"""RMD refitted on the transfer rows themselves, round by round: what kamal's refit=auto does, measured (issue 31).

kamal fits each teacher's RMD on the text `kamal synthesize` wrote for it. Where that text does not look like the
teacher's rows of the pool (the cross-lingual pair: English text written for a Chinese sentiment teacher), RMD may
pick the right teacher on the generated rows and not on the pool. muki's refit=auto (kamalcli/probe/
transfer_refit.py) fits such a teacher's Gaussians again on the surer half of the pool rows the selection gives it
(its own predictions as the classes, every pool row as the background), selects again, and so on for up to three
rounds, stopping once no row changes teacher. It refits only the teachers the prior's check fails for; this
script also measures refitting every teacher, the variant kamal does not take. Per round: how often the selection
picks the right teacher, and how often MUKI's hard target (the picked teacher's class) names the gold label; the
pool's gold copy is read only to measure. A round that moves no row ends the refit; later cells repeat it.

    python benchmarks/pool_refit.py WORKSPACE... [--data pool --gold pool-gold] [--rounds 3]

Reads the workspaces' cached probes (their features at the RMD layer) and sentence vectors; trains nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kamalcli.data.text import load_dataset_rows  # noqa: E402
from kamalcli.probe.arrays import ProbeArrays  # noqa: E402
from kamalcli.probe.prior_check import transfer_check  # noqa: E402
from kamalcli.probe.prototypes import DEFAULT_ENCODER  # noqa: E402
from kamalcli.probe.transfer_refit import refit_rounds  # noqa: E402
from kamalcli.trust.mahalanobis import RMDModel  # noqa: E402
from kamalcli.workspace.folder import find_workspace  # noqa: E402
from kamalcli.workspace.store import Store  # noqa: E402


def teacher_views(store, teachers, dataset) -> list[dict]:
    """Per teacher, on the transfer rows: features at its RMD layer, its predicted class, -RMD of its stored fit."""
    views = []
    for t in teachers:
        probe = max((p for p in store.probes(teacher_id=t.id, dataset_id=dataset.id) if store.rmd_fit_of(p.id)),
                    key=lambda p: p.id)
        fit_files = sorted(Path(store.rmd_fit_of(probe.id).path).glob("rmd-L*.npz"), key=lambda f: int(f.stem[5:]))
        arrays = ProbeArrays.load(Path(probe.path))
        features = np.asarray(arrays.features[int(fit_files[-1].stem[5:])], dtype=np.float64)
        views.append({"features": features, "pred": arrays.logits.argmax(axis=1),
                      "confidence": -RMDModel.load(fit_files[-1]).score(features)})
    return views


def measure(root: Path, data: str, gold_name: str, rounds: int) -> None:
    workspace = find_workspace(str(root))
    store = Store.open(workspace)
    teachers, dataset = store.teachers(), store.dataset(data)
    views = teacher_views(store, teachers, dataset)
    gold = load_dataset_rows(store.dataset(gold_name))[1]
    owner = np.array([next(i for i, t in enumerate(teachers) if g in t.labels) for g in gold])
    named = [[t.labels[k] for k in v["pred"]] for t, v in zip(teachers, views)]
    check = transfer_check(workspace, store, teachers, dataset, None, encoder=DEFAULT_ENCODER, device="cpu")
    failed = [i for i, t in enumerate(teachers) if check is not None and t.name in {f.teacher for f in check.failed}]
    print(f"## {root.parent.name}/{root.name}: the prior's check on {data} "
          + ("not made" if check is None else "fails for " + ", ".join(teachers[i].name for i in failed)
             if failed else "passes for every teacher") + "\n")
    print("| refitted | " + " | ".join(f"round {r}" for r in range(rounds + 1)) + " |")
    print("|---|" + "---|" * (rounds + 1))
    variants = [("every teacher", list(range(len(teachers))))]
    if failed and len(failed) < len(teachers):
        variants.append(("teachers the check fails for", failed))
    for label, refit in variants:
        cells = []
        steps = refit_rounds(np.stack([v["confidence"] for v in views], axis=1), [v["features"] for v in views],
                             [v["pred"] for v in views], refit, rounds)
        for confidence in steps + [steps[-1]] * (rounds + 1 - len(steps)):
            picked = confidence.argmax(axis=1)
            target = np.array([named[p][row] for row, p in enumerate(picked)])
            cells.append(f"{100 * (picked == owner).mean():.1f} / {100 * (target == np.asarray(gold)).mean():.1f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("\n(each cell: selection picks the right teacher % / MUKI's hard target names the gold label %; round 0: "
          "the fit on the generated text, as kamal selects without refit)\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspaces", nargs="+", type=Path)
    parser.add_argument("--data", default="pool", help="the transfer set (default pool)")
    parser.add_argument("--gold", default="pool-gold", help="the same rows with labels (default pool-gold)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for root in args.workspaces:
        measure(root, args.data, args.gold, args.rounds)


if __name__ == "__main__":
    main()
