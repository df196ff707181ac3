"""An Auxiliary: what a feature-level method adds to the one training loop (see train/objective.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class StudentView:
    """One forward pass of the student, as the objective sees it."""

    logits: torch.Tensor                                # (B, |Y|)
    hidden_states: tuple[torch.Tensor, ...] | None      # index 0 = embeddings; None unless asked for
    attention_mask: torch.Tensor                        # (B, L)


class Auxiliary(nn.Module):
    """Trainable parts and per-step behaviour a method adds to the loop (override what you need)."""

    student_layers: tuple[int, ...] = ()   # hidden-state indices the term reads (0 = embeddings)
    lr: float | None = None                # its own learning rate; None: the student's

    def batch(self, index: np.ndarray, device) -> dict[str, torch.Tensor]:
        """Extra per-batch inputs (e.g. teachers run inside the loop)."""
        return {}

    def forward(self, view: StudentView, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B,) or a scalar, added to the output-level loss."""
        raise NotImplementedError

    def after_step(self, step: int, view: StudentView, batch: dict[str, torch.Tensor]) -> None:
        """Called after each optimiser step (e.g. a policy update from the batch's reward)."""

    def extra_state(self) -> dict:
        """Checkpointed non-parameter state (tensors, numbers, lists): an optimiser of its own, a baseline."""
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass

    def report(self) -> dict:
        """Figures worth recording with the student (e.g. the share of time teachers took)."""
        return {}
