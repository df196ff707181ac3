"""A sequence classifier's head: what it computes from its encoder's first-token state, and its parameters.

`--fit head` (kamalcli/train/head.py) trains the head alone on cached encoder states: the classifier keeps
its own architecture, so a student fitted that way saves, exports and predicts as any other. Each family
below is checked against the whole model's forward (tests/test_fit_head.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from kamalcli.errors import KamalError


@dataclass(frozen=True)
class Head:
    modules: tuple[nn.Module, ...]                     # what it trains; the encoder below stays as it is
    logits: Callable[[torch.Tensor], torch.Tensor]     # (B, hidden) first-token states -> (B, |Y|)

    def parameters(self) -> list[nn.Parameter]:
        return [p for m in self.modules for p in m.parameters()]


def _bert(model: nn.Module) -> Head:  # BertPooler (dense + tanh) reads hidden_states[:, 0]
    pooler = model.bert.pooler
    return Head((pooler, model.classifier), lambda s: model.classifier(model.dropout(pooler(s.unsqueeze(1)))))


def _roberta(model: nn.Module) -> Head:  # RobertaClassificationHead and its kin read features[:, 0]
    return Head((model.classifier,), lambda s: model.classifier(s.unsqueeze(1)))


def _distilbert(model: nn.Module) -> Head:
    return Head((model.pre_classifier, model.classifier),
                lambda s: model.classifier(model.dropout(torch.relu(model.pre_classifier(s)))))


def _deberta(model: nn.Module) -> Head:
    return Head((model.pooler, model.classifier), lambda s: model.classifier(model.dropout(model.pooler(s.unsqueeze(1)))))


_FAMILIES: dict[str, Callable[[nn.Module], Head]] = {
    "bert": _bert, "roberta": _roberta, "xlm-roberta": _roberta, "camembert": _roberta, "electra": _roberta,
    "distilbert": _distilbert, "deberta": _deberta, "deberta-v2": _deberta,
}


def head_of(model: nn.Module) -> Head:
    kind = model.config.model_type
    if kind not in _FAMILIES or not type(model).__name__.endswith("ForSequenceClassification"):
        known = ", ".join(sorted(_FAMILIES))
        raise KamalError(f"--fit head knows the heads of sequence classifiers of {known}; this student is "
                         f"{type(model).__name__} ({kind}): use --fit all")
    return _FAMILIES[kind](model)
