"""Each transfer row's nearest rows in a sentence encoder's space, and a target (or a pick) averaged over them.

muki-hard's `smooth` (docs/methods.md): a row's target is half its own and half
the mean of its k nearest rows' targets. The teachers' pick errs row by row;
rows that read alike mostly share a class, so the neighbours outvote many of
those errors without a label (a one-step label propagation, Zhou et al. 2004).
That holds only where the encoder reads the rows, which is what the prior's
check (kamalcli/probe/prior_check.py) measures, so smooth=auto follows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SMOOTH_NEIGHBOURS = 10  # smooth=auto
OWN_SHARE = 0.5         # the row's own target's share; the neighbours' mean has the rest
# smooth=auto wants at least this many rows per label and neighbour: 200 a label at k = 10. Measured on
# debian-topics' two teachers (docs/benchmarks.md), smoothing raised the student by 2.1-3.2 points with 2,000
# transfer rows over 10 labels (three seeds), and moved it by -1.0 to +0.7 with the first 736, 1,000 and 1,500
# of those rows (1,000: -1.0 on both seeds); on the README walk's 736 rows it cost 2.5 on each of three seeds.
# So auto smooths only at the pool size where it was measured to help.
ROWS_PER_LABEL_AND_NEIGHBOUR = 20


def neighbours_for(smooth: int | str, neighbours: int, prior: dict | None, rows: int, labels: int,
                   data: str, encoder: str) -> tuple[int, str | None]:
    """How many neighbours each row's target is averaged with, and for smooth=auto the line that says why none.
    prior: the run's recorded prior decision (kamalcli/probe/auto_score.py Prior.as_json)."""
    if smooth != "auto":
        return neighbours, None
    if not (prior and prior.get("data")):
        return 0, ("smooth=auto: none: it smooths only beside a prior over every label, whose check shows that "
                   f"{encoder} reads the transfer rows; smooth=K asks for K anyway.")
    if prior.get("teachers") is not None:
        return 0, (f"smooth=auto: none: the prior's check found that {encoder} does not read every teacher's rows of "
                   f"{data}; smooth=K asks for K anyway.")
    needed = ROWS_PER_LABEL_AND_NEIGHBOUR * neighbours * labels
    if rows < needed:
        return 0, (f"smooth=auto: none: {rows} rows of {data} are too few for {neighbours} neighbours a row over "
                   f"{labels} labels (at least {needed}); smooth=K asks for K anyway.")
    return neighbours, None


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


# muki's pick_smooth (docs/methods.md): the teacher is picked by each row's confidence averaged with its nearest
# rows'. Rows that read alike mostly belong to the same teacher's domain, so a row's neighbours outvote its picking
# errors; it reads no labels. auto takes it where the neighbours' own picks agree with the row's clearly more often
# than chance (Cohen's kappa at least PICK_KAPPA, "fair" agreement), which is what the averaging relies on.
PICK_NEIGHBOURS = 10  # pick_smooth=auto
PICK_KAPPA = 0.2


@dataclass(frozen=True)
class PickAgreement:
    """How often a row's nearest rows pick the same teacher as the row itself, against chance (the share of
    rows each teacher is picked for, squared and summed)."""

    agreement: float
    chance: float

    @property
    def kappa(self) -> float:
        return 0.0 if self.chance >= 1 else (self.agreement - self.chance) / (1 - self.chance)

    @property
    def clear(self) -> bool:
        return self.kappa >= PICK_KAPPA

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


def pick_smooth_line(option: int | str, info: dict, data: str, encoder: str) -> str:
    """What pick_smooth did, in one line (info: muki's objective.info["pick_smooth"])."""
    k = info["neighbours"]
    agreement = PickAgreement(info["agreement"], info["chance"])
    if not info["used"]:
        return (f"pick_smooth=auto: none: the {k} nearest rows of {data} in {encoder} do not share a row's pick "
                f"clearly beyond chance ({agreement.words()}; at least {PICK_KAPPA} wanted); pick_smooth=K asks "
                "for K anyway.")
    return (f"pick_smooth={option}: each row's teacher is picked by its confidence averaged with its {k} nearest rows' "
            f"of {data} in {encoder} ({agreement.words()}; no labels; pick_smooth=0 turns it off).")
