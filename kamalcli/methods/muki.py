"""MUKI (Li et al., EMNLP 2022): each row learns from the most certain teacher (hard) or from all teachers
weighted by softmax(certainty / tau) (soft), re-weighted by the certainty margin (docs/methods.md).

Sentence level: confidence c_i = 1 - H(pbar_i)/log|Y_i| from MC dropout picks
(hard) or weights (soft) the teachers. That is `paper=true`; kamal's default
picks the score per workspace without labels (score=auto) and commits to the
picked teacher only where that score's measured selection is clearly better
than the pick vanilla-kd's target already makes; otherwise the target is
vanilla-kd's (commit=auto, hard only). commit=a in [0, 1] mixes the two targets
and weights by hand: t = a Pad(p_i*) + (1 - a) softmax(concat_i z_i),
w = a m + (1 - a). The row weight m is MUKI's margin c_max - c_second
scaled to mean 1 within each picked teacher's rows (reweight=auto): it ranks
a teacher's rows by how sure the pick is, without letting one teacher's
general confidence set its share of the loss; reweight=true is the paper's
margin as it is (paper=true). pick_smooth=auto averages each row's
confidences over its nearest transfer rows before the pick, where their own
picks agree with the row's beyond chance (kamalcli/recipe/recipe.py).

Token level (named entities): a teacher's confidence on a word is computed from
its distribution over its own entity tags only (O removed, renormalised),
c = 1 - H / log|E| (kamalcli/probe/tokens.py), from MC dropout (paper=true, the
default with K > 1) or the plain softmax (mc=false). Where at least one
teacher's most likely tag is an entity tag, hard takes the most confident
teacher's whole distribution (O included) and soft mixes the teachers'
distributions with weights softmax(c / tau). Where every teacher's most likely
tag is O, there is nothing to select: the target is the mean of the teachers'
distributions. reweight=true (auto, the default here) weights every word by
the margin c_max - c_second of the entity confidences. The loss reads the
student at each word's first sub-token and averages over the sentence's words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.methods.base import Objective, Options, TeacherOutputs, require
from kamalcli.probe.prototypes import DEFAULT_ENCODER
from kamalcli.probe.scores import Score
from kamalcli.probe.selection import per_teacher_rank
from kamalcli.probe.tokens import entity_confidences, every_teacher_says_o, selected_targets
from kamalcli.probs import softmax

Calibration = Literal["none", "rank"]
Reweight = Literal["auto", "per-teacher"]


def margin(confidence: np.ndarray) -> np.ndarray:
    """c_max - c_second over the teachers (the last axis); 0 where teachers are equally sure."""
    top2 = np.sort(confidence, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


def per_teacher_margin(confidence: np.ndarray) -> np.ndarray:
    """(n, N) -> (n,): the margin divided by its mean over the rows that pick the same teacher, so every teacher's
    rows weigh 1 on average (1 for a teacher whose rows all have margin 0)."""
    weights, picked = margin(confidence), confidence.argmax(axis=1)
    for teacher in np.unique(picked):
        rows = picked == teacher
        mean = weights[rows].mean()
        weights[rows] = weights[rows] / mean if mean > 0 else 1.0
    return weights


@dataclass(frozen=True)
class MukiOptions(Options):
    paper: bool = False           # True: the MUKI paper's configuration (MC dropout selects the teacher)
    mc: bool = True               # False: plain entropy instead of MC dropout (the paper's ablation)
    reweight: bool | Reweight = "auto"  # true: the confidence margin c_max - c_second (the paper); per-teacher: that
    # margin scaled to mean 1 within each picked teacher's rows; auto: per-teacher (paper=true: true); false: none
    score: Score = "auto"         # which confidence picks the teacher; auto: chosen per workspace without labels
    calibrate: Calibration = "none"  # kamal: "rank" compares each teacher's confidence with its own range
    temperature: float = 1.0      # softens the teachers' distributions and the student's alike
    encoder: str = DEFAULT_ENCODER  # the prototype score's shared sentence encoder (all-MiniLM-L6-v2)
    refit: Literal["auto", "none"] = "none"  # auto: RMD fitted again on the transfer rows for the teachers whose
    # rows the generated text does not read (kamalcli/probe/transfer_refit.py); none: the fits stay. Off by default:
    # on two confirm settings the refitted teacher took every row (genre, outlets; -3.0 on outlets, docs/benchmarks.md)
    pick_smooth: int | Literal["auto"] = "auto"  # the pick by each row's confidence averaged with this many nearest
    # rows'; auto: 10 where their picks agree with the row's beyond chance (kamalcli/probe/neighbours.py); 0: none

    def check(self) -> None:
        require(self.temperature > 0, "temperature must be above 0")
        require(not self.paper or (self.score in ("auto", "mc-dropout") and self.calibrate == "none"),
                "paper=true selects by MC dropout without calibration: drop score= and calibrate=")
        require(self.pick_smooth == "auto" or self.pick_smooth >= 0,
                "pick_smooth must be a number of rows, 0 or more (or auto)")
        require(not self.paper or self.pick_smooth in ("auto", 0), "paper=true picks row by row: drop pick_smooth=")
        require(not self.paper or self.reweight != "per-teacher",
                "paper=true weights by MUKI's margin: drop reweight= (reweight=false is the paper's ablation)")

    @property
    def pick_neighbours(self) -> int:
        """How many nearest transfer rows each row's confidence is averaged with before the pick (auto: the
        recipe's, where the neighbours' picks agree with the row's; paper=true: none)."""
        from kamalcli.recipe.recipe import pick_neighbours

        return pick_neighbours(self)

    @property
    def confidence_score(self) -> str:
        score = "mc-dropout" if self.paper else self.score
        return "entropy" if not self.mc and score == "mc-dropout" else score

    @property
    def reweighting(self) -> str:
        """margin (the paper's), per-teacher (that margin scaled to mean 1 within each picked teacher's rows) or
        none; reweight=auto as the recipe decides."""
        from kamalcli.recipe.recipe import reweighting

        return reweighting(self)


