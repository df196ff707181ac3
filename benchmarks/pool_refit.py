"""RMD refitted on the transfer rows themselves: a measurement, not (yet) part of kamal (issue 31).

kamal fits each teacher's RMD on the text `kamal synthesize` wrote for it. Where that text does not look like the
teacher's rows of the pool (the cross-lingual pair: English text written for a Chinese sentiment teacher), RMD may
pick the right teacher on the generated rows and not on the pool. This measures a label-free remedy: from the
current selection, each teacher's Gaussians are fitted again on the surer half of the pool rows it is given (the
rows whose margin over the next teacher is larger, kamalcli/probe/prior_check.py `surer_half`; classes: the
teacher's own predictions; background: every pool row), the rows are selected again, and so on for a few rounds.
Two variants: every teacher refitted, or only the teachers for which the prior's check fails (the check's failure
says the generated text does not read that teacher's rows). Per round: how often the selection picks the right
teacher, and how often MUKI's hard target (the picked teacher's class) names the gold label; the pool's gold copy
is read only to measure.

    python benchmarks/pool_refit.py WORKSPACE... [--data pool --gold pool-gold] [--rounds 3]
    python benchmarks/pool_refit.py WORKSPACE --train-default  # a cross-lingual build's workspace

Reads the workspaces' cached probes (their features at the RMD layer) and sentence vectors; trains nothing. With
--train-default: in a copy of the workspace (WORKSPACE-refitN beside it), the transfer probes' RMD values are replaced
by the refit's (every teacher, --rounds rounds), and kamal's default student is trained there as default-student
trains the cross-lingual pair's (seed 1), its accuracy printed per test set: what the refit would give the student.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kamalcli.data.text import load_dataset_rows  # noqa: E402
from kamalcli.probe.arrays import ProbeArrays  # noqa: E402
from kamalcli.probe.prior_check import surer_half, transfer_check  # noqa: E402
from kamalcli.probe.prototypes import DEFAULT_ENCODER  # noqa: E402
from kamalcli.trust.mahalanobis import RMDModel, fit_rmd  # noqa: E402
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


def refit_rounds(views: list[dict], refit: list[int], rounds: int) -> list[np.ndarray]:
    """The selection confidence (rows, teachers) before and after each round; teachers not in `refit` keep theirs."""
    confidence = np.stack([v["confidence"] for v in views], axis=1)
    out = [confidence]
    for _ in range(rounds):
        confidence = confidence.copy()
        for i in refit:
            rows = surer_half(out[-1], i)
            v = views[i]
            confidence[:, i] = -fit_rmd(v["features"][rows], v["pred"][rows], v["features"]).score(v["features"])
        out.append(confidence)
    return out


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
        for confidence in refit_rounds(views, refit, rounds):
            picked = confidence.argmax(axis=1)
            target = np.array([named[p][row] for row, p in enumerate(picked)])
            cells.append(f"{100 * (picked == owner).mean():.1f} / {100 * (target == np.asarray(gold)).mean():.1f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("\n(each cell: selection picks the right teacher % / MUKI's hard target names the gold label %; round 0: "
          "the fit on the generated text, as kamal selects today)\n")


def train_default(root: Path, data: str, rounds: int) -> None:
    """The default student on a copy of the workspace whose transfer probes carry the refitted RMD."""
    copy = root.with_name(f"{root.name}-refit{rounds}")
    if not copy.exists():
        shutil.copytree(root, copy)
        store = Store.open(find_workspace(str(copy)))
        teachers, dataset = store.teachers(), store.dataset(data)
        confidence = refit_rounds(teacher_views(store, teachers, dataset), list(range(len(teachers))), rounds)[-1]
        for i, t in enumerate(teachers):
            for probe in store.probes(teacher_id=t.id, dataset_id=dataset.id):
                fit = store.rmd_fit_of(probe.id)
                if fit is not None:
                    store.set_probe_rmd(probe.id, fit.id, -confidence[:, i], probe.summary or {})
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import default_student as ds
    from common import Workspace

    bench, setting = ds.realistic_setting("cross-lingual")
    ws = Workspace(copy)
    name = ds.train_default(bench, setting, ws, data, name=f"refit{rounds}-default")
    for test in setting.tests(bench):
        print(f"{copy.name}: the default on {test}: {100 * ws.json('eval', name, '--data', test)['accuracy']:.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspaces", nargs="+", type=Path)
    parser.add_argument("--data", default="pool", help="the transfer set (default pool)")
    parser.add_argument("--gold", default="pool-gold", help="the same rows with labels (default pool-gold)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-default", action="store_true", help="train the default on a refitted copy")
    args = parser.parse_args()
    for root in args.workspaces:
        if args.train_default:
            train_default(root.resolve(), args.data, args.rounds)
        else:
            measure(root, args.data, args.gold, args.rounds)


if __name__ == "__main__":
    main()
