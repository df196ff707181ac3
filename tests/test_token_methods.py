"""Golden values for token-level amalgamation: entity-only confidence, MUKI targets per word (including
the every-teacher-says-O case), vanilla-kd's merged O, the masked per-word losses, and entity P/R/F1."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kamalcli.data.entities import entity_scores, spans
from kamalcli.errors import KamalError
from kamalcli.labels import LabelSpace
from kamalcli.methods.losses import word_cross_entropy
from kamalcli.methods.muki import MukiHardOptions, MukiSoftOptions, build_token_muki_hard, build_token_muki_soft
from kamalcli.methods.uhc import UHCOptions, build_token_uhc
from kamalcli.methods.vanilla_kd import KDOptions, build_token_vanilla_kd, union_word_logits
from kamalcli.probe.tokens import TokenTeacherOutputs, entity_confidence, selected_targets

A_TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
B_TAGS = ["O", "B-ORG", "I-ORG"]


def _outputs(prob_a, prob_b, words=None, mc=False):
    """One sentence of len(prob_a) words; teachers given by probabilities (logits = log p)."""
    space = LabelSpace.from_teachers([("a", A_TAGS), ("b", B_TAGS)])
    pa, pb = np.asarray(prob_a, dtype=np.float64)[None], np.asarray(prob_b, dtype=np.float64)[None]
    words = np.ones(pa.shape[:2], dtype=bool) if words is None else np.asarray(words)[None]
    with np.errstate(divide="ignore"):  # log 0 = -inf: a tag the teacher never gives
        za, zb = np.log(pa).astype(np.float32), np.log(pb).astype(np.float32)
    return TokenTeacherOutputs(space, ("a", "b"), (za, zb),
                               (pa.astype(np.float32) if mc else None, pb.astype(np.float32) if mc else None), words)


def test_union_has_one_o_and_every_teachers_tags():
    space = LabelSpace.from_teachers([("a", A_TAGS), ("b", B_TAGS)])
    assert space.names == ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG")
    assert space.blocks["b"] == (0, 5, 6)


def test_entity_confidence_ignores_o():
    # O 0.9 and the rest split 0.08 / 0.02 / 0 / 0: renormalised (0.8, 0.2, 0, 0) over |E| = 4
    c = entity_confidence(np.array([0.9, 0.08, 0.02, 0.0, 0.0]), 0)
    h = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    assert c == pytest.approx(1 - h / math.log(4), abs=1e-9)
    assert c == pytest.approx(0.63904, abs=1e-5)
    # a uniform entity distribution is 0 whatever O holds; one entity tag only is certain
    assert entity_confidence(np.array([0.99, 0.0025, 0.0025, 0.0025, 0.0025]), 0) == pytest.approx(0.0, abs=1e-9)
    assert entity_confidence(np.array([0.5, 0.5]), 0) == 1.0


def test_muki_hard_picks_by_entity_confidence_and_averages_all_o_words():
    prob_a = [[0.1, 0.85, 0.05, 0.0, 0.0],     # word 0: a says B-PER, sure among its entity tags
              [0.9, 0.025, 0.025, 0.025, 0.025]]  # word 1: a says O
    prob_b = [[0.97, 0.02, 0.01],              # word 0: b says O, entity tags (2/3, 1/3)
              [0.8, 0.1, 0.1]]                 # word 1: b says O too
    out = _outputs(prob_a, prob_b)
    objective = build_token_muki_hard(out, MukiHardOptions(score="entropy", reweight=False))
    target = objective.arrays["target"][0]
    # word 0: c_a = 1 - H(0.85/0.9, 0.05/0.9)/log 4 = 0.84532 > c_b = 1 - H(2/3, 1/3)/log 2 = 0.08170: a's distribution
    np.testing.assert_allclose(target[0], [0.1, 0.85, 0.05, 0.0, 0.0, 0.0, 0.0], atol=1e-6)
    # word 1: every teacher says O -> the mean of both padded distributions
    np.testing.assert_allclose(target[1], [0.85, 0.0125, 0.0125, 0.0125, 0.0125, 0.05, 0.05], atol=1e-6)
    assert objective.info["contested_words"] == 1 and objective.info["all_o_words"] == 1
    assert objective.info["chosen_share_contested"] == {"a": 1.0, "b": 0.0}


def test_muki_soft_mixes_by_softmax_of_entity_confidence():
    padded = np.array([[[[0.2, 0.8, 0.0]]], [[[0.6, 0.0, 0.4]]]])       # (N=2, n=1, W=1, |Y|=3)
    confidence = np.array([[[0.9, 0.5]]])
    target = selected_targets(padded, confidence, np.array([[False]]), tau=0.2)
    w = 1 / (1 + math.exp(-(0.9 - 0.5) / 0.2))                            # softmax weight of teacher 0 = 0.880797
    np.testing.assert_allclose(target[0, 0], [0.2 * w + 0.6 * (1 - w), 0.8 * w, 0.4 * (1 - w)], atol=1e-9)
    np.testing.assert_allclose(target[0, 0], [0.247681, 0.704638, 0.047681], atol=1e-6)
    hard = selected_targets(padded, confidence, np.array([[False]]), tau=None)
    np.testing.assert_allclose(hard[0, 0], [0.2, 0.8, 0.0])
    # every teacher says O: the plain mean, whatever the confidences
    np.testing.assert_allclose(selected_targets(padded, confidence, np.array([[True]]), tau=0.2)[0, 0], [0.4, 0.4, 0.2])


def test_muki_soft_builder_and_margin_weights():
    out = _outputs([[0.1, 0.85, 0.05, 0.0, 0.0]], [[0.97, 0.02, 0.01]], mc=True)
    objective = build_token_muki_soft(out, MukiSoftOptions(tau=0.2))   # reweight=auto: per-word margin here
    assert objective.arrays["word_weight"][0, 0] == pytest.approx(0.84532 - 0.08170, abs=1e-4)
    assert objective.info["score"] == "mc-dropout" and objective.info["reweight"] == "margin"
    with pytest.raises(KamalError, match=r"^reweight=per-teacher is not supported at token level"):
        build_token_muki_soft(out, MukiSoftOptions(tau=0.2, reweight="per-teacher"))


def test_vanilla_kd_adds_the_teachers_o_classes_into_one_o():
    out = _outputs([[0.5, 0.3, 0.1, 0.05, 0.05]], [[0.6, 0.3, 0.1]])
    z = union_word_logits(out)[0, 0]
    # softmax over the 8 concatenated logits (log p): each teacher's block sums to 1, so Z = 2
    p = np.exp(z - np.logaddexp.reduce(z))
    np.testing.assert_allclose(p, [(0.5 + 0.6) / 2, 0.15, 0.05, 0.025, 0.025, 0.15, 0.05], atol=1e-6)
    target = build_token_vanilla_kd(out, KDOptions()).arrays["target"][0, 0]
    np.testing.assert_allclose(target, p, atol=1e-6)


def _batch(objective, positions):
    import torch

    batch = {k: torch.as_tensor(v) for k, v in objective.arrays.items()}
    batch["positions"] = torch.as_tensor(positions)
    return batch


def test_word_loss_reads_first_sub_tokens_only_and_masks_the_rest():
    import torch

    out = _outputs([[0.1, 0.85, 0.05, 0.0, 0.0], [0.9, 0.025, 0.025, 0.025, 0.025]],
                   [[0.97, 0.02, 0.01], [0.8, 0.1, 0.1]], words=[True, False])
    objective = build_token_muki_hard(out, MukiHardOptions(score="entropy", reweight=False))
    # sub-tokens: [CLS] w0a w0b w1 [SEP] pad: word 0 at 1, word 1 at 3 (not seen by the teachers: masked)
    logits = torch.zeros(1, 6, 7)
    logits[0, 2] = 50.0  # a later sub-token of word 0, padding: must not matter
    logits[0, 5] = -50.0
    loss = objective.loss(logits, _batch(objective, [[1, 3]]))
    target = objective.arrays["target"][0, 0]
    expected = float((target[target > 0] * np.log(target[target > 0] * 7)).sum())  # KL(target || uniform over 7)
    assert loss.shape == (1,)
    assert float(loss[0]) == pytest.approx(expected, abs=1e-5)
    assert float(loss[0]) == pytest.approx(1.42772, abs=1e-4)


def test_uhc_per_word_matches_each_teacher_on_its_block():
    import torch

    out = _outputs([[0.5, 0.3, 0.1, 0.05, 0.05]], [[0.6, 0.3, 0.1]])
    objective = build_token_uhc(out, UHCOptions())
    logits = torch.zeros(1, 3, 7)  # uniform student: renormalised over a's 5 tags and b's 3 tags
    loss = float(objective.loss(logits, _batch(objective, [[1]]))[0])
    pa, pb = np.array([0.5, 0.3, 0.1, 0.05, 0.05]), np.array([0.6, 0.3, 0.1])
    expected = (pa * np.log(pa * 5)).sum() + (pb * np.log(pb * 3)).sum()
    assert loss == pytest.approx(expected, abs=1e-5)
    assert loss == pytest.approx(0.57251, abs=1e-4)


def test_supervised_word_cross_entropy_ignores_missing_words():
    import torch

    logits = torch.zeros(1, 4, 3)
    logits[0, 1] = torch.tensor([2.0, 0.0, 0.0])
    batch = {"positions": torch.tensor([[1, 2, -1]]), "tags": torch.tensor([[0, 1, -1]])}
    ce = float(word_cross_entropy(logits, batch)[0])
    expected = (-math.log(math.exp(2) / (math.exp(2) + 2)) + math.log(3)) / 2
    assert ce == pytest.approx(expected, abs=1e-6)
    assert ce == pytest.approx(0.66908, abs=1e-5)


def test_spans_follow_seqeval_chunking():
    assert spans(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    assert spans(["I-PER", "I-PER", "B-PER", "I-LOC"]) == [("PER", 0, 2), ("PER", 2, 3), ("LOC", 3, 4)]
    assert spans(["O", "O"]) == []


def test_entity_scores_seqeval_readme_example():
    # seqeval's README: f1_score 0.50; MISC 0/0/0 (support 1), PER 1/1/1 (support 1)
    gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    scores = entity_scores(gold, pred)
    assert scores["entity_f1"] == pytest.approx(0.5)
    assert scores["entity_precision"] == pytest.approx(0.5) and scores["entity_recall"] == pytest.approx(0.5)
    assert scores["per_type"]["MISC"]["f1"] == 0.0 and scores["per_type"]["PER"]["f1"] == 1.0
    assert scores["entity_macro_f1"] == pytest.approx(0.5)


def test_entity_scores_precision_and_recall_differ():
    gold = [["B-PER", "I-PER", "O", "B-LOC", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]]
    s = entity_scores(gold, pred)
    assert (s["entity_precision"], s["entity_recall"]) == (pytest.approx(2 / 3), 1.0)
    assert s["entity_f1"] == pytest.approx(0.8)
    assert s["per_type"]["LOC"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1,
                                    "predicted": 2}


def test_token_selection_golden():
    from kamalcli.probe.tokens import token_selection

    out = _outputs([[0.1, 0.85, 0.05, 0.0, 0.0], [0.9, 0.025, 0.025, 0.025, 0.025], [0.9, 0.025, 0.025, 0.025, 0.025]],
                   [[0.97, 0.02, 0.01], [0.8, 0.18, 0.02], [0.9, 0.05, 0.05]])
    s = token_selection(out, [["B-PER", "B-ORG", "O"]], mc=False)
    # word 0 (PER): entity-only picks a (0.845 > 0.082), with O picks b (0.860 > 0.678): a is right
    # word 1 (ORG): entity-only picks b (0.531 > 0.0), with O picks a (0.712 > 0.485): b is right
    assert s["entity_words"] == 2
    assert s["selection_entity_only"] == 1.0 and s["selection_with_o"] == 0.0
    # word 1: every teacher says O, so the target is the mean (argmax O): right on 1 of 2 entity words, 2 of 3 words
    assert s["entity_words_all_teachers_o"] == 0.5
    assert s["hard_target_right_entity_words"] == 0.5
    assert s["hard_target_right_all_words"] == pytest.approx(2 / 3)
    assert s["score"] == "entropy"


def test_token_level_muki_refuses_smooth_in_one_line():
    out = _outputs([[0.1, 0.85, 0.05, 0.0, 0.0]], [[0.97, 0.02, 0.01]])
    with pytest.raises(KamalError, match=r"^smooth= is not supported at token level \(drop it\)$"):
        build_token_muki_hard(out, MukiHardOptions(score="entropy", smooth=3))
    build_token_muki_hard(out, MukiHardOptions(score="entropy", smooth=0))  # off: nothing to refuse