Prior = Literal["auto", "prototype", "none"]


@dataclass(frozen=True)
class MukiHardOptions(MukiOptions):
    commit: float | Literal["auto"] = "auto"  # 1: MUKI's hard target, 0: vanilla-kd's; auto: 1 or 0, measured (1
    # falls back to 0 where the pick starves a teacher vanilla-kd's target credits)
    prior: Prior = "auto"  # prototype: the target times the prototype classifier's; auto: that where it can be built
    smooth: int | Literal["auto"] = "auto"  # each row's target half averaged over this many nearest rows; 0: none

    def check(self) -> None:
        super().check()
        require(self.commit == "auto" or 0 <= self.commit <= 1, "commit must be between 0 and 1 (or auto)")
        require(not self.paper or self.commit == "auto", "paper=true is MUKI's hard target: drop commit=")
        require(not self.paper or self.prior in ("auto", "none"), "paper=true is MUKI's hard target: drop prior=")
        require(self.smooth == "auto" or self.smooth >= 0, "smooth must be a number of rows, 0 or more (or auto)")
        require(not self.paper or self.smooth in ("auto", 0), "paper=true is MUKI's hard target: drop smooth=")

    @property
    def neighbours(self) -> int:
        """How many nearest transfer rows each row's target may be averaged with (smooth=auto: the recipe's at
        most; paper=true: none)."""
        from kamalcli.recipe.recipe import smooth_neighbours

        return smooth_neighbours(self)

    @property
    def guarded(self) -> bool:
        """commit=auto (not paper=true) commits with the recipe's guard: a pick that starves a teacher falls back to
        vanilla-kd's target (kamalcli/recipe/recipe.py `starved`). A number asked for is kept as asked."""
        return self.commit == "auto" and not self.paper

    @property
    def committed(self) -> float:
        """How far the hard target commits to the picked teacher: 1 unless a measured skill set it (Recipe.options_for
        turns commit=auto into the number it decided where that is under 1; committing, without a measurement, or
        with paper=true, it stays 1, the first two guarded)."""
        return 1.0 if self.paper or self.commit == "auto" else float(self.commit)


@dataclass(frozen=True)
class MukiSoftOptions(MukiOptions):
    tau: float = 0.2              # smoothness of the teacher weights softmax(c / tau)

    def check(self) -> None:
        super().check()
        require(self.tau > 0, "tau must be above 0")


# -- sentence level ------------------------------------------------------------

