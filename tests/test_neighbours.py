"""muki-hard's smooth and muki's pick_smooth: each row's nearest rows, and a target or a pick averaged over them
(golden values)."""

import numpy as np

from kamalcli.probe.neighbours import PickAgreement, neighbour_mean, nearest_rows, pick_agreement, smoothed
from kamalcli.recipe.recipe import Decision, pick_smooth_line, picks_agree
from kamalcli.recipe.recipe import _smooth as smooth_decision


def on_circle(degrees):
    radians = np.radians(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1).astype(np.float32)


def test_nearest_rows_are_the_most_similar_others_nearest_first_in_any_chunking():
    vectors = on_circle([0, 10, 30, 100, 180])
    expected = [[1, 2], [0, 2], [1, 0], [2, 4], [3, 2]]
    assert nearest_rows(vectors, 2).tolist() == expected
    assert nearest_rows(vectors, 2, chunk=2).tolist() == expected  # chunks of the similarity matrix agree
    assert nearest_rows(vectors, 9).shape == (5, 4)                  # never more than the other rows
    assert nearest_rows(on_circle([0]), 3).shape == (1, 0)


def test_smoothed_is_half_the_row_and_half_its_neighbours_mean():
    target = np.array([[0.8, 0.2], [0.6, 0.4], [0.1, 0.9]])
    neighbours = np.array([[1, 2], [0, 2], [1, 0]])
    # row 0: 0.5 [0.8, 0.2] + 0.5 mean([0.6, 0.4], [0.1, 0.9]) = [0.575, 0.425], and so on
    assert np.allclose(smoothed(target, neighbours), [[0.575, 0.425], [0.525, 0.475], [0.4, 0.6]])
    assert np.allclose(smoothed(target, neighbours, own_share=1.0), target)
    assert smoothed(target, np.empty((3, 0), dtype=np.int64)) is target


def test_smooth_auto_follows_the_prior_over_every_label_and_needs_rows_enough(monkeypatch):
    from types import SimpleNamespace

    from kamalcli.recipe import recipe

    monkeypatch.setattr(recipe, "SMOOTH_NEIGHBOURS", 10)  # kamal's default (the tests' conftest turns it off)

    def prior(data, teachers=None):
        return Decision("prior", data, "", {"kind": "prototype" if data else "none", "data": data, "teachers": teachers})

    def smooth(rows, labels, prior_decision):
        evidence = SimpleNamespace(data="pool", rows=rows, label_names=tuple(range(labels)))
        decision = smooth_decision(evidence, SimpleNamespace(encoder="minilm-l6"), prior_decision)
        return decision.value, decision.line, decision.reason

    everywhere = prior("synth")
    assert smooth(2000, 10, everywhere)[0] == 10
    # 1,000 rows over 10 labels, where smoothing cost the student a point on each of two seeds
    assert smooth(1999, 10, everywhere)[0] == 0
    assert smooth(1000, 10, everywhere) == (0, (
        "smooth=auto: none: 1000 rows of pool are too few for 10 neighbours a row over 10 labels (at least 2000); "
        "smooth=K asks for K anyway."), "1,000 rows, fewer than the 2,000 it needs")
    assert smooth(2000, 12, prior("synth", ["en-topics"]))[:2] == (0, (
        "smooth=auto: none: the prior's check found that minilm-l6 does not read every teacher's rows of pool; "
        "smooth=K asks for K anyway."))
    for none in (None, prior(None)):
        assert smooth(2000, 10, none)[:2] == (0, (
            "smooth=auto: none: it smooths only beside a prior over every label, whose check shows that minilm-l6 "
            "reads the transfer rows; smooth=K asks for K anyway."))


def test_neighbour_mean_averages_a_row_and_its_neighbours_with_equal_weights():
    confidence = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6], [0.8, 0.2]])
    neighbours = np.array([[1], [0], [3], [2]])
    # rows 0 and 1: mean([0.9, 0.1], [0.2, 0.8]) = [0.55, 0.45]; rows 2 and 3: mean([0.4, 0.6], [0.8, 0.2]) = [0.6, 0.4]
    smoothed_confidence = neighbour_mean(confidence, neighbours)
    assert np.allclose(smoothed_confidence, [[0.55, 0.45], [0.55, 0.45], [0.6, 0.4], [0.6, 0.4]])
    assert smoothed_confidence.argmax(axis=1).tolist() == [0, 0, 0, 0]  # rows 1 and 2 change teacher
    assert neighbour_mean(confidence, np.empty((4, 0), dtype=np.int64)) is confidence


def test_pick_agreement_counts_neighbours_sharing_the_rows_pick_against_chance():
    confidence = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.3, 0.7], [0.6, 0.4]])  # picks a, a, b, b, a
    neighbours = np.array([[1, 4], [0, 2], [3, 1], [2, 4], [0, 1]])
    # agreeing neighbours: 2 + 1 + 1 + 1 + 2 = 7 of 10; chance 0.6^2 + 0.4^2 = 0.52; kappa 0.18 / 0.48 = 0.375
    agreement = pick_agreement(confidence, neighbours)
    assert np.isclose(agreement.agreement, 0.7) and np.isclose(agreement.chance, 0.52)
    assert np.isclose(agreement.kappa, 0.375) and picks_agree(agreement)
    assert not picks_agree(PickAgreement(0.6, 0.52))                         # kappa 0.17: below the 0.2 auto wants
    assert PickAgreement(1.0, 1.0).kappa == 0.0                        # every row picks one teacher: nothing to read


def test_pick_smooth_line_says_what_was_done_or_why_not():
    used = {"neighbours": 10, "used": True, "agreement": 0.7965, "chance": 0.5029, "kappa": 0.5906}
    assert pick_smooth_line("auto", used, "pool", "minilm-l6") == (
        "pick_smooth=auto: each pick averaged over the 10 nearest rows of pool in minilm-l6 (kappa 0.59)")
    unused = {"neighbours": 10, "used": False, "agreement": 0.55, "chance": 0.5, "kappa": 0.1}
    assert pick_smooth_line("auto", unused, "pool", "minilm-l6") == (
        "pick_smooth=auto: none: the 10 nearest rows' picks agree at kappa 0.10 (< 0.2) on pool")
