"""mt-bert: multi-teacher distillation (Wu et al., 2021), and kamal's label-free variant.

Hidden term: student layer j matches each teacher's layer round(j * L_t / L_s) by
MSE(H_s_j, W_ij H_t) with a learnable W_ij (teacher width -> student width, no
bias) per teacher and layer, embeddings not matched; per token when the
teachers run in the loop and tokenise like the student, else mean-pooled.

Output term, with gold labels (`labels=true`; the paper, teachers over one label set):
    sum_i KL(p_i || q) / (1 + CE(y, p_i))  +  CE(y, q)
KL differs from the paper's soft cross-entropy by the teacher's entropy, a
constant: the gradients are the same. Without labels (kamal's variant, teachers
with any label sets): each teacher is matched on its own block of the student's
output, renormalised (as in uhc), weighted by 1 / (1 + H(p_i)) (the expected
cross-entropy of the teacher's own prediction, in place of the gold one):
    sum_i KL(p_i || q|Y_i) / (1 + H(p_i)).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch import nn

from kamalcli.errors import KamalError
from kamalcli.methods.features import FeatureAuxiliary, aligned_layer, teacher_features
from kamalcli.methods.base import FeatureContext, Objective, gold_over_one_label_set
from kamalcli.methods.feature_options import MTBertOptions
from kamalcli.methods.losses import cross_entropy, kl_to_target, masked_mse
from kamalcli.probs import entropy


class MTBertAuxiliary(FeatureAuxiliary):
    def __init__(self, pairs: list[tuple[int, int, int]], student_hidden: int, teacher_hidden: list[int],
                 features, weight: float):
        super().__init__(features, weight)
        self.pairs = pairs  # (teacher i, student layer j, teacher layer)
        self.student_layers = tuple(sorted({j for _, j, _ in pairs}))
        self.maps = nn.ModuleList(nn.Linear(teacher_hidden[i], student_hidden, bias=False) for i, _, _ in pairs)

    def forward(self, view, batch) -> torch.Tensor:
        mask = self.mask(view)
        total = 0.0
        for w, (i, j, layer) in zip(self.maps, self.pairs):
            total = total + masked_mse(self.student(view, j), w(self.teacher(batch, i, layer)), mask)
        return self.weight * total


def _output_term(context: FeatureContext, options: MTBertOptions):
    outputs = context.outputs
    T = options.temperature
    n, N = outputs.num_rows, len(outputs.teachers)
    arrays = {f"p{i}": outputs.probs(i, T).astype(np.float32) for i in range(N)}
    if options.labels:
        gold = gold_over_one_label_set(context, "mt-bert")
        ce = np.stack([-np.log(np.clip(outputs.probs(i)[np.arange(n), gold], 1e-30, None)) for i in range(N)], axis=1)
        arrays["gold"] = gold
        arrays["w"] = (1.0 / (1.0 + ce)).astype(np.float32)

        def loss(logits, batch):
            total = cross_entropy(logits, batch["gold"])
            for i in range(N):
                total = total + batch["w"][:, i] * kl_to_target(logits, batch[f"p{i}"], T)
            return total

        return arrays, loss, {"variant": "paper (gold labels)", "mean_teacher_weight": arrays["w"].mean(axis=0).round(4).tolist()}

    blocks = [np.asarray(outputs.space.blocks[t]) for t in outputs.teachers]
    arrays["w"] = np.stack([1.0 / (1.0 + entropy(outputs.probs(i), axis=1)) for i in range(N)], axis=1).astype(np.float32)

    def loss(logits, batch):
        total = 0
        for i, cols in enumerate(blocks):
            block = logits[:, torch.as_tensor(cols, device=logits.device)]
            total = total + batch["w"][:, i] * kl_to_target(block, batch[f"p{i}"], T)
        return total

    return arrays, loss, {"variant": "kamal label-free", "mean_teacher_weight": arrays["w"].mean(axis=0).round(4).tolist()}


def build_mt_bert(context: FeatureContext, options: MTBertOptions) -> Objective:
    shapes = context.sources.shapes()
    pairs = [(i, j, aligned_layer(j, context.student_depth, t.layers))
             for i, t in enumerate(shapes) for j in range(1, context.student_depth + 1)]
    wanted = {i: tuple(sorted({layer for k, _, layer in pairs if k == i})) for i in range(len(shapes))}
    arrays, loss, info = _output_term(context, options)  # checks labels before any work
    teachers = None
    if options.co_finetune:
        if options.features != "tokens":
            raise KamalError("co_finetune changes the teachers, so their cached pooled features no longer hold: "
                             "use features=tokens")
        from kamalcli.methods.co_finetune import co_finetune

        outputs, teachers = co_finetune(context, options, arrays["gold"])
        context = replace(context, outputs=outputs)
        arrays, loss, info = _output_term(context, options)
        info["co_finetuned"] = True
    features = teacher_features(context, wanted, options.features, "mt-bert", teachers)
    torch.manual_seed(context.seed)
    auxiliary = MTBertAuxiliary(pairs, context.student_hidden, [t.hidden for t in shapes], features,
                                options.hidden_weight)
    arrays.update(features.arrays)
    return Objective(arrays, loss, info=info, auxiliary=auxiliary)
