"""Does the prototype prior read the transfer rows (kamalcli/probe/prior_check.py): the agreement figure, by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest


def test_agreement_against_chance_agreement_by_hand():
    from kamalcli.probe.prior_check import agreement

    a = agreement("t", np.array([0, 0, 1, 1, 0]), np.array([0, 1, 1, 1, 0]), 2)
    # agree 4/5; chance (3/5)(2/5) + (2/5)(3/5) = 0.48; kappa (0.8 - 0.48) / 0.52
    assert (a.rows, a.agreed) == (5, 4)
    assert a.chance == pytest.approx(0.48) and a.kappa == pytest.approx(0.615385, abs=1e-6)
    # Wilson 95% of 4/5: lower bound 0.3755, under chance: five rows are not enough
    assert not a.clear
    many = agreement("t", np.tile([0, 0, 1, 1, 0], 20), np.tile([0, 1, 1, 1, 0], 20), 2)
    assert many.kappa == pytest.approx(0.615385, abs=1e-6) and many.clear  # 80 of 100: lower bound 0.711
    assert a.words() == "t: 80.0% of 5 rows (95% interval 37.6-96.4%; chance 48.0%; kappa 0.62)"


def test_a_teacher_the_prototypes_cannot_read_fails_the_check_and_one_given_no_rows_says_nothing():
    from kamalcli.probe.prior_check import check_prior

    rng = np.random.default_rng(0)
    n = 400
    selected = np.repeat([0, 1], n // 2)
    # union columns: teacher a's labels 0-2, teacher b's 3-4
    truth_a, truth_b = rng.integers(0, 3, n), rng.integers(0, 2, n)
    probs = np.full((n, 5), 0.01)
    probs[np.arange(n), truth_a] = 1.0               # on a's labels the prototypes name a's class
    probs[np.arange(n), 3 + rng.integers(0, 2, n)] = 1.0  # on b's labels they guess
    check = check_prior(["a", "b"], probs, [[0, 1, 2], [3, 4]], [truth_a, truth_b], selected, "pool", "rmd")
    by_name = {t.teacher: t for t in check.teachers}
    assert by_name["a"].clear and by_name["a"].kappa == pytest.approx(1.0)
    assert not by_name["b"].clear and abs(by_name["b"].kappa) < 0.15
    assert not check.passed
    assert check.line("synth", "minilm-l6").startswith(
        "the prototypes of synth in minilm-l6 do not read every teacher's rows of pool: on the rows rmd gives each "
        "teacher, they name the teacher's class no more often than chance for b: ")
    only_a = check_prior(["a", "b"], probs, [[0, 1, 2], [3, 4]], [truth_a, truth_b], np.zeros(n, int), "pool", "rmd")
    assert only_a.passed and only_a.teachers[1].rows == 0  # b given no rows: nothing known against it


def test_the_prior_follows_the_check():
    from kamalcli.probe.auto_score import decide_prior

    plan = SimpleNamespace(dataset=SimpleNamespace(name="synth", label_counts={"x": 2, "y": 2}))
    failed = SimpleNamespace(passed=False, line=lambda data, encoder: f"{data} in {encoder} reads nothing",
                             as_json=lambda: {"passed": False})
    passed = SimpleNamespace(passed=True, line=lambda data, encoder: "read", as_json=lambda: {"passed": True})
    assert decide_prior(plan, ["x", "y"], check=failed).line == "prior=auto: none: synth in minilm-l6 reads nothing."
    assert decide_prior(plan, ["x", "y"], check=failed).as_json()["check"] == {"passed": False}
    assert decide_prior(plan, ["x", "y"], check=passed).data == "synth"
    assert "(checked against the transfer rows when a student trains)" in decide_prior(plan, ["x", "y"]).line
