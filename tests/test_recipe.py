"""The default student's recipe (kamalcli/recipe/recipe.py): one call decides every auto, from one evidence
object, into a frozen Recipe whose reasons are short and whose evidence goes to --verbose and --json."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kamalcli.probe.measured import Figure
from kamalcli.probe.prior_check import Agreement, PriorCheck
from kamalcli.recipe.recipe import ORDER, REASON_WIDTH, Recipe, autos, decide


def muki_hard(*options: str):
    from kamalcli.methods import get_method

    return get_method("muki-hard").parse(list(options))


def evidence(figures=(), check=None, rows=2000, labelled=True, label_counts=(5, 5)):
    """What gather() collects, made by hand: two teachers of five labels, generated text holding every label."""
    synth = SimpleNamespace(name="synth", label_counts={label: 20 for label in "abcdefghij"} if labelled else {})
    plan = SimpleNamespace(dataset=synth, source="generated", line="RMD fitted on synth, text kamal synthesize wrote.")
    teachers = (SimpleNamespace(name="a", task="sequence", labels=tuple("abcde")),
                SimpleNamespace(name="b", task="sequence", labels=tuple("fghij")))
    return SimpleNamespace(teachers=teachers, data="pool", rows=rows, label_names=tuple("abcdefghij"),
                           label_counts=label_counts, canonical=lambda label: label, check=check,
                           figures=list(figures), figures_for=lambda score: list(figures),
                           fit_plan=lambda one_dataset=False: plan, encoder_error=lambda encoder: None, gold=None,
                           gold_alone=False, prior_check=check)


READ = PriorCheck("pool", "rmd", [Agreement("a", 100, 90, 0.5), Agreement("b", 100, 88, 0.5)])
UNREAD_B = PriorCheck("pool", "rmd", [Agreement("a", 100, 90, 0.5), Agreement("b", 100, 51, 0.5)])


def test_the_default_student_leaves_every_decision_to_the_recipe_and_paper_true_none():
    assert autos(muki_hard(), evidence().teachers) == {"score", "fit", "prior", "commit", "smooth", "pick_smooth",
                                                       "reweight"}  # refit: an option, off by default
    assert "refit" in autos(muki_hard("refit=auto"), evidence().teachers)
    assert autos(muki_hard("paper=true"), evidence().teachers) == set()
    assert autos(muki_hard("score=entropy", "prior=none", "commit=1"), evidence().teachers) == {
        "pick_smooth", "smooth", "reweight"}


def test_a_prior_the_check_reads_carries_the_selection_and_smooths_a_large_pool(monkeypatch):
    from kamalcli.recipe import recipe as module

    monkeypatch.setattr(module, "SMOOTH_NEIGHBOURS", 10)  # kamal's default (the tests' conftest turns it off)
    monkeypatch.setattr(module, "PICK_NEIGHBOURS", 10)
    figures = [Figure("rmd+prototype", "synth", True, 200, 0.95, 0.5), Figure("energy", "synth", True, 200, 0.7, 0.5)]
    recipe = decide(evidence(figures, READ), muki_hard())
    assert [d.name for d in recipe.decisions] == [n for n in ORDER if n in {d.name for d in recipe.decisions}]
    assert recipe.value("score") == "rmd+prototype" and recipe.value("fit") == "synth"
    assert recipe.value("prior") == "synth" and recipe.value("commit") == 0.0  # the prior carries the selection
    assert recipe.value("smooth") == 10  # 2,000 rows over 10 labels: 20 a label and neighbour
    assert recipe.value("pick_smooth") == 0  # commit=0: the target reads no pick
    assert recipe.value("refit") is None and recipe.value("reweight") == "per-teacher"
    assert decide(evidence(figures, READ, rows=1999), muki_hard()).value("smooth") == 0
    assert all(len(reason) <= REASON_WIDTH for _, _, reason in recipe.rows())
    assert all(len(line) <= 130 for line in recipe.table())
    assert recipe.options_for(muki_hard()).score == "rmd+prototype" and recipe.options_for(muki_hard()).commit == 0.0


def test_where_the_prototypes_do_not_read_a_teacher_its_rmd_is_refitted_and_the_prior_stays_within_the_other():
    figures = [Figure("rmd+prototype", "synth", True, 200, 0.95, 0.5), Figure("rmd", "synth", True, 200, 0.9, 0.5),
               Figure("energy", "synth", True, 200, 0.6, 0.5)]
    assert decide(evidence(figures, UNREAD_B), muki_hard()).value("refit") is None  # an option, off by default
    recipe = decide(evidence(figures, UNREAD_B), muki_hard("refit=auto"))
    assert recipe.value("score") == "rmd"  # no prototype score where the prototypes do not read the rows
    assert recipe.value("prior") == "synth within a" and recipe.evidence("prior")["teachers"] == ["a"]
    assert recipe.value("refit") == "b" and recipe.evidence("refit")["teachers"] == ["b"]
    assert recipe.value("commit") == 1.0  # rmd's 90% is clearly above vanilla-kd's own pick (energy, 60%)
    assert recipe.options_for(muki_hard("refit=auto")).commit == "auto"  # committing: MUKI's target, guarded as built
    assert recipe.value("smooth") == 0 and "does not read every teacher's rows" in recipe.get("smooth").reason


def test_the_recipe_reads_back_as_recorded_and_an_older_runs_decisions_become_one():
    recipe = decide(evidence([Figure("entropy", "test", False, 400, 0.8, 0.5)], READ), muki_hard())
    assert Recipe.from_json(recipe.as_json()) == recipe
    assert Recipe.from_json(None) == Recipe() and Recipe().table() == []
    params = {"auto": {"score": "rmd", "reason": "...", "line": "score=auto selects with rmd: ...", "figure": None},
              "gate": {"commit": 1.0, "baseline": 0.7, "line": "commit=auto: ...", "figure": None},
              "prior": {"kind": "none", "data": None, "line": "prior=auto: none: ...", "check": None, "teachers": None},
              "refit": {"teachers": ["b"], "rounds": 3, "line": "refit=auto: ..."}, "method": "muki-hard"}
    old = Recipe.from_json(Recipe.from_legacy(params))
    assert params == {"method": "muki-hard"}  # the old keys are gone from what the request is built from
    assert (old.value("score"), old.value("commit"), old.value("prior"), old.value("refit")) == ("rmd", 1.0, None, "b")
    assert old.options_for(muki_hard()).score == "rmd" and old.evidence("refit")["rounds"] == 3
    assert Recipe.from_legacy({"method": "vanilla-kd"}) is None


def test_a_reason_longer_than_the_table_allows_is_a_programming_error():
    from kamalcli.recipe.recipe import Decision

    with pytest.raises(AssertionError, match="reason over 80 characters"):
        Decision("score", "rmd", "x" * (REASON_WIDTH + 1))
