"""Merging fine-tuned encoders through their task vectors tau_i = theta_i - theta_0 (theta_0: the pretrained base).

- average: theta_0 + mean_i tau_i, the plain mean of the weights (a model soup);
- task-arithmetic (Ilharco et al., ICLR 2023): theta_0 + lambda sum_i tau_i, lambda = 1;
- ties (Yadav et al., NeurIPS 2023): each tau_i trimmed to its top 20% of entries by magnitude, one sign per
  entry elected by the sign of the trimmed sum, the mean of the trimmed entries that agree with it (entries no
  teacher keeps stay at the base), theta_0 + lambda tau, lambda = 1.

Pure functions on {name: tensor}; the caller makes sure every dict has the same names and shapes.
"""

from __future__ import annotations

from typing import Callable

import torch

State = dict[str, torch.Tensor]

DENSITY = 0.2  # ties: the share of each task vector's entries kept (the paper's k = 20%)
SCALE = 1.0    # task-arithmetic and ties: lambda


def task_vectors(base: State, finetuned: list[State]) -> list[State]:
    return [{k: f[k].float() - base[k].float() for k in base} for f in finetuned]


def average(base: State, taus: list[State]) -> State:
    return {k: base[k].float() + torch.stack([t[k] for t in taus]).mean(dim=0) for k in base}


def task_arithmetic(base: State, taus: list[State], scale: float = SCALE) -> State:
    return {k: base[k].float() + scale * torch.stack([t[k] for t in taus]).sum(dim=0) for k in base}


def trim(tau: torch.Tensor, density: float) -> torch.Tensor:
    """tau with all but its top `density` share of entries by magnitude set to 0 (ties: at least one kept)."""
    flat = tau.flatten()
    keep = max(1, round(density * flat.numel()))
    threshold = flat.abs().kthvalue(flat.numel() - keep + 1).values
    return torch.where(tau.abs() >= threshold, tau, torch.zeros_like(tau))


def ties(base: State, taus: list[State], density: float = DENSITY, scale: float = SCALE) -> State:
    merged = {}
    for k in base:
        trimmed = torch.stack([trim(t[k], density) for t in taus])
        sign = torch.sign(trimmed.sum(dim=0))
        agree = (torch.sign(trimmed) == sign) & (trimmed != 0)
        count = agree.sum(dim=0).clamp(min=1)
        merged[k] = base[k].float() + scale * (trimmed * agree).sum(dim=0) / count
    return merged


MERGES: dict[str, Callable[[State, list[State]], State]] = {
    "average": average, "task-arithmetic": task_arithmetic, "ties": ties}
