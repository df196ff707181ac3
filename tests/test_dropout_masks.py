"""The probe's cheaper dropout masks: the same distribution as torch's dropout, every site covered."""

import pytest
import torch
import torch.nn.functional as F

from kamalcli.models.batching import encode
from kamalcli.models.loading import load_classifier, load_tokenizer
from kamalcli.probe import dropout_masks
from kamalcli.probe.dropout_masks import WordDropout, dropout_passes, keep_mask

TEXTS = ["goal match coach", "market shares bank profit", "the treaty said", "robot chip software genome telescope"]


def test_keep_share_is_one_minus_p():
    torch.manual_seed(0)
    for p in (0.1, 0.25, 0.5):
        share = keep_mask(torch.Size([1000, 1000]), p).float().mean().item()
        # 1e6 draws: the standard error is at most 5e-4
        assert abs(share - (1 - p)) < 2.5e-3, (p, share)


def test_masks_are_independent_across_the_four_elements_of_a_word():
    torch.manual_seed(0)
    mask = keep_mask(torch.Size([250_000, 4]), 0.5).float()
    # a word's four 16-bit parts: each kept half the time, pairs a quarter of the time
    assert torch.allclose(mask.mean(dim=0), torch.full((4,), 0.5), atol=5e-3)
    assert abs((mask[:, 0] * mask[:, 3]).mean().item() - 0.25) < 5e-3


def test_word_dropout_scales_kept_elements_and_follows_the_seed():
    x = torch.full((64, 64), 2.0)
    torch.manual_seed(3)
    with WordDropout():
        a = F.dropout(x, p=0.2, training=True)
        untouched = F.dropout(x, p=0.2, training=False)
    torch.manual_seed(3)
    with WordDropout():
        b = torch.nn.Dropout(0.2)(x)
    assert set(a.unique().tolist()) == {0.0, 2.5}
    assert torch.equal(a, b), "the same seed must give the same masks"
    assert torch.equal(untouched, x)


def test_mean_of_passes_matches_torch_dropout(assets):
    model = load_classifier(assets["teacher_a"])
    passes = 600  # as 600 copies of the texts in one batch: every row draws its own masks
    batch = encode(load_tokenizer(assets["teacher_a"]), TEXTS * passes, 32).batch(range(len(TEXTS) * passes))

    def mean_probs(cheap: bool) -> torch.Tensor:
        device = "cpu" if cheap else "cuda-like"  # any non-CPU name keeps torch's own dropout
        with torch.inference_mode(), dropout_passes(model, 0.3, device):
            return torch.softmax(model(**batch).logits, -1).view(passes, len(TEXTS), -1).mean(0)

    torch.manual_seed(0)
    ours, theirs = mean_probs(True), mean_probs(False)
    assert (ours - theirs).abs().max().item() < 0.02


def test_every_dropout_site_draws_our_masks_and_eval_mode_returns(assets, monkeypatch):
    model = load_classifier(assets["teacher_a"], attn="sdpa")
    batch = encode(load_tokenizer(assets["teacher_a"]), TEXTS, 32).batch(range(len(TEXTS)))
    with torch.inference_mode():
        deterministic = model(**batch).logits
    calls = []
    real = dropout_masks.keep_mask
    monkeypatch.setattr(dropout_masks, "keep_mask", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    with torch.inference_mode(), dropout_passes(model, None, "cpu"):
        assert model.config._attn_implementation == "eager"
        a, b = model(**batch).logits, model(**batch).logits
    assert not torch.allclose(a, b)
    # BERT per pass: embeddings; per layer attention probabilities (4-d), attention output, FFN output; pooler
    layers = model.config.num_hidden_layers
    assert len(calls) == 2 * (1 + 3 * layers + 1)
    assert sum(len(shape) == 4 for shape in calls) == 2 * model.config.num_hidden_layers
    assert model.config._attn_implementation == "sdpa" and not model.training
    assert not any(m.training for m in model.modules())
    with torch.inference_mode():
        assert torch.allclose(model(**batch).logits, deterministic, atol=1e-6)


def test_eval_mode_returns_after_an_error(assets):
    model = load_classifier(assets["teacher_a"])
    with pytest.raises(RuntimeError), dropout_passes(model, None, "cpu"):
        raise RuntimeError("interrupted")
    assert not any(m.training for m in model.modules())
