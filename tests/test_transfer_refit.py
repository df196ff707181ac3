"""refit=auto (kamalcli/probe/transfer_refit.py): RMD fitted again on the transfer rows for the teachers whose rows
the generated text does not read."""

from __future__ import annotations

import numpy as np
import pytest

from test_amalgamate_cli import train_args

SPREAD = np.array([[0.3, 0], [-0.3, 0], [0, 0.3], [0, -0.3], [0.2, 0.2], [-0.2, -0.2]])


def _pair():
    """16 rows: 0-3 teacher a's, 4-9 teacher b's class 0, 10-15 its class 1. In b's feature space its classes are
    two clusters and a's rows lie far off. b's fit on generated text gave it eight of its rows; four of its rows
    (8, 9, 14, 15) went to a."""
    features_b = np.concatenate([[[0, 0], [0.3, 0], [0, 0.3], [-0.3, -0.3]], (5, 5) + SPREAD, (5, 8) + SPREAD])
    predicted_b = np.array([0, 1, 0, 1] + [0] * 6 + [1] * 6)
    a = np.array([0.0] * 4 + [-10.0] * 12)
    b = np.array([-9.0] * 4 + [3.0, 2.5, 1.0, 0.5, -11, -12] + [2.8, 2.2, 0.8, 0.6, -11.5, -13])
    return np.stack([a, b], axis=1), [np.zeros((16, 2)), features_b], [np.zeros(16, dtype=int), predicted_b]


def test_refitting_a_teacher_on_the_surer_half_of_its_rows_wins_back_the_rows_its_old_fit_lost():
    from kamalcli.probe.transfer_refit import refit_rounds

    confidence, features, predicted = _pair()
    steps = refit_rounds(confidence, features, predicted, refit=[1])
    assert steps[0].argmax(axis=1).tolist() == [0] * 4 + [1, 1, 1, 1, 0, 0] + [1, 1, 1, 1, 0, 0]
    # round 1 fits b on rows 4, 5 (class 0) and 10, 11 (class 1), its surest four of eight: every b row is b's
    assert steps[1].argmax(axis=1).tolist() == [0] * 4 + [1] * 12
    assert steps[1][11, 1] == pytest.approx(0.238, abs=1e-3) and steps[1][0, 1] == pytest.approx(-1997.0, abs=0.1)
    assert (steps[1][:, 0] == confidence[:, 0]).all()  # a keeps its column
    # round 2 moves no row: no third round
    assert len(steps) == 3 and (steps[2].argmax(axis=1) == steps[1].argmax(axis=1)).all()


def test_a_teacher_given_fewer_than_two_rows_keeps_its_column():
    from kamalcli.probe.transfer_refit import refit_rounds

    confidence, features, predicted = _pair()
    confidence[:, 1] = -20.0
    confidence[4, 1] = 5.0  # b is given one row
    steps = refit_rounds(confidence, features, predicted, refit=[1])
    assert len(steps) == 2 and (steps[1] == confidence).all()


def test_refit_only_for_an_rmd_selection_the_check_fails_for():
    from kamalcli.probe.prior_check import Agreement, PriorCheck
    from kamalcli.recipe.recipe import decide_refit

    read, unread = Agreement("en", 100, 90, 0.5), Agreement("zh", 100, 52, 0.5)
    failing = PriorCheck("pool", "rmd", [read, unread])
    refit = decide_refit(failing, "rmd", "pool")
    assert refit.value == "zh" and refit.as_json() == {"value": "zh", "reason": "the generated text does not read zh's rows",
                                                       "teachers": ["zh"], "rounds": 3, "line": refit.line}
    assert refit.line == ("refit=auto: zh's RMD is fitted again on the rows of pool selection gives it (the surer "
                          "half, its own predicted classes; no labels), because the prior's check finds the generated "
                          "text does not read its rows; up to 3 rounds (refit=none keeps the fit on the generated "
                          "text).")
    assert decide_refit(failing, "mc-dropout", "pool").value is None and not decide_refit(failing, "entropy", "p").line
    passing = decide_refit(PriorCheck("pool", "rmd", [read, read]), "rmd", "pool")
    assert passing.value is None and passing.line == ""  # the prior's line already says the check passes
    unmade = decide_refit(None, "rmd", "pool")
    assert unmade.value is None and unmade.line.startswith("refit=auto: none: the prior's check of pool was not made")


