"""Output-level amalgamation: targets from cached teacher outputs (docs/methods.md).

- muki-hard / muki-soft (Li et al. 2022): confidence c_i = 1 - H(pbar_i)/log|Y_i|
  from MC dropout picks (hard) or weights (soft) the teachers; re-weighting by
  the margin c_max - c_second. That is `paper=true`; kamal's default picks the
  score per workspace without labels (score=auto).
- vanilla-kd (Hinton et al. 2015): softmax over the concatenated logits.
- uhc (Vongkulbhisal et al. 2019): each teacher matched on its own label block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from kamalcli.methods.base import Objective, Options, TeacherOutputs, require
from kamalcli.probe.prototypes import DEFAULT_ENCODER

Score = Literal["auto", "mc-dropout", "entropy", "max-prob", "energy", "rmd", "prototype", "rmd+prototype"]
PROTOTYPE_SCORES = ("prototype", "rmd+prototype")  # need labelled text for every label (kamalcli/probe/prototypes.py)
Calibration = Literal["none", "rank"]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def margin(confidence: np.ndarray) -> np.ndarray:
    """c_max - c_second per row (0 where teachers are equally sure)."""
    top2 = np.sort(confidence, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def _kl_loss(temperature: float):
    def loss(logits, batch):
        from kamalcli.methods.losses import kl_to_target

        return kl_to_target(logits, batch["target"], temperature)

    return loss


# -- MUKI ----------------------------------------------------------------------------

@dataclass(frozen=True)
class MukiHardOptions(Options):
    paper: bool = False           # True: the MUKI paper's configuration (MC dropout selects the teacher)
    mc: bool = True               # False: plain entropy instead of MC dropout (the paper's ablation)
    reweight: bool = True         # instance re-weighting by the confidence margin
    score: Score = "auto"         # which confidence picks the teacher; auto: chosen per workspace without labels
    calibrate: Calibration = "none"  # kamal: "rank" compares each teacher's confidence with its own range
    temperature: float = 1.0      # softens the teachers' distributions and the student's alike
    encoder: str = DEFAULT_ENCODER  # the prototype score's shared sentence encoder (all-MiniLM-L6-v2)

    def check(self) -> None:
        require(self.temperature > 0, "temperature must be above 0")
        require(not self.paper or (self.score in ("auto", "mc-dropout") and self.calibrate == "none"),
                "paper=true selects by MC dropout without calibration: drop score= and calibrate=")

    @property
    def confidence_score(self) -> str:
        score = "mc-dropout" if self.paper else self.score
        return "entropy" if not self.mc and score == "mc-dropout" else score

    @property
    def reweighted(self) -> bool:
        return self.reweight


@dataclass(frozen=True)
class MukiSoftOptions(MukiHardOptions):
    tau: float = 0.2              # smoothness of the teacher weights softmax(c / tau)

    def check(self) -> None:
        super().check()
        require(self.tau > 0, "tau must be above 0")


def per_teacher_rank(confidence: np.ndarray) -> np.ndarray:
    """Each teacher's confidence -> its percentile among that teacher's own rows, in (0, 1].

    A teacher that is less sure of everything (a distilled student acting as a
    teacher, a small model) is otherwise out-voted on its own labels by a
    sharper teacher that is over-confident out of its domain.
    """
    from kamalcli.probe.selection import rankdata

    n = confidence.shape[0]
    return np.stack([rankdata(confidence[:, i]) / n for i in range(confidence.shape[1])], axis=1)


def _muki_common(outputs: TeacherOutputs, options: MukiHardOptions):
    score, info = options.confidence_score, {}
    if score == "auto":
        from kamalcli.probe.auto_score import choose_score

        choice = choose_score(outputs.confidence, outputs.rmd_sources,
                              tuple(len(outputs.space.blocks[t]) for t in outputs.teachers))
        score, info["auto"] = choice.score, choice.as_json()
    confidence = outputs.score(score)
    calibrate = options.calibrate
    if calibrate == "rank":
        confidence = per_teacher_rank(confidence)
    padded = np.stack([outputs.padded(i, options.temperature) for i in range(len(outputs.teachers))])  # (N, n, |Y|)
    weights = margin(confidence) if options.reweighted else None
    info.update({"score": score, "calibrate": calibrate, "reweight": options.reweighted})
    return confidence, padded, weights, info


def hard_target(padded: np.ndarray, confidence: np.ndarray) -> np.ndarray:
    """(N, n, |Y|) padded teacher distributions -> (n, |Y|): each row's most confident teacher's."""
    return padded[confidence.argmax(axis=1), np.arange(padded.shape[1])]


def build_muki_hard(outputs: TeacherOutputs, options: MukiHardOptions) -> Objective:
    confidence, padded, weights, info = _muki_common(outputs, options)
    chosen = confidence.argmax(axis=1)
    target = hard_target(padded, confidence)
    share = np.bincount(chosen, minlength=len(outputs.teachers)) / outputs.num_rows
    info["chosen_share"] = dict(zip(outputs.teachers, share.round(4).tolist()))
    if weights is not None:
        info["mean_weight"] = float(weights.mean())
    return Objective({"target": target.astype(np.float32)}, _kl_loss(options.temperature), weights, info)


def build_muki_soft(outputs: TeacherOutputs, options: MukiSoftOptions) -> Objective:
    confidence, padded, weights, info = _muki_common(outputs, options)
    w = softmax(confidence / options.tau, axis=1)              # (n, N)
    target = np.einsum("nt,tny->ny", w, padded)
    info["mean_teacher_weight"] = dict(zip(outputs.teachers, w.mean(axis=0).round(4).tolist()))
    if weights is not None:
        info["mean_weight"] = float(weights.mean())
    return Objective({"target": target.astype(np.float32)}, _kl_loss(options.temperature), weights, info)


# -- vanilla KD -------------------------------------------------------------------------

@dataclass(frozen=True)
class KDOptions(Options):
    temperature: float = 1.0

    def check(self) -> None:
        require(self.temperature > 0, "temperature must be above 0")


def union_logits(outputs: TeacherOutputs, temperature: float = 1.0) -> np.ndarray:
    """concat_i z_i / T in the union space. A label two teachers share gets the log of the
    summed exponentials (so the softmax adds their probability mass, like Pad does)."""
    n = outputs.num_rows
    merged = np.full((n, len(outputs.space)), -np.inf)
    for i, teacher in enumerate(outputs.teachers):
        cols = np.asarray(outputs.space.blocks[teacher])
        merged[:, cols] = np.logaddexp(merged[:, cols], outputs.logits[i].astype(np.float64) / temperature)
    return merged


def build_vanilla_kd(outputs: TeacherOutputs, options: KDOptions) -> Objective:
    target = softmax(union_logits(outputs, options.temperature), axis=1)
    return Objective({"target": target.astype(np.float32)}, _kl_loss(options.temperature))


# -- UHC --------------------------------------------------------------------------------

@dataclass(frozen=True)
class UHCOptions(Options):
    temperature: float = 1.0

    def check(self) -> None:
        require(self.temperature > 0, "temperature must be above 0")


def build_uhc(outputs: TeacherOutputs, options: UHCOptions) -> Objective:
    T = options.temperature
    blocks = [np.asarray(outputs.space.blocks[t]) for t in outputs.teachers]
    arrays = {f"p{i}": outputs.probs(i, T).astype(np.float32) for i in range(len(blocks))}

    def loss(logits, batch):
        import torch

        from kamalcli.methods.losses import kl_to_target

        total = 0
        for i, cols in enumerate(blocks):
            total = total + kl_to_target(logits[:, torch.as_tensor(cols, device=logits.device)], batch[f"p{i}"], T)
        return total

    return Objective(arrays, loss)

