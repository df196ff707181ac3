"""cfl: common feature learning (Luo et al., IJCAI 2019), as ported by MUKI.

Each teacher's last-layer feature and the student's go through their own
aligner (Linear to d_s/4, ReLU) and one shared extractor (d/4 -> d/4 -> d/4)
into a common space; there the student's batch is pulled to each teacher's by a
multi-kernel RBF MMD (features L2-normalised), while decoders rebuild each
teacher's feature from its common one (so the space keeps the teachers'
information):  sum_i MMD(f_s, f_i) + sum_i MSE(dec_i(f_i), h_i), times
`feature_weight`, plus vanilla-kd. Features are mean-pooled and cached by the
probe (KamalEngine's choice); MMD compares batches, so a batch needs two rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kamalcli.methods.base import FeatureContext, Objective, require
from kamalcli.methods.features import FeatureAuxiliary, teacher_features
from kamalcli.methods.losses import masked_mse, mmd_rbf
from kamalcli.methods.feature_options import CFLOptions
from kamalcli.methods.vanilla_kd import build_vanilla_kd


def _mlp(a: int, b: int, c: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c))


class CFLAuxiliary(FeatureAuxiliary):
    def __init__(self, student_layer: int, teacher_layers: list[int], student_hidden: int,
                 teacher_hidden: list[int], features, weight: float):
        super().__init__(features, weight)
        common = max(1, student_hidden // 4)
        self.student_layers = (student_layer,)
        self.teacher_layers = list(teacher_layers)
        self.student_align = nn.Sequential(nn.Linear(student_hidden, common), nn.ReLU())
        self.teacher_align = nn.ModuleList(nn.Sequential(nn.Linear(d, common), nn.ReLU()) for d in teacher_hidden)
        self.extractor = _mlp(common, common, common)
        self.decoders = nn.ModuleList(_mlp(common, d, d) for d in teacher_hidden)
        self.single_row_batches = 0

    def forward(self, view, batch) -> torch.Tensor:
        student = F.normalize(self.extractor(self.student_align(self.student(view, self.student_layers[0]))), dim=-1)
        total = 0.0
        for i, layer in enumerate(self.teacher_layers):
            h = self.teacher(batch, i, layer)
            common = self.extractor(self.teacher_align[i](h))
            total = total + masked_mse(self.decoders[i](common), h)
            if len(h) >= 2:  # an epoch's last batch can hold one row: MMD is undefined there
                total = total + mmd_rbf(student, F.normalize(common, dim=-1))
            else:
                self.single_row_batches += 1
        return self.weight * total

    def report(self) -> dict:
        return {**super().report(), "batches_without_mmd": self.single_row_batches}


def build_cfl(context: FeatureContext, options: CFLOptions) -> Objective:
    require(context.batch_size >= 2, "cfl compares batches of features (MMD): use --batch-size 2 or more")
    shapes = context.sources.shapes()
    wanted = {i: (t.layers,) for i, t in enumerate(shapes)}
    features = teacher_features(context, wanted, "pooled", "cfl")
    torch.manual_seed(context.seed)
    auxiliary = CFLAuxiliary(context.student_depth, [t.layers for t in shapes], context.student_hidden,
                             [t.hidden for t in shapes], features, options.feature_weight)
    objective = build_vanilla_kd(context.outputs, options)
    objective.arrays.update(features.arrays)
    objective.auxiliary = auxiliary
    return objective
