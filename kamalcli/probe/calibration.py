"""Expected calibration error (Guo et al. 2017) and the entropy-based scores."""

from __future__ import annotations

import numpy as np

from kamalcli.probs import entropy as probs_entropy, normalised_entropy

EPS = 1e-12


def entropy(probs: np.ndarray) -> np.ndarray:
    """Row-wise Shannon entropy (nats) of (n, k) distributions."""
    return probs_entropy(np.asarray(probs, dtype=np.float64), axis=1, floor=EPS)


def entropy_from_logits(logits: np.ndarray) -> np.ndarray:
    """Entropy of softmax(z) via log-softmax in float64: stays above 0 for very confident rows,
    where a float32 probability would round to exactly 1 (and teachers would tie)."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -(np.exp(log_p) * log_p).sum(axis=1)


def normalised_uncertainty(probs: np.ndarray) -> np.ndarray:
    """H(p) / log k in [0, 1]; 0 for a single-class teacher (it cannot be unsure)."""
    return normalised_entropy(np.asarray(probs, dtype=np.float64), axis=1, floor=EPS)


def reliability_bins(confidence, correct, bins: int = 15):
    """Per equal-width bin (lo, hi]: mean confidence, accuracy (None when empty) and row count."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    conf, acc, counts = [], [], []
    for b in range(bins):
        members = which == b
        n = int(members.sum())
        counts.append(n)
        conf.append(float(confidence[members].mean()) if n else None)
        acc.append(float(correct[members].mean()) if n else None)
    return conf, acc, counts


def ece(confidence: np.ndarray, correct: np.ndarray, bins: int = 15) -> float | None:
    """sum_b |B_b|/n * |acc(B_b) - conf(B_b)| over equal-width bins (lo, hi]."""
    n = np.asarray(confidence).size
    if n == 0:
        return None
    conf, acc, counts = reliability_bins(confidence, correct, bins)
    return float(sum(k / n * abs(a - c) for c, a, k in zip(conf, acc, counts) if k))
