"""Adaptive Monte-Carlo dropout: a row stops sampling once more passes cannot move its confidence.

What the probe's consumers read from the MC passes is the confidence
c = 1 - H(pbar)/log|Y| of the mean distribution pbar (teacher selection,
MUKI's weights, its ECE). After n passes, c(pbar_n) differs from its limit by
sampling noise and by the bias of an entropy of a finite mean. Both are
estimated per row from the passes themselves:

  noise  se_n   = std_k(s_k) / sqrt(n),  s_k = sum_j p_kj log pbar_j / log|Y|
         (the delta method: dc = sum_j log pbar_j dpbar_j / log|Y|, as sum_j dpbar_j = 0)
  bias   bias_n = sum_j var_k(p_kj) / pbar_j / (2 n log|Y|)
         (E[H(pbar_n)] ~ H(pbar) - that, times log|Y|; c_n is too high by about this)

A row stops after pass n >= min_passes once se_n + bias_n < tolerance, and
at K passes in any case; only the rows still sampling make the next pass, so
passes shrink as rows converge. With tolerance 0 every row takes all K.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

EPS = 1e-12


def confidence_error(passes: torch.Tensor) -> torch.Tensor:
    """se_n + bias_n of c(pbar) per row, from passes of shape (n, rows, classes); n >= 2."""
    n, _, classes = passes.shape
    if classes < 2:
        return torch.zeros(passes.shape[1], dtype=passes.dtype)
    log_classes = math.log(classes)
    mean = passes.mean(dim=0)
    s = (passes * mean.clamp(min=EPS).log()).sum(dim=-1) / log_classes
    noise = s.std(dim=0, unbiased=True) / math.sqrt(n)
    bias = (passes.var(dim=0, unbiased=True) / mean.clamp(min=EPS)).sum(dim=-1) / (2 * n * log_classes)
    return noise + bias


def adaptive_mc_mean(
    sample: Callable[[np.ndarray], torch.Tensor],
    rows: int,
    classes: int,
    *,
    max_passes: int,
    min_passes: int,
    tolerance: float,
    batch_size: int,
) -> tuple[torch.Tensor, np.ndarray]:
    """The mean of each row's passes, and how many passes each row took.

    sample(local_rows) runs one dropout pass over those rows (indices into
    0..rows-1) and returns their softmax probabilities, one row each.
    """
    history = torch.zeros(max_passes, rows, classes, dtype=torch.float64)
    taken = np.zeros(rows, dtype=np.int64)
    active = np.arange(rows)
    for n in range(1, max_passes + 1):
        for start in range(0, len(active), batch_size):
            part = active[start : start + batch_size]
            history[n - 1, torch.from_numpy(part)] = sample(part).to(torch.float64).cpu()
        taken[active] = n
        if n >= max(min_passes, 2) and n < max_passes:
            error = confidence_error(history[:n, torch.from_numpy(active)])
            active = active[(error >= tolerance).numpy()]
            if len(active) == 0:
                break
    mean = history.sum(dim=0) / torch.from_numpy(taken).to(torch.float64).unsqueeze(1)
    return mean, taken
