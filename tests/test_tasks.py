"""Teachers of different tasks in one student (kamalcli/heads.py): a head per task, multi-label included."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from conftest import TRAIN, add_teachers_and_data
import tiny

TONES = ["calm", "angry"]
TAGS = ["short", "sporty", "money"]


def multi_label_teacher(folder, labels, seed):
    tiny.make_classifier(folder, labels, seed=seed)
    config = json.loads((folder / "config.json").read_text())
    config["problem_type"] = "multi_label_classification"
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def tag_rows(rows, seed=0):
    """Each topic row with a set of tags: sporty for sports, money for business, short for short texts."""
    out = []
    for row in rows:
        tags = [t for t, on in (("short", len(row["text"].split()) < 6), ("sporty", row["label"] == "sports"),
                                ("money", row["label"] == "business")) if on]
        out.append({"text": row["text"], "tags": tags, "tone": random.Random(row["text"]).choice(TONES)})
    return out


@pytest.fixture
def tasks(kamal, assets, trained, tmp_path):
    """news and money (one shared task), tone (task tone, one teacher) and tagger (task tags, multi-label)."""
    add_teachers_and_data(kamal, {"news": trained["news"], "money": trained["money"]}, assets)
    kamal("add-teacher", tiny.make_classifier(tmp_path / "tone", TONES, seed=21), "--name", "tone", "--task", "tone")
    kamal("add-teacher", multi_label_teacher(tmp_path / "tagger", TAGS, seed=22), "--name", "tagger", "--task", "tags")
    rows = tag_rows(tiny.topic_rows(["world", "sports", "business", "scitech"], 8, seed=31))
    added = kamal("add-data", tiny.write_jsonl(tmp_path / "tags.jsonl", rows), "--name", "tags-test", "--label-column",
                  "tags", "--role", "test")
    assert "no teacher knows" not in added.output  # each row's labels, a JSON list, are the tagger's
    kamal("add-data", tmp_path / "tags.jsonl", "--name", "tone-test", "--label-column", "tone", "--role", "test")
    return kamal


def test_a_multi_label_teacher_needs_a_task_of_its_own(kamal, trained, tmp_path):
    tagger = multi_label_teacher(tmp_path / "tagger", TAGS, seed=22)
    out = kamal("add-teacher", tagger, "--name", "tagger", code=2).output
    assert "is multi-label" in out and "--task NAME" in out and "Traceback" not in out
    kamal("add-teacher", tagger, "--name", "tagger", "--task", "tags")
    out = kamal("add-teacher", trained["news"], "--name", "news", "--task", "tags", code=2).output
    assert "task tags holds tagger" in out and "not single-label" in out
    out = kamal("add-teacher", trained["news"], "--name", "news", "--task", "two words", code=2).output
    assert "task name 'two words'" in out
    teachers = {t["name"]: t for t in kamal.json("teachers")}
    assert teachers["tagger"]["head"] == "tags" and teachers["tagger"]["multi_label"] is True


def test_a_student_of_three_tasks_trains_evaluates_and_predicts(tasks, assets):
    out = tasks("amalgamate", "--method", "vanilla-kd", "--name", "all", "--student", assets["encoder"], *TRAIN).output
    assert "Task tone: vanilla-kd on tone." in out and "Task tags: multi-label on tagger." in out
    student = next(s for s in tasks.json("students") if s["name"] == "all")
    assert [h["name"] for h in student["train"]["heads"]] == ["default", "tone", "tags"]
    assert student["labels"] == ["default/world", "default/sports", "default/business", "default/scitech",
                                 "tone/calm", "tone/angry", "tags/short", "tags/sporty", "tags/money"]

    topic = tasks.json("eval", "all", "--data", "test")
    assert topic["task"] == "default" and topic["rows"] == 80 and 0 <= topic["accuracy"] <= 1
    tags = tasks.json("eval", "all", "--data", "tags-test")
    assert tags["task"] == "tags" and tags["multi_label"] and set(tags["per_class"]) == set(TAGS)
    tone = tasks.json("eval", "all", "--data", "tone-test", "--task", "tone")
    assert tone["task"] == "tone" and set(tone["per_class"]) == set(TONES)
    out = tasks("eval", "all", "--data", "tags-test").output
    assert "task tags" in out and "micro-F1" in out

    rows = tasks.json("predict", "all", "sports ball game", "", "--top", "2")
    answer = rows[0]["tasks"]
    assert sorted(answer) == ["default", "tags", "tone"]
    assert answer["default"]["label"] in ["world", "sports", "business", "scitech"] and len(answer["default"]["top"]) == 2
    assert set(answer["tags"]["probabilities"]) == set(TAGS)
    assert set(answer["tags"]["labels"]) == {t for t, p in answer["tags"]["probabilities"].items() if p >= 0.5}
    assert rows[1]["note"]
    text = tasks("predict", "all", "sports ball game").output
    assert text.startswith("default: ") and "tone: " in text and "tags: {" in text


def test_the_multi_label_task_learns_its_teachers_sigmoids(tasks, assets):
    """The tags head's loss alone reaches the teacher's per-label probabilities better than the untrained head."""
    from kamalcli.heads import heads_of_config
    from kamalcli.models.inference import classifier_logits

    tasks("amalgamate", "--method", "vanilla-kd", "--name", "all", "--student", assets["encoder"], "--epochs", "6",
          "--lr", "3e-3", "--batch-size", "16", "--max-length", "32")
    student = next(s for s in tasks.json("students") if s["name"] == "all")
    texts = [json.loads(line)["text"] for line in assets["pool"].read_text().splitlines()[:40]]
    config = json.loads(open(student["path"] + "/config.json").read())
    heads = heads_of_config(config, student["labels"])
    logits = classifier_logits(student["path"], texts, 32, device="cpu")
    teacher = next(t for t in tasks.json("teachers") if t["name"] == "tagger")
    taught = 1 / (1 + np.exp(-classifier_logits(teacher["path"], texts, 32, device="cpu")))
    learnt = heads[2].probabilities(logits)
    assert np.abs(learnt - taught).mean() < 0.1


def test_a_baseline_measures_one_task(tasks):
    out = tasks("eval", "--baseline", "ensemble", "--data", "test", code=2).output
    assert "answer several tasks" in out and "--teacher NAME" in out
    topic = tasks.json("eval", "--baseline", "ensemble", "--teacher", "news", "--teacher", "money", "--data", "test")
    assert topic["labels"] == ["world", "sports", "business", "scitech"]
    tags = tasks.json("eval", "--baseline", "teacher:tagger", "--data", "tags-test")
    assert tags["multi_label"] and tags["task"] == "tags"


def test_what_several_tasks_do_not_do_yet_is_refused_in_one_line(tasks, assets):
    out = tasks("amalgamate", "--method", "vanilla-kd", "--fit", "head", "--student", assets["encoder"], code=2).output
    assert "several tasks" in out and "--fit head trains one head" in out and "Traceback" not in out


def test_binary_kl_golden_values():
    from kamalcli.methods.losses import binary_kl_to_target

    logits = torch.tensor([[0.0, 2.0], [-1.0, 1.0]])
    target = torch.tensor([[0.5, 1.0], [0.25, 0.75]])
    # row 0: label 0 matches (0), label 1: -log sigmoid(2) = 0.126928; row 1: two KL(0.25 || sigmoid(-1)) terms
    got = binary_kl_to_target(logits, target)
    q = 1 / (1 + np.exp(1.0))
    kl = 0.25 * np.log(0.25 / q) + 0.75 * np.log(0.75 / (1 - q))
    assert got.tolist() == pytest.approx([0.12692801, 2 * kl], abs=1e-6)
    assert binary_kl_to_target(logits, target, temperature=2.0)[0].item() == pytest.approx(
        4 * -np.log(1 / (1 + np.exp(-1.0))), abs=1e-6)


def test_multi_label_target_averages_the_teachers_that_have_a_label():
    from kamalcli.labels import LabelSpace
    from kamalcli.methods.multi_label import multi_label_target
    from kamalcli.probe.outputs import TeacherOutputs

    space = LabelSpace.from_teachers([("a", ["x", "y"]), ("b", ["y", "z"])])
    outputs = TeacherOutputs(space, ("a", "b"), (np.array([[0.0, 2.0]]), np.array([[-2.0, 0.0]])), {})
    s = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    assert multi_label_target(outputs)[0].tolist() == pytest.approx([0.5, (s(2) + s(-2)) / 2, 0.5])


def test_multi_label_metrics_golden_values():
    from kamalcli.train.metrics import multi_label_metrics

    on = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0]], dtype=bool)
    gold = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0]], dtype=bool)
    m = multi_label_metrics(on, gold, ["x", "y", "z"])
    assert m["micro_f1"] == pytest.approx(2 * 3 / (5 + 3))
    assert m["per_class"]["x"]["f1"] == 1.0 and m["per_class"]["y"]["f1"] == pytest.approx(2 / 3)
    assert m["macro_f1"] == pytest.approx((1 + 2 / 3) / 2)  # z never occurs in gold: left out of the mean
    assert m["subset_accuracy"] == pytest.approx(1 / 3)


def test_heads_read_their_own_columns():
    from kamalcli.heads import column_names, heads_of_config, label_set, laid_out

    heads = laid_out([{"name": "topic", "labels": ["a", "b"]}, {"name": "tags", "labels": ["x", "y"], "multi_label": True}])
    assert column_names(heads) == ["topic/a", "topic/b", "tags/x", "tags/y"]
    logits = np.array([[0.0, np.log(3.0), 0.0, 100.0]])
    assert heads[0].probabilities(logits)[0].tolist() == pytest.approx([0.25, 0.75])
    assert heads[1].probabilities(logits)[0].tolist() == pytest.approx([0.5, 1.0])
    assert [h.name for h in heads_of_config({}, ["a", "b"])] == ["default"]
    assert label_set('["x", "y"]') == ["x", "y"] and label_set("x, y") == ["x", "y"] and label_set("[]") == []


def test_a_task_is_calibrated_and_the_student_exports_with_an_output_per_task(tasks, assets, tmp_path):
    import onnxruntime as ort

    out = tasks("amalgamate", "--method", "vanilla-kd", "--name", "all", "--student", assets["encoder"], *TRAIN).output
    assert "Scope: a score per task fitted on 240 rows of pool" in out
    _scoped_per_task(tasks)
    tasks("eval", "all", "--data", "test")
    answer = _one_task_calibrated(tasks, tmp_path)
    exported = tasks.json("export", "all", "--onnx")
    assert tasks.json("predict", "all", "sports ball game", "--onnx")[0]["tasks"]["tone"]["set"] == answer["tone"]["set"]
    folder = exported["path"]
    manifest = json.loads(open(folder + "/export.json").read())
    assert manifest["outputs"] == ["logits", "features", "probabilities_default", "probabilities_tone",
                                   "probabilities_tags"]
    assert [t["name"] for t in manifest["tasks"]] == ["default", "tone", "tags"]
    assert manifest["parity"]["tasks_max_abs_diff"] < 1e-4
    session = ort.InferenceSession(folder + "/model.onnx", providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()][2:] == manifest["outputs"][2:]
    texts = ["sports ball game", "money bank stock market"]
    assert _close(tasks.json("predict", "all", *texts, "--onnx"), tasks.json("predict", "all", *texts))
    card = open(folder + "/README.md").read()
    assert "## Tasks" in card and "| tags | multi-label" in card and "micro-F1" in card
    assert "Out of scope of task tone" in card and os.path.isfile(folder + "/scope-tasks.npz")
    hf = tasks.json("export", "all", "--hf")
    assert "## Tasks" in open(hf["path"] + "/README.md").read()


def _scoped_per_task(tasks) -> None:
    """Each task's scope: amalgamate fitted it, predict and eval read it, kamal scope refits it."""
    student = next(s for s in tasks.json("students") if s["name"] == "all")
    assert set(student["scope"]["tasks"]) == {"default", "tone", "tags"}
    answer = tasks.json("predict", "all", "sports ball game")[0]["tasks"]
    assert all(isinstance(answer[t]["in_scope"], bool) and "scope_score" in answer[t] for t in answer)
    tags = tasks.json("eval", "all", "--data", "tags-test")
    assert tags["task"] == "tags" and 0 <= tags["scope"]["flagged"] <= 1
    refit = tasks.json("scope", "all", "--data", "pool", "--score", "msp", "--keep", "0.5")
    assert refit["tasks"]["tone"]["score"] == "msp" and refit["tasks"]["tone"]["keep"] == 0.5
    flagged = tasks.json("eval", "all", "--data", "tone-test")["scope"]["flagged"]
    assert 0.2 <= flagged <= 0.8  # half the pool's rows kept: about half of texts like them flagged
    from kamalcli.cli.student_cmds import _trust_cell
    from kamalcli.workspace.folder import find_workspace
    from kamalcli.workspace.store import Store

    store = Store.open(find_workspace(tasks.workspace))
    try:
        assert "tone msp, keeps 50.0%" in _trust_cell(store.student("all"))
    finally:
        store.close()


