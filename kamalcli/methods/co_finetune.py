"""MT-BERT's co-finetuning: the teachers, fine-tuned together on gold labels through one shared
attentive pooling and prediction layer, before the student learns from them.

    a_t = softmax_t(v . tanh(W h_t)),  pooled_i = sum_t a_t h_i,t   (W: d -> 200, shared)
    y_i = softmax(U pooled_i)                                        (U shared)
    loss = sum_i CE(y, y_i)

Needs one label set and one hidden size across teachers, and teachers that
tokenise alike (they read the same token batch).
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from kamalcli.errors import KamalError
from kamalcli.methods.base import FeatureContext, Objective
from kamalcli.methods.losses import cross_entropy

QUERY_DIM = 200  # the paper's attention query size
PAPER_LR_RATIO = 2e-6 / 5e-6  # teacher lr / student lr in the paper


class AttentivePooling(nn.Module):
    def __init__(self, hidden: int, query: int = QUERY_DIM):
        super().__init__()
        self.project = nn.Linear(hidden, query)
        self.query = nn.Linear(query, 1, bias=False)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = self.query(torch.tanh(self.project(states))).squeeze(-1)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1).unsqueeze(-1)
        return (weights * states).sum(dim=1)


class CoFinetunedTeachers(nn.Module):
    """The teachers' encoders with one shared pooling and head.

    Its logits are (B, N * |Y|), teacher after teacher, and config.num_labels says so: the shape the
    training loop and predict_logits read.
    """

    def __init__(self, encoders: list[nn.Module], hidden: int, num_labels: int):
        super().__init__()
        self.encoders = nn.ModuleList(encoders)
        self.pool = AttentivePooling(hidden)
        self.head = nn.Linear(hidden, num_labels)
        self.config = SimpleNamespace(num_labels=len(encoders) * num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids=None, output_hidden_states=False):
        logits = []
        for encoder in self.encoders:
            kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            states = encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
            logits.append(self.head(self.pool(states, attention_mask)))
        return SimpleNamespace(logits=torch.cat(logits, dim=1), hidden_states=None)


def _loss(teachers: int):
    def loss(logits, batch):  # (B, N * |Y|)
        per_teacher = logits.view(logits.shape[0], teachers, -1)
        return sum(cross_entropy(per_teacher[:, i], batch["gold"]) for i in range(teachers))

    return loss


def co_finetune(context: FeatureContext, options, gold: np.ndarray):
    """Returns (the cached outputs with the co-finetuned teachers' logits, their encoders)."""
    from kamalcli.models.loading import load_classifier
    from kamalcli.models.inference import predict_logits

    sources = context.sources
    shapes = sources.shapes()
    if len({t.hidden for t in shapes}) != 1:
        raise KamalError("co_finetune shares one pooling and head across teachers: they need one hidden size")
    encoding = sources.shared_encoding()
    if encoding is None:
        raise KamalError("co_finetune feeds every teacher the same tokens: the teachers must tokenise alike")
    if context.phases is None:
        raise KamalError("internal: co_finetune needs the run's training phases")
    encoders = [load_classifier(t.path).base_model for t in sources.teachers]
    torch.manual_seed(context.seed)
    model = CoFinetunedTeachers(encoders, shapes[0].hidden, len(context.outputs.space))
    lr = options.co_finetune_lr or PAPER_LR_RATIO * context.phases.config.lr
    objective = Objective({"gold": gold.astype(np.int64)}, _loss(len(shapes)))
    if context.phases.run("co-finetune", model, encoding, objective, lr=lr, epochs=options.co_finetune_epochs):
        context.say(f"Co-finetuned {len(shapes)} teachers with a shared pooling and head (lr {lr:g}).")
    logits = predict_logits(model, encoding, device=context.phases.config.device)
    logits = logits.reshape(len(logits), len(shapes), -1)
    outputs = replace(context.outputs, logits=tuple(logits[:, i].copy() for i in range(len(shapes))))
    return outputs, [m.eval() for m in model.encoders]

