"""Token-level amalgamation (named entities): per-word targets from token teachers (docs/methods.md).

The union tag set is one O and every teacher's B-/I- tags. Each method builds,
for every sentence i and word w, a target distribution over the union
(arrays of shape (n, W, |Y|)) and a per-word weight; the loss reads the
student's logits at each word's first sub-token (the `positions` array the
amalgamation adds for the student's own tokenizer) and averages over the
sentence's words. Padding, special tokens and later sub-tokens of a word never
enter the loss. The same options as the sentence-level methods.

- muki-hard / muki-soft: a teacher's confidence on a word is computed from its
  distribution over its own entity tags only (O removed, renormalised),
  c = 1 - H / log|E| (kamalcli/token_probe.py), from MC dropout (paper=true,
  the default with K > 1) or the plain softmax (mc=false). Where at least one
  teacher's most likely tag is an entity tag, hard takes the most confident
  teacher's whole distribution (O included) and soft mixes the teachers'
  distributions with weights softmax(c / tau). Where every teacher's most
  likely tag is O, there is nothing to select: the target is the mean of the
  teachers' distributions (their O mass averaged, each entity tag's mass
  divided by N). reweight=true weights every word by the margin c_max -
  c_second of the entity confidences.
- vanilla-kd: softmax over the concatenation of all teachers' logits per word;
  the N O logits are N classes of that softmax whose probabilities are then
  added into the student's one O (log-sum-exp of the O logits): the student's
  O is the union of the teachers' O classes.
- uhc: the student's distribution renormalised over each teacher's tags (its O
  and its B-/I- tags) matches that teacher's distribution; summed over
  teachers.
"""

from __future__ import annotations

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.methods.base import Objective, TeacherOutputs


def _selection_score(options) -> bool:
    """Whether MUKI selects from the MC-dropout mean (True) or the plain softmax (False) at token level."""
    score = options.confidence_score
    if getattr(options, "calibrate", "none") != "none":
        raise KamalError("calibrate= is not supported at token level (drop it)")
    if score in ("auto", "mc-dropout"):
        return True
    if score == "entropy":
        return False
    raise KamalError(f"score={score} is not available at token level (auto, mc-dropout or entropy: the entity-only "
                     "entropy of the MC-dropout mean or of the plain softmax)")


def entity_confidences(outputs, mc: bool) -> np.ndarray:
    """(n, W, N): each teacher's entity-only confidence on each word."""
    from kamalcli.token_probe import entity_confidence

    return np.stack([entity_confidence(outputs.selection_probs(i, mc), outputs.o_index(i))
                     for i in range(len(outputs.teachers))], axis=-1)


def every_teacher_says_o(outputs) -> np.ndarray:
    """(n, W) bool: every teacher's most likely tag is O."""
    says_o = [outputs.logits[i].argmax(axis=-1) == outputs.o_index(i) for i in range(len(outputs.teachers))]
    return np.logical_and.reduce(says_o)


def muki_targets(padded: np.ndarray, confidence: np.ndarray, all_o: np.ndarray, tau: float | None) -> np.ndarray:
    """padded (N, n, W, |Y|) teacher distributions in the union, confidence (n, W, N), all_o (n, W) ->
    (n, W, |Y|): the most confident teacher's (tau None: hard) or the softmax(c / tau) mixture (soft);
    the plain mean where every teacher says O."""
    if tau is None:
        chosen = confidence.argmax(axis=-1)                                  # (n, W)
        target = np.take_along_axis(padded, chosen[None, ..., None], axis=0)[0]
    else:
        z = confidence / tau
        w = np.exp(z - z.max(axis=-1, keepdims=True))
        w /= w.sum(axis=-1, keepdims=True)
        target = np.einsum("nwt,tnwy->nwy", w, padded)
    return np.where(all_o[..., None], padded.mean(axis=0), target)


