"""Every method's targets and losses, checked against the formulas in docs/methods.md."""

import numpy as np
import pytest
import torch

from kamalcli.errors import KamalError
from kamalcli.labels import LabelSpace
from kamalcli.methods import REGISTRY, get_method
from kamalcli.methods.base import TeacherOutputs
from kamalcli.methods.losses import kl_to_target
from kamalcli.methods.muki import margin, per_teacher_margin
from kamalcli.methods.vanilla_kd import union_logits


def outputs(shared: bool = False) -> TeacherOutputs:
    space = LabelSpace.from_teachers([("a", ["w", "s"]), ("b", ["s", "x"] if shared else ["b", "x"])])
    logits = (np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.array([[0.0, 3.0], [1.0, 0.0], [0.5, 0.0]]))
    c = np.array([[0.9, 0.2], [0.3, 0.7], [0.5, 0.5]])
    return TeacherOutputs(space, ("a", "b"), logits, {"mc-dropout": c, "entropy": c[:, ::-1].copy()})


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_pad_places_each_teacher_in_its_block_and_sums_shared_labels():
    out = outputs(shared=True)
    assert out.space.names == ("w", "s", "x")
    padded_b = out.padded(1)
    assert np.allclose(padded_b[:, 0], 0) and np.allclose(padded_b[:, 1:], softmax(out.logits[1]))
    space = LabelSpace.from_teachers([("t", ["a", "b"])])
    assert np.allclose(space.pad("t", np.array([[0.3, 0.7]])), [[0.3, 0.7]])


def test_muki_hard_takes_the_most_confident_teacher_and_weights_by_margin():
    out = outputs()
    m = get_method("muki-hard")
    objective = m.build(out, m.parse(["paper=true"]))
    t = objective.arrays["target"]
    assert np.allclose(t[0], np.r_[softmax(out.logits[0][0]), 0, 0], atol=1e-6)   # teacher a: 0.9 > 0.2
    assert np.allclose(t[1], np.r_[0, 0, softmax(out.logits[1][1])], atol=1e-6)   # teacher b: 0.7 > 0.3
    assert np.allclose(objective.weights, [0.7, 0.4, 0.0])
    assert m.build(out, m.parse(["paper=true", "reweight=false"])).weights is None
    assert np.allclose(m.build(out, m.parse(["score=mc-dropout", "reweight=true"])).weights, [0.7, 0.4, 0.0])


def test_the_default_row_weight_is_the_margin_scaled_to_mean_one_within_each_picked_teacher():
    out = outputs()  # margins 0.7, 0.4, 0.0; rows 0 and 2 pick a (row 2 a tie), row 1 picks b
    m = get_method("muki-hard")
    objective = m.build(out, m.parse(["score=mc-dropout"]))
    assert np.allclose(objective.weights, [2.0, 1.0, 0.0])  # a: 0.7 / 0.35, 0.0 / 0.35; b: 0.4 / 0.4
    assert objective.info["reweight"] == "per-teacher"
    assert m.build(out, m.parse(["score=mc-dropout", "reweight=per-teacher"])).info["reweight"] == "per-teacher"
    assert m.build(out, m.parse(["paper=true"])).info["reweight"] == "margin"
    assert m.build(out, m.parse(["score=mc-dropout", "reweight=false"])).weights is None
    # a teacher whose picked rows all tie keeps weight 1 on them rather than 0 / 0
    assert np.allclose(per_teacher_margin(np.array([[0.5, 0.5], [0.2, 0.6], [0.1, 0.9]])), [1.0, 2 / 3, 4 / 3])


def test_reweight_takes_a_switch_or_a_word_and_refuses_the_rest():
    m = get_method("muki-hard")
    assert m.parse(["reweight=off"]).reweight is False and m.parse(["reweight=yes"]).reweight is True
    assert m.parse([]).reweight == "auto"
    with pytest.raises(KamalError, match="reweight must be true, false, auto or per-teacher"):
        m.parse(["reweight=sometimes"])
    with pytest.raises(KamalError, match="paper=true weights by MUKI's margin"):
        m.parse(["paper=true", "reweight=per-teacher"])


def test_mc_false_is_the_plain_entropy_ablation():
    out = outputs()
    m = get_method("muki-hard")
    plain = m.build(out, m.parse(["paper=true", "mc=false"]))
    assert plain.info["score"] == "entropy"
    assert np.allclose(plain.arrays["target"][0, 2:], softmax(out.logits[1][0]), atol=1e-6)  # entropy prefers b