def _muki_common(outputs: TeacherOutputs, options: MukiOptions, picks: bool = True):
    """picks: the target reads the pick (muki-hard's commit=0 does not), so pick_smooth applies."""
    score, info = options.confidence_score, {}
    if score == "auto":  # kamal amalgamate decides it before training (kamalcli/recipe/recipe.py); else no figures
        from kamalcli.recipe.recipe import choose_score

        choice = choose_score((), tuple(len(outputs.space.blocks[t]) for t in outputs.teachers))
        score, info["auto"] = choice.value, choice.as_json()
    confidence = outputs.score(score)
    calibrate = options.calibrate
    if calibrate == "rank":
        confidence = per_teacher_rank(confidence)
    if picks:
        confidence = _smoothed_pick(confidence, outputs, options, info)
    padded = np.stack([outputs.padded(i, options.temperature) for i in range(len(outputs.teachers))])  # (N, n, |Y|)
    weights = row_weights(confidence, options.reweighting)
    info.update({"score": score, "calibrate": calibrate, "reweight": options.reweighting})
    return confidence, padded, weights, info


def row_weights(confidence: np.ndarray, reweighting: str) -> np.ndarray | None:
    if reweighting == "none":
        return None
    return margin(confidence) if reweighting == "margin" else per_teacher_margin(confidence)


def _smoothed_pick(confidence: np.ndarray, outputs: TeacherOutputs, options: MukiOptions, info: dict) -> np.ndarray:
    """pick_smooth: each row's confidence averaged with its nearest rows' (outputs.pick_neighbours), for K asked
    for, or for auto where the neighbours' picks agree with the row's beyond chance; info["pick_smooth"] says which."""
    from kamalcli.probe.neighbours import neighbour_mean, pick_agreement
    from kamalcli.recipe.recipe import picks_agree

    k = options.pick_neighbours
    if outputs.pick_neighbours is None or not k:
        return confidence
    neighbours = outputs.pick_neighbours[:, :k]
    agreement = pick_agreement(confidence, neighbours)
    used = options.pick_smooth != "auto" or picks_agree(agreement)
    info["pick_smooth"] = {"neighbours": int(neighbours.shape[1]), "used": used,
                           "agreement": round(agreement.agreement, 4),
                           "chance": round(agreement.chance, 4), "kappa": round(agreement.kappa, 4)}
    return neighbour_mean(confidence, neighbours) if used else confidence


def hard_target(padded: np.ndarray, confidence: np.ndarray) -> np.ndarray:
    """(N, n, |Y|) padded teacher distributions -> (n, |Y|): each row's most confident teacher's."""
    return padded[confidence.argmax(axis=1), np.arange(padded.shape[1])]


def with_prior(target: np.ndarray, prior: np.ndarray, blocks: list[np.ndarray] | None = None) -> np.ndarray:
    """target (n, |Y|) times the prior's class probabilities, renormalised. blocks (column indices of some
    teachers' labels): only within each block, keeping its mass, so the prior reshapes those teachers' classes
    and leaves the choice between teachers, and every other teacher's classes, to the target."""
    if blocks is None:
        out = target * prior
        return out / out.sum(axis=1, keepdims=True)
    out = target.copy()
    for block in blocks:
        mass = target[:, block].sum(axis=1, keepdims=True)
        shaped = target[:, block] * prior[:, block]
        out[:, block] = shaped / np.maximum(shaped.sum(axis=1, keepdims=True), 1e-30) * mass
    return out


def build_muki_hard(outputs: TeacherOutputs, options: MukiHardOptions) -> Objective:
    from kamalcli.methods.losses import kl_loss
    from kamalcli.methods.vanilla_kd import union_probs

    commit = options.committed
    confidence, padded, weights, info = _muki_common(outputs, options, picks=commit > 0)
    chosen = confidence.argmax(axis=1)
    share = np.bincount(chosen, minlength=len(outputs.teachers)) / outputs.num_rows
    target = hard_target(padded, confidence)
    concatenated = union_probs(outputs, options.temperature) if commit < 1 or options.guarded else None
    if commit > 0 and options.guarded:
        commit = _guard(share, concatenated, outputs, info)
    if commit < 1:
        target = commit * target + (1 - commit) * concatenated
        weights = None if weights is None else commit * weights + (1 - commit)
    info["commit"] = commit
    if outputs.prior is not None:  # a product of experts: the teachers' target times the prior's classes
        blocks = None if outputs.prior_teachers is None else [
            np.asarray(outputs.space.blocks[t]) for t in outputs.prior_teachers]
        target = with_prior(target, outputs.prior, blocks)
        info["prior"] = "prototype" + ("" if blocks is None else f" within {', '.join(outputs.prior_teachers)}")
    if outputs.neighbours is not None:  # label-free: rows that read alike outvote each other's picking errors
        from kamalcli.probe.neighbours import smoothed

        target = smoothed(target, outputs.neighbours)
        info["smooth"] = int(outputs.neighbours.shape[1])
    info["chosen_share"] = dict(zip(outputs.teachers, share.round(4).tolist()))
    if weights is not None:
        info["mean_weight"] = float(weights.mean())
    return Objective({"target": target.astype(np.float32)}, kl_loss(options.temperature), weights, info)


