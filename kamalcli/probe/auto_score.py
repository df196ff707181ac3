"""score=auto: which confidence picks the teacher, chosen per workspace without labels.

Three rules, in order:
1. RMD whose Gaussians were fitted on data the teachers did not choose themselves
   (a teacher's own training rows, labelled rows given with --rmd-fit, or text
   kamal synthesize wrote for the teachers, which amalgamate picks up) for every
   teacher. Distance to each teacher's training distribution is the one score measured
   to separate teachers that are all over-confident out of their domain. Where that
   labelled text also gave the prototype score (one shared sentence encoder,
   kamalcli/probe/prototypes.py), the fusion of the two: `rmd+prototype`.
2. Energy when the teachers' label counts differ: max-prob and the entropy-based
   confidences (normalised by log|Y_i|) have a floor and a scale that depend on the
   number of labels, so they do not compare a two-label teacher with a four-label one;
   the log-sum-exp of the logits has no such normalisation.
3. Otherwise, the label-free score whose choices agree most with the majority vote of
   all label-free scores on the transfer rows (ties: the first in CANDIDATES). One
   score that misbehaves on these teachers, such as RMD fitted on the rows a teacher
   is itself confident on when it picks one teacher for nearly every row, is out-voted
   rather than trusted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Label-free candidates, in order of preference when they agree equally with the vote
CANDIDATES = ("mc-dropout", "entropy", "max-prob", "energy", "rmd")
INDEPENDENT_RMD = ("teacher-train", "labelled")


def energy(logits: np.ndarray) -> np.ndarray:
    """log sum_k exp(z_k) per row (Liu et al. 2020): higher = more in-distribution; unbounded, scale of the logits."""
    z = np.asarray(logits, dtype=np.float64)
    top = z.max(axis=1)
    return top + np.log(np.exp(z - top[:, None]).sum(axis=1))


@dataclass(frozen=True)
class AutoChoice:
    score: str
    reason: str
    agreement: dict[str, float]  # candidate -> share of rows where its choice equals the vote (rule 2 only)

    def as_json(self) -> dict:
        return {"score": self.score, "reason": self.reason, "agreement": self.agreement}


def majority_vote(choices: np.ndarray, num_teachers: int) -> np.ndarray:
    """choices (scores, n) of teacher indices -> per row the teacher most scores chose (ties: the first score's)."""
    rows = np.arange(choices.shape[1])
    votes = np.zeros((choices.shape[1], num_teachers))
    for row_choices in choices:
        votes[rows, row_choices] += 1
    votes[rows, choices[0]] += 0.5  # breaks ties only: a vote count is whole
    return votes.argmax(axis=1)


def choose_score(confidence: dict[str, np.ndarray], rmd_sources: tuple[str | None, ...] = (),
                 label_counts: tuple[int, ...] = ()) -> AutoChoice:
    """confidence: score -> (n, N) on the transfer rows; rmd_sources: per teacher, where its RMD fit came from;
    label_counts: per teacher, how many labels it knows."""
    if "rmd" in confidence and rmd_sources and all(s in INDEPENDENT_RMD for s in rmd_sources):
        if "rmd+prototype" in confidence:
            return AutoChoice("rmd+prototype", "RMD in each teacher's space and the class prototypes of one shared "
                              "sentence encoder, both from labelled text the teachers did not pick", {})
        return AutoChoice("rmd", "RMD fitted on in-distribution rows the teachers did not pick themselves", {})
    if "energy" in confidence and len(set(label_counts)) > 1:
        return AutoChoice("energy", "the teachers know different numbers of labels", {})
    names = [c for c in CANDIDATES if c in confidence]
    if not names:
        raise ValueError("no confidence score to choose from")
    num_teachers = confidence[names[0]].shape[1]
    choices = np.stack([np.asarray(confidence[c]).argmax(axis=1) for c in names])
    vote = majority_vote(choices, num_teachers)
    agreement = {c: float((choices[i] == vote).mean()) for i, c in enumerate(names)}
    best = max(names, key=lambda c: (agreement[c], -names.index(c)))
    return AutoChoice(best, "agrees most with the majority vote of the label-free scores", agreement)