def _one_task_calibrated(tasks, tmp_path) -> dict:
    """Task tone calibrated (kamal calibrate), its set in predict and its coverage in eval; predict's answers."""
    tasks("add-data", tmp_path / "tags.jsonl", "--name", "tone-cal", "--label-column", "tone", "--role", "eval")
    found = tasks.json("calibrate", "all", "--data", "tone-cal", "--coverage", "0.8")
    assert found["notes"][0] == "Task tone." and found["rows"] == 32
    assert "is a test set" in tasks("calibrate", "all", "--data", "tags-test", code=2).output
    tasks("add-data", tmp_path / "tags.jsonl", "--name", "tags-cal", "--label-column", "tags", "--role", "eval")
    assert "task tags is multi-label" in tasks("calibrate", "all", "--data", "tags-cal", code=2).output
    answer = tasks.json("predict", "all", "sports ball game")[0]["tasks"]
    assert set(answer["tone"]["set"]) <= set(TONES) and (answer["tone"]["label"] in answer["tone"]["set"]
                                                          or answer["tone"]["set"] == [])
    assert "set" not in answer["default"]
    tone = tasks.json("eval", "all", "--data", "tone-test")
    assert tone["conformal"]["coverage_asked"] == 0.8 and tone["conformal"]["calibration_rows"] == 32
    student = next(s for s in tasks.json("students") if s["name"] == "all")
    assert set(student["calibration"]["tasks"]) == {"tone"}
    return answer


