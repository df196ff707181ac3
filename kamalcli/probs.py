"""Distributions and ranks in numpy, written once: softmax, entropy, normalised entropy, ranks, percentiles,
and the interval around a share measured on few rows.

numpy only (no torch), so probes, methods, exports and the torch-free runtime share them.
"""

from __future__ import annotations

import math

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: a two-sided 95% interval


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def logsumexp(x: np.ndarray, axis: int = -1) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return np.squeeze(top, axis=axis) + np.log(np.exp(x - top).sum(axis=axis))


def entropy(probs: np.ndarray, axis: int = -1, floor: float = 1e-30) -> np.ndarray:
    """Shannon entropy (nats) along `axis`; probabilities below `floor` are taken as `floor` inside the log."""
    return -(probs * np.log(np.clip(probs, floor, 1.0))).sum(axis=axis)


def normalised_entropy(probs: np.ndarray, axis: int = -1, floor: float = 1e-30) -> np.ndarray:
    """H(p) / log k in [0, 1]; 0 over a single class (nothing to be unsure about)."""
    k = probs.shape[axis]
    if k < 2:
        return np.zeros(np.delete(probs.shape, axis % probs.ndim))
    return entropy(probs, axis, floor) / np.log(k)


def rankdata(values: np.ndarray) -> np.ndarray:
    """Average ranks, 1-based (ties share the mean of their ranks)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def percentile(scores: np.ndarray) -> np.ndarray:
    """Unbounded scores (RMD distances) -> their rank among all (row, teacher) entries, in (0, 1].

    One monotone map for every teacher, so which teacher is most confident does
    not change; but margins and softmax(c / tau) become as well scaled as for
    MC-dropout confidences, and a few far-out rows cannot dominate re-weighting.
    """
    return (rankdata(scores.ravel()) / scores.size).reshape(scores.shape)


def auroc(positive: np.ndarray, negative: np.ndarray) -> float:
    """The probability that a random positive row scores above a random negative one (ties count half): the
    area under the ROC curve, by the Mann-Whitney U statistic. NaN when either side is empty."""
    positive, negative = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    if len(positive) == 0 or len(negative) == 0:
        return float("nan")
    ranks = rankdata(np.concatenate([positive, negative]))
    n = len(positive)
    return float((ranks[:n].sum() - n * (n + 1) / 2) / (n * len(negative)))


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95% by default) around successes / n: the shares p for which
    (successes / n - p)^2 <= z^2 p (1 - p) / n. Unlike p +- z sqrt(p (1 - p) / n) it stays inside [0, 1]
    and keeps its width at 0 or n successes, which is what a held-out slice of 60-100 rows needs."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"a share needs 0 <= successes <= n and n > 0 (got {successes} of {n})")
    share, z2 = successes / n, z * z
    centre = (share + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)
