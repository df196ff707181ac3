"""muki-hard's smooth: each row's nearest rows, and a target averaged over them (golden values)."""

import numpy as np

from kamalcli.probe.neighbours import nearest_rows, neighbours_for, smoothed


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


def test_smooth_auto_follows_the_prior_over_every_label_and_needs_rows_enough():
    everywhere = {"kind": "prototype", "data": "synth", "teachers": None}
    assert neighbours_for("auto", 10, everywhere, 2000, 10, "pool", "minilm-l6") == (10, None)
    # 1,000 rows over 10 labels, where smoothing cost the student a point on each of two seeds
    assert neighbours_for("auto", 10, everywhere, 1999, 10, "pool", "minilm-l6")[0] == 0
    assert neighbours_for("auto", 10, everywhere, 1000, 10, "pool", "minilm-l6") == (0, (
        "smooth=auto: none: 1000 rows of pool are too few for 10 neighbours a row over 10 labels (at least 2000); "
        "smooth=K asks for K anyway."))
    within = {"kind": "prototype", "data": "synth", "teachers": ["en-topics"]}
    assert neighbours_for("auto", 10, within, 2000, 12, "pool", "minilm-l6") == (0, (
        "smooth=auto: none: the prior's check found that minilm-l6 does not read every teacher's rows of pool; "
        "smooth=K asks for K anyway."))
    for none in (None, {"kind": "none", "data": None, "teachers": None}):
        assert neighbours_for("auto", 10, none, 2000, 10, "pool", "minilm-l6") == (0, (
            "smooth=auto: none: it smooths only beside a prior over every label, whose check shows that minilm-l6 "
            "reads the transfer rows; smooth=K asks for K anyway."))
    assert neighbours_for(3, 3, None, 12, 10, "pool", "minilm-l6") == (3, None)  # asked for: no check