def _close(a, b, tolerance=1e-4) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tolerance) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y, tolerance) for x, y in zip(a, b))
    if isinstance(a, float):
        return abs(a - b) <= tolerance
    return a == b


def test_muki_hard_decides_a_recipe_per_task_and_probe_and_report_see_tasks(tasks, assets):
    out = tasks("probe", "--mc-samples", "2").output
    assert "Teacher selection on test, task default" in out  # news against money; tone alone and tags pick nothing
    assert "task tone" not in out and "task tags" not in out
    assert {tuple(r["teachers"]) for r in _selection_rows(tasks)} == {("news", "money")}
    report = tasks("report").output
    assert "tagger: multi-label (a sigmoid per label), so the figures above" in report
    assert all(row.get("mean_uhat") is None for row in tasks.json("report")["probes"] if row["teacher"] == "tagger")
    _html_report_leaves_the_multi_label_teacher_out(tasks)
    out = tasks("amalgamate", "--method", "muki-hard", "--name", "m", "--student", assets["encoder"], *TRAIN).output
    assert "Task default: muki-hard on news, money." in out and "Task tone: vanilla-kd on tone." in out
    student = next(s for s in tasks.json("students") if s["name"] == "m")
    assert set(student["train"]["recipe"]["tasks"]) <= {"default"}
    assert tasks.json("eval", "m", "--data", "test")["task"] == "default"


