"""Per-row scores and per-probe figures: confidence, calibration, selection quality."""

from __future__ import annotations

import numpy as np

from kamalcli.labels import label_indices
from kamalcli.probe.arrays import ProbeArrays
from kamalcli.probe.calibration import ece, entropy, entropy_from_logits, normalised_uncertainty
from kamalcli.probe.selection import selection_quality


def row_scores(arrays: ProbeArrays) -> dict[str, np.ndarray]:
    probs = arrays.probs()
    mc = np.asarray(arrays.mc_probs, dtype=np.float64)
    h = entropy_from_logits(arrays.logits)
    k = probs.shape[1]
    return {
        "pred": probs.argmax(axis=1),
        "max_prob": probs.max(axis=1),
        "entropy": h,
        "uhat": h / np.log(k) if k > 1 else np.zeros_like(h),  # from the float64 log-softmax entropy above
        "mc_pred": mc.argmax(axis=1),
        "mc_max_prob": mc.max(axis=1),
        "mc_entropy": entropy(mc),
        "mc_uhat": normalised_uncertainty(mc),
    }


def _mean(values) -> float | None:
    values = np.asarray(values, dtype=np.float64)
    return float(values.mean()) if values.size else None


def summarize(rows: dict[str, np.ndarray], teacher_labels, gold: list[str] | None) -> dict:
    n = len(rows["pred"])
    out = {
        "rows": n,
        "mean_max_prob": _mean(rows["max_prob"]),
        "mean_uhat": _mean(rows["uhat"]),
        "mean_mc_uhat": _mean(rows["mc_uhat"]),
    }
    if gold is None:
        return out
    local = label_indices(gold, teacher_labels)
    inside = local >= 0
    out["in_domain_rows"] = int(inside.sum())
    out["out_domain_rows"] = int((~inside).sum())
    for prefix, pred, conf, u in (("", rows["pred"], rows["max_prob"], rows["uhat"]),
                                  ("mc_", rows["mc_pred"], rows["mc_max_prob"], rows["mc_uhat"])):
        correct = (pred == local) & inside
        out[f"{prefix}accuracy_in"] = _mean(correct[inside]) if inside.any() else None
        out[f"{prefix}ece_in"] = ece(conf[inside], correct[inside]) if inside.any() else None
        out[f"{prefix}ece_out"] = ece(conf[~inside], np.zeros((~inside).sum())) if (~inside).any() else None
        out[f"{prefix}confidence_out"] = _mean(conf[~inside]) if (~inside).any() else None
        out[f"{prefix}uhat_in"] = _mean(u[inside]) if inside.any() else None
        out[f"{prefix}uhat_out"] = _mean(u[~inside]) if (~inside).any() else None
    return out


def rmd_split_means(values: np.ndarray, mask: np.ndarray | None) -> dict:
    out = {"mean": _mean(values)}
    if mask is not None:
        out["mean_in"] = _mean(values[mask]) if mask.any() else None
        out["mean_out"] = _mean(values[~mask]) if (~mask).any() else None
    return out


SCORES = {
    "mc-dropout": lambda r: 1.0 - np.asarray(r["mc_uhat"], dtype=np.float64),
    "entropy": lambda r: 1.0 - np.asarray(r["uhat"], dtype=np.float64),
    "max-prob": lambda r: np.asarray(r["max_prob"], dtype=np.float64),
    "rmd": lambda r: -np.asarray(r["rmd"], dtype=np.float64) if None not in r["rmd"] else None,
}


def selection_table(gold: list[str], space, teachers, rows_by_teacher: dict,
                    extra_scores: dict[str, dict] | None = None) -> dict:
    """Selection accuracy, AUROC and hard-target accuracy per score, plus the oracle's.

    extra_scores: score name -> {teacher id: confidence per row}.
    """
    gold_col = label_indices(gold, space.names)
    owns = np.stack([space.mask(t.name)[np.maximum(gold_col, 0)] & (gold_col >= 0) for t in teachers], axis=1)
    # the union label each teacher predicts (its argmax, mapped into the union)
    predicted = np.stack([np.asarray(space.blocks[t.name])[np.asarray(rows_by_teacher[t.id]["pred"], dtype=np.int64)]
                          for t in teachers], axis=1)
    candidates = {score: [fn(rows_by_teacher[t.id]) for t in teachers] for score, fn in SCORES.items()}
    for score, by_teacher in (extra_scores or {}).items():
        candidates[score] = [by_teacher[t.id] for t in teachers]
    results = {}
    for score, columns in candidates.items():
        if any(c is None for c in columns):
            continue
        confidence = np.stack(columns, axis=1)
        quality = selection_quality(confidence, owns)
        chosen = confidence.argmax(axis=1)
        quality["target_accuracy"] = float((predicted[np.arange(len(chosen)), chosen] == gold_col).mean())
        results[score] = quality
    # Perfect selection: an owning teacher's prediction (the ceiling of hard selection).
    first_owner = np.where(owns.any(axis=1), owns.argmax(axis=1), 0)
    results["oracle"] = {
        "accuracy": 1.0 if owns.any() else None, "auroc": None, "rows": int(owns.any(axis=1).sum()),
        "target_accuracy": float((predicted[np.arange(len(gold_col)), first_owner] == gold_col).mean()),
    }
    return results