def _guard(share: np.ndarray, concatenated: np.ndarray, outputs: TeacherOutputs, info: dict) -> float:
    """commit=auto's guard (kamalcli/recipe/recipe.py `starved`): 0 (vanilla-kd's target) where the pick starves a
    teacher vanilla-kd's target credits, else 1; info["starved"] names them, with their share and credit."""
    from kamalcli.recipe.recipe import starved

    credited = [float(concatenated[:, outputs.space.blocks[t]].sum(axis=1).mean()) for t in outputs.teachers]
    which = starved(share, credited)
    if which:
        info["starved"] = {outputs.teachers[i]: (round(float(share[i]), 4), round(credited[i], 4)) for i in which}
    return 0.0 if which else 1.0


def build_muki_soft(outputs: TeacherOutputs, options: MukiSoftOptions) -> Objective:
    from kamalcli.methods.losses import kl_loss

    confidence, padded, weights, info = _muki_common(outputs, options)
    w = softmax(confidence / options.tau, axis=1)              # (n, N)
    target = np.einsum("nt,tny->ny", w, padded)
    info["mean_teacher_weight"] = dict(zip(outputs.teachers, w.mean(axis=0).round(4).tolist()))
    if weights is not None:
        info["mean_weight"] = float(weights.mean())
    return Objective({"target": target.astype(np.float32)}, kl_loss(options.temperature), weights, info)


# -- token level ---------------------------------------------------------------

def _selection_score(options) -> bool:
    """Whether MUKI selects from the MC-dropout mean (True) or the plain softmax (False) at token level."""
    score = options.confidence_score
    if getattr(options, "calibrate", "none") != "none":
        raise KamalError("calibrate= is not supported at token level (drop it)")
    if getattr(options, "commit", "auto") not in ("auto", 1):
        raise KamalError("commit= is not supported at token level (drop it)")
    if getattr(options, "smooth", "auto") not in ("auto", 0):
        raise KamalError("smooth= is not supported at token level (drop it)")
    if getattr(options, "pick_smooth", "auto") not in ("auto", 0):
        raise KamalError("pick_smooth= is not supported at token level (drop it)")
    if getattr(options, "reweight", "auto") == "per-teacher":
        raise KamalError("reweight=per-teacher is not supported at token level (true, the default there, or false)")
    if score in ("auto", "mc-dropout"):
        return True
    if score == "entropy":
        return False
    raise KamalError(f"score={score} is not available at token level (auto, mc-dropout or entropy: the entity-only "
                     "entropy of the MC-dropout mean or of the plain softmax)")


def _token_muki(outputs, options, tau):
    from kamalcli.methods.losses import word_kl_loss

    mc = _selection_score(options)
    confidence = entity_confidences(outputs, mc)
    T = options.temperature
    padded = np.stack([outputs.padded(i, outputs.probs(i, T)) for i in range(len(outputs.teachers))])
    all_o = every_teacher_says_o(outputs)
    target = selected_targets(padded, confidence, all_o, tau)
    arrays = {"target": target.astype(np.float32), "word_mask": outputs.words.astype(np.float32)}
    reweighted = options.reweight in ("auto", True)  # token level: the paper's per-word margin
    if reweighted:
        arrays["word_weight"] = margin(confidence).astype(np.float32)
    contested = outputs.words & ~all_o
    chosen = confidence.argmax(axis=-1)[contested]
    info = {"level": "token", "score": "mc-dropout" if mc and outputs.mc_probs[0] is not None else "entropy",
            "entity_only_confidence": True, "reweight": "margin" if reweighted else "none",
            "contested_words": int(contested.sum()), "all_o_words": int((outputs.words & all_o).sum()),
            "chosen_share_contested": dict(zip(outputs.teachers, (np.bincount(chosen, minlength=len(outputs.teachers))
                                                                 / max(1, chosen.size)).round(4).tolist()))}
    return Objective(arrays, word_kl_loss(T), None, info)


def build_token_muki_hard(outputs, options) -> Objective:
    return _token_muki(outputs, options, None)


def build_token_muki_soft(outputs, options) -> Objective:
    return _token_muki(outputs, options, options.tau)