def _html_report_leaves_the_multi_label_teacher_out(tasks):
    import kamalcli
    from kamalcli.report.gather import gather

    tasks("report", "--html", tasks.workspace / "report.html")
    session = kamalcli.open(tasks.workspace).session
    with session.reader() as store:
        shown = {p.teacher for p in gather(session.workspace, store).probes}
    assert shown == {"news", "money", "tone"}  # tagger's figures would read one softmax over independent labels


def _selection_rows(kamal):
    import sqlite3

    conn = sqlite3.connect(kamal.workspace / ".kamal" / "kamal.db")
    try:
        return [{"teachers": json.loads(r[0])} for r in conn.execute("SELECT DISTINCT teachers FROM selection")]
    finally:
        conn.close()


def test_extend_adds_a_task_then_grows_one_task_and_adds_a_multi_label_one(tasks, assets, trained):
    """A one-task student gains a task (tone); the two-task student then gains topics in its default task (life)
    and a multi-label task (tags). Each old (task, label) column starts from the parent's row."""
    from safetensors.torch import load_file

    tasks("amalgamate", "--method", "muki-hard", "--teacher", "news", "--teacher", "money", "--name", "topics",
          "--student", assets["encoder"], *TRAIN)
    out = tasks("extend", "topics", "--teacher", "tone", "--name", "toned", *TRAIN).output
    assert "Extending topics (4 labels) with 2 new: tone/calm, tone/angry." in out
    assert "Task default: muki-hard on topics-as-teacher." not in out  # one teacher: vanilla-kd keeps the topics
    assert "Task default: vanilla-kd on topics-as-teacher." in out and "Task tone: vanilla-kd on tone." in out
    assert "calibrate=rank" not in out  # no new teacher meets the old student in a task: nothing to compare
    students = {s["name"]: s for s in tasks.json("students")}
    toned = students["toned"]
    assert toned["parent"] == "topics" and [h["name"] for h in toned["train"]["heads"]] == ["default", "tone"]
    assert toned["labels"] == [f"default/{label}" for label in students["topics"]["labels"]] + ["tone/calm", "tone/angry"]

    tasks("add-teacher", trained["life"], "--name", "life")
    out = tasks("extend", "toned", "--teacher", "life", "--teacher", "tagger", "--name", "grown", *TRAIN).output
    assert "as teacher toned-default-as-teacher for its 4 labels of task default" in out
    assert "with 5 new: default/health, default/arts, tags/short, tags/sporty, tags/money." in out
    assert "Task default: muki-hard on toned-default-as-teacher, life." in out and "(calibrate=rank)" in out
    assert "Task tags: multi-label on tagger." in out
    cut = {t["name"]: t for t in tasks.json("teachers")}
    assert cut["toned-tone-as-teacher"]["labels"] == ["calm", "angry"] and cut["toned-tone-as-teacher"]["head"] == "tone"
    grown = next(s for s in tasks.json("students") if s["name"] == "grown")
    assert grown["labels"] == [*toned["labels"][:4], "default/health", "default/arts", "tone/calm", "tone/angry",
                               "tags/short", "tags/sporty", "tags/money"]
    assert tasks.json("eval", "grown", "--data", "tags-test")["task"] == "tags"
    assert sorted(tasks.json("predict", "grown", "a calm sports game")[0]["tasks"]) == ["default", "tags", "tone"]

    # the parent's rows, laid out anew: what `grown` started from, before any training
    from kamalcli.students.problem import _heads_from_parent
    from kamalcli.heads import laid_out
    from kamalcli.workspace.folder import find_workspace
    from kamalcli.workspace.store import Store

    store = Store.open(find_workspace(tasks.workspace))
    try:
        model, _, _ = _heads_from_parent(store, "toned", laid_out(grown["train"]["heads"]), seed=0)
    finally:
        store.close()
    parent = load_file(toned["path"] + "/model.safetensors")["classifier.weight"]
    started = model.classifier.weight.detach()
    assert torch.equal(started[:4], parent[:4]) and torch.equal(started[6:8], parent[4:6])


