"""How well a confidence score picks the teacher that owns the gold label.

For each example and teacher, a score says how confident that teacher is. The
teacher with the highest score is 'selected'. With gold labels we know which
teachers own each example's label, so we can measure:
- selection accuracy: share of examples whose selected teacher owns the label;
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
    accuracy = float(owns[np.arange(len(chosen)), chosen].mean())
    return {"accuracy": accuracy, "auroc": auroc(confidence, owns), "rows": int(confidence.shape[0])}


def per_teacher_rank(confidence: np.ndarray) -> np.ndarray:
    """Each teacher's confidence -> its percentile among that teacher's own rows, in (0, 1].

    A teacher that is less sure of everything (a distilled student acting as a
    teacher, a small model) is otherwise out-voted on its own labels by a
    sharper teacher that is over-confident out of its domain.
    """
    n = confidence.shape[0]
    return np.stack([rankdata(confidence[:, i]) / n for i in range(confidence.shape[1])], axis=1)
