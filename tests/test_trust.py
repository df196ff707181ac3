"""What a student says about itself (issue 33): the scope score, conformal prediction sets, the label queue and
amalgamate --gold. Golden values for the maths; the CLI end to end, exports included."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from kamalcli.errors import KamalError
from kamalcli.probs import auroc
from kamalcli.trust import conformal
from kamalcli.trust.scope import fit_scope, load_scope, scope_scores

from conftest import unfolded, TRAIN


# -- golden values ----------------------------------------------------------------------------------------

def test_auroc_golden():
    # pairs (in, out): (0.9, 0.1) (0.9, 0.5) (0.4, 0.1) win, (0.4, 0.5) loses; a tie counts half
    assert auroc(np.array([0.9, 0.4]), np.array([0.1, 0.5])) == pytest.approx(0.75)
    assert auroc(np.array([1.0]), np.array([1.0, 0.0])) == pytest.approx(0.75)
    assert np.isnan(auroc(np.array([1.0]), np.array([])))


def test_conformal_threshold_sets_and_coverage_golden():
    probs = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]])
    gold = np.array([0, 1, 1, 0])
    # nonconformity 1 - p(true): 0.3, 0.6, 0.4, 0.7; coverage 0.6 with n = 4: the ceil(5 * 0.6) = 3rd smallest
    cal = conformal.calibrate(probs, gold, 0.6, data="d")
    assert cal.threshold == pytest.approx(0.6) and cal.rows == 4 and not cal.complete
    # a label is in when p >= 1 - 0.6 = 0.4
    assert cal.sets(probs, ["a", "b", "c"]) == [["a"], ["a", "b"], ["b"], ["c"]]
    assert conformal.coverage_and_size(cal.members(probs), gold) == pytest.approx((0.75, 1.25))
    # 0.8 asks for the ceil(5 * 0.8) = 4th of 4; 0.9 for a 5th that does not exist: every label
    assert conformal.calibrate(probs, gold, 0.8).threshold == pytest.approx(0.7)
    assert conformal.calibrate(probs, gold, 0.9).complete
    assert [conformal.rows_needed(c) for c in (0.8, 0.9, 0.95)] == [4, 9, 19]
    assert conformal.Calibration.from_json(cal.as_json()) == cal


def test_the_coverage_of_one_calibration_draw_follows_its_beta_law_golden():
    # Beta(ceil((n + 1) c), n + 1 - ceil((n + 1) c)) 5% and 95% quantiles, from scipy.stats.beta.ppf
    assert conformal.coverage_spread(100, 0.9) == pytest.approx((0.8482045713864065, 0.94473676231713), abs=1e-9)
    assert conformal.coverage_spread(1000, 0.9) == pytest.approx((0.884075488583474, 0.9152152323315307), abs=1e-9)
    assert conformal.coverage_spread(20, 0.8) == pytest.approx((0.6563361956857181, 0.9286461156913818), abs=1e-9)
    assert conformal.coverage_spread(50000, 0.95) == pytest.approx((0.9483876720891473, 0.9515938618696593), abs=1e-8)
    assert conformal.coverage_spread(5, 0.9) is None  # too few rows: every set holds every label


@pytest.mark.parametrize("coverage", [0.0, 1.0, -0.5, 1.5])
def test_conformal_refuses_coverage_outside_zero_one(coverage):
    with pytest.raises(KamalError, match="strictly between 0 and 1"):
        conformal.calibrate(np.array([[0.5, 0.5]]), np.array([0]), coverage)


def test_scope_scores_golden_and_threshold_keeps_the_share_asked():
    logits = np.array([[2.0, 0.0], [0.0, 0.0]])
    assert scope_scores("energy", logits) == pytest.approx([2.126928, 0.693147], abs=1e-6)
    assert scope_scores("msp", logits) == pytest.approx([0.880797, 0.5], abs=1e-6)
    values = np.arange(100, dtype=float)
    fitted = fit_scope(np.stack([values, np.zeros(100)], axis=1), score="msp", keep=0.9)
    kept = fitted.in_scope(fitted.scores(np.stack([values, np.zeros(100)], axis=1)))
    assert kept.mean() == pytest.approx(0.9, abs=0.011)
    with pytest.raises(KamalError, match="between 0 and 1"):
        fit_scope(np.zeros((30, 2)), score="energy", keep=1.0)
    with pytest.raises(KamalError, match="at least 20"):
        fit_scope(np.zeros((5, 2)), score="energy")


def test_rmd_scope_flags_far_rows_and_keeps_new_near_ones(tmp_path):
    rng = np.random.default_rng(0)
    centres = np.array([[4.0, 0, 0, 0], [-4.0, 0, 0, 0]])
    def rows(n, centre, seed):
        return np.random.default_rng(seed).normal(size=(n, 4)) + centre
    fit = np.concatenate([rows(200, centres[0], 1), rows(200, centres[1], 2)])
    logits = np.stack([fit[:, 0], -fit[:, 0]], axis=1)
    scope = fit_scope(logits, fit, score="rmd", keep=0.95)
    fresh = np.concatenate([rows(500, centres[0], 3), rows(500, centres[1], 4)])
    far = rng.normal(size=(300, 4)) + np.array([0.0, 6.0, 0, 0])
    kept = scope.in_scope(scope.scores(None, fresh)).mean()
    # the out-of-fold threshold keeps close to the share asked of new rows from the same distribution
    assert 0.90 <= kept <= 0.99
    assert scope.in_scope(scope.scores(None, far)).mean() < 0.05
    scope.save(tmp_path)
    again = load_scope(tmp_path)
    assert again.threshold == scope.threshold and np.allclose(again.scores(None, far), scope.scores(None, far))


def test_gold_loss_adds_cross_entropy_on_labelled_rows_only():
    import torch

    from kamalcli.train.objective import Objective, with_gold

    base = Objective({"x": np.zeros(3, dtype=np.float32)}, lambda logits, batch: torch.ones(len(logits)))
    objective = with_gold(base, np.array([1, -1, 0]), weight=2.0)
    logits = torch.tensor([[0.0, 0.0], [5.0, 0.0], [0.0, 0.0]])
    batch = {"gold_label": torch.tensor([1, -1, 0]), "x": torch.zeros(3)}
    # CE of a uniform pair is log 2; the unlabelled row keeps the method's loss alone
    assert objective.loss(logits, batch).tolist() == pytest.approx([1 + 2 * np.log(2), 1.0, 1 + 2 * np.log(2)])
    assert objective.info["gold"] == {"rows": 2, "weight": 2.0}


def test_label_queue_signals_and_spread_golden():
    from types import SimpleNamespace

    from kamalcli.students.label_queue import margin, spread_out, teachers_disagree

    outputs = SimpleNamespace(logits=(np.log(np.array([[3.0, 1.0], [1.0, 1.0]])), np.log(np.array([[4.0], [2.0]]))))
    # mass of teacher a: 4/8 and 2/4 -> both 0.5 shared: disagreement 0.5
    assert teachers_disagree(outputs) == pytest.approx([0.5, 0.5])
    assert margin(np.array([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2]])) == pytest.approx([0.2, 0.0])
    priority = np.array([0.9, 0.89, 0.5, 0.1])
    vectors = np.array([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0], [0.7, 0.7]])
    # row 1 is a near copy of row 0: never taken while others remain
    assert spread_out(priority, vectors, 3) == [0, 2, 3]


def test_label_queue_mixed_rows_golden():
    from kamalcli.students.label_queue import mixed

    # the seed-0 draw of 20 rows begins 4, 19, 6, 2: rows 6 (informed) is skipped
    assert mixed([5, 6, 7, 8], 3, 20, 0) == [5, 4, 6, 19, 7, 2, 8]
    assert mixed([4], 2, 20, 0) == [4, 19, 6]  # an informed row is never drawn again
    assert mixed([1, 2], 0, 20, 0) == [1, 2]


def test_label_queue_balanced_and_representative_rows_golden():
    from kamalcli.students.label_queue import balanced, representatives

    predicted = np.array([0, 0, 0, 0, 1, 1, 2])
    rows = balanced(predicted, 5, seed=0)
    # classes in turn, the largest first (0, 1, 2, 0, 1): each row once, random within its class
    assert [int(predicted[i]) for i in rows] == [0, 1, 2, 0, 1] and len(set(rows)) == 5
    assert balanced(predicted, 5, seed=0) == rows and sorted(balanced(predicted, 7, seed=3)) == list(range(7))
    # three tight groups of unequal size: one row from each, the largest group's first, each its group's centre
    angles = np.array([0.0, 0.02, -0.02, 0.01, 2.0, 2.03, 1.97, 4.0, 4.02])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    picked = representatives(vectors, 3, seed=0)
    assert picked[0] in (0, 3) and sorted(picked[1:]) == [4, 7]  # 0.0 / 0.01 are equally near group 1's centre
    assert representatives(vectors, 3, seed=0) == picked and len(set(representatives(vectors, 9, seed=1))) == 9


# -- the command line --------------------------------------------------------------------------------------

def test_amalgamate_fits_a_scope_that_predict_eval_and_the_onnx_export_share(kd_student, ws, assets, tmp_path):
    record = next(s for s in kd_student.json("students") if s["name"] == "kd")
    assert record["scope"]["rows"] == 240 and record["scope"]["keep"] == 0.95
    # round 4, item 4: this tiny student may put every transfer row in one class; then rmd falls back to energy
    assert (record["scope"]["score"], "note" in record["scope"]) in (("rmd", False), ("energy", True))
    folder = ws / ".kamal" / "artifacts" / "students" / "kd"
    assert (folder / "scope.npz").is_file()
    texts = ["goal match league coach", "market bank revenue", "doctor clinic nurse therapy", "zzz qqq"]
    torch_side = kd_student.json("predict", "kd", *texts)
    assert all(isinstance(r["in_scope"], bool) and isinstance(r["scope_score"], float) for r in torch_side)
    assert "set" not in torch_side[0]  # not calibrated yet
    metrics = kd_student.json("eval", "kd", "--data", "test")
    assert 0.0 <= metrics["scope"]["flagged"] <= 1.0 and metrics["scope"]["auroc"] is None  # every gold label known
    kd_student("export", "kd", "--onnx")
    onnx_side = kd_student.json("predict", "kd", "--onnx", *texts)
    for a, b in zip(onnx_side, torch_side):
        assert a["scope_score"] == pytest.approx(b["scope_score"], rel=1e-3, abs=1e-3)
        assert a["in_scope"] == b["in_scope"]
    export = json.loads((ws / ".kamal" / "artifacts" / "exports" / "kd" / "export.json").read_text())
    assert export["outputs"] == ["logits", "features"] and export["parity"]["features_max_abs_diff"] < 1e-3
    assert "Out of scope" in (ws / ".kamal" / "artifacts" / "exports" / "kd" / "README.md").read_text()
    kd_student("export", "kd", "--hf", "--out", tmp_path / "hf")
    assert hf_scope_scores(tmp_path / "hf", texts) == pytest.approx([r["scope_score"] for r in torch_side], abs=1e-4)


def hf_scope_scores(folder, texts):
    """What a user of the Hugging Face export computes, as its card says: transformers' last-layer first-token
    vector and the export's scope.npz."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    scope = load_scope(folder)
    scores = []
    with torch.no_grad():
        for text in texts:
            out = model(**tokenizer(text, truncation=True, max_length=32, return_tensors="pt"), output_hidden_states=True)
            scores.append(float(scope.scores(out.logits.numpy(), out.hidden_states[-1][:, 0].numpy())[0]))
    return scores