def test_muki_soft_weights_teachers_by_softmax_of_confidence_over_tau():
    out = outputs()
    m = get_method("muki-soft")
    t = m.build(out, m.parse(["tau=0.5", "score=mc-dropout"])).arrays["target"]
    w = softmax(out.confidence["mc-dropout"] / 0.5)
    expected = w[:, :1] * np.c_[softmax(out.logits[0]), np.zeros((3, 2))] + w[:, 1:] * np.c_[np.zeros((3, 2)), softmax(out.logits[1])]
    assert np.allclose(t, expected, atol=1e-6)
    assert np.allclose(t.sum(axis=1), 1, atol=1e-6)


def test_rank_calibration_compares_each_teacher_with_itself():
    from kamalcli.probe.selection import per_teacher_rank

    # teacher b is less sure of everything, yet row 1 is relatively its most confident
    c = np.array([[0.9, 0.3], [0.8, 0.5], [0.7, 0.1]])
    assert np.allclose(per_teacher_rank(c), [[1.0, 2 / 3], [2 / 3, 1.0], [1 / 3, 1 / 3]])
    base = outputs()
    out = TeacherOutputs(base.space, base.teachers, base.logits, {"mc-dropout": c})
    m = get_method("muki-hard")
    assert m.build(out, m.parse(["paper=true"])).info["chosen_share"] == {"a": 1.0, "b": 0.0}
    ranked = m.build(out, m.parse(["calibrate=rank", "score=mc-dropout", "reweight=true"]))
    assert ranked.info["calibrate"] == "rank"
    assert ranked.info["chosen_share"] == {"a": 0.6667, "b": 0.3333}  # rounded to 4 places
    assert np.allclose(ranked.arrays["target"][1], np.r_[0, 0, softmax(out.logits[1][1])], atol=1e-6)
    assert np.allclose(ranked.weights, [1 / 3, 1 / 3, 0.0])


def test_vanilla_kd_is_softmax_of_concatenated_logits():
    out = outputs()
    m = get_method("vanilla-kd")
    t = m.build(out, m.parse(["temperature=2"])).arrays["target"]
    assert np.allclose(t, softmax(np.c_[out.logits[0], out.logits[1]] / 2), atol=1e-6)
    shared = union_logits(outputs(shared=True))
    assert shared[0, 1] == pytest.approx(np.logaddexp(0.0, 0.0))  # 's' from both teachers: mass adds


