"""Does the prototype prior read the transfer rows (kamalcli/probe/prior_check.py): the agreement figure, by hand."""

from __future__ import annotations

from html import escape
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
    check = check_prior(["a", "b"], probs, [[0, 1, 2], [3, 4]], [truth_a, truth_b], np.eye(2)[selected], "pool", "rmd")
    by_name = {t.teacher: t for t in check.teachers}
    assert by_name["a"].clear and by_name["a"].kappa == pytest.approx(1.0)
    assert not by_name["b"].clear and abs(by_name["b"].kappa) < 0.15
    assert not check.passed
    assert check.line("synth", "minilm-l6").startswith(
        "the prototypes of synth in minilm-l6 do not read every teacher's rows of pool: on the surer half of the rows "
        "rmd gives each teacher, they name the teacher's class no more often than chance, or place fewer than "
        "clearly half of its rows among its labels, for b: ")
    assert check.line("synth", "minilm-l6").endswith("kappa -0.05; 0.0% of them placed among its labels)")
    only_a = check_prior(["a", "b"], probs, [[0, 1, 2], [3, 4]], [truth_a, truth_b], np.tile([1.0, 0.0], (n, 1)),
                         "pool", "rmd")
    assert only_a.passed and only_a.teachers[1].rows == 0  # b given no rows: nothing known against it


def test_the_surer_half_of_a_teacher_s_rows_by_its_margin_over_the_next_teacher():
    from kamalcli.probe.prior_check import surer_half

    confidence = np.array([[0.9, 0.1, 0.0],   # teacher 0, margin 0.8
                           [0.5, 0.4, 0.0],   # teacher 0, margin 0.1
                           [0.2, 0.7, 0.1],   # teacher 1
                           [0.6, 0.0, 0.3],   # teacher 0, margin 0.3
                           [0.4, 0.0, 0.35],  # teacher 0, margin 0.05
                           [0.7, 0.2, 0.1]])  # teacher 0, margin 0.5
    # five rows go to teacher 0; the surer half, rounded up, is three: margins 0.8, 0.5, 0.3
    assert surer_half(confidence, 0).tolist() == [0, 5, 3]
    assert surer_half(confidence, 1).tolist() == [2] and surer_half(confidence, 2).tolist() == []


def test_a_teacher_whose_classes_the_prototypes_read_but_whose_rows_they_place_among_another_s_labels_fails():
    """The Chinese teacher on a build where minilm-l6 guessed its classes a little better than chance (kappa 0.11)
    while its mass lay on the English teacher's labels on every one of those rows: a prior over every label would
    move them to English topics."""
    from kamalcli.probe.prior_check import check_prior

    # union columns: teacher a's labels 0-1, b's 2-3; rows 0-19 go to a, 20-39 to b; each predicts 0, 1, 0, 1, ...
    predicted = np.tile([0, 1], 20)
    on_a = np.where(predicted[:20, None] == 0, [0.6, 0.2, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1])
    on_b = np.where(predicted[20:, None] == 0, [0.5, 0.3, 0.15, 0.05], [0.5, 0.3, 0.05, 0.15])
    check = check_prior(["a", "b"], np.concatenate([on_a, on_b]), [[0, 1], [2, 3]], [predicted, predicted],
                        np.repeat(np.eye(2), 20, axis=0), "pool", "rmd")
    a, b = check.teachers
    assert (a.rows, a.agreed, a.placed) == (10, 10, 10) and a.clear  # the surer half of its 20 rows
    # b's classes read right on all 10 (kappa 1), but the prototypes' mass is on a's labels (0.8 of it) every time
    assert (b.rows, b.agreed, b.placed) == (10, 10, 0) and b.kappa == pytest.approx(1.0) and not b.clear
    assert not check.passed and check.read == ["a"] and b.as_json()["placed"] == 0.0
    assert b.words().endswith("kappa 1.00; 0.0% of them placed among its labels)")


def test_rows_a_selector_gives_a_teacher_by_mistake_do_not_pass_the_check_for_it():
    """The Chinese teacher's case: its own rows unread (the prototypes guess), but the selector also gives it
    foreign rows the prototypes read, with small margins. All its rows together pass; the surer half fails."""
    from kamalcli.probe.prior_check import agreement, check_prior

    rng = np.random.default_rng(1)
    own, foreign = 600, 400
    truth = rng.integers(0, 2, own + foreign)   # teacher b's predicted class on each of its rows
    probs = np.full((own + foreign, 4), 0.01)   # union columns: a's labels 0-1, b's 2-3
    probs[np.arange(own), 2 + rng.integers(0, 2, own)] = 1.0      # b's own rows: the prototypes guess
    probs[own + np.arange(foreign), 2 + truth[own:]] = 1.0        # foreign rows: they name b's class
    margin = np.concatenate([rng.uniform(0.5, 1.0, own), rng.uniform(0.0, 0.5, foreign)])
    confidence = np.stack([np.zeros(own + foreign), margin], axis=1)  # every row to b
    everything = agreement("b", probs[:, 2:].argmax(axis=1), truth, 2)
    assert everything.clear  # what the check read before: 1,000 rows, 400 of them read, pass
    check = check_prior(["a", "b"], probs, [[0, 1], [2, 3]], [truth, truth], confidence, "pool", "rmd")
    b = check.teachers[1]
    assert b.rows == 500 and not b.clear and not check.passed and check.teachers[0].rows == 0


