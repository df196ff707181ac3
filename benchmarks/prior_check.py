"""The prior's check (kamalcli/probe/prior_check.py) on default-student workspaces, with what the labels say.

For each workspace: the check as kamal amalgamate makes it on the transfer set (label-free: on the rows RMD gives
each teacher, how often the prototype classifier names the teacher's predicted class, against chance agreement),
then, from the transfer set's gold copy (read here only to measure), the same agreement on each teacher's true
rows and how often the prototype classifier, the ensemble and their product name the gold label; last, the check
as each selection score would make it, on every row the score gives a teacher (the check before 2026-11-27) and on
the surer half of them (the check kamal makes), with the share of those rows that are truly the teacher's.

    python benchmarks/prior_check.py benchmarks/work/quick-protocols-two-halves \
        benchmarks/work/quick-protocols-cross-lingual [--data pool --gold pool-gold] [--encoder BASE]

Reads the workspaces' cached probes and sentence vectors (computing the encoder's if missing); trains nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kamalcli.data.text import load_dataset_rows  # noqa: E402
from kamalcli.probe.arrays import ProbeArrays  # noqa: E402
from kamalcli.probe.figures import SCORES  # noqa: E402
from kamalcli.probe.fit_plan import rmd_fit_plan  # noqa: E402
from kamalcli.probe.prior_check import agreement, surer_half, transfer_check  # noqa: E402
from kamalcli.probe.prototypes import DEFAULT_ENCODER, class_posterior, fit_prototypes  # noqa: E402
from kamalcli.probs import softmax  # noqa: E402
from kamalcli.workspace.folder import find_workspace  # noqa: E402
from kamalcli.workspace.store import Store  # noqa: E402


def measure(root: Path, data: str, gold_name: str, encoder: str = DEFAULT_ENCODER) -> None:
    workspace = find_workspace(str(root))
    store = Store.open(workspace)
    teachers, dataset = store.teachers(), store.dataset(data)
    check = transfer_check(workspace, store, teachers, dataset, None, encoder=encoder, device="cpu")
    print(f"## {root.name} (prototypes in {encoder})\n")
    if check is None:
        print("no check: no generated text for every label, or a teacher not probed on the transfer set\n")
        return
    print(f"label-free check: {'passed' if check.passed else 'failed'} (rows selected by {check.selected_by})")
    for t in check.teachers:
        print(f"- {t.words()}")
    gold = load_dataset_rows(store.dataset(gold_name))[1]
    names = [label for t in teachers for label in t.labels]
    owner = np.repeat(np.arange(len(teachers)), [len(t.labels) for t in teachers])
    gold_index = np.array([names.index(label) for label in gold])
    fit = fit_prototypes(workspace, teachers, dataset, rmd_fit_plan(store, teachers, None, one_dataset=True).dataset,
                         encoder=encoder, max_length=64, device="cpu", say=lambda _: None)
    prior = class_posterior(fit.vectors, fit.prototypes)[:, [fit.names.index(n) for n in names]]
    probes = [max(store.probes(teacher_id=t.id, dataset_id=dataset.id), key=lambda p: p.id) for t in teachers]
    rows = [store.probe_rows(p.id) for p in probes]
    logits = [np.asarray(r["pred"]) for r in rows]
    print(f"\non each teacher's true rows ({gold_name}, labels read only here):")
    for i, t in enumerate(teachers):
        mine = owner[gold_index] == i
        a = agreement(t.name, prior[mine][:, owner == i].argmax(1), logits[i][mine], int((owner == i).sum()))
        print(f"- {a.words()}")
    ensemble = softmax(np.concatenate([ProbeArrays.load(Path(p.path)).logits for p in probes], axis=1), axis=1)
    for label, target in (("prototype classifier", prior), ("ensemble", ensemble), ("ensemble x prior", ensemble * prior)):
        print(f"- {label}: names the gold label on {100 * (target.argmax(1) == gold_index).mean():.1f}% of rows")
    by_selector(teachers, rows, fit.shares(), prior, owner, owner[gold_index])
    print()


def by_selector(teachers, rows: list[dict], prototype_shares: np.ndarray, prior: np.ndarray, owner: np.ndarray,
                gold_owner: np.ndarray) -> None:
    """The check as each selection score would make it: on all the rows it gives a teacher, and on their surer half."""
    needs = {"rmd": "rmd", "entropy": "uhat", "mc-dropout": "mc_uhat", "max-prob": "max_prob"}
    confidences = {score: [SCORES[score](r) for r in rows] if all(None not in r[column] for r in rows) else None
                   for score, column in needs.items()}
    confidences["prototype"] = list(prototype_shares.T)
    print("\nthe check under each selection score (all rows it gives a teacher | their surer half; own: truly the "
          "teacher's, gold read only here):")
    print("| selection | right % | teacher | rows | own % | kappa | passes | surer rows | own % | kappa | passes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, columns in confidences.items():
        if columns is None:
            continue
        confidence = np.stack(columns, axis=1)
        picked = confidence.argmax(axis=1)
        for i, t in enumerate(teachers):
            cells = []
            for rows_i in (np.flatnonzero(picked == i), surer_half(confidence, i)):
                a = agreement(t.name, prior[rows_i][:, owner == i].argmax(1),
                              np.asarray(rows[i]["pred"])[rows_i], int((owner == i).sum()))
                own = 100 * (gold_owner[rows_i] == i).mean() if len(rows_i) else 0.0
                cells += [f"{a.rows:,}", f"{own:.1f}", f"{a.kappa:.2f}", "yes" if a.clear else "no"]
            right = f"{100 * (picked == gold_owner).mean():.1f}" if i == 0 else ""
            print(f"| {name if i == 0 else ''} | {right} | {t.name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspaces", nargs="+", type=Path)
    parser.add_argument("--data", default="pool", help="the transfer set (default pool)")
    parser.add_argument("--gold", default="pool-gold", help="the same rows with labels (default pool-gold)")
    parser.add_argument("--encoder", default=DEFAULT_ENCODER, help=f"the prototypes' encoder (default {DEFAULT_ENCODER})")
    args = parser.parse_args()
    for root in args.workspaces:
        measure(root, args.data, args.gold, args.encoder)


if __name__ == "__main__":
    main()