def test_uhc_matches_each_teacher_on_its_own_block():
    out = outputs()
    m = get_method("uhc")
    objective = m.build(out, m.parse([]))
    student = torch.tensor([[0.5, -0.5, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    batch = {k: torch.as_tensor(v) for k, v in objective.arrays.items()}
    loss = objective.loss(student, batch).numpy()
    expected = []
    for i in range(3):
        total = 0.0
        for block, p in (([0, 1], softmax(out.logits[0][i])), ([2, 3], softmax(out.logits[1][i]))):
            q = softmax(student[i, block].numpy())
            total += np.sum(p * np.log(p / q))
        expected.append(total)
    assert np.allclose(loss, expected, atol=1e-5)


def test_kl_direction_handles_hard_targets_and_temperature():
    target = torch.tensor([[1.0, 0.0, 0.0]])
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    q = torch.softmax(logits, -1)
    assert kl_to_target(logits, target).item() == pytest.approx(-torch.log(q[0, 0]).item(), rel=1e-5)
    q2 = torch.softmax(logits / 2, -1)
    assert kl_to_target(logits, target, 2.0).item() == pytest.approx(-4 * torch.log(q2[0, 0]).item(), rel=1e-5)
    assert torch.isfinite(kl_to_target(logits, torch.tensor([[0.5, 0.5, 0.0]]))).all()


def test_commit_mixes_mukis_hard_target_and_weight_with_vanilla_kds():
    out = outputs()
    m = get_method("muki-hard")
    half = m.build(out, m.parse(["score=mc-dropout", "commit=0.5", "reweight=true"]))
    # row 0: teacher a picked (0.9 > 0.2); a's softmax [2, 0] and softmax([2, 0, 0, 3]) over the union, halved
    assert np.allclose(half.arrays["target"][0], [0.56574, 0.07657, 0.01696, 0.34073], atol=1e-5)
    assert np.allclose(half.weights, [0.85, 0.7, 0.5])  # 0.5 * margin [0.7, 0.4, 0] + 0.5
    assert half.info["commit"] == 0.5
    vanilla = get_method("vanilla-kd")
    nothing = m.build(out, m.parse(["score=mc-dropout", "commit=0"]))
    assert np.allclose(nothing.arrays["target"], vanilla.build(out, vanilla.parse([])).arrays["target"], atol=1e-6)
    assert np.allclose(nothing.weights, 1)
    full = m.build(out, m.parse(["score=mc-dropout", "commit=1"]))
    assert np.allclose(full.arrays["target"], m.build(out, m.parse(["paper=true"])).arrays["target"])
    assert m.build(out, m.parse(["score=mc-dropout"])).info["commit"] == 1.0  # auto, nothing measured: MUKI's


def test_commit_auto_falls_back_to_vanilla_kds_target_where_the_pick_starves_a_teacher():
    from dataclasses import replace

    from kamalcli.recipe.recipe import starved, starved_line

    # every row picks teacher a, where vanilla-kd's target credits b with a mean mass of
    # (29.47 - 9.389) / 29.47, 3.718 / 7.437 and 2.649 / 8.085 over the three rows: 0.5144; 0 < 0.25 * 0.5144
    out = replace(outputs(), confidence={"mc-dropout": np.array([[0.9, 0.2], [0.8, 0.7], [0.6, 0.5]])})
    m, vanilla = get_method("muki-hard"), get_method("vanilla-kd")
    guarded = m.build(out, m.parse(["score=mc-dropout"]))
    assert guarded.info["commit"] == 0.0 and guarded.info["chosen_share"] == {"a": 1.0, "b": 0.0}
    assert guarded.info["starved"] == {"b": (0.0, pytest.approx(0.5144, abs=1e-4))}
    assert starved_line(guarded.info["starved"], "pool") == ("commit=auto: the pick starves b 0.0% of pool's rows, "
                                                             "vanilla-kd's target 51.4%: each row learns vanilla-kd's "
                                                             "target instead.")
    assert np.allclose(guarded.arrays["target"], vanilla.build(out, vanilla.parse([])).arrays["target"], atol=1e-6)
    assert np.allclose(guarded.weights, 1)
    # a commit asked for, and MUKI as published, keep the pick; a pick giving b a third of the rows starves nobody
    for asked in (["score=mc-dropout", "commit=1"], ["paper=true"]):
        kept = m.build(out, m.parse(asked))
        assert kept.info["commit"] == 1.0 and "starved" not in kept.info
        assert np.allclose(kept.arrays["target"][:, 2:], 0)
    assert m.build(outputs(), m.parse(["score=mc-dropout"])).info["commit"] == 1.0
    assert starved([1.0, 0.0], [0.5, 0.5]) == [1] and starved([0.9, 0.1], [0.6, 0.4]) == []
    assert starved([0.2, 0.8], [0.98, 0.02]) == [0] and starved([0.5, 0.5], [0.98, 0.02]) == []


def test_a_prior_multiplies_the_target_and_is_renormalised():
    from dataclasses import replace

    prior = np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]])
    out = replace(outputs(), prior=prior)
    m = get_method("muki-hard")
    soft = m.build(out, m.parse(["score=mc-dropout", "commit=0"]))
    # softmax over the concatenated logits ([2, 0, 0, 3], [0, 1, 1, 0], [1, 1, 0.5, 0]) times the prior, row by row
    assert np.allclose(soft.arrays["target"], [[0.07968, 0.02157, 0.03235, 0.86640],
                                               [0.13447, 0.36553, 0.36553, 0.13447],
                                               [0.78000, 0.11143, 0.06758, 0.04099]], atol=1e-5)
    assert soft.info["prior"] == "prototype" and np.allclose(soft.weights, 1)
    # with MUKI's hard target, the picked teacher's block alone, times the prior: row 0 is a's, [2, 0] -> 0.881, 0.119
    hard = m.build(out, m.parse(["score=mc-dropout", "commit=1"]))
    assert np.allclose(hard.arrays["target"][0], [0.78699, 0.21301, 0.0, 0.0], atol=1e-5)
    assert "prior" not in m.build(outputs(), m.parse(["score=mc-dropout", "commit=0"])).info


def test_smooth_averages_the_finished_target_over_each_rows_neighbours(monkeypatch):
    from dataclasses import replace

    from kamalcli.recipe import recipe as module
    from kamalcli.probe.neighbours import smoothed

    m = get_method("muki-hard")
    plain = m.build(outputs(), m.parse(["score=mc-dropout", "commit=0"]))
    neighbours = np.array([[1, 2], [0, 2], [1, 0]])
    smooth = m.build(replace(outputs(), neighbours=neighbours), m.parse(["score=mc-dropout", "commit=0"]))
    assert np.allclose(smooth.arrays["target"], smoothed(plain.arrays["target"], neighbours), atol=1e-6)
    assert smooth.info["smooth"] == 2 and "smooth" not in plain.info
    monkeypatch.setattr(module, "SMOOTH_NEIGHBOURS", 7)  # the tests' conftest turns auto off
    assert m.parse([]).neighbours == 7 and m.parse(["smooth=4"]).neighbours == 4
    assert m.parse(["smooth=0"]).neighbours == 0 and m.parse(["paper=true"]).neighbours == 0


