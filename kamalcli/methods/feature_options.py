"""Options of the feature-level methods (torch-free, so `kamal methods` stays fast)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kamalcli.methods.base import Options, require
from kamalcli.methods.vanilla_kd import KDOptions
from kamalcli.probe.scores import Score

Source = Literal["tokens", "pooled"]  # tokens: teachers run in the loop; pooled: the probe cache


@dataclass(frozen=True)
class FeatureKDOptions(KDOptions):
    """vanilla-kd on outputs plus feature terms times feature_weight."""

    feature_weight: float = 1.0

    def check(self) -> None:
        super().check()
        require(self.feature_weight >= 0, "feature_weight must be 0 or more")


@dataclass(frozen=True)
class DFAOptions(FeatureKDOptions):
    features: Source = "tokens"
    layers: Literal["all", "last"] = "all"            # which student layers are matched


@dataclass(frozen=True)
class CFLOptions(FeatureKDOptions):
    pass


@dataclass(frozen=True)
class MTBertOptions(Options):
    labels: bool = False                               # use the transfer data's gold labels (the paper)
    features: Source = "tokens"
    temperature: float = 1.0
    hidden_weight: float = 1.0
    co_finetune: bool = False                          # first fine-tune the teachers with a shared pooling and head
    co_finetune_epochs: int = 1
    co_finetune_lr: float | None = None                # None: 0.4 x the run's lr (the paper's 2e-6 / 5e-6)

    def check(self) -> None:
        require(self.temperature > 0, "temperature must be above 0")
        require(self.hidden_weight >= 0, "hidden_weight must be 0 or more")
        require(not self.co_finetune or self.labels, "co_finetune needs gold labels: add labels=true")
        require(self.co_finetune_epochs >= 1, "co_finetune_epochs must be at least 1")
        require(self.co_finetune_lr is None or 0 < self.co_finetune_lr < 1, "co_finetune_lr must be in (0, 1)")


RLReward = Literal["r1", "r2", "r3"]


@dataclass(frozen=True)
class RLKDOptions(Options):
    """rl-kd: a policy per teacher samples select/skip for every row; REINFORCE with a baseline."""

    labels: bool = False              # the paper: gold labels, teachers over one label set; false: kamal's variant
    reward: RLReward | None = None    # labels=true: r1 = -CE, r2 = -CE - DL, r3 (default) mixes in held-out accuracy
    alpha: float = 0.5                # labels=true: alpha * DL + (1 - alpha) * CE
    gamma: float = 0.5                # r3: gamma * (-CE - DL) + (1 - gamma) * held-out accuracy
    temperature: float = 1.0
    policy_lr: float = 1e-2           # Adam on the policy (its own optimiser, checkpointed with the student)
    baseline_decay: float = 0.9       # the reward baseline: an exponential moving average of past rewards
    empty: Literal["best", "all", "skip"] = "best"  # a row with no teacher selected learns from ...
    pretrain_epochs: int = 1          # the student on the average of all teachers first (0: skip)
    policy_pretrain_epochs: int = 3   # then the policy, the student fixed (0: skip)
    score: Score = "mc-dropout"       # label-free: the confidences in the state and the reference target
    encoder: str | None = None        # R(x): a frozen, not fine-tuned encoder; None: the student's base

    def check(self) -> None:
        require(self.labels or self.reward is None,
                "reward= chooses among the paper's rewards, which need gold labels (labels=true); the label-free "
                "variant rewards agreement with the confidence-selected target on held-out rows")
        require(0 <= self.alpha <= 1, "alpha must be in [0, 1]")
        require(0 <= self.gamma <= 1, "gamma must be in [0, 1]")
        require(self.temperature > 0, "temperature must be above 0")
        require(0 < self.policy_lr < 1, "policy_lr must be in (0, 1)")
        require(0 <= self.baseline_decay < 1, "baseline_decay must be in [0, 1)")
        require(self.pretrain_epochs >= 0 and self.policy_pretrain_epochs >= 0, "pre-training epochs must be 0 or more")

    @property
    def chosen_reward(self) -> str:
        return (self.reward or "r3") if self.labels else "agreement"

    @property
    def confidence_score(self) -> str | None:
        """The probe confidences it reads: only the label-free variant reads any."""
        return None if self.labels else self.score


@dataclass(frozen=True)
class StrataNetOptions(Options):
    """stratanet: block-wise selective-transformer amalgamation with RMD confidences (docs/methods.md)."""

    alpha: float = 0.7               # alpha * block alignment + (1 - alpha) * KL; the paper implies alpha > 0.5
    temperature: float = 0.75        # the KL's temperature (the paper's appendix)
    tau: float = 0.2                 # teacher weights of the output mix: softmax(confidence percentile / tau)
    fit_share: float = 0.2           # share of each teacher's generated rows its RMD Gaussians are fitted on
    guard: bool = True               # kamal: the [AMAL] target is detached and trained to rebuild the teachers
    rebuild_weight: float = 1.0      # weight of that confidence-weighted reconstruction
    heads: int = 4                   # attention heads of the selective transformer (divides the student's width)

    def check(self) -> None:
        require(0 <= self.alpha <= 1, "alpha must be in [0, 1]")
        require(self.temperature > 0 and self.tau > 0, "temperature and tau must be above 0")
        require(0 < self.fit_share < 1, "fit_share must be in (0, 1)")
        require(self.rebuild_weight >= 0, "rebuild_weight must be 0 or more")
        require(self.heads >= 1, "heads must be at least 1")
