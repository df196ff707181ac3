"""Training-step time with a multilingual vocabulary: plain AdamW, fused AdamW, and fused with the
word embeddings frozen (`--embeddings freeze`).

The model has multilingual-e5-small's shape at six layers (vocabulary 250,037, hidden 384) with random
weights, the rows are random token ids (speed depends on shapes, not values), and every variant runs
kamal's own training loop for the same steps, interleaved per round so that the machine's noise hits
all of them alike. MiniLM's shape (vocabulary 30,522) is measured too: there the embedding matrix is
small and fusing should matter little.

    python benchmarks/optimizer_speed.py [--steps 12] [--rounds 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {"multilingual-e5-small": 250_037, "minilm": 30_522}


def _model(vocab_size: int, seed: int = 0):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, num_labels=12)
    return BertForSequenceClassification(config)


def _seconds_per_step(vocab_size: int, variant: str, steps: int, batch: int, length: int, device: str) -> float:
    import torch

    from kamalcli.models.batching import Encoded
    from kamalcli.teachers.train import supervised_objective
    from kamalcli.train.loop import TrainConfig, train

    rng = np.random.default_rng(0)
    rows = batch * (steps + 1)
    encoded = Encoded(ids=list(rng.integers(5, vocab_size, (rows, length)).astype(np.int64)), pad_id=0,
                      token_type=True)
    objective = supervised_objective(rng.integers(0, 12, rows))
    config = TrainConfig(steps=steps + 1, batch_size=batch, lr=1e-4, max_length=length, checkpoint_every=10**6,
                         embeddings="freeze" if variant == "fused, embeddings frozen" else "train", device=device)
    original = torch.optim.AdamW
    if variant == "plain AdamW":
        torch.optim.AdamW = lambda groups, lr, fused=None: original(groups, lr=lr)
    import time

    times = []
    try:
        with tempfile.TemporaryDirectory() as folder:
            train(_model(vocab_size), encoded, objective, config, Path(folder),
                  on_step=lambda step: times.append(time.perf_counter()))
    finally:
        torch.optim.AdamW = original
    return (times[-1] - times[0]) / (len(times) - 1)  # the first step (optimizer state allocation) left out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    variants = ["plain AdamW", "fused AdamW", "fused, embeddings frozen"]
    for shape, vocab in SHAPES.items():
        seconds = {v: [] for v in variants}
        for _ in range(args.rounds):
            for variant in variants:
                seconds[variant].append(_seconds_per_step(vocab, variant, args.steps, args.batch_size, args.length,
                                                          args.device))
        plain = statistics.median(seconds["plain AdamW"])
        print(f"\n{shape} shape, 6 layers, vocabulary {vocab:,}, batch {args.batch_size} x {args.length} tokens, "
              f"{args.device}, median of {args.rounds} interleaved rounds of {args.steps} steps")
        print("| variant | s / step | speed-up vs plain | per round |")
        print("|---|---|---|---|")
        for variant in variants:
            median = statistics.median(seconds[variant])
            rounds = ", ".join(f"{s:.2f}" for s in seconds[variant])
            print(f"| {variant} | {median:.2f} | {plain / median:.2f}x | {rounds} |")


if __name__ == "__main__":
    main()