def test_the_prior_follows_the_check_teacher_by_teacher():
    from kamalcli.probe.prior_check import Agreement, PriorCheck
    from kamalcli.recipe.recipe import carries_selection, decide_prior

    plan = SimpleNamespace(dataset=SimpleNamespace(name="synth", label_counts={"x": 2, "y": 2, "z": 2}))
    read = Agreement("a", 100, 90, 0.5)       # clearly above chance agreement
    unread = Agreement("b", 100, 52, 0.5)     # at chance
    everywhere = decide_prior(plan, ["x", "y", "z"], check=PriorCheck("pool", "rmd", [read, read]))
    assert everywhere.value == "synth" and everywhere.evidence["teachers"] is None and carries_selection(everywhere)
    within = decide_prior(plan, ["x", "y", "z"], check=PriorCheck("pool", "rmd", [read, unread]))
    assert within.evidence["data"] == "synth" and within.evidence["teachers"] == ["a"]
    assert within.value == "synth within a" and not carries_selection(within)
    assert within.line.startswith("prior=auto: within the labels of a only, the target's classes are multiplied")
    assert "b: 52.0% of 100 rows" in within.line and within.as_json()["teachers"] == ["a"]
    nowhere = decide_prior(plan, ["x", "y", "z"], check=PriorCheck("pool", "rmd", [unread, unread]))
    assert nowhere.value is None and nowhere.line.startswith("prior=auto: none: the prototypes of synth in minilm-l6 "
                                                            "do not read every teacher's rows of pool")
    assert nowhere.as_json()["check"]["passed"] is False
    assert "(checked against the transfer rows when a student trains)" in decide_prior(plan, ["x", "y", "z"]).line


def test_a_prior_within_some_teachers_reshapes_their_classes_and_keeps_every_teacher_s_mass():
    from kamalcli.methods.muki import with_prior

    target = np.array([[0.5, 0.1, 0.3, 0.1]])  # teacher a: columns 0-1, teacher b: columns 2-3
    prior = np.array([[0.1, 0.4, 0.25, 0.25]])
    # everywhere: 0.05, 0.04, 0.075, 0.025 over their sum 0.19
    assert with_prior(target, prior) == pytest.approx(np.array([[0.263158, 0.210526, 0.394737, 0.131579]]), abs=1e-6)
    # within a only: a's mass 0.6 split as 0.05 : 0.04; b's classes untouched
    assert with_prior(target, prior, [np.array([0, 1])]) == pytest.approx(
        np.array([[0.333333, 0.266667, 0.3, 0.1]]), abs=1e-6)


def test_the_decision_where_the_prototypes_may_not_read_a_teacher_reads_alike_in_report_and_html(capsys):
    from kamalcli.cli.probe_cmds import _selection_summaries
    from kamalcli.probe.measured import Figure
    from kamalcli.recipe.recipe import Recipe, _if_unread, choose_score
    from kamalcli.report.gather import Report
    from kamalcli.report.html import selection_section

    # generated rows only: the prototype score leads; without it rmd does (both clearly above chance)
    figures = [Figure("prototype", "synth", True, 200, 0.95, 0.5), Figure("rmd", "synth", True, 200, 0.80, 0.5),
               Figure("entropy", "synth", True, 200, 0.52, 0.5)]
    decision = choose_score(figures, (3, 3))
    unread = _if_unread(SimpleNamespace(figures=figures, label_counts=(3, 3)), Recipe((decision,)))
    assert decision.value == "prototype" and unread["score"] == "rmd"
    record = {"teachers": ["news", "money"], "recipe": Recipe((decision,)).as_json(), "unread": unread}

    _selection_summaries([], [record], verbose=True)
    text = capsys.readouterr().err
    expected = ("Where the prototypes do not read some teacher's transfer rows (not checked here: `kamal probe` "
                f"checks the transfer sets, kamal amalgamate its --data; then no prototype score, and the prior only "
                f"within the teachers they read): {unread['line']} {unread['commit']['line']}")
    assert expected + "\n" in text and "rmd" in unread["line"]
    row = {"data": "synth", "teachers": ["news", "money"], "options_key": "k", "score": "rmd", "accuracy": 0.8,
           "auroc": None, "target_accuracy": None, "rows": 200}
    page = selection_section(Report(workspace="w", teachers=[], selection=[row], recipes=[record]))
    assert escape(expected) in page
