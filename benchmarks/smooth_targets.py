"""How often the default student's target names the gold label on its transfer rows, with and without smoothing.

For each workspace (a default-student one: teachers added as folders, generated text, the transfer set and its gold
copy): `kamal amalgamate --method muki-hard` with kamal's defaults and `--option smooth=0` runs in a throwaway copy
of the workspace up to its training loop, which is replaced by one that keeps the objective's target and stops.
That target is then smoothed over each row's k nearest rows in the prototype encoder (kamalcli/probe/neighbours.py)
for several k and own shares, and each version's argmax is compared with the gold copy (read here only to measure).
Trains nothing.

    python benchmarks/smooth_targets.py benchmarks/work/quick-protocols-two-halves [more] \
        [--data pool --gold pool-gold] [--first 736,1000,1500,2000]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import amalgamate_in_copy, markdown  # noqa: E402

NEIGHBOURS = (5, 10, 20, 40)
OWN_SHARES = (0.7, 0.5, 0.3)


class _Stop(Exception):
    pass


def default_target(root: Path, data: str, max_length: int, student: str) -> np.ndarray:
    """The (rows, |Y|) target kamal's default (smooth=0) trains on, in a throwaway copy of the workspace."""
    import kamalcli.train.loop as loop

    from kamalcli.workspace.folder import find_workspace
    from kamalcli.workspace.store import Store

    teachers = [t.name for t in Store.open(find_workspace(str(root))).teachers()]
    kept = {}

    def keep_target(model, encoded, objective, config, workdir, **_):
        kept["target"] = np.asarray(objective.arrays["target"])
        raise _Stop()

    original = loop.train
    loop.train = keep_target
    try:
        result = amalgamate_in_copy(root, ["--method", "muki-hard", "--name", "target", "--student", student,
                                           "--data", data, "--option", "smooth=0", "--max-length", str(max_length),
                                           *[a for t in teachers for a in ("--teacher", t)]])
    finally:
        loop.train = original
    if "target" not in kept:
        raise SystemExit(f"{root}: amalgamate stopped before training:\n{result.output[-2000:]}")
    return kept["target"]


def measure(root: Path, data: str, gold_name: str, max_length: int, student: str, first: list[int]) -> str:
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.probe.encoder import sentence_vectors
    from kamalcli.probe.neighbours import nearest_rows, smoothed
    from kamalcli.probe.prototypes import DEFAULT_ENCODER
    from kamalcli.workspace.folder import find_workspace
    from kamalcli.workspace.store import Store

    workspace = find_workspace(str(root))
    store = Store.open(workspace)
    names = list(store.label_space(store.teachers()).names)
    dataset = store.dataset(data)
    texts, _ = load_dataset_rows(dataset)
    gold_texts, gold_labels = load_dataset_rows(store.dataset(gold_name))
    if gold_texts != texts:
        raise SystemExit(f"{gold_name} is not {data} with labels")
    gold = np.array([names.index(label) for label in gold_labels])
    target = default_target(root, data, max_length, student)
    vectors = sentence_vectors(workspace, DEFAULT_ENCODER, texts, dataset.content_hash, max_length, "cpu", print)
    if first:
        return by_pool_size(root.name, data, target, vectors, gold, first)
    rows = []
    for k in NEIGHBOURS:
        neighbours = nearest_rows(vectors, k)
        rows.append([k, *(f"{100 * (smoothed(target, neighbours, share).argmax(1) == gold).mean():.1f}"
                          for share in OWN_SHARES)])
    plain = 100 * (target.argmax(1) == gold).mean()
    return (f"## {root.name}: {len(texts)} rows of {data}\n\nkamal's default target without smoothing: {plain:.1f}% "
            f"name the gold label. Smoothed over k nearest rows in {DEFAULT_ENCODER}, by the row's own share "
            f"(kamal's default: k 10, share 0.5):\n\n"
            + markdown(["k", *(f"own share {s}" for s in OWN_SHARES)], rows) + "\n")


def by_pool_size(workspace: str, data: str, target: np.ndarray, vectors: np.ndarray, gold: np.ndarray,
                 sizes: list[int], k: int = 10, share: float = 0.5) -> str:
    """kamal's smoothing (k 10, even split) on the first N rows of the set: the unsmoothed target is the whole set's,
    the neighbours are found among those N rows only, as `kamal add-data` of N rows would find them."""
    from kamalcli.probe.neighbours import nearest_rows, smoothed

    rows = []
    for n in sizes:
        plain, unit, right = target[:n], vectors[:n], gold[:n]
        neighbours = nearest_rows(unit, k)
        smooth = smoothed(plain, neighbours, share)
        before, after = plain.argmax(1) == right, smooth.argmax(1) == right
        kth = np.einsum("nd,nd->n", unit, unit[neighbours[:, -1]])
        rows.append([n, f"{n / len(np.unique(right)):.0f}", f"{100 * (right[neighbours] == right[:, None]).mean():.1f}",
                     f"{kth.mean():.3f}", f"{100 * before.mean():.1f}", f"{100 * after.mean():.1f}",
                     int((before & ~after).sum()), int((~before & after).sum()),
                     f"{plain[np.arange(n), right].mean():.3f}", f"{smooth[np.arange(n), right].mean():.3f}",
                     f"{plain.max(1).mean():.3f}", f"{smooth.max(1).mean():.3f}"])
    return (f"## {workspace}: the first N rows of {data}, smoothed over their {k} nearest (own share {share})\n\n"
            + markdown(["rows", "rows a label", "neighbours of the row's class %", f"similarity of the {k}th",
                        "target right %", "smoothed right %", "right to wrong", "wrong to right",
                        "p(gold)", "p(gold) smoothed", "max p", "max p smoothed"], rows) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workspaces", nargs="+", type=Path)
    parser.add_argument("--data", default="pool")
    parser.add_argument("--gold", default="pool-gold")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--student", default="minilm-l3", help="any base: the target does not depend on it")
    parser.add_argument("--first", help="pool sizes, e.g. 736,1000,1500,2000: smoothing on the set's first N rows")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    first = [int(n) for n in args.first.split(",")] if args.first else []
    for root in args.workspaces:
        print(measure(root.resolve(), args.data, args.gold, args.max_length, args.student, first), flush=True)


if __name__ == "__main__":
    main()
