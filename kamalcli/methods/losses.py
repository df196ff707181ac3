"""Per-example losses on student logits (torch). Direction: KL(target || student)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def kl_to_target(logits: torch.Tensor, target: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """sum_y t log(t / q), q = softmax(s / T), times T^2 (Hinton's gradient scale). Zeros in t add 0."""
    log_q = F.log_softmax(logits.float() / temperature, dim=-1)
    kl = (torch.xlogy(target, target) - target * log_q).sum(dim=-1)
    return kl * temperature**2


def binary_kl_to_target(logits: torch.Tensor, target: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Independent labels (a multi-label task): sum over labels of the two-outcome KL(t || q), q = sigmoid(s / T),
    times T^2: binary cross-entropy to a soft target less the target's own entropy, so a perfect match is 0."""
    z = logits.float() / temperature
    log_q, log_not_q = F.logsigmoid(z), F.logsigmoid(-z)
    kl = (torch.xlogy(target, target) - target * log_q + torch.xlogy(1 - target, 1 - target)
          - (1 - target) * log_not_q)
    return kl.sum(dim=-1) * temperature**2


def binary_kd_loss(temperature: float):
    """The loss of a multi-label task whose arrays hold a per-row `target` of independent label probabilities."""

    def loss(logits, batch):
        return binary_kl_to_target(logits, batch["target"], temperature)

    return loss


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels, reduction="none")


def masked_mse(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per example: mean squared error over features, and over real tokens when states are per token.

    a, b: (B, d) pooled or (B, L, d) per token with mask (B, L) (padding does not count).
    """
    se = (a.float() - b.float()).pow(2).mean(dim=-1)
    if se.dim() == 1:
        return se
    m = mask.to(se.dtype)
    return (se * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)


MMD_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)


def mmd_rbf(x: torch.Tensor, y: torch.Tensor, scales=MMD_SCALES) -> torch.Tensor:
    """Squared maximum mean discrepancy between two batches (B, d), multi-kernel RBF, biased estimate.

    k(a, b) = sum_s exp(-|a - b|^2 / (s * m)), m = the mean squared distance between distinct rows
    of the joint batch (not differentiated through), s in {1/4, 1/2, 1, 2, 4}.
    MMD^2 = mean k(x, x') + mean k(y, y') - 2 mean k(x, y).
    """
    n = x.shape[0]
    z = torch.cat([x.float(), y.float()])
    sq = (z * z).sum(dim=1)
    d2 = (sq[:, None] + sq[None, :] - 2 * z @ z.T).clamp(min=0)
    total = z.shape[0]
    bandwidth = d2.detach().sum() / max(1, total * total - total)
    bandwidth = bandwidth.clamp(min=1e-12)
    k = sum(torch.exp(-d2 / (s * bandwidth)) for s in scales)
    return k[:n, :n].mean() + k[n:, n:].mean() - 2 * k[:n, n:].mean()


def entropy(probs: torch.Tensor) -> torch.Tensor:
    return -(torch.xlogy(probs, probs)).sum(dim=-1)


def kl_loss(temperature: float):
    """The loss of a method whose arrays hold a per-row `target` distribution: KL(target || student / T)."""

    def loss(logits, batch):
        return kl_to_target(logits, batch["target"], temperature)

    return loss


# -- per word (token level): the student is read at each word's first sub-token ("positions")

def word_kl_loss(temperature: float):
    """Per sentence: the mean over its words of word_weight * KL(target || student at the word's first sub-token)."""

    def loss(logits, batch):
        from kamalcli.models.words import gather_words

        kl = kl_to_target(gather_words(logits, batch["positions"]), batch["target"], temperature)
        return mean_over_words(kl, batch)

    return loss


def word_cross_entropy(logits, batch):
    """Supervised per-word loss (train-teacher, the upper bound): gold tag ids, -1 where no word."""
    from kamalcli.models.words import gather_words

    words = gather_words(logits, batch["positions"]).float()
    gold = batch["tags"]
    ce = F.cross_entropy(words.transpose(1, 2), gold.clamp(min=0), reduction="none")  # (B, W)
    valid = (gold >= 0) & (batch["positions"] >= 0)
    return (ce * valid).sum(dim=1) / valid.sum(dim=1).clamp(min=1)


def mean_over_words(per_word, batch):
    """(B, W) -> (B,): the weighted sum over the words the student sees and the teachers saw, divided by their number."""
    counted = batch["word_mask"] * (batch["positions"] >= 0)
    weight = counted * batch["word_weight"] if "word_weight" in batch else counted
    return (per_word * weight).sum(dim=1) / counted.sum(dim=1).clamp(min=1)
