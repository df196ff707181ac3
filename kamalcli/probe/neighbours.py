"""Each transfer row's nearest rows in a sentence encoder's space, and a target (or a pick) averaged over them.

muki-hard's `smooth` (docs/methods.md): a row's target is half its own and half
the mean of its k nearest rows' targets. The teachers' pick errs row by row;
rows that read alike mostly share a class, so the neighbours outvote many of
those errors without a label (a one-step label propagation, Zhou et al. 2004).
muki's pick_smooth averages each row's confidence with its nearest rows'
before the pick. When auto uses either is the recipe's (kamalcli/recipe/recipe.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OWN_SHARE = 0.5  # smooth: the row's own target's share; the neighbours' mean has the rest


def nearest_rows(vectors: np.ndarray, k: int, chunk: int = 512) -> np.ndarray:
    """(n, min(k, n - 1)) indices of each row's most cosine-similar other rows, nearest first. vectors: unit length."""
    vectors = np.asarray(vectors, dtype=np.float32)
    n = vectors.shape[0]
    k = min(k, n - 1)
    out = np.empty((n, max(k, 0)), dtype=np.int64)
    if k <= 0:
        return out
    for start in range(0, n, chunk):  # (chunk, n) similarities at a time: a large pool never holds n x n
        stop = min(start + chunk, n)
        similarity = vectors[start:stop] @ vectors.T
        similarity[np.arange(stop - start), np.arange(start, stop)] = -np.inf  # a row is not its own neighbour
        top = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(similarity, top, axis=1), axis=1, kind="stable")
        out[start:stop] = np.take_along_axis(top, order, axis=1)
    return out


def smoothed(target: np.ndarray, neighbours: np.ndarray, own_share: float = OWN_SHARE) -> np.ndarray:
    """(n, |Y|): own_share x each row's target + the rest x the mean of its neighbours' targets (rows still sum to 1)."""
    if neighbours.shape[1] == 0:
        return target
    return own_share * target + (1 - own_share) * target[neighbours].mean(axis=1)


@dataclass(frozen=True)
class PickAgreement:
    """How often a row's nearest rows pick the same teacher as the row itself, against chance (the share of
    rows each teacher is picked for, squared and summed)."""

    agreement: float
    chance: float

    @property
    def kappa(self) -> float:
        return 0.0 if self.chance >= 1 else (self.agreement - self.chance) / (1 - self.chance)

    def words(self) -> str:
        return (f"their picks agree with the row's on {self.agreement:.1%} against a chance of {self.chance:.1%}, "
                f"kappa {self.kappa:.2f}")


def pick_agreement(confidence: np.ndarray, neighbours: np.ndarray) -> PickAgreement:
    """confidence (n, N teachers); neighbours (n, k): the agreement of the neighbours' picks with each row's."""
    pick = confidence.argmax(axis=1)
    share = np.bincount(pick, minlength=confidence.shape[1]) / len(pick)
    return PickAgreement(float((pick[neighbours] == pick[:, None]).mean()), float((share ** 2).sum()))


def neighbour_mean(confidence: np.ndarray, neighbours: np.ndarray) -> np.ndarray:
    """(n, N): each row's confidence averaged, with equal weights, over the row itself and its k nearest rows."""
    if neighbours.shape[1] == 0:
        return confidence
    return (confidence + confidence[neighbours].sum(axis=1)) / (neighbours.shape[1] + 1)