def test_the_queue_of_several_tasks_is_refused_in_one_line(tasks):
    out = tasks("label-queue", "--data", "pool", "--n", "5", "--out", "queue.csv", code=2).output
    assert "several tasks" in out and "Traceback" not in out and len(out.strip().splitlines()) == 1, out


def test_a_scope_per_task_is_fitted_saved_and_read_back():
    """Each task's scope is the one-task scope of its own columns (rmd: its classes' Gaussians on the shared
    features); scope-tasks.npz gives back the same scores."""
    import tempfile

    from kamalcli.heads import laid_out
    from kamalcli.trust.scope import fit_scope, fit_task_scopes, load_task_scopes, save_task_scopes

    rng = np.random.default_rng(0)
    features = np.concatenate([rng.normal(-2, 1, (40, 4)), rng.normal(2, 1, (40, 4))])
    logits = np.concatenate([np.tile([3.0, 0.0, 0.0, 0.0, 2.0], (40, 1)), np.tile([0.0, 3.0, 0.0, 2.0, 0.0], (40, 1))])
    heads = laid_out([{"name": "topic", "labels": ["a", "b", "c"]}, {"name": "tone", "labels": ["x", "y"]}])
    scopes = fit_task_scopes(logits, features, heads, data="pool")
    alone = fit_scope(logits[:, 3:], features, data="pool")
    assert scopes["tone"].score == "rmd" and scopes["tone"].threshold == alone.threshold
    assert np.allclose(scopes["tone"].rmd.means, alone.rmd.means)
    with tempfile.TemporaryDirectory() as folder:
        save_task_scopes(folder, scopes)
        back = load_task_scopes(folder)
    assert list(back) == ["topic", "tone"]
    for head in heads:
        assert np.allclose(back[head.name].scores(logits[:, head.columns], features),
                           scopes[head.name].scores(logits[:, head.columns], features))