def test_pick_smooth_picks_by_the_confidence_averaged_over_each_rows_neighbours(monkeypatch):
    from dataclasses import replace

    from kamalcli.recipe import recipe as module

    m = get_method("muki-hard")
    near = replace(outputs(), pick_neighbours=np.array([[1], [0], [0]]))
    # confidences [0.9, 0.2], [0.3, 0.7], [0.5, 0.5] averaged with row 1's, row 0's, row 0's:
    # [0.6, 0.45], [0.6, 0.45], [0.7, 0.35]: teacher a for every row (row 1 was b's)
    smooth = m.build(near, m.parse(["score=mc-dropout", "commit=1", "pick_smooth=1", "reweight=true"]))
    assert smooth.info["chosen_share"] == {"a": 1.0, "b": 0.0}
    assert np.allclose(smooth.arrays["target"][1], [0.26894, 0.73106, 0, 0], atol=1e-5)  # a's softmax([0, 1])
    assert np.allclose(smooth.weights, [0.15, 0.15, 0.35])  # the margins of the averaged confidences
    assert smooth.info["pick_smooth"] == {"neighbours": 1, "used": True, "agreement": 0.3333, "chance": 0.5556,
                                          "kappa": -0.5}
    # auto: the neighbours' picks (b, a, a for rows a, b, a) agree 1 time in 3, below chance: the pick stays
    monkeypatch.setattr(module, "PICK_NEIGHBOURS", 1)  # the tests' conftest turns auto off
    auto = m.build(near, m.parse(["score=mc-dropout", "commit=1"]))
    plain = m.build(outputs(), m.parse(["score=mc-dropout", "commit=1"]))
    assert np.allclose(auto.arrays["target"], plain.arrays["target"]) and not auto.info["pick_smooth"]["used"]
    assert "pick_smooth" not in plain.info
    # vanilla-kd's target (commit=0) reads no pick: nothing to smooth
    assert "pick_smooth" not in m.build(near, m.parse(["score=mc-dropout", "commit=0", "pick_smooth=1"])).info
    soft = get_method("muki-soft")
    assert soft.build(near, soft.parse(["score=mc-dropout", "pick_smooth=1"])).info["pick_smooth"]["used"]
    assert m.parse([]).pick_neighbours == 1 and m.parse(["pick_smooth=4"]).pick_neighbours == 4
    assert m.parse(["pick_smooth=0"]).pick_neighbours == 0 and m.parse(["paper=true"]).pick_neighbours == 0


def test_margin():
    assert np.allclose(margin(np.array([[0.1, 0.9, 0.5], [0.4, 0.4, 0.0]])), [0.4, 0.0])


@pytest.mark.parametrize("pairs, message", [
    (["tau"], "write it as key=value"),
    (["nope=1"], "has no option 'nope'"),
    (["tau=abc"], "tau must be a number"),
    (["mc=maybe"], "must be true or false"),
    (["tau=0"], "tau must be above 0"),
    (["score=magic"], "must be one of auto, mc-dropout, entropy, max-prob, energy, rmd"),
    (["paper=true", "score=rmd"], "paper=true selects by MC dropout"),
    (["commit=0.5"], "has no option 'commit'"),  # muki-soft weighs the teachers already
])
def test_option_errors(pairs, message):
    with pytest.raises(KamalError, match=message):
        get_method("muki-soft").parse(pairs)


@pytest.mark.parametrize("pairs, message", [
    (["commit=1.5"], "commit must be between 0 and 1"),
    (["commit=most"], "commit must be a number or auto"),
    (["paper=true", "commit=0.5"], "paper=true is MUKI's hard target"),
    (["paper=true", "prior=prototype"], "paper=true is MUKI's hard target: drop prior="),
    (["prior=always"], "prior must be one of auto, prototype, none"),
    (["smooth=-1"], "smooth must be a number of rows, 0 or more"),
    (["smooth=some"], "smooth must be a number or auto"),
    (["paper=true", "smooth=5"], "paper=true is MUKI's hard target: drop smooth="),
    (["pick_smooth=-1"], "pick_smooth must be a number of rows, 0 or more"),
    (["paper=true", "pick_smooth=5"], "paper=true picks row by row: drop pick_smooth="),
])
def test_commit_errors(pairs, message):
    with pytest.raises(KamalError, match=message):
        get_method("muki-hard").parse(pairs)


def test_registry_lists_every_method_with_defaults():
    assert {"muki-hard", "muki-soft", "vanilla-kd", "uhc", "ensemble", "teacher", "merge"} <= set(REGISTRY)
    assert get_method("muki-soft").defaults()["tau"] == 0.2
    assert not get_method("ensemble").trains
    with pytest.raises(KamalError, match="unknown method 'dfb'"):
        get_method("dfb")
