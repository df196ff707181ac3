"""vanilla-kd (Hinton et al. 2015): the student matches softmax over all teachers' concatenated logits.

Token level: per word, softmax over the concatenation of all teachers' logits;
the N O logits are N classes of that softmax whose probabilities are then added
into the student's one O (log-sum-exp of the O logits): the student's O is the
union of the teachers' O classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kamalcli.methods.base import Objective, Options, TeacherOutputs, require
from kamalcli.probs import softmax


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


def union_probs(outputs: TeacherOutputs, temperature: float = 1.0) -> np.ndarray:
    """The teachers' ensemble: softmax over their concatenated logits / T in the union (vanilla-kd's target)."""
    return softmax(union_logits(outputs, temperature), axis=1)


def build_vanilla_kd(outputs: TeacherOutputs, options: KDOptions) -> Objective:
    from kamalcli.methods.losses import kl_loss

    target = union_probs(outputs, options.temperature)
    return Objective({"target": target.astype(np.float32)}, kl_loss(options.temperature))


# -- token level ---------------------------------------------------------------

def flat_outputs(outputs) -> TeacherOutputs:
    """The per-word outputs as sentence-level TeacherOutputs over n*W rows (for union_logits)."""
    n, width = outputs.words.shape
    logits = tuple(z.reshape(n * width, z.shape[-1]) for z in outputs.logits)
    return TeacherOutputs(outputs.space, outputs.teachers, logits, {})


def union_word_logits(outputs, temperature: float = 1.0) -> np.ndarray:
    """(n, W, |Y|): all teachers' logits / T per word, concatenated, the O logits log-sum-exp'ed into one O."""
    n, width = outputs.words.shape
    return union_logits(flat_outputs(outputs), temperature).reshape(n, width, len(outputs.space))


def build_token_vanilla_kd(outputs, options) -> Objective:
    from kamalcli.methods.losses import word_kl_loss

    target = softmax(union_word_logits(outputs, options.temperature))
    return Objective({"target": target.astype(np.float32), "word_mask": outputs.words.astype(np.float32)},
                     word_kl_loss(options.temperature), None, {"level": "token"})
