"""Selection accuracy balanced over teachers, what score=auto and commit=auto judge by: figures by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest


def test_balanced_accuracy_weighs_each_teacher_s_rows_alike():
    from kamalcli.probe.selection import selection_quality

    # teacher 0 owns rows 0-3, teacher 1 rows 4-5; the pick is right on rows 0, 1, 2 and 4
    owns = np.array([[1, 0]] * 4 + [[0, 1]] * 2, dtype=bool)
    confidence = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.2, 0.8], [0.4, 0.6], [0.9, 0.1]])
    quality = selection_quality(confidence, owns)
    assert quality["accuracy"] == pytest.approx(4 / 6)
    assert quality["balanced"] == pytest.approx((3 / 4 + 1 / 2) / 2)  # 0.625
    assert quality["balanced_rows"] == pytest.approx(4 / (1 / 4 + 1 / 2))  # 5.333: fewer than 6 rows' worth
    # a constant pick of the larger teacher: 4 of 6 plain, 1/2 balanced
    constant = selection_quality(np.tile([1.0, 0.0], (6, 1)), owns)
    assert (constant["accuracy"], constant["balanced"]) == (pytest.approx(4 / 6), 0.5)


def test_balanced_chance_is_the_best_constant_pick_teacher_by_teacher():
    from kamalcli.probe.measured import balanced_chance, chance

    a, b = SimpleNamespace(labels=("x", "y")), SimpleNamespace(labels=("z",))
    counts = {"x": 20, "y": 20, "z": 20}
    assert chance(counts, [a, b]) == pytest.approx(40 / 60) and balanced_chance(counts, [a, b]) == 0.5
    # a label both know: always picking b is right on all of b's rows and on half of a's (y): (0.5 + 1) / 2
    a, b = SimpleNamespace(labels=("x", "y")), SimpleNamespace(labels=("y", "z"))
    assert balanced_chance({"x": 10, "y": 10, "z": 20}, [a, b]) == pytest.approx(0.75)
    # a teacher owning no measured rows does not count
    assert balanced_chance({"x": 10, "y": 10}, [SimpleNamespace(labels=("x", "y")), SimpleNamespace(labels=("w",))]) == 1.0


def test_on_generated_text_of_ten_and_two_labels_energy_s_constant_pick_no_longer_wins():
    """The cross-lingual pair's case (docs/benchmarks.md): 200 generated rows for a teacher of ten labels, 40 for
    one of two; energy picks the first on every row, entropy picks right on 108 of the 200 and 32 of the 40."""
    from kamalcli.data.text import GENERATED
    from kamalcli.probe.measured import _figure
    from kamalcli.recipe.recipe import choose_score as decide

    first, second = SimpleNamespace(labels=tuple("abcdefghij")), SimpleNamespace(labels=("pos", "neg"))
    dataset = SimpleNamespace(name="synth", label_counts={**{c: 20 for c in "abcdefghij"}, "pos": 20, "neg": 20},
                              provenance={"kind": GENERATED})
    effective = 4 / (1 / 200 + 1 / 40)  # 133.3

    def row(score, right_first, right_second):
        return {"score": score, "num_rows": 240, "accuracy": (right_first + right_second) / 240,
                "balanced": (right_first / 200 + right_second / 40) / 2, "balanced_rows": effective,
                "cross_fitted": None}

    figures = [_figure(row("energy", 200, 0), dataset, [first, second]),
               _figure(row("entropy", 108, 32), dataset, [first, second])]
    energy, entropy = figures
    assert (energy.accuracy, energy.chance, energy.rows, energy.total_rows) == (0.5, 0.5, 133, 240)
    assert entropy.accuracy == pytest.approx(0.67) and entropy.clear and not energy.clear
    decision = decide(figures, (10, 2), ("energy", "entropy"))
    # Wilson 95% of 89 in 133 (0.67 x 133, rounded): (0.6692 + 0.0144 -+ 0.0813) / 1.0289 = 0.585-0.743
    assert decision.value == "entropy"
    assert decision.line == (
        "score=auto selects with entropy: it picks the right teacher on 67.0% of 240 generated rows of synth, "
        "balanced over teachers (95% interval 58.5-74.3% on 133 effective rows; chance 50.0%), clearly above chance.")
    # judged by plain accuracy, as before: energy 83.3% is chance itself, entropy 58.3% under it; nothing counts
    # and the fallback for teachers of different label counts is energy
    plain = [_figure({**row("energy", 200, 0), "balanced": None}, dataset, [first, second]),
             _figure({**row("entropy", 108, 32), "balanced": None}, dataset, [first, second])]
    assert plain[0].accuracy == pytest.approx(200 / 240) and decide(plain, (10, 2), ("energy", "entropy")).value == "energy"


def test_the_report_names_the_most_accurate_score_by_its_balanced_figure():
    """The report's "selects the right teacher most often" ranks as score=auto does: energy's constant pick of the
    larger teacher (83.3% plain, 50.0% balanced) does not lead entropy (58.3% plain, 67.0% balanced)."""
    from kamalcli.probe.service import selection_groups

    def row(score, accuracy, balanced):
        return {"data": "synth", "teachers": ["en", "zh"], "options_key": "", "score": score, "accuracy": accuracy,
                "balanced": balanced, "in_sample": False}

    rows = [row("energy", 0.833, 0.500), row("entropy", 0.583, 0.670), row("oracle", 1.0, 1.0)]
    (_, _, _, best), = selection_groups(rows)
    assert best["score"] == "entropy"
    # figures stored before balanced accuracy existed rank by the plain one
    rows = [row("energy", 0.833, None), row("entropy", 0.583, None)]
    (_, _, _, best), = selection_groups(rows)
    assert best["score"] == "energy"
