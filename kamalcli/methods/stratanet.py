"""stratanet (Vijayaraghavan et al. 2024): block-wise amalgamation through a selective transformer.

Blocks = the student's depth; teacher i's block b is the mean of its layers
floor((b-1) L_i / B) + 1 .. floor(b L_i / B), each mean-pooled over tokens (the
probe cache). Per teacher and block, a relative-Mahalanobis confidence
c_ib = -min_k RMD_k, with Gaussians fitted on a held-out share of that
teacher's own generated rows (labelled by the class they were steered to; kamal:
only those the teacher puts in that class, p >= 0.5, as `kamal probe` fits), then
mapped to its percentile over the transfer rows. Per block, a selective
transformer (one encoder layer) reads a learnable [AMAL] token followed by each
teacher's enriched vector Linear([h_ib; c_ib]); its [AMAL] output a_b is the
block's target. Loss per row:

    alpha * sum_b || norm(P_b s_b) - norm(a_b) ||^2  +  (1 - alpha) * T^2 KL(mix || softmax(s / T))

with T = 0.75, mix = sum_i w_i Pad(softmax(z_i / T)), w = softmax(c_iB / tau)
(kamal: the paper does not say how confidences become weights).

kamal's guard against collapse (the paper does not say how the selective
transformer is trained): the student term sees a_b detached, so nothing pulls
a_b towards the student, and a_b is trained to rebuild each teacher's block
vector, weighted by that teacher's weight w_i:
    rebuild_weight * sum_b sum_i w_i MSE(D_bi(a_b), h_ib).
Without it (guard=false) both sides of the alignment can meet at one constant.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from kamalcli.errors import KamalError
from kamalcli.methods.features import FeatureAuxiliary, aligned_layer, feature_key, teacher_features
from kamalcli.methods.base import FeatureContext, Objective
from kamalcli.methods.feature_options import StrataNetOptions
from kamalcli.methods.losses import kl_to_target, masked_mse


def block_layers(block: int, blocks: int, depth: int) -> tuple[int, ...]:
    """Teacher layers (1-based hidden-state indices) of block `block` of `blocks`."""
    first, last = (block - 1) * depth // blocks + 1, block * depth // blocks
    return tuple(range(first, last + 1)) if last >= first else (aligned_layer(block, blocks, depth),)


def block_alignment(student: torch.Tensor, amal: torch.Tensor) -> torch.Tensor:
    """|| norm(student) - norm(amal) ||^2 per row, (B, d) each."""
    return (F.normalize(student.float(), dim=-1) - F.normalize(amal.float(), dim=-1)).pow(2).sum(dim=-1)


def stratanet_loss(student_blocks, amal_blocks, logits, target, alpha: float, temperature: float) -> torch.Tensor:
    """The paper's loss per row: alpha * sum_b alignment + (1 - alpha) * KL at T (times T^2, as all of kamal's KD)."""
    align = sum(block_alignment(s, a) for s, a in zip(student_blocks, amal_blocks))
    return alpha * align + (1 - alpha) * kl_to_target(logits, target, temperature)


class StrataNetAuxiliary(FeatureAuxiliary):
    def __init__(self, blocks: list[list[tuple[int, ...]]], student_hidden: int, teacher_hidden: list[int],
                 features, options: StrataNetOptions):
        super().__init__(features, 1.0)
        if student_hidden % options.heads:
            raise KamalError(f"stratanet heads={options.heads} must divide the student's width {student_hidden}")
        self.blocks = blocks  # blocks[b][i]: teacher i's layers in block b
        self.student_layers = tuple(range(1, len(blocks) + 1))
        self.alpha, self.guard, self.rebuild_weight = options.alpha, options.guard, options.rebuild_weight
        d = student_hidden
        self.amal = nn.Parameter(torch.randn(len(blocks), d) * 0.02)
        self.enrich = nn.ModuleList(nn.ModuleList(nn.Linear(t + 1, d) for t in teacher_hidden) for _ in blocks)
        self.selective = nn.ModuleList(nn.TransformerEncoderLayer(d, options.heads, 2 * d, dropout=0.1, batch_first=True)
                                       for _ in blocks)
        self.project = nn.ModuleList(nn.Linear(d, d) for _ in blocks)
        self.rebuild = nn.ModuleList(nn.ModuleList(nn.Linear(d, t) for t in teacher_hidden) for _ in blocks)
        self.amal_cosine = None  # mean cosine between rows' [AMAL] outputs in the last batch (1.0: collapsed)

    def teacher_block(self, batch, i: int, b: int) -> torch.Tensor:
        return torch.stack([self.teacher(batch, i, layer) for layer in self.blocks[b][i]]).mean(dim=0)

    def amalgamate(self, batch, b: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """[AMAL] output of block b (B, d), and the teachers' block vectors."""
        confidence = batch["strata_conf"]  # (B, N, blocks): percentiles
        vectors = [self.teacher_block(batch, i, b) for i in range(len(self.blocks[b]))]
        tokens = torch.stack([self.enrich[b][i](torch.cat([v, confidence[:, i, b:b + 1]], dim=-1))
                              for i, v in enumerate(vectors)], dim=1)
        sequence = torch.cat([self.amal[b].expand(len(tokens), 1, -1), tokens], dim=1)
        return self.selective[b](sequence)[:, 0], vectors

    def forward(self, view, batch) -> torch.Tensor:
        total = 0.0
        for b in range(len(self.blocks)):
            amal, vectors = self.amalgamate(batch, b)
            target = amal.detach() if self.guard else amal
            total = total + self.alpha * block_alignment(self.project[b](self.student(view, b + 1)), target)
            if self.guard:
                for i, v in enumerate(vectors):
                    total = total + self.rebuild_weight * batch["strata_w"][:, i] * masked_mse(self.rebuild[b][i](amal), v)
        self.amal_cosine = _mean_cosine(amal.detach())
        return total

    def report(self) -> dict:
        return {**super().report(), "amal_mean_cosine_last_batch": self.amal_cosine, "guard": self.guard}


