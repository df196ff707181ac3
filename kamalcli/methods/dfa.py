"""dfa: layer-wise feature amalgamation (Shen et al., AAAI 2019), as ported by MUKI, corrected.

Per aligned student layer j: an encoder maps the concatenated teacher states to
the student's width, decoders reconstruct each teacher from that encoding, and
an adapter pulls the student's state to the (detached) encoding:
    MSE(adapter(h_s), enc.detach()) + sum_i MSE(dec_i(enc), h_i),  enc = E([h_1; ..; h_N])
summed over the aligned layers, times `feature_weight`, plus vanilla-kd on outputs.
Unlike the MUKI port: the whole blocks train (the port trains only their biases),
padding is masked, any number of teachers and depths work, and hidden sizes may differ.
"""

from __future__ import annotations

import torch
from torch import nn

from kamalcli.methods.features import FeatureAuxiliary, aligned_layer, teacher_features
from kamalcli.methods.base import FeatureContext, Objective
from kamalcli.methods.feature_options import DFAOptions
from kamalcli.methods.losses import masked_mse
from kamalcli.methods.vanilla_kd import build_vanilla_kd


class DFAAuxiliary(FeatureAuxiliary):
    def __init__(self, pairs: list[tuple[int, tuple[int, ...]]], student_hidden: int, teacher_hidden: list[int],
                 features, weight: float):
        super().__init__(features, weight)
        self.pairs = pairs
        self.student_layers = tuple(j for j, _ in pairs)
        self.teacher_hidden = list(teacher_hidden)
        total = sum(teacher_hidden)
        self.encoders = nn.ModuleList(nn.Linear(total, student_hidden) for _ in pairs)
        self.decoders = nn.ModuleList(nn.Linear(student_hidden, total) for _ in pairs)
        self.adapters = nn.ModuleList(nn.Linear(student_hidden, student_hidden) for _ in pairs)

    def forward(self, view, batch) -> torch.Tensor:
        mask = self.mask(view)
        total = 0.0
        for k, (j, teacher_layers) in enumerate(self.pairs):
            states = [self.teacher(batch, i, layer) for i, layer in enumerate(teacher_layers)]
            encoding = self.encoders[k](torch.cat(states, dim=-1))
            rebuilt = self.decoders[k](encoding).split(self.teacher_hidden, dim=-1)
            total = total + masked_mse(self.adapters[k](self.student(view, j)), encoding.detach(), mask)
            for r, h in zip(rebuilt, states):
                total = total + masked_mse(r, h, mask)
        return self.weight * total


def build_dfa(context: FeatureContext, options: DFAOptions) -> Objective:
    shapes = context.sources.shapes()
    student_layers = range(1, context.student_depth + 1) if options.layers == "all" else [context.student_depth]
    pairs = [(j, tuple(aligned_layer(j, context.student_depth, t.layers) for t in shapes)) for j in student_layers]
    wanted = {i: tuple(sorted({layers[i] for _, layers in pairs})) for i in range(len(shapes))}
    features = teacher_features(context, wanted, options.features, "dfa")
    torch.manual_seed(context.seed)
    auxiliary = DFAAuxiliary(pairs, context.student_hidden, [t.hidden for t in shapes], features, options.feature_weight)
    objective = build_vanilla_kd(context.outputs, options)
    objective.arrays.update(features.arrays)
    objective.auxiliary = auxiliary
    objective.info["layer_pairs"] = [[j, list(t)] for j, t in pairs]
    return objective