def _margin(confidence: np.ndarray) -> np.ndarray:
    top2 = np.sort(confidence, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


def _muki(outputs, options, tau):
    mc = _selection_score(options)
    confidence = entity_confidences(outputs, mc)
    T = options.temperature
    padded = np.stack([outputs.padded(i, outputs.probs(i, T)) for i in range(len(outputs.teachers))])
    all_o = every_teacher_says_o(outputs)
    target = muki_targets(padded, confidence, all_o, tau)
    arrays = {"target": target.astype(np.float32), "word_mask": outputs.words.astype(np.float32)}
    if options.reweighted:
        arrays["word_weight"] = _margin(confidence).astype(np.float32)
    contested = outputs.words & ~all_o
    chosen = confidence.argmax(axis=-1)[contested]
    info = {"level": "token", "score": "mc-dropout" if mc and outputs.mc_probs[0] is not None else "entropy",
            "entity_only_confidence": True, "reweight": options.reweighted,
            "contested_words": int(contested.sum()), "all_o_words": int((outputs.words & all_o).sum()),
            "chosen_share_contested": dict(zip(outputs.teachers, (np.bincount(chosen, minlength=len(outputs.teachers))
                                                                 / max(1, chosen.size)).round(4).tolist()))}
    return Objective(arrays, word_kl_loss(T), None, info)


def build_token_muki_hard(outputs, options) -> Objective:
    return _muki(outputs, options, None)


def build_token_muki_soft(outputs, options) -> Objective:
    return _muki(outputs, options, options.tau)


def flat_outputs(outputs) -> TeacherOutputs:
    """The per-word outputs as sentence-level TeacherOutputs over n*W rows (for union_logits)."""
    n, width = outputs.words.shape
    logits = tuple(z.reshape(n * width, z.shape[-1]) for z in outputs.logits)
    return TeacherOutputs(outputs.space, outputs.teachers, logits, {})


def union_word_logits(outputs, temperature: float = 1.0) -> np.ndarray:
    """(n, W, |Y|): all teachers' logits / T per word, concatenated, the O logits log-sum-exp'ed into one O."""
    from kamalcli.methods.output_level import union_logits

    n, width = outputs.words.shape
    return union_logits(flat_outputs(outputs), temperature).reshape(n, width, len(outputs.space))


def build_token_vanilla_kd(outputs, options) -> Objective:
    from kamalcli.methods.output_level import softmax

    target = softmax(union_word_logits(outputs, options.temperature))
    return Objective({"target": target.astype(np.float32), "word_mask": outputs.words.astype(np.float32)},
                     word_kl_loss(options.temperature), None, {"level": "token"})


def build_token_uhc(outputs, options) -> Objective:
    T = options.temperature
    blocks = [np.asarray(outputs.space.blocks[t]) for t in outputs.teachers]
    arrays = {f"p{i}": outputs.probs(i, T).astype(np.float32) for i in range(len(blocks))}
    arrays["word_mask"] = outputs.words.astype(np.float32)

    def loss(logits, batch):
        import torch

        from kamalcli.methods.losses import kl_to_target
        from kamalcli.word_alignment import gather_words

        words = gather_words(logits, batch["positions"])
        total = 0
        for i, cols in enumerate(blocks):
            total = total + kl_to_target(words[..., torch.as_tensor(cols, device=words.device)], batch[f"p{i}"], T)
        return _mean_over_words(total, batch)

    return Objective(arrays, loss, None, {"level": "token"})


def word_kl_loss(temperature: float):
    """Per sentence: the mean over its words of word_weight * KL(target || student at the word's first sub-token)."""

    def loss(logits, batch):
        from kamalcli.methods.losses import kl_to_target
        from kamalcli.word_alignment import gather_words

        kl = kl_to_target(gather_words(logits, batch["positions"]), batch["target"], temperature)
        return _mean_over_words(kl, batch)

    return loss


def word_cross_entropy(logits, batch):
    """Supervised per-word loss (train-teacher, the upper bound): gold tag ids, -1 where no word."""
    import torch.nn.functional as F

    from kamalcli.word_alignment import gather_words

    words = gather_words(logits, batch["positions"]).float()
    gold = batch["tags"]
    ce = F.cross_entropy(words.transpose(1, 2), gold.clamp(min=0), reduction="none")  # (B, W)
    valid = (gold >= 0) & (batch["positions"] >= 0)
    return (ce * valid).sum(dim=1) / valid.sum(dim=1).clamp(min=1)


def _mean_over_words(per_word, batch):
    """(B, W) -> (B,): the weighted sum over the words the student sees and the teachers saw, divided by their number."""
    counted = batch["word_mask"] * (batch["positions"] >= 0)
    weight = counted * batch["word_weight"] if "word_weight" in batch else counted
    return (per_word * weight).sum(dim=1) / counted.sum(dim=1).clamp(min=1)
