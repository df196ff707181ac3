"""Fitted scores measured out of sample on their own fit's rows (kamalcli/probe/cross_fit.py)."""

from __future__ import annotations

import numpy as np


def test_folds_deal_each_label_so_every_other_fold_set_knows_every_label():
    from kamalcli.probe.cross_fit import fold_of

    labels = ["a"] * 7 + ["b"] * 3
    fold = fold_of(labels)
    assert sorted(np.bincount(fold[:7])) == [1, 1, 1, 2, 2]  # 7 rows of a over 5 folds
    assert sorted(fold[7:]) == [0, 1, 2]                      # 3 rows of b: one in each of 3 folds
    for f in range(5):
        others = {label for label, g in zip(labels, fold) if g != f}
        assert others == {"a", "b"}
    assert (fold_of(labels) == fold).all()  # seeded
    assert fold_of(labels + ["c"]) is None  # one row of c: no fit on the other folds would know it


def test_in_sample_rmd_flatters_selection_where_cross_fitted_rmd_is_at_chance():
    """Two teachers whose text is the same noise: no score can tell their rows apart. RMD fitted on the rows it
    scores remembers them (each row lies near its own class mean); cross-fitted, it is at chance."""
    from kamalcli.probe.cross_fit import cross_fitted_rmd, fold_of
    from kamalcli.trust.mahalanobis import fit_rmd

    rng = np.random.default_rng(0)
    features = rng.normal(size=(60, 24))
    labels = ["a1", "a2"] * 15 + ["b1", "b2"] * 15  # rows 0-29 written for teacher A, 30-59 for B
    owner = np.repeat([0, 1], 30)
    fold = fold_of(labels)
    in_sample, cross_fitted = [], []
    for teacher, own in enumerate((("a1", "a2"), ("b1", "b2"))):
        local = np.array([own.index(label) if label in own else -1 for label in labels])
        keep = local >= 0
        in_sample.append(-fit_rmd(features[keep], local[keep], features).score(features))
        cross_fitted.append(-cross_fitted_rmd(features, local, keep, fold))
    in_sample_accuracy = (np.stack(in_sample, 1).argmax(1) == owner).mean()
    cross_fitted_accuracy = (np.stack(cross_fitted, 1).argmax(1) == owner).mean()
    assert in_sample_accuracy >= 0.8, in_sample_accuracy
    assert cross_fitted_accuracy <= 0.6, cross_fitted_accuracy


def test_a_cross_fitted_figure_counts_and_says_so():
    from kamalcli.probe.measured import Figure
    from kamalcli.recipe.recipe import choose_score as decide

    # 217 of 240 generated rows (90.4%), chance 83.3%: Wilson lower bound 86.0%, clear
    figure = Figure("rmd", "synth", True, 240, 217 / 240, 200 / 240, cross_fitted=5)
    assert figure.words() == ("90.4% of 240 generated rows of synth, 5-fold cross-fitted (95% interval 86.0-93.5%; "
                              "chance 83.3%)")
    assert decide([figure], (10, 2)).value == "rmd"