def test_eval_reports_how_well_the_scope_flags_labels_no_teacher_knows(kd_student, assets):
    kd_student("add-data", assets["test6"], "--name", "test6", "--role", "eval")
    metrics = kd_student.json("eval", "kd", "--data", "test6")
    scope = metrics["scope"]
    assert 0.0 <= scope["auroc"] <= 1.0 and scope["flagged_unknown"] is not None
    assert "flagged out of scope" in kd_student("eval", "kd", "--data", "test6").stdout


def test_calibrate_gives_sets_in_predict_eval_and_exports(kd_student, ws):
    out = kd_student("calibrate", "kd", "--data", "test", "--coverage", "0.8")
    assert "calibrated on 80 rows of test for coverage 0.8" in out.stdout
    # Beta(65, 16): 5% and 95% quantiles 72.6% and 87.0%; with 800 rows Beta(641, 160): 77.7% and 82.3%
    assert ("with 80 rows one draw's coverage lies in 72.6-87.0% nine times in ten (800 rows: 77.7-82.3%)"
            in unfolded(out.stdout))
    record = next(s for s in kd_student.json("students") if s["name"] == "kd")
    assert record["calibration"]["coverage"] == 0.8 and record["calibration"]["rows"] == 80
    assert f"{record['scope']['score']}, keeps 95.0%; sets 80.0%" in kd_student("students").stdout
    rows = kd_student.json("predict", "kd", "market bank revenue", "goal match")
    assert all(isinstance(r["set"], list) for r in rows)
    sets = kd_student.json("eval", "kd", "--data", "test")["conformal"]
    # calibrated and measured on the same 80 rows: coverage at least the ceil(81 * 0.8) / 80 the threshold took
    assert sets["coverage"] >= 0.8 and sets["coverage_asked"] == 0.8 and 1.0 <= sets["mean_set_size"] <= 4.0
    kd_student("export", "kd", "--onnx")
    assert [r["set"] for r in kd_student.json("predict", "kd", "--onnx", "market bank revenue", "goal match")] == \
        [r["set"] for r in rows]
    assert "Prediction sets" in (ws / ".kamal" / "artifacts" / "exports" / "kd" / "README.md").read_text()


