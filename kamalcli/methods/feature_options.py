"""Options of the feature-level methods (torch-free, so `kamal methods` stays fast)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kamalcli.methods.base import Options, require
from kamalcli.methods.output_level import KDOptions

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