def test_a_several_task_run_resumes_bit_for_bit(tasks, assets, interrupt_training, monkeypatch):
    from safetensors.torch import load_file

    from kamalcli.students import amalgamate

    args = ["--method", "muki-hard", "--student", assets["encoder"], *TRAIN, "--checkpoint-every", "5"]
    tasks("amalgamate", *args, "--name", "straight")
    interrupt_training(7)
    assert "kamal amalgamate --resume cut" in tasks("amalgamate", *args, "--name", "cut", code=130).stderr
    interrupt_training(None)
    monkeypatch.setattr(amalgamate, "plan_recipe", lambda *a, **k: pytest.fail("a resumed run decided again"))
    tasks("amalgamate", "--resume", "cut")
    paths = {s["name"]: s["path"] for s in tasks.json("students")}
    a, b = (load_file(paths[name] + "/model.safetensors") for name in ("straight", "cut"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_a_multi_label_student_alone_trains_evaluates_predicts_and_exports(kamal, assets, tmp_path):
    kamal("add-teacher", multi_label_teacher(tmp_path / "tagger", TAGS, seed=22), "--name", "tagger", "--task", "tags")
    kamal("add-data", assets["pool"], "--name", "pool")
    rows = tag_rows(tiny.topic_rows(["world", "sports", "business", "scitech"], 8, seed=31))
    kamal("add-data", tiny.write_jsonl(tmp_path / "tags.jsonl", rows), "--name", "tags-test", "--label-column", "tags",
          "--role", "test")
    out = kamal("amalgamate", "--method", "muki-hard", "--name", "tags", "--student", assets["encoder"], *TRAIN).output
    assert "Task tags: multi-label on tagger." in out
    student = next(s for s in kamal.json("students") if s["name"] == "tags")
    assert student["labels"] == ["tags/short", "tags/sporty", "tags/money"]
    metrics = kamal.json("eval", "tags", "--data", "tags-test")
    assert metrics["task"] == "tags" and metrics["rows"] == 32 and 0 <= metrics["micro_f1"] <= 1
    exported = kamal.json("export", "tags", "--onnx")
    assert exported["parity"]["tasks_max_abs_diff"] < 1e-4
    texts = ["sports ball game", "money bank stock"]
    assert _close(kamal.json("predict", "tags", *texts, "--onnx"), kamal.json("predict", "tags", *texts))
