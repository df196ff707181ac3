"""What dfa, cfl and mt-bert share: choosing the teacher features' source, reading states, timing.

Per-token states need teachers in the loop and a tokenisation that matches the
student's; otherwise (or when asked) the methods use mean-pooled features from
the probe cache. kamal says which, and never matches misaligned tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kamalcli.errors import KamalError
from kamalcli.features import feature_key
from kamalcli.methods.base import FeatureContext
from kamalcli.train.auxiliary import Auxiliary, StudentView


@dataclass
class TeacherFeatures:
    pooled: bool
    arrays: dict[str, np.ndarray]   # cached pooled features (memory-mapped), merged into the objective's arrays
    stream: object | None           # InLoopTeachers, when per token


def teacher_features(context: FeatureContext, layers: dict[int, tuple[int, ...]], source: str,
                     method: str, models: list | None = None) -> TeacherFeatures:
    """source: "tokens" (teachers in the loop; `models` replace the registered ones) or "pooled" (the probe cache)."""
    if source == "tokens":
        misaligned = context.sources.misaligned()
        if misaligned and models is not None:
            raise KamalError(f"{method}: {', '.join(misaligned)} tokenise the text differently from the student; "
                             "fine-tuned teachers can only be matched per token")
        if misaligned:
            context.say(f"{method}: {', '.join(misaligned)} tokenise the text differently from the student, so "
                        "per-token states cannot be matched; using mean-pooled features from the probe cache.")
            source = "pooled"
    if source == "pooled":
        return TeacherFeatures(True, context.sources.cached(layers), None)
    return TeacherFeatures(False, {}, context.sources.in_loop(layers, models))


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


class FeatureAuxiliary(Auxiliary):
    """An Auxiliary over teacher features: per token (teachers in the loop) or pooled (cached)."""

    def __init__(self, features: TeacherFeatures, weight: float = 1.0):
        super().__init__()
        self.pooled = features.pooled
        self.weight = weight
        self.__dict__["stream"] = features.stream  # a plain attribute: teachers are not trained or checkpointed

    def batch(self, index: np.ndarray, device) -> dict[str, torch.Tensor]:
        return self.stream(index, device) if self.stream is not None else {}

    def student(self, view: StudentView, layer: int) -> torch.Tensor:
        states = view.hidden_states[layer]
        return mean_pool(states, view.attention_mask) if self.pooled else states

    @staticmethod
    def teacher(batch: dict[str, torch.Tensor], i: int, layer: int) -> torch.Tensor:
        return batch[feature_key(i, layer)]

    def mask(self, view: StudentView) -> torch.Tensor | None:
        return None if self.pooled else view.attention_mask

    def report(self) -> dict:
        if self.stream is None:
            return {"teacher_features": "cached, mean-pooled"}
        return {"teacher_features": "in the loop, per token", "teacher_seconds": round(self.stream.seconds, 3),
                "teacher_batches": self.stream.calls}
