"""Classification metrics from predictions and gold labels (numpy only)."""

from __future__ import annotations

import numpy as np


def classification_metrics(pred: np.ndarray, gold: np.ndarray, labels: list[str]) -> dict:
    """pred, gold: label indices into `labels`; gold -1 = a label outside `labels` (always wrong)."""
    pred = np.asarray(pred)
    gold = np.asarray(gold)
    k = len(labels)
    known = gold >= 0
    confusion = np.zeros((k, k), dtype=np.int64)
    np.add.at(confusion, (gold[known], pred[known]), 1)
    per_class = {}
    f1s = []
    for i, name in enumerate(labels):
        tp = confusion[i, i]
        predicted = (pred == i).sum()
        actual = (gold == i).sum()
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {"precision": float(precision), "recall": float(recall), "f1": float(f1), "support": int(actual)}
        if actual:
            f1s.append(f1)
    return {
        "rows": int(len(gold)),
        "accuracy": float((pred == gold).mean()) if len(gold) else None,
        "macro_f1": float(np.mean(f1s)) if f1s else None,
        "unknown_label_rows": int((~known).sum()),
        "per_class": per_class,
        "labels": list(labels),
        "confusion": confusion.tolist(),
    }


def subset_accuracy(pred: np.ndarray, gold: np.ndarray, columns: list[int]) -> float | None:
    """Accuracy on the rows whose gold label is one of `columns` (e.g. old vs new labels)."""
    mask = np.isin(gold, columns)
    return float((pred[mask] == gold[mask]).mean()) if mask.any() else None
