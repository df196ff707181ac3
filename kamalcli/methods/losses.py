"""Per-example losses on student logits (torch). Direction: KL(target || student)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def kl_to_target(logits: torch.Tensor, target: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """sum_y t log(t / q), q = softmax(s / T), times T^2 (Hinton's gradient scale). Zeros in t add 0."""
    log_q = F.log_softmax(logits.float() / temperature, dim=-1)
    kl = (torch.xlogy(target, target) - target * log_q).sum(dim=-1)
    return kl * temperature**2


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels, reduction="none")
