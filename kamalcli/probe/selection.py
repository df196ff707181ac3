"""How well a confidence score picks the teacher that owns the gold label.

For each example and teacher, a score says how confident that teacher is. The
teacher with the highest score is 'selected'. With gold labels we know which
teachers own each example's label, so we can measure:
- selection accuracy: share of examples whose selected teacher owns the label;
- balanced selection accuracy: the same per teacher, on the rows whose label it owns, averaged over the
  teachers with such rows. Plain accuracy weighs teachers by how many rows they own, and that mix is the
  measured data's, not the transfer rows': text `kamal synthesize` writes has as many rows per label, so a
  teacher of 10 labels beside one of 2 owns 5 rows in 6 and always picking it scores 83.3%. Balanced, any
  constant pick scores 1/T (disjoint labels). Its rows for a 95% interval are the effective sample size
  T^2 / sum(1/n_i), which is n for equal groups and what the variance of a mean of T recalls with one
  accuracy gives otherwise;
- AUROC: P(score of an owning teacher > score of a non-owning one) over all
  (example, teacher) pairs, ties counted half.
"""

from __future__ import annotations

import numpy as np

from kamalcli.probs import rankdata


def auroc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    scores = np.asarray(scores, dtype=np.float64).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def selection_quality(confidence: np.ndarray, owns: np.ndarray) -> dict:
    """confidence, owns: (n, teachers). Rows whose label no teacher owns are left out."""
    confidence = np.asarray(confidence, dtype=np.float64)
    owns = np.asarray(owns, dtype=bool)
    covered = owns.any(axis=1)
    confidence, owns = confidence[covered], owns[covered]
    if confidence.shape[0] == 0:
        return {"accuracy": None, "auroc": None, "rows": 0}
    chosen = np.argmax(confidence, axis=1)
    right = owns[np.arange(len(chosen)), chosen]
    return {"accuracy": float(right.mean()), "auroc": auroc(confidence, owns), "rows": int(confidence.shape[0]),
            **balanced_accuracy(right, owns)}


def balanced_accuracy(right: np.ndarray, owns: np.ndarray) -> dict:
    """{"balanced": the mean over teachers owning rows of the share of their rows picked right,
    "balanced_rows": the effective rows T^2 / sum(1/n_i)}; right: per row, the pick owns its label."""
    right, owns = np.asarray(right, dtype=bool), np.asarray(owns, dtype=bool)
    sizes = owns.sum(axis=0)
    mine = sizes > 0
    if not mine.any():
        return {"balanced": None, "balanced_rows": 0.0}
    recalls = (right[:, None] & owns).sum(axis=0)[mine] / sizes[mine]
    return {"balanced": float(recalls.mean()), "balanced_rows": float(mine.sum() ** 2 / (1.0 / sizes[mine]).sum())}


def per_teacher_rank(confidence: np.ndarray) -> np.ndarray:
    """Each teacher's confidence -> its percentile among that teacher's own rows, in (0, 1].

    A teacher that is less sure of everything (a distilled student acting as a
    teacher, a small model) is otherwise out-voted on its own labels by a
    sharper teacher that is over-confident out of its domain.
    """
    n = confidence.shape[0]
    return np.stack([rankdata(confidence[:, i]) / n for i in range(confidence.shape[1])], axis=1)
