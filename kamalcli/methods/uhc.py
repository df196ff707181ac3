"""uhc (Vongkulbhisal et al., CVPR 2019): the student's probabilities, renormalised over each teacher's
labels, match that teacher; summed over teachers. At token level the same per word (a teacher's labels:
its O and its B-/I- tags).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kamalcli.methods.base import Objective, Options, TeacherOutputs, require


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


# -- token level ---------------------------------------------------------------

def build_token_uhc(outputs, options) -> Objective:
    T = options.temperature
    blocks = [np.asarray(outputs.space.blocks[t]) for t in outputs.teachers]
    arrays = {f"p{i}": outputs.probs(i, T).astype(np.float32) for i in range(len(blocks))}
    arrays["word_mask"] = outputs.words.astype(np.float32)

    def loss(logits, batch):
        import torch

        from kamalcli.methods.losses import kl_to_target, mean_over_words
        from kamalcli.models.words import gather_words

        words = gather_words(logits, batch["positions"])
        total = 0
        for i, cols in enumerate(blocks):
            total = total + kl_to_target(words[..., torch.as_tensor(cols, device=words.device)], batch[f"p{i}"], T)
        return mean_over_words(total, batch)

    return Objective(arrays, loss, None, {"level": "token"})
