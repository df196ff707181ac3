"""The prototype score and its fusion with RMD: golden values worked out by hand; the mean-pooled vectors."""

import numpy as np
import pytest

from kamalcli.errors import KamalError
from kamalcli.probe.prototypes import class_posterior, class_prototypes, fused, teacher_shares


def test_a_label_prototype_is_the_unit_mean_of_its_unit_rows():
    vectors = np.array([[2.0, 0.0], [0.0, 3.0], [0.0, 1.0]])  # unit: [1,0], [0,1], [0,1]
    prototypes = class_prototypes(vectors, ["a", "b", "a"], ["b", "a"])
    assert np.allclose(prototypes, [[0.0, 1.0], [0.707107, 0.707107]], atol=1e-6)
    with pytest.raises(KamalError, match="no rows for label.* c"):
        class_prototypes(vectors, ["a", "b", "a"], ["a", "b", "c"])


def test_teacher_shares_are_softmax_mass_over_each_teachers_labels():
    prototypes = np.array([[1.0, 0.0], [0.0, 1.0]])  # labels a, b
    rows = np.array([[1.0, 0.0], [3.0, 4.0]])  # the second is [0.6, 0.8] at unit length
    owns = np.array([[True, False], [False, True]])  # teacher 0 knows a, teacher 1 knows b
    # softmax([1, 0]) = [0.731059, 0.268941]; softmax([0.6, 0.8]) = [0.450166, 0.549834]
    assert np.allclose(teacher_shares(rows, prototypes, owns, temperature=1.0),
                       [[0.731059, 0.268941], [0.450166, 0.549834]], atol=1e-6)
    both = np.array([[True, True], [False, True]])  # a label two teachers know counts for both
    assert np.allclose(teacher_shares(rows, prototypes, both, temperature=1.0)[0], [0.731059, 1.0], atol=1e-6)
    # T = 0.05 scales the cosines by 20: softmax([20, 0])
    assert np.allclose(teacher_shares(rows[:1], prototypes, owns)[0], [1 - 2.061154e-9, 2.061154e-9], atol=1e-12)


def test_the_prior_is_the_softmax_of_cosines_at_temperature_0_1_over_every_label():
    prototypes = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])  # labels a, b, c
    rows = np.array([[2.0, 0.0], [3.0, 4.0]])  # unit: [1, 0], [0.6, 0.8]
    # cosines (1, 0, 0.6) and (0.6, 0.8, 1) scaled by 10
    assert np.allclose(class_posterior(rows, prototypes), [[0.981970, 0.000045, 0.017985],
                                                           [0.015876, 0.117310, 0.866813]], atol=1e-6)


def test_a_gold_row_is_left_out_of_its_own_labels_prototype_in_the_prior():
    from kamalcli.probe.prototypes import PrototypeFit, _held_out

    # generated rows a: [1, 0] and b: [0, 1]; one gold row of a at [0.6, 0.8], which is also a transfer row
    fit_vectors, fit_labels = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]), ["a", "b", "a"]
    sums, held_out = _held_out(["real", "other"], ["g1", "g2", "real"], fit_labels, fit_vectors, ["a", "b"])
    assert np.allclose(sums, [[1.6, 0.8], [0.0, 1.0]]) and held_out[0].tolist() == [0] and held_out[1].tolist() == [0]
    rows = np.array([[0.6, 0.8], [2.0, 0.0]])
    pooled = class_prototypes(fit_vectors, fit_labels, ["a", "b"])  # a: unit([1.6, 0.8]) = [0.894427, 0.447214]
    fit = PrototypeFit(["a", "b"], np.eye(2, dtype=bool), rows, pooled, sums, held_out)
    # the gold row against a's prototype without it ([1, 0]): cosines (0.6, 0.8) / 0.1; the other row as usual:
    # cosines (0.894427, 0) / 0.1
    assert np.allclose(fit.prior(["a", "b"]), [[0.119203, 0.880797], [0.999870, 0.000130]], atol=1e-6)
    assert np.allclose(fit.prior(["b", "a"])[0], [0.880797, 0.119203], atol=1e-6)
    # in-sample it would have read its own label: cosines (0.894427, 0.8) / 0.1
    assert np.allclose(PrototypeFit(["a", "b"], fit.owns, rows, pooled).prior(["a", "b"])[0], [0.719962, 0.280038],
                       atol=1e-6)


def test_the_prior_is_decided_on_labelled_text_holding_every_label():
    from types import SimpleNamespace

    from kamalcli.recipe.recipe import decide_prior

    synth = SimpleNamespace(name="synth", label_counts={"a": 3, "B": 2})
    plan = SimpleNamespace(dataset=synth)
    prior = decide_prior(plan, ["a", "b"], canonical=str.lower)  # B merged into b (kamal labels merge)
    assert prior.value == "synth" and prior.as_json()["kind"] == "prototype"
    assert prior.line.startswith("prior=auto: the target is multiplied by the class probabilities")
    missing = decide_prior(plan, ["a", "b", "c"], canonical=str.lower)
    assert missing.value is None and missing.reason == "synth has no rows of c"
    assert missing.line == "prior=auto: none: synth has no rows of c."
    assert decide_prior(SimpleNamespace(dataset=None), ["a"]).line.startswith("prior=auto: none: no labelled text")
    assert decide_prior(plan, ["a", "b"], str.lower, encoder_error="minilm-l6 is not installed").line == (
        "prior=auto: none: minilm-l6 is not installed.")
    gold = SimpleNamespace(name="gold", id=2, label_counts={"a": 4})
    synth.id = 1
    pooled = decide_prior(plan, ["a", "b"], canonical=str.lower, gold=gold)  # --gold: its rows join the prototypes
    assert pooled.value == "synth + gold" and pooled.evidence["data"] == "synth" and pooled.evidence["gold"] == "gold"
    assert "built from synth and the labelled rows of gold" in pooled.line
    given = decide_prior(SimpleNamespace(dataset=gold), ["a"], gold=gold)  # --rmd-fit gold: gold alone
    assert given.value == "gold" and given.evidence["gold"] is None
    # the generated text's prototypes failed the check (kamalcli/recipe/evidence.py): the gold rows replace them
    alone = decide_prior(plan, ["a"], gold=gold, gold_alone=True)
    assert alone.value == "gold" and alone.evidence["data"] == "gold" and alone.evidence["gold"] is None
    assert alone.reason == "gold alone: the generated text's prototypes misread the rows"
    assert "from gold alone, because the prototypes of the generated text do not read every teacher's" in alone.line


def test_fusion_averages_the_pooled_percentiles():
    rmd = np.array([[1.0, 2.0], [3.0, 4.0]])          # percentiles 0.25 0.5 / 0.75 1
    prototype = np.array([[0.9, 0.1], [0.2, 0.8]])    # percentiles 1 0.25 / 0.5 0.75
    assert np.allclose(fused(rmd, prototype), [[0.625, 0.375], [0.625, 0.875]])


def test_sentence_vectors_are_unit_means_over_the_real_tokens_only(tmp_path, assets):
    from kamalcli.probe.encoder import _compute

    short, long = "world news today", "sports scores from the league final match tonight"
    together = _compute(assets["encoder"], [short, long], 32, "cpu", ("mean",))["mean"]
    alone = _compute(assets["encoder"], [short], 32, "cpu", ("mean",))["mean"]
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert np.allclose(together[0], alone[0], atol=1e-5)  # padding beside a longer row changes nothing
    assert not np.allclose(together[0], _compute(assets["encoder"], [short], 32, "cpu", ("cls",))["cls"][0], atol=1e-3)
