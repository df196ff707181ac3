"""What the training loop minimises: the contract between the loop and every method.

The loop owns this contract (train/ does not import methods/). An Objective is

- an output-level term: per-row arrays (targets, gold labels, cached teacher
  features, memory-mapped arrays are read per batch), optional per-row weights
  and `loss(logits, batch) -> (B,)`. Label-free model selection measures this
  term on held-out rows;
- optionally an Auxiliary: an nn.Module trained beside the student (projections,
  encoders/decoders, a policy). The loop optimises it with the student (its own
  learning rate if it asks), clips it, checkpoints and restores it, gives it the
  student's hidden states from the same forward pass, and calls its per-step
  hook.

Per example: weight * loss(logits) + auxiliary(view, batch); the loop takes the mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:  # torch stays out of `kamal methods` and `kamal --help`
    import torch

    from kamalcli.train.auxiliary import Auxiliary


@dataclass
class Objective:
    """Per-row arrays and the output-level loss; weights and an Auxiliary are optional."""

    arrays: dict[str, np.ndarray]
    loss: Callable  # (student_logits (B, |Y|), batch_arrays: dict[str, Tensor]) -> (B,) tensor
    weights: np.ndarray | None = None
    info: dict = field(default_factory=dict)  # figures worth recording (e.g. target agreement)
    auxiliary: "Auxiliary | None" = None


class BatchArrays:
    """The objective's arrays for a batch of rows. In-memory arrays become tensors once; memory-mapped
    ones (cached teacher features) are read per batch, so they are never all in RAM."""

    def __init__(self, objective: Objective):
        import torch

        self._lazy = {k: v for k, v in objective.arrays.items() if isinstance(v, np.memmap)}
        self._tensors = {k: torch.as_tensor(np.ascontiguousarray(v)) for k, v in objective.arrays.items()
                         if k not in self._lazy}
        self._weights = (torch.as_tensor(objective.weights, dtype=torch.float32)
                         if objective.weights is not None else None)

    def __call__(self, index: np.ndarray, device) -> dict[str, "torch.Tensor"]:
        import torch

        idx = torch.as_tensor(index)
        out = {k: v[idx].to(device) for k, v in self._tensors.items()}
        for k, v in self._lazy.items():
            out[k] = torch.from_numpy(np.asarray(v[np.asarray(index)], dtype=np.float32)).to(device)
        return out

    def weights(self, index: np.ndarray, device) -> "torch.Tensor | None":
        return None if self._weights is None else self._weights[np.asarray(index)].to(device)


def output_loss(objective: Objective, logits: "torch.Tensor", batch: dict[str, "torch.Tensor"],
                weights: "torch.Tensor | None") -> "torch.Tensor":
    """Mean over the batch of weight * loss(logits): the term label-free model selection measures."""
    per_example = objective.loss(logits, batch)
    if weights is not None:
        per_example = per_example * weights
    return per_example.mean()


def with_gold(objective: Objective, gold: np.ndarray, weight: float = 1.0) -> Objective:
    """The objective plus a cross-entropy on the rows a user labelled (gold: the label's index per row, -1 where
    none), beside the method's own loss, for every method: per row, loss + weight * CE(logits, gold)."""
    import torch

    base = objective.loss

    def loss(logits, batch):
        labels = batch["gold_label"]
        labelled = labels >= 0
        ce = torch.nn.functional.cross_entropy(logits.float(), labels.clamp(min=0), reduction="none")
        return base(logits, batch) + weight * torch.where(labelled, ce, torch.zeros_like(ce))

    info = {**objective.info, "gold": {"rows": int((gold >= 0).sum()), "weight": weight}}
    return Objective({**objective.arrays, "gold_label": np.asarray(gold, dtype=np.int64)}, loss, objective.weights,
                     info, objective.auxiliary)