def test_amalgamate_refits_the_teachers_the_check_fails_for_and_records_it(two_teachers, assets, monkeypatch):
    from kamalcli.probe import prior_check
    from kamalcli.probe.prior_check import Agreement, PriorCheck

    two_teachers("add-data", assets["train"], "--name", "train", "--role", "eval")
    two_teachers("probe", "--data", "pool", "--rmd-fit", "train", "--mc-samples", "2")
    seen = []

    def money_unread(workspace, store, teachers, dataset, rmd_fit, **kwargs):
        seen.append((dataset.name, rmd_fit))
        return PriorCheck(dataset.name, "rmd", [Agreement("news", 100, 95, 0.5), Agreement("money", 100, 50, 0.5)])

    monkeypatch.setattr(prior_check, "transfer_check", money_unread)
    result = two_teachers("--verbose", "amalgamate", "--method", "muki-hard", "--option", "score=rmd", "--option", "prior=none",
                          "--option", "refit=auto", "--mc-samples", "2", "--name", "refitted", *train_args(assets))
    assert seen == [("pool", None)]
    assert "refit=auto: money's RMD is fitted again on the rows of pool" in result.output
    assert "refit=auto: rows changing teacher, round by round: " in result.output
    two_teachers("amalgamate", "--method", "muki-hard", "--option", "score=rmd", "--option", "prior=none",
                  "--mc-samples", "2", "--name", "kept", *train_args(assets))  # refit: off by default
    students = {s["name"]: s for s in two_teachers.json("students")}
    assert students["refitted"]["train"]["objective"]["refit"] == ["money"]
    assert "refit" not in students["kept"]["train"]["objective"] and students["kept"]["options"]["refit"] == "none"
    runs = {r["params"]["name"]: r for r in two_teachers.json("runs") if r["kind"] == "amalgamate"}
    assert runs["refitted"]["params"]["recipe"]["refit"]["teachers"] == ["money"]  # a resumed run refits the same
    assert "refit" not in runs["kept"]["params"]["recipe"]


def test_the_report_says_which_teachers_a_student_would_refit(capsys):
    from html import escape

    from kamalcli.cli.probe_cmds import _selection_summaries
    from kamalcli.probe.prior_check import Agreement, PriorCheck
    from kamalcli.recipe.recipe import Recipe, decide_refit
    from kamalcli.report.gather import Report
    from kamalcli.report.html import selection_section

    refit = decide_refit(PriorCheck("pool", "rmd", [Agreement("en", 100, 90, 0.5), Agreement("zh", 100, 52, 0.5)]),
                         "rmd", "pool")
    record = {"teachers": ["en", "zh"], "recipe": Recipe((refit,)).as_json()}
    kept = {"teachers": ["en", "de"], "recipe": Recipe((decide_refit(None, "entropy", "pool"),)).as_json()}
    _selection_summaries([], [record, kept], verbose=True)
    said = capsys.readouterr()
    assert "  refit  zh  the generated text does not read zh's rows\n" in said.out
    assert "  refit  none  entropy reads no RMD\n" in said.out
    assert f"{refit.line}\n" in said.err and said.err.count("refit=auto") == 1  # the evidence, under --verbose
    row = {"data": "synth", "teachers": ["en", "zh"], "options_key": "k", "score": "rmd", "accuracy": 0.8,
           "auroc": None, "target_accuracy": None, "rows": 200}
    page = selection_section(Report(workspace="w", teachers=[], selection=[row], recipes=[record, kept]))
    assert escape(refit.line) in page and page.count("refit=auto") == 1