def test_calibrate_and_scope_refuse_bad_input_in_one_line(kd_student, assets, tmp_path):
    assert "has no gold labels" in kd_student("calibrate", "kd", "--data", "pool", code=2).stderr
    kd_student("add-data", assets["test6"], "--name", "test6", "--role", "eval")
    before = kd_student.db_snapshot()
    err = kd_student("calibrate", "kd", "--data", "test6", code=2).stderr
    assert "does not know (arts, health)" in err and err.count("\n") == 1
    for coverage in ("0", "1", "1.5"):
        assert "strictly between 0 and 1" in kd_student("calibrate", "kd", "--data", "test", "--coverage", coverage,
                                                        code=2).stderr
    assert "between 0 and 1" in kd_student("scope", "kd", "--keep", "1.2", code=2).stderr
    kd_student("add-data", assets["test"], "--name", "held", "--role", "test")
    before = kd_student.db_snapshot()
    err = kd_student("calibrate", "kd", "--data", "held", code=2).stderr
    assert "held is a test set, which kamal only measures on" in err and err.count("\n") == 1
    assert kd_student.db_snapshot() == before
    assert "Prediction" not in kd_student("eval", "kd", "--data", "test").stdout


def test_scope_refits_on_other_data(kd_student):
    fitted = kd_student.json("scope", "kd", "--data", "test", "--keep", "0.9", "--score", "energy")
    assert (fitted["score"], fitted["rows"], fitted["keep"], fitted["data"]) == ("energy", 80, 0.9, "test")
    rows = kd_student.json("predict", "kd", "market bank revenue")
    record = next(s for s in kd_student.json("students") if s["name"] == "kd")
    assert record["scope"]["score"] == "energy"
    assert rows[0]["in_scope"] == (rows[0]["scope_score"] >= record["scope"]["threshold"])


