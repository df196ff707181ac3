"""Fitted scores measured out of sample on the rows they are fitted on (cross-fitting).

A fitted score (RMD, the prototype score) picks a row's teacher by a fit of labelled rows. Measured on those very
rows it measures how well the fit remembers them, so such a figure is never counted. But a user of downloaded
teachers often has no labelled rows other than the text `kamal synthesize` wrote, which is also what RMD and the
prototypes are fitted on: score=auto could then judge no fitted score at all, however well it selects.

Cross-fitting measures it honestly on that text: the rows are dealt into FOLDS folds, label by label, and each
fold is scored by a fit on the other folds, made as the real fit is made (the same rows kept, the same
background). Every row is scored by a fit that never saw it, so the figure is what the fit does on new text of
the same kind (still generated text: weaker evidence than real labelled rows, kamalcli/probe/measured.py).
"""

from __future__ import annotations

import numpy as np

FOLDS = 5


def is_fitted_score(score: str) -> bool:
    """A selection row's score rests on an RMD fit or on prototypes (rmd, rmd@L3, rmd+prototype, ...)."""
    return score.startswith("rmd") or "prototype" in score


def fold_of(labels: list[str], folds: int = FOLDS, seed: int = 0) -> np.ndarray | None:
    """Per row, its fold (0..folds-1): each label's rows dealt in turn, in a seeded random order, so the other
    folds of any row hold every label. None when a label has fewer than 2 rows: no fit on the other folds would
    know it."""
    labels = np.asarray(labels, dtype=object)
    order = np.random.default_rng(seed).permutation(len(labels))
    fold = np.empty(len(labels), dtype=np.int64)
    for label in dict.fromkeys(labels[order]):
        rows = order[labels[order] == label]
        if len(rows) < 2:
            return None
        fold[rows] = np.arange(len(rows)) % min(folds, len(rows))
    return fold


def cross_fitted_rmd(features: np.ndarray, local: np.ndarray, keep: np.ndarray, fold: np.ndarray) -> np.ndarray | None:
    """Per row, its relative Mahalanobis distance under a fit on the other folds: class Gaussians of their kept
    rows (local: the row's class among the teacher's labels), background of all their rows, as kamal fits RMD
    on labelled or generated text. None when some fold leaves fewer than 2 kept rows to fit on."""
    from kamalcli.trust.mahalanobis import fit_rmd

    features = np.asarray(features, dtype=np.float64)
    out = np.empty(len(features))
    for f in np.unique(fold):
        held = fold == f
        fit_rows = ~held & keep & (local >= 0)
        if fit_rows.sum() < 2:
            return None
        out[held] = fit_rmd(features[fit_rows], local[fit_rows], features[~held]).score(features[held])
    return out


def cross_fitted_shares(vectors: np.ndarray, labels: list[str], names: list[str], owns: np.ndarray,
                        fold: np.ndarray) -> np.ndarray:
    """(rows, teachers): the prototype score of each row, its prototypes from the other folds' rows."""
    from kamalcli.probe.prototypes import class_prototypes, teacher_shares

    labels = np.asarray(labels, dtype=object)
    out = np.empty((len(vectors), owns.shape[1]))
    for f in np.unique(fold):
        held = fold == f
        prototypes = class_prototypes(vectors[~held], list(labels[~held]), names)
        out[held] = teacher_shares(vectors[held], prototypes, owns)
    return out
