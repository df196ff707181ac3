"""score=auto and the energy score: golden values worked out by hand."""

import numpy as np
import pytest

from kamalcli.probe.auto_score import choose_score, energy, majority_vote


def test_energy_is_the_log_sum_exp_of_the_logits():
    assert np.allclose(energy(np.array([[0.0, 0.0], [1.0, 2.0], [1000.0, 1000.0]])),
                       [0.693147, 2.313262, 1000.693147], atol=1e-6)


def test_majority_vote_breaks_ties_with_the_first_score():
    choices = np.array([[0, 1, 1, 0], [1, 1, 0, 1], [1, 0, 0, 1]])  # 3 scores x 4 rows, 2 teachers
    assert majority_vote(choices, 2).tolist() == [1, 1, 0, 1]
    assert majority_vote(np.array([[0, 1], [1, 0]]), 2).tolist() == [0, 1]  # 1-1 ties: the first score's choice


def confidences():
    # choices per row: mc-dropout 0 0 1 1; entropy 0 0 1 0; max-prob 0 1 1 1; energy 1 1 1 1 (one teacher always)
    pick = lambda choices: np.array([[1.0, 0.0] if c == 0 else [0.0, 1.0] for c in choices])  # noqa: E731
    return {"mc-dropout": pick([0, 0, 1, 1]), "entropy": pick([0, 0, 1, 0]), "max-prob": pick([0, 1, 1, 1]),
            "energy": pick([1, 1, 1, 1])}


def test_auto_takes_the_score_closest_to_the_vote_of_all_label_free_scores():
    # vote: row 0 three to one for teacher 0; row 1 two to two, mc-dropout's 0; rows 2 and 3 for teacher 1
    choice = choose_score(confidences())
    assert choice.score == "mc-dropout"
    assert choice.agreement == {"mc-dropout": 1.0, "entropy": 0.75, "max-prob": 0.75, "energy": 0.5}
    without_mc = choose_score({k: v for k, v in confidences().items() if k != "mc-dropout"})
    # vote without mc-dropout: 0 1 1 1 (row 0 two to one, rows 1 and 3 two to one for teacher 1)
    assert without_mc.score == "max-prob"
    assert without_mc.agreement == {"entropy": 0.5, "max-prob": 1.0, "energy": 0.75}
    tied = {"entropy": confidences()["entropy"], "max-prob": confidences()["entropy"]}
    assert choose_score(tied).score == "entropy"  # equal agreement: the first in CANDIDATES


def test_auto_takes_rmd_only_when_every_fit_is_independent_of_the_teachers_own_picks():
    scores = {**confidences(), "rmd": np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])}
    assert choose_score(scores, ("teacher-train", "labelled")).score == "rmd"
    circular = choose_score(scores, ("pseudo", "teacher-train"))
    assert circular.score != "rmd" and circular.agreement["rmd"] == 0.25
    with pytest.raises(ValueError):
        choose_score({})


def test_auto_takes_energy_when_the_teachers_know_different_numbers_of_labels():
    choice = choose_score(confidences(), (), (2, 4))
    assert choice.score == "energy" and choice.agreement == {}
    assert choose_score(confidences(), (), (3, 3)).score == "mc-dropout"  # equal counts: the vote
    scores = {**confidences(), "rmd": confidences()["entropy"]}
    assert choose_score(scores, ("teacher-train", "labelled"), (2, 4)).score == "rmd"  # an independent RMD first