def test_label_queue_writes_rows_to_fill_and_gold_trains_on_them(kd_student, assets, tmp_path):
    out = tmp_path / "queue.csv"
    kd_student("label-queue", "--data", "pool", "--n", "12", "--out", out, "--student", "kd")
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 and len({r["text"] for r in rows}) == 12
    assert set(rows[0]) >= {"row", "text", "label", "suggested", "candidates", "priority", "teachers_disagree",
                            "small_margin", "student_unsure"}
    priorities = [float(r["priority"]) for r in rows]
    assert max(priorities) == priorities[0]
    assert "exists" in kd_student("label-queue", "--data", "pool", "--n", "3", "--out", out, code=2).stderr
    assert "has 240 rows" in kd_student("label-queue", "--data", "pool", "--n", "999", "--out", tmp_path / "q.jsonl",
                                        code=2).stderr
    assert ".csv or .jsonl" in kd_student("label-queue", "--data", "pool", "--n", "3", "--out", tmp_path / "q.txt",
                                          code=2).stderr
    drawn = {}
    for strategy, seed in (("random", 0), ("random", 1), ("balanced", 0), ("diverse", 0), ("mixed", 1)):
        result = kd_student.json("label-queue", "--data", "pool", "--n", "12", "--out", tmp_path / f"{strategy}{seed}.csv",
                                 "--strategy", strategy, "--seed", seed, "--encoder", assets["encoder"])
        assert result["strategy"] == strategy and len({r["text"] for r in result["rows"]}) == 12
        drawn[strategy, seed] = [r["row"] for r in result["rows"]]
    again = kd_student.json("label-queue", "--data", "pool", "--n", "12", "--out", tmp_path / "again.csv",
                            "--strategy", "random")
    assert [r["row"] for r in again["rows"]] == drawn["random", 0] != drawn["random", 1]  # the seed is the draw
    suggested = [r["suggested"] for r in kd_student.json("label-queue", "--data", "pool", "--n", "12", "--out",
                                                          tmp_path / "b.csv", "--strategy", "balanced")["rows"]]
    assert max(suggested.count(s) for s in suggested) - min(suggested.count(s) for s in set(suggested)) <= 1
    assert "'sometimes' is not one of" in kd_student("label-queue", "--data", "pool", "--n", "3", "--out",
                                                     tmp_path / "s.csv", "--strategy", "sometimes", code=2).stderr
    truth = {json.loads(line)["text"]: json.loads(line)["label"] for line in open(assets["train"])}
    for r in rows:  # the user fills in the labels (here: the pool's own topics, by keyword from the generator)
        r["label"] = truth.get(r["text"], r["suggested"])
    filled = tmp_path / "filled.csv"
    with open(filled, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    kd_student("add-data", filled, "--name", "gold", "--label-column", "label")
    result = kd_student("amalgamate", "--method", "vanilla-kd", "--name", "kd-gold", "--data", "pool", "--gold", "gold",
                        "--student", assets["encoder"], *TRAIN)
    assert "Gold labels of gold: 12 transfer rows learn their label" in result.stderr
    record = next(s for s in kd_student.json("students") if s["name"] == "kd-gold")
    assert record["train"]["gold"] == "gold" and record["train"]["objective"]["gold"]["rows"] == 12


def test_gold_refuses_data_without_labels_or_with_unknown_ones(kd_student, assets, tmp_path):
    args = ["amalgamate", "--method", "vanilla-kd", "--student", assets["encoder"], *TRAIN, "--data", "pool"]
    assert "has no labels" in kd_student(*args, "--gold", "pool", code=2).stderr
    kd_student("add-data", assets["test6"], "--name", "test6", "--role", "eval")
    before = kd_student.db_snapshot()
    assert "none of the teachers knows: arts, health" in kd_student(*args, "--gold", "test6", code=2).stderr
    assert kd_student.db_snapshot() == before


def test_predict_table_marks_out_of_scope_rows_and_shows_sets(capsys):
    from kamalcli.cli.student_cmds import _print_labels

    _print_labels([{"text": "t", "label": "a", "probability": 0.6, "top": [{"label": "a", "probability": 0.6}],
                    "in_scope": False, "scope_score": -3.0, "set": ["a", "b"]},
                   {"text": "u", "label": "b", "probability": 0.9, "top": [{"label": "b", "probability": 0.9}],
                    "in_scope": True, "scope_score": 1.0}])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["a\t0.600\tt\t[out of scope]\tset: {a, b}", "b\t0.900\tu"]


# round 4, item 2
def test_predict_onnx_answers_with_the_scope_and_calibration_refitted_after_the_export(kd_student):
    kd_student("export", "kd", "--onnx")
    kd_student("scope", "kd", "--data", "test", "--score", "energy", "--keep", "0.6")
    kd_student("calibrate", "kd", "--data", "test", "--coverage", "0.8")
    texts = ["goal match league coach", "market bank revenue", "telescope genome physics", "zzz qqq", "the embassy"]
    torch_side = kd_student.json("predict", "kd", *texts)
    result = kd_student("predict", "kd", "--onnx", "--json", *texts)
    onnx_side = json.loads(result.stdout)
    assert [r.get("set") for r in onnx_side] == [r["set"] for r in torch_side]
    assert [r["in_scope"] for r in onnx_side] == [r["in_scope"] for r in torch_side]
    assert not all(r["in_scope"] for r in torch_side)  # the refitted energy scope keeps 60%: it flags some
    for a, b in zip(onnx_side, torch_side):
        assert a["scope_score"] == pytest.approx(b["scope_score"], abs=1e-3)
    assert "kd's scope and calibration changed since its ONNX export" in result.stderr
    assert "kamal export kd --onnx --force" in result.stderr
    assert all(len(line) <= 160 for line in result.stderr.splitlines())
    kd_student("export", "kd", "--onnx", "--force")  # the export now carries them: nothing to say
    assert "changed since" not in kd_student("predict", "kd", "--onnx", *texts).stderr


# round 4, item 4
def test_an_rmd_scope_over_one_predicted_class_falls_back_to_energy():
    rng = np.random.default_rng(0)
    logits = np.stack([rng.normal(3.0, 1.0, 40), rng.normal(0.0, 0.1, 40)], axis=1)  # class 0 on every row
    features = rng.normal(size=(40, 4))
    fitted = fit_scope(logits, features, score="rmd", data="pool")
    assert fitted.score == "energy" and fitted.rmd is None and "in one class" in fitted.note
    assert fitted.as_json()["note"] == fitted.note
    far = np.array([[0.0, 0.0]])  # low energy: no teacher's class is likely
    assert not fitted.in_scope(fitted.scores(far))[0]
    two = fit_scope(np.concatenate([logits, logits[:, ::-1]]), np.concatenate([features, features]), score="rmd")
    assert two.score == "rmd" and not two.note


# round 4, item 4
def test_scope_says_so_when_the_student_puts_every_row_in_one_class(kd_student, tmp_path):
    import tiny

    rows = [{"text": "goal match league coach " + w} for w in tiny.FILLER * 3]
    kd_student("add-data", tiny.write_jsonl(tmp_path / "one.jsonl", rows), "--name", "one")
    assert len({r["label"] for r in kd_student.json("predict", "kd", *[r["text"] for r in rows])}) == 1
    result = kd_student("scope", "kd", "--data", "one")
    assert "the student puts all 30 rows of one in one class" in result.stderr and "fitted energy" in result.stderr
    assert "scope energy fitted on 30 rows of one" in result.stdout
    record = next(s for s in kd_student.json("students") if s["name"] == "kd")
    assert record["scope"]["score"] == "energy"
    scores = [r["scope_score"] for r in kd_student.json("predict", "kd", "zzz qqq", "goal match league coach")]
    assert scores[0] != scores[1]  # rmd over one class scored every text -0.0
