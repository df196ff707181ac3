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


def multi_label_metrics(on: np.ndarray, gold: np.ndarray, labels: list[str]) -> dict:
    """on, gold: (rows, labels) booleans, what the model says holds and what holds. Micro-F1 pools every (row,
    label) decision; macro-F1 is the mean over labels that occur in gold; subset accuracy counts rows whose whole
    label set is right."""
    on, gold = np.asarray(on, dtype=bool), np.asarray(gold, dtype=bool)
    per_class, f1s = {}, []
    for j, name in enumerate(labels):
        tp = int((on[:, j] & gold[:, j]).sum())
        predicted, actual = int(on[:, j].sum()), int(gold[:, j].sum())
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {"precision": precision, "recall": recall, "f1": f1, "support": actual}
        if actual:
            f1s.append(f1)
    tp, predicted, actual = int((on & gold).sum()), int(on.sum()), int(gold.sum())
    micro = 2 * tp / (predicted + actual) if predicted + actual else 0.0
    return {
        "rows": int(len(gold)),
        "micro_f1": float(micro),
        "macro_f1": float(np.mean(f1s)) if f1s else None,
        "subset_accuracy": float((on == gold).all(axis=1).mean()) if len(gold) else None,
        "per_class": per_class,
        "labels": list(labels),
    }
