"""amalgamate --gold's target (kamalcli/methods/gold_target.py): the candidate the gold rows pick out of fold."""

import numpy as np
import pytest

from kamalcli.methods.gold_target import ABSENT, MIN_ROWS, logistic, choice_line, gold_target

X = np.array([[2.04, -2.56, 0.42], [-0.57, -0.45, -0.22], [-2.02, -0.23, -0.87], [3.32, 0.23, -0.35],
              [-0.28, -0.67, -1.06], [-0.39, 0.48, -0.24], [0.96, -0.2, 0.02], [1.55, 0.55, -0.51],
              [-0.18, 0.54, 1.94], [-0.27, -0.24, 1.0], [-0.89, -0.29, 0.88], [0.58, 0.09, 0.67]])


def test_thelogistic_regression_is_scikit_learns():
    """Golden values: scikit-learn 1.9.1's LogisticRegression(C=1.0) on these rows (predict_log_proba of the first
    three); class 2 has no row, so it gets ABSENT."""
    y = np.array([0, 1, 3] * 4)
    got = logistic(X, y, np.arange(12), 4)(np.arange(3))
    want = [[-0.087, -2.5204, ABSENT, -5.8515], [-1.8475, -0.6926, ABSENT, -1.0726], [-3.7601, -0.8021, ABSENT, -0.638]]
    assert got == pytest.approx(np.array(want), abs=2e-4)


def _setting(rows=400, classes=4, seed=0):
    """Rows whose sentence vectors name their class, and a teachers' target that is right on most rows."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, rows)
    vectors = np.eye(classes)[y] * 2 + rng.normal(scale=0.6, size=(rows, classes))
    return y, vectors, rng


def _accuracy(target, y, rows):
    return float((target[rows].argmax(1) == y[rows]).mean())


def _sure(labels, classes=4):
    """A teachers' target sure of these labels, one per row."""
    target = np.full((len(labels), classes), 0.02)
    target[np.arange(len(labels)), labels] = 0.94
    return target


def _gold(y, rng, rows):
    """rows random rows labelled, -1 elsewhere."""
    gold, labelled = np.full(len(y), -1), rng.choice(len(y), rows, replace=False)
    gold[labelled] = y[labelled]
    return gold, labelled


def test_a_target_the_gold_rows_show_wrong_is_replaced_and_the_other_rows_gain():
    y, vectors, rng = _setting()
    target = _sure(np.where(y == 0, 1, y))  # the teachers call class 0 class 1
    gold, labelled = _gold(y, rng, 100)
    chosen = gold_target(target, target, None, vectors, gold)
    rest = np.setdiff1d(np.arange(len(y)), labelled)
    assert chosen.info["chosen"] != "teachers" and chosen.info["rows"] == 100
    assert chosen.info["right"][chosen.info["chosen"]] > chosen.info["right"]["teachers"]
    assert _accuracy(chosen.target, y, rest) > _accuracy(target, y, rest) + 0.15
    assert chosen.target.sum(axis=1) == pytest.approx(np.ones(len(y)))
    # a gold row learns the chosen candidate's out-of-fold answer, not its own label read back
    assert not np.allclose(chosen.target[labelled].max(axis=1), 1.0)


def test_a_target_the_gold_rows_confirm_stays():
    y, vectors, rng = _setting(seed=1)
    target = _sure(y)
    chosen = gold_target(target, target, target, vectors, _gold(y, rng, 60)[0])
    assert chosen.info["chosen"] == "teachers" and chosen.info["right"]["teachers"] == 60
    assert chosen.target is target
    assert "teachers predicts 60 of them" in choice_line(chosen.info)


def test_too_few_gold_rows_keep_the_teachers_target_and_say_why():
    y, vectors, _ = _setting()
    target = np.full((len(y), 4), 0.25)
    gold = np.full(len(y), -1)
    gold[: MIN_ROWS - 1] = y[: MIN_ROWS - 1]
    chosen = gold_target(target, target, None, vectors, gold)
    assert chosen.info["chosen"] == "teachers" and chosen.target is target
    assert choice_line(chosen.info) == (f"Gold rows ({MIN_ROWS - 1}): fewer than {MIN_ROWS} gold rows of two classes, "
                                        "so the target stays the teachers'.")