def _mean_cosine(x: torch.Tensor) -> float | None:
    if len(x) < 2:
        return None
    unit = F.normalize(x.float(), dim=-1)
    sims = unit @ unit.T
    n = len(x)
    return round(float((sims.sum() - sims.diagonal().sum()) / (n * n - n)), 4)


# -- confidences -------------------------------------------------------------------------

def _block_features(arrays: dict, i: int, layers: tuple[int, ...], rows=None) -> np.ndarray:
    parts = [np.asarray(arrays[feature_key(i, layer)] if rows is None else arrays[feature_key(i, layer)][rows],
                        dtype=np.float64) for layer in layers]
    return np.mean(parts, axis=0)


def fit_rows(context: FeatureContext, options: StrataNetOptions) -> tuple[list[np.ndarray], list[np.ndarray], str]:
    """Per teacher: the rows its RMD Gaussians are fitted on and their class ids, and where they came from."""
    from kamalcli.probe.runner import on_steered_class
    from kamalcli.data.text import steered_rows

    outputs = context.outputs
    rng = np.random.default_rng(context.seed)
    steered = steered_rows(context.sources.dataset)
    rows, labels = [], []
    if steered is not None:
        by, classes = np.asarray(steered[0]), np.asarray(steered[1])
        for i, name in enumerate(outputs.teachers):
            own = np.flatnonzero(by == name)
            if len(own) < 2:
                raise KamalError(f"stratanet: the generated data holds {len(own)} rows steered by {name}; its "
                                 "confidences are fitted on them (synthesize with that teacher)")
            names = list(context.sources.teachers[i].labels)
            local = np.array([names.index(c) for c in classes[own]])
            on_class = np.flatnonzero(on_steered_class(outputs.probs(i)[own], local))  # as kamal probe's fit
            picked = np.sort(rng.permutation(on_class)[:max(2, round(options.fit_share * len(own)))])
            rows.append(own[picked])
            labels.append(local[picked])
        return rows, labels, "held-out generated rows of each teacher (those it puts in their class)"
    for i in range(len(outputs.teachers)):  # no generated data: the rows each teacher is surest of (circular)
        p = outputs.probs(i)
        sure = np.flatnonzero(p.max(axis=1) >= np.median(p.max(axis=1)))
        chosen = np.sort(rng.permutation(sure)[:max(2, round(options.fit_share * len(p)))])
        rows.append(chosen)
        labels.append(p[chosen].argmax(axis=1))
    return rows, labels, "transfer rows each teacher is surest of (circular: not generated data)"


def rmd_confidences(arrays: dict, blocks: list[list[tuple[int, ...]]], rows: list[np.ndarray],
                    labels: list[np.ndarray], n: int) -> np.ndarray:
    """(n, N, blocks): each teacher's RMD confidence per block as its percentile over the rows."""
    from kamalcli.probe.selection import per_teacher_rank
    from kamalcli.trust.mahalanobis import fit_rmd

    teachers = len(rows)
    out = np.zeros((n, teachers, len(blocks)), dtype=np.float32)
    for b, per_teacher in enumerate(blocks):
        raw = np.zeros((n, teachers))
        for i, layers in enumerate(per_teacher):
            fitted = _block_features(arrays, i, layers, rows[i])
            model = fit_rmd(fitted, labels[i], fitted)
            raw[:, i] = -model.score(_block_features(arrays, i, layers))
        out[:, :, b] = per_teacher_rank(raw)
    return out


def build_stratanet(context: FeatureContext, options: StrataNetOptions) -> Objective:
    from kamalcli.probs import softmax

    shapes = context.sources.shapes()
    depth = context.student_depth
    blocks = [[block_layers(b, depth, t.layers) for t in shapes] for b in range(1, depth + 1)]
    wanted = {i: tuple(sorted({layer for per in blocks for layer in per[i]})) for i in range(len(shapes))}
    features = teacher_features(context, wanted, "pooled", "stratanet")
    outputs = context.outputs
    rows, labels, fitted_on = fit_rows(context, options)
    confidence = rmd_confidences(features.arrays, blocks, rows, labels, outputs.num_rows)
    weights = softmax(confidence[:, :, -1].astype(np.float64) / options.tau, axis=1)
    padded = np.stack([outputs.padded(i, options.temperature) for i in range(len(outputs.teachers))])
    target = np.einsum("nt,tny->ny", weights, padded).astype(np.float32)
    context.say(f"stratanet: RMD confidences per teacher and block ({depth} blocks), fitted on {fitted_on}.")
    torch.manual_seed(context.seed)
    auxiliary = StrataNetAuxiliary(blocks, context.student_hidden, [t.hidden for t in shapes], features, options)
    alpha, temperature = options.alpha, options.temperature

    def loss(logits, batch):
        return (1 - alpha) * kl_to_target(logits, batch["target"], temperature)

    arrays = {"target": target, "strata_conf": confidence, "strata_w": weights.astype(np.float32), **features.arrays}
    info = {"blocks": [[list(layers) for layers in per] for per in blocks], "rmd_fitted_on": fitted_on,
            "rmd_fit_rows": [int(len(r)) for r in rows],
            "mean_teacher_weight": dict(zip(outputs.teachers, weights.mean(axis=0).round(4).tolist()))}
    return Objective(arrays, loss, info=info, auxiliary=auxiliary)
