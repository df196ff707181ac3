"""MC dropout really samples: dropout on, everything else off; K = 1 is the deterministic pass."""

import numpy as np
import pytest
import torch

from kamalcli.models.batching import encode
from kamalcli.errors import KamalError
from kamalcli.models.loading import dropout_sites, enable_mc_dropout, load_classifier, load_tokenizer
from kamalcli.probe.arrays import ProbeArrays, ProbeSettings
from kamalcli.probe.mc_dropout import check_dropout, run_teacher

TEXTS = ["goal match coach", "market shares bank profit", "the treaty said", "robot chip software genome telescope"]


@pytest.fixture
def model_and_batch(assets):
    model = load_classifier(assets["teacher_a"])
    encoded = encode(load_tokenizer(assets["teacher_a"]), TEXTS, 32)
    return model, encoded


def test_only_dropout_modules_are_in_train_mode(model_and_batch):
    model, _ = model_and_batch
    active = enable_mc_dropout(model)
    sites = set(map(id, dropout_sites(model)))
    assert active > 0
    for module in model.modules():
        assert module.training == (id(module) in sites), type(module).__name__
    assert any(type(m).__name__.endswith("Attention") for m in dropout_sites(model))  # attention-prob dropout too


def test_passes_differ_with_dropout_and_match_without(model_and_batch):
    model, encoded = model_and_batch
    batch = encoded.batch(range(len(TEXTS)))
    with torch.inference_mode():
        model.eval()
        deterministic = model(**batch).logits
        enable_mc_dropout(model)
        a, b = model(**batch).logits, model(**batch).logits
    assert not torch.allclose(a, b), "two MC-dropout passes gave identical logits: dropout is not sampling"
    assert not torch.allclose(a, deterministic)
    enable_mc_dropout(model, rate=0.0)
    with torch.inference_mode():
        assert torch.allclose(model(**batch).logits, deterministic, atol=1e-6)


@pytest.mark.parametrize("mode", ["sequential", "batched"])
def test_probe_arrays(model_and_batch, tmp_path, mode):
    model, encoded = model_and_batch
    info = run_teacher(model, encoded, ProbeSettings(mc_samples=8, layers=(1, 2), mc_exact=True), tmp_path,
                       mode=mode, batch_size=3)
    assert info["mc_passes_mean"] == 8.0
    (tmp_path / "meta.json").write_text('{"layers": [1, 2]}')
    arrays = ProbeArrays.load(tmp_path)
    assert arrays.logits.shape == (4, 2) and arrays.mc_probs.shape == (4, 2)
    assert np.allclose(arrays.mc_probs.sum(axis=1), 1.0, atol=1e-5)
    assert arrays.features[2].shape == (4, 32)
    assert not np.allclose(arrays.mc_probs, arrays.probs(), atol=1e-7)  # sampling changed something
    with torch.inference_mode():
        model.eval()
        expected = model(**encoded.batch(range(4))).logits.numpy()
    assert np.allclose(arrays.logits, expected, atol=1e-5)  # rows land in their own places


def test_k_equal_one_is_the_deterministic_pass(model_and_batch, tmp_path):
    model, encoded = model_and_batch
    run_teacher(model, encoded, ProbeSettings(mc_samples=1), tmp_path)
    (tmp_path / "meta.json").write_text('{"layers": []}')
    arrays = ProbeArrays.load(tmp_path)
    assert np.allclose(arrays.mc_probs, arrays.probs(), atol=1e-6)


def test_mc_mean_is_the_mean_of_k_sampled_softmaxes(model_and_batch):
    from kamalcli.probe.mc_dropout import _mc_mean

    model, encoded = model_and_batch
    batch = encoded.batch(range(4))
    enable_mc_dropout(model)
    torch.manual_seed(3)
    with torch.inference_mode():
        mean = _mc_mean(model, batch, 4, "sequential")
        torch.manual_seed(3)
        manual = sum(torch.softmax(model(**batch).logits, -1) for _ in range(4)) / 4
    assert torch.allclose(mean, manual)


def test_a_teacher_without_dropout_cannot_do_mc(assets):
    model = load_classifier(assets["no_dropout"])
    with pytest.raises(KamalError, match="MC dropout is impossible.*--mc-samples 1.*--dropout"):
        check_dropout(model, ProbeSettings(mc_samples=4), "flat")
    assert check_dropout(model, ProbeSettings(mc_samples=4, dropout=0.1), "flat") > 0
    assert check_dropout(model, ProbeSettings(mc_samples=1), "flat") == 0
