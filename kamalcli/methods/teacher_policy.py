"""rl-kd's teacher selector: one logistic policy per teacher, trained by REINFORCE with a baseline.

Teacher k selects a row with probability pi_k(s) = sigmoid(A_k . s + b_k), s the row's
state. For a batch (one episode, one delayed reward r) the update ascends

    (r - baseline) * mean_rows sum_k grad log pi(a_k | s),
    grad_A_k log pi(a_k | s) = (a_k - pi_k(s)) * s,   grad_b_k = a_k - pi_k(s)

(the paper's Eq. 8 sums grad pi itself and has no baseline; log pi is the
REINFORCE estimator, and the baseline, a moving average of past rewards, only
lowers its variance). The policy keeps its own Adam optimiser: its parameters
are not trained by the loss the student minimises.
"""

from __future__ import annotations

import torch
from torch import nn


class TeacherPolicy(nn.Module):
    def __init__(self, state_size: int, teachers: int, lr: float, baseline_decay: float, seed: int):
        super().__init__()
        # requires_grad off: the student's optimiser leaves them alone; REINFORCE writes their gradient
        self.weight = nn.Parameter(torch.zeros(teachers, state_size), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(teachers), requires_grad=False)
        self.optimizer = torch.optim.Adam([self.weight, self.bias], lr=lr, maximize=True)
        self.baseline_decay = baseline_decay
        self.baseline: float | None = None
        self.generator = torch.Generator().manual_seed(seed)

    def probabilities(self, states: torch.Tensor) -> torch.Tensor:
        """(B, D) states -> (B, N) probabilities of selecting each teacher."""
        return torch.sigmoid(states @ self.weight.T + self.bias)

    def sample(self, probabilities: torch.Tensor) -> torch.Tensor:
        """(B, N) actions in {0, 1} for these probabilities, drawn from the policy's own generator (checkpointed)."""
        return torch.bernoulli(probabilities.cpu(), generator=self.generator).to(probabilities.device)

    def gradient(self, states: torch.Tensor, actions: torch.Tensor, advantage: float) -> tuple[torch.Tensor, torch.Tensor]:
        """advantage * mean over rows of grad log pi(actions | states), for (weight, bias)."""
        residual = (actions - self.probabilities(states)) * advantage / states.shape[0]   # (B, N)
        return residual.T @ states, residual.sum(dim=0)

    def advantage(self, reward: float) -> float:
        """reward - baseline, then the baseline moves toward the reward. The first batch sets the baseline
        (advantage 0): there is nothing to compare its reward with yet."""
        if self.baseline is None:
            self.baseline = reward
        advantage = reward - self.baseline
        self.baseline = self.baseline_decay * self.baseline + (1 - self.baseline_decay) * reward
        return advantage

    def reinforce(self, states: torch.Tensor, actions: torch.Tensor, reward: float) -> float:
        """One policy-gradient step for a batch and its reward; returns the advantage used."""
        first = self.baseline is None
        advantage = self.advantage(reward)
        if first:  # no step: Adam would count it, and its moments would start from a zero gradient
            return advantage
        self.weight.grad, self.bias.grad = self.gradient(states, actions, advantage)
        self.optimizer.step()
        self.weight.grad = self.bias.grad = None
        return advantage

    def extra_state(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "baseline": self.baseline,
                "generator": self.generator.get_state()}

    def load_extra_state(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline = state["baseline"]
        self.generator.set_state(state["generator"])
