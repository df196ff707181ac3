"""How many dropout passes a row needs: the adaptive probe's stopping rule replayed on recorded passes.

Records K individual MC-dropout passes of every teacher of a workspace on one of its labelled datasets,
then replays kamal's adaptive rule (kamalcli.probe.adaptive.adaptive_mc_mean, the code the probe runs)
on those passes for several minimum pass counts, beside the exact probe with fewer passes. Every row
compares against the mean of all K passes: the mean passes per row, the share of rows whose selected
teacher (highest MC confidence) is the same, the mean |c - c_K| of the confidence, and the selection
accuracy (the selected teacher owns the gold label). "exact, other masks" compares two disjoint halves
of the K passes with each other: the noise of the exact probe at K/2.

    python benchmarks/probe_passes.py --workspace benchmarks/work/quick-two-halves --data test --rows 600
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kamalcli.probe.adaptive import adaptive_mc_mean  # noqa: E402

RULES = [(4, 0.03), (3, 0.03), (2, 0.03)]  # (min_passes, tolerance); kamal's default is (3, 0.03)


def kamal_json(workspace: Path, *args: str):
    out = subprocess.run([sys.executable, "-m", "kamalcli", "--workspace", str(workspace), *args, "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def record(folder: str, texts: list[str], k: int, max_length: int, cache: Path) -> np.ndarray:
    if cache.exists():
        return np.load(cache)
    from kamalcli.models.batching import encode, inference_batches
    from kamalcli.models.loading import enable_mc_dropout, load_classifier, load_tokenizer

    model = load_classifier(folder).eval()
    encoded = encode(load_tokenizer(folder), texts, max_length, config=model.config)
    passes = np.zeros((k, len(texts), model.config.num_labels), np.float32)
    torch.manual_seed(0)
    enable_mc_dropout(model)
    with torch.inference_mode():
        for index in inference_batches(encoded.lengths, 64):
            batch = encoded.batch(index, "cpu")
            for pass_ in range(k):
                passes[pass_, index] = torch.softmax(model(**batch).logits.float(), -1).numpy()
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, passes)
    return passes


def confidence(mean: np.ndarray) -> np.ndarray:
    return 1 + (mean * np.log(np.clip(mean, 1e-12, None))).sum(-1) / math.log(mean.shape[-1])


def replay(passes: np.ndarray, min_passes: int, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """The adaptive probe's mean and passes per row, drawing the recorded passes in order."""
    drawn = np.zeros(passes.shape[1], dtype=np.int64)

    def sample(rows: np.ndarray) -> torch.Tensor:
        out = torch.from_numpy(passes[drawn[rows], rows])
        drawn[rows] += 1
        return out

    mean, taken = adaptive_mc_mean(sample, passes.shape[1], passes.shape[2], max_passes=passes.shape[0],
                                   min_passes=min_passes, tolerance=tolerance, batch_size=64)
    return mean.numpy(), taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=REPO / "benchmarks" / "work" / "quick-two-halves")
    parser.add_argument("--data", default="test")
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("-k", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=64)
    args = parser.parse_args()

    teachers = kamal_json(args.workspace, "teachers")
    dataset = next(d for d in kamal_json(args.workspace, "data") if d["name"] == args.data)
    rows = [json.loads(line) for line in Path(dataset["source"]).read_text().splitlines() if line.strip()][: args.rows]
    texts, gold = [r["text"] for r in rows], [r.get("label") for r in rows]
    cache = REPO / "benchmarks" / "work" / "passes"
    passes = {t["name"]: record(t["path"], texts, args.k, args.max_length,
                                cache / f"{args.workspace.name}-{t['name']}-{args.data}-{len(texts)}-k{args.k}.npy")
              for t in teachers}
    owners = np.array([[g in t["labels"] for t in teachers] for g in gold])

    def figures(confidences: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> tuple[float, float, float]:
        chosen = np.stack([confidences[t["name"]] for t in teachers]).argmax(0)
        ref_chosen = np.stack([reference[t["name"]] for t in teachers]).argmax(0)
        agree = 100 * float((chosen == ref_chosen).mean())
        gap = float(np.mean([np.abs(confidences[n] - reference[n]).mean() for n in confidences]))
        accuracy = 100 * float(owners[np.arange(len(chosen)), chosen].mean())
        return agree, gap, accuracy

    full = {n: confidence(p.mean(0)) for n, p in passes.items()}
    half = args.k // 2
    lines = [("exact, all K", args.k, *figures(full, full))]
    first = {n: confidence(p[:half].mean(0)) for n, p in passes.items()}
    second = {n: confidence(p[half:].mean(0)) for n, p in passes.items()}
    agree, gap, accuracy = figures(first, second)
    lines.append((f"exact K={half} vs exact K={half}, other masks", half, agree, gap, accuracy))
    for min_passes, tolerance in RULES:
        results = {n: replay(p, min_passes, tolerance) for n, p in passes.items()}
        mean_passes = float(np.mean([taken.mean() for _, taken in results.values()]))
        lines.append((f"adaptive, min {min_passes}, tolerance {tolerance}", mean_passes,
                      *figures({n: confidence(m) for n, (m, _) in results.items()}, full)))
    for n_passes in (2, 3, 4, 6):
        lines.append((f"exact K={n_passes} (first passes)", n_passes,
                      *figures({n: confidence(p[:n_passes].mean(0)) for n, p in passes.items()}, full)))

    print(f"{len(texts)} rows of {args.data}, teachers {', '.join(t['name'] for t in teachers)}, K = {args.k}")
    print("| probe | passes per row | same teacher as all K | mean abs(c - c_K) | selection accuracy |")
    print("|---|---|---|---|---|")
    for name, n, agree, gap, accuracy in lines:
        print(f"| {name} | {n:.2f} | {agree:.1f}% | {gap:.4f} | {accuracy:.1f}% |")


if __name__ == "__main__":
    main()
