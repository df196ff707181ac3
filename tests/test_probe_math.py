"""ECE, AUROC, selection quality and relative Mahalanobis on numbers we can check by hand."""

import itertools

import numpy as np
import pytest

from kamalcli.probe.calibration import ece, entropy, entropy_from_logits, normalised_uncertainty
from kamalcli.trust.mahalanobis import fit_rmd
from kamalcli.probe.selection import auroc, selection_quality


def test_ece_by_hand():
    # bin (0.8, 0.866]: confidences 0.85, 0.85, accuracy 1/2 -> gap 0.35; bin (0.933, 1]: 0.95, acc 1 -> 0.05
    conf = np.array([0.85, 0.85, 0.95])
    correct = np.array([1, 0, 1])
    assert ece(conf, correct) == pytest.approx(2 / 3 * 0.35 + 1 / 3 * 0.05)
    assert ece(np.array([0.7, 0.9]), np.zeros(2)) == pytest.approx(0.8)  # OOD: ECE = mean confidence
    assert ece(np.array([]), np.array([])) is None
    assert ece(np.array([1.0, 1.0]), np.ones(2)) == pytest.approx(0.0)


def test_entropy_and_normalisation():
    p = np.array([[0.5, 0.5], [1.0, 0.0], [0.25, 0.75]])
    assert entropy(p) == pytest.approx([np.log(2), 0.0, -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))])
    assert normalised_uncertainty(p)[0] == pytest.approx(1.0)
    logits = np.array([[0.0, 0.0], [60.0, 0.0]])
    h = entropy_from_logits(logits)
    assert h[0] == pytest.approx(np.log(2)) and 0 < h[1] < 1e-20  # saturated rows still rank


def brute_force_auroc(scores, positive):
    pos = scores[positive]
    neg = scores[~positive]
    pairs = [(a > b) + 0.5 * (a == b) for a, b in itertools.product(pos, neg)]
    return float(np.mean(pairs))


def test_auroc_matches_brute_force_with_ties():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=60).astype(float)
    positive = rng.random(60) < 0.4
    assert auroc(scores, positive) == pytest.approx(brute_force_auroc(scores, positive))
    assert auroc(np.array([1.0, 2.0]), np.array([False, True])) == 1.0
    assert auroc(np.array([1.0, 2.0]), np.array([True, True])) is None


def test_selection_quality():
    confidence = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
    owns = np.array([[1, 0], [1, 0], [0, 1], [0, 0]], dtype=bool)  # last row: nobody's label
    q = selection_quality(confidence, owns)
    assert q["rows"] == 3
    assert q["accuracy"] == pytest.approx(1 / 3)
    assert q["auroc"] == pytest.approx(brute_force_auroc(confidence[:3].ravel(), owns[:3].ravel()))


def test_rmd_scores_out_of_distribution_higher():
    rng = np.random.default_rng(1)
    d = 16
    centers = rng.normal(0, 3, size=(3, d))
    labels = rng.integers(0, 3, size=300)
    inside = centers[labels] + rng.normal(size=(300, d))
    outside = rng.normal(0, 3, size=(100, d)) + 8.0
    model = fit_rmd(inside, labels, np.vstack([inside, outside]))
    scores_in = model.score(centers[rng.integers(0, 3, 100)] + rng.normal(size=(100, d)))
    scores_out = model.score(rng.normal(0, 3, size=(100, d)) + 8.0)
    assert auroc(np.concatenate([scores_in, scores_out]), np.r_[np.zeros(100), np.ones(100)].astype(bool)) > 0.95


def test_rmd_survives_a_tiny_sample(tmp_path):
    rng = np.random.default_rng(2)
    features = rng.normal(size=(3, 64))  # far fewer rows than dimensions: singular without shrinkage
    model = fit_rmd(features, np.array([0, 1, 1]), features)
    scores = model.score(rng.normal(size=(5, 64)))
    assert np.all(np.isfinite(scores))
    model.save(tmp_path / "m.npz")
    from kamalcli.trust.mahalanobis import RMDModel

    assert np.allclose(RMDModel.load(tmp_path / "m.npz").score(features), model.score(features))


def test_generated_rows_fit_their_class_only_where_the_teacher_agrees_class_by_class():
    from kamalcli.probe.runner import on_steered_class

    probs = np.array([[0.7, 0.3], [0.8, 0.2], [0.45, 0.55], [0.2, 0.8], [0.5, 0.5], [0.6, 0.4], [0.9, 0.1]])
    local = np.array([0, 0, 0, 1, 1, 1, -1])  # the class each row was steered to; -1: another teacher's class
    assert on_steered_class(probs, local).tolist() == [True, True, False, True, True, False, False]
    # a class with fewer than 2 rows the teacher agrees with keeps all its rows (a fit needs 2; an unsure
    # teacher would otherwise leave it without a Gaussian); the other class is still filtered
    local = np.array([0, 0, 0, 1, 1, 1, -1])
    probs[3:6] = [[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]]
    assert on_steered_class(probs, local).tolist() == [True, True, False, True, True, True, False]
