"""The adaptive MC-dropout probe: its stopping rule (golden values), its passes, and its cache key."""

import numpy as np
import pytest
import torch

from kamalcli.models.batching import encode
from kamalcli.models.loading import load_classifier, load_tokenizer
from kamalcli.probe.adaptive import adaptive_mc_mean, confidence_error
from kamalcli.probe.arrays import ProbeArrays, ProbeSettings
from kamalcli.probe.mc_dropout import run_teacher
from kamalcli.probe.runner import ProbeRequest


def test_confidence_error_golden_value():
    # pbar = (0.7, 0.3); s_k = p_k . log pbar / log 2 = -0.759052, -1.003530: noise |s1 - s2| / 2 = 0.122239;
    # var_k p_kj = 0.02 for both classes: bias (0.02/0.7 + 0.02/0.3) / (2 * 2 * log 2) = 0.034350
    passes = torch.tensor([[[0.8, 0.2]], [[0.6, 0.4]]], dtype=torch.float64)
    assert confidence_error(passes).item() == pytest.approx(0.122239 + 0.034350, abs=1e-5)
    assert confidence_error(torch.tensor([[[1.0, 0.0]]] * 3, dtype=torch.float64)).item() == 0.0
    assert confidence_error(torch.ones(4, 2, 1, dtype=torch.float64)).tolist() == [0.0, 0.0]  # one class: c is 1


class Alternating:
    """Row 0 is always sure; row 1 alternates (0.8, 0.2) / (0.6, 0.4); row 2 alternates (0.9, 0.1) / (0.1, 0.9)."""

    PATTERNS = [[[1.0, 0.0]], [[0.8, 0.2], [0.6, 0.4]], [[0.9, 0.1], [0.1, 0.9]]]

    def __init__(self):
        self.calls = [0, 0, 0]
        self.sampled = []  # the rows of each call

    def __call__(self, rows: np.ndarray) -> torch.Tensor:
        self.sampled.append(rows.tolist())
        out = []
        for r in rows:
            pattern = self.PATTERNS[r]
            out.append(pattern[self.calls[r] % len(pattern)])
            self.calls[r] += 1
        return torch.tensor(out, dtype=torch.float32)


def test_rows_stop_after_the_passes_worked_out_by_hand():
    # Row 1's error after n passes: 0.157, 0.114, 0.082, 0.075, 0.0615, 0.0592 (n = 7), 0.0511;
    # row 2's stays above 0.06 through n = 8; row 0's is 0 from the start.
    sample = Alternating()
    mean, taken = adaptive_mc_mean(sample, 3, 2, max_passes=8, min_passes=3, tolerance=0.06, batch_size=2)
    assert taken.tolist() == [3, 7, 8]
    assert sample.sampled == [[0, 1], [2]] * 3 + [[1, 2]] * 4 + [[2]]  # stopped rows leave the batches
    assert mean[0].tolist() == [1.0, 0.0]
    assert mean[1].tolist() == pytest.approx([(4 * 0.8 + 3 * 0.6) / 7, (4 * 0.2 + 3 * 0.4) / 7])
    assert mean[2].tolist() == pytest.approx([0.5, 0.5])


def test_tolerance_zero_takes_every_pass():
    mean, taken = adaptive_mc_mean(Alternating(), 3, 2, max_passes=5, min_passes=2, tolerance=0.0, batch_size=8)
    assert taken.tolist() == [5, 5, 5]
    assert mean[1].tolist() == pytest.approx([(3 * 0.8 + 2 * 0.6) / 5, (3 * 0.2 + 2 * 0.4) / 5])


def test_the_probe_records_each_rows_passes(assets, tmp_path):
    model = load_classifier(assets["teacher_a"])
    texts = ["goal match coach", "market shares bank profit", "the treaty said", "robot chip software genome"] * 5
    encoded = encode(load_tokenizer(assets["teacher_a"]), texts, 32)
    settings = ProbeSettings(mc_samples=8, layers=(2,), mc_min_passes=3)
    info = run_teacher(model, encoded, settings, tmp_path, batch_size=3)
    (tmp_path / "meta.json").write_text('{"layers": [2]}')
    arrays = ProbeArrays.load(tmp_path)
    passes = np.load(tmp_path / "mc_passes.npy")
    assert info["mc_estimator"] == "adaptive" and info["mc_passes_mean"] == pytest.approx(passes.mean())
    assert ((passes >= 3) & (passes <= 8)).all()
    assert np.allclose(arrays.mc_probs.sum(axis=1), 1.0, atol=1e-5)
    assert not np.allclose(arrays.mc_probs, arrays.probs(), atol=1e-7)  # sampling changed something
    exact = run_teacher(model, encoded, ProbeSettings(mc_samples=8, layers=(2,), mc_exact=True), tmp_path / "x",
                        batch_size=3)
    assert exact == {"mc_estimator": "exact", "mc_passes_mean": 8.0}
    (tmp_path / "x" / "meta.json").write_text('{"layers": [2]}')
    exact_arrays = ProbeArrays.load(tmp_path / "x")
    # the deterministic parts are the same fp32 pass in both
    assert np.array_equal(arrays.logits, exact_arrays.logits)
    assert np.array_equal(arrays.features[2], exact_arrays.features[2])


def test_cache_keys_never_mix_exact_and_adaptive():
    exact, adaptive = ProbeSettings(mc_samples=16, mc_exact=True), ProbeSettings(mc_samples=16)
    # the exact probe's fields are those of probes made before the adaptive one: old caches stay valid
    assert exact.cache_fields() == {"mc_samples": 16, "dropout": None, "max_length": 128, "layers": [], "seed": 0}
    assert adaptive.cache_fields()["mc_adaptive"] == {"tolerance": 0.03, "min_passes": 2}
    assert ProbeSettings(mc_samples=16, mc_tolerance=0.01).cache_fields() != adaptive.cache_fields()
    assert ProbeSettings(mc_samples=1).cache_fields() == ProbeSettings(mc_samples=1, mc_exact=True).cache_fields()
    keys = {ProbeRequest(mc_samples=16, mc_exact=e).options_key for e in (True, False)}
    assert len(keys) == 2
    assert ProbeRequest(mc_samples=1).options_key == ProbeRequest(mc_samples=1, mc_exact=True).options_key


@pytest.mark.parametrize("bad", [dict(mc_tolerance=-0.1), dict(mc_tolerance=1.0), dict(mc_min_passes=1)])
def test_bad_adaptive_settings(bad):
    from kamalcli.errors import KamalError

    with pytest.raises(KamalError):
        ProbeSettings(mc_samples=8, **bad).validate()

