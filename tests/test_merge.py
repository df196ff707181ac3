"""Weight-space merging (kamal eval --baseline merge[:METHOD]): the merges on tiny tensors, then through the
command on tiny teachers."""

import shutil

import pytest
import torch

import tiny


def state(*values):
    return {"w": torch.tensor(values, dtype=torch.float32)}


# base 1; task vectors (1, -2, 0.5, 0, 3) and (-1, -1.5, 2, 0.1, 0)
BASE = state(1, 1, 1, 1, 1)
TAUS = [state(1, -2, 0.5, 0, 3), state(-1, -1.5, 2, 0.1, 0)]


def test_task_vectors_are_the_fine_tuned_weights_less_the_base():
    from kamalcli.merge.task_vectors import task_vectors

    [tau] = task_vectors(BASE, [state(2, -1, 1.5, 1, 4)])
    assert tau["w"].tolist() == [1, -2, 0.5, 0, 3]


def test_average_and_task_arithmetic():
    from kamalcli.merge.task_vectors import average, task_arithmetic

    assert torch.allclose(average(BASE, TAUS)["w"], torch.tensor([1, -0.75, 2.25, 1.05, 2.5]))
    assert torch.allclose(task_arithmetic(BASE, TAUS)["w"], torch.tensor([1, -2.5, 3.5, 1.1, 4]))
    assert torch.allclose(task_arithmetic(BASE, TAUS, scale=0.5)["w"], torch.tensor([1, -0.75, 2.25, 1.05, 2.5]))


def test_ties_trims_elects_a_sign_and_averages_the_agreeing_entries():
    from kamalcli.merge.task_vectors import ties, trim

    # density 0.4 keeps 2 of 5 entries: (0, -2, 0, 0, 3) and (0, -1.5, 2, 0, 0); elected signs (0, -, +, 0, +)
    assert trim(TAUS[0]["w"], 0.4).tolist() == [0, -2, 0, 0, 3]
    assert trim(TAUS[1]["w"], 0.4).tolist() == [0, -1.5, 2, 0, 0]
    assert torch.allclose(ties(BASE, TAUS, density=0.4)["w"], torch.tensor([1, -0.75, 3, 1, 4]))
    # an entry the teachers pull apart: the larger side wins and the other is left out, not averaged in
    pulled = [state(4, 0, 0, 0, 0), state(-1, 0, 0, 0, 0)]
    assert ties(state(0, 0, 0, 0, 0), pulled, density=0.2)["w"].tolist() == [4, 0, 0, 0, 0]
    # the default keeps the paper's 20%: 2 of 10 entries
    assert int((trim(torch.arange(1.0, 11.0), 0.2) != 0).sum()) == 2


def head_on(encoder, folder, labels, seed):
    """A classifier whose encoder is exactly `encoder`'s weights, with a random head over labels."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig.from_pretrained(str(encoder), num_labels=len(labels), id2label=dict(enumerate(labels)),
                                        label2id={n: i for i, n in enumerate(labels)})
    BertForSequenceClassification.from_pretrained(str(encoder), config=config).save_pretrained(str(folder))
    tiny.make_tokenizer(folder)
    return folder


def test_teachers_at_their_base_merge_into_their_ensemble(kamal, assets, tmp_path):
    """With every task vector 0, any merge is the base, each head sits on its own encoder: the ensemble."""
    kamal("add-teacher", head_on(assets["encoder"], tmp_path / "a", ["world", "sports"], 1), "--name", "a")
    kamal("add-teacher", head_on(assets["encoder"], tmp_path / "b", ["business", "scitech"], 2), "--name", "b")
    kamal("add-data", assets["test"], "--name", "test", "--role", "eval")
    ensemble = kamal.json("eval", "--baseline", "ensemble", "--data", "test")
    for method in ("task-arithmetic", "ties", "average"):
        merged = kamal.json("eval", "--baseline", f"merge:{method}", "--base", assets["encoder"], "--data", "test")
        assert merged["confusion"] == ensemble["confusion"] and merged["accuracy"] == ensemble["accuracy"]
        assert merged["merge"]["method"] == method and merged["merge"]["distance_from_base"] == {"a": 0.0, "b": 0.0}
        assert merged["merge"]["kept_per_teacher"] == []


def test_trained_teachers_merge_from_the_base_they_name(two_teachers, assets):
    result = two_teachers("eval", "--baseline", "merge", "--base", assets["encoder"], "--data", "test")
    assert result.stdout.startswith("baseline merge:task-arithmetic on test: accuracy ")
    merged = two_teachers.json("eval", "--baseline", "merge:ties", "--base", assets["encoder"], "--data", "test")
    assert merged["rows"] == 80 and set(merged["per_class"]) == {"world", "sports", "business", "scitech"}
    distance = merged["merge"]["distance_from_base"]
    assert set(distance) == {"news", "money"} and all(0 < d < 0.5 for d in distance.values())
    # the teachers record their base as a local folder, which may have moved: kamal asks for it
    refused = two_teachers("eval", "--baseline", "merge", "--data", "test", code=2)
    assert "the teachers were fine-tuned from a local folder, encoder: name it with --base FOLDER" in refused.output


@pytest.mark.parametrize("args, message", [
    (["--baseline", "merge:soup", "--base", "{encoder}"], "unknown merge 'soup': average, task-arithmetic, ties"),
    (["--baseline", "ensemble", "--base", "{encoder}"], "--base names the pretrained base of --baseline merge"),
    (["--baseline", "merge", "--base", "{small}"], "is not the base these teachers were fine-tuned from"),
    (["--baseline", "merge", "--base", "{wide}"], "is not the base these teachers were fine-tuned from: "
                                                  "embeddings.word_embeddings.weight is"),
    (["--baseline", "merge", "--teacher", "news", "--base", "{encoder}"], "a merge needs two or more teachers"),
    (["--baseline", "supervised"], "unknown baseline 'supervised': ensemble, teacher:NAME, merge[:METHOD], zero-shot or prior:DATA"),
])
def test_merge_refusals(two_teachers, assets, tmp_path, args, message):
    from transformers import BertModel

    small = tiny.make_encoder(tmp_path / "small", layers=1)
    wide = tmp_path / "wide"
    BertModel(tiny.tiny_config(2, 0.1, 2, hidden=48)).save_pretrained(str(wide))
    tiny.make_tokenizer(wide)
    paths = {"encoder": assets["encoder"], "small": small, "wide": wide}
    result = two_teachers("eval", "--data", "test", *[a.format(**paths) for a in args], code=2)
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_teachers_of_two_architectures_are_not_merged(kamal, assets, tmp_path):
    shutil.copytree(assets["teacher_a"], tmp_path / "a")
    kamal("add-teacher", tmp_path / "a", "--name", "a")
    kamal("add-teacher", tiny.make_classifier(tmp_path / "b", ["business", "scitech"], layers=1), "--name", "b")
    kamal("add-data", assets["test"], "--name", "test", "--role", "eval")
    result = kamal("eval", "--baseline", "merge", "--base", assets["encoder"], "--data", "test", code=2)
    assert ("a merge needs teachers of one architecture fine-tuned from one base: a is BertModel (2 layers of 32, "
            "vocabulary") in result.output


def test_each_head_reads_the_merged_encoder(assets, tmp_path):
    """Teacher a sits at the base, b's encoder is the base moved by 0.02 everywhere: the average puts both heads on
    the base moved by 0.01, and the logits are what that model gives."""
    from types import SimpleNamespace

    from transformers import BertForSequenceClassification

    from kamalcli.merge.merged import merged_logits
    from kamalcli.models.batching import encode
    from kamalcli.models.inference import predict_logits
    from kamalcli.models.loading import load_tokenizer

    def moved(folder, by):
        model = BertForSequenceClassification.from_pretrained(str(folder))
        with torch.no_grad():
            for p in model.bert.parameters():
                p.add_(by)
        return model

    a = head_on(assets["encoder"], tmp_path / "a", ["world", "sports"], 1)
    b = head_on(assets["encoder"], tmp_path / "b", ["business", "scitech"], 2)
    moved(b, 0.02).save_pretrained(str(b))
    texts = ["the match ended in a draw", "shares fell after the report"]
    teachers = [SimpleNamespace(name="a", path=str(a)), SimpleNamespace(name="b", path=str(b))]
    merged, merge = merged_logits(teachers, str(assets["encoder"]), "average", texts, 32)
    for folder, logits in zip((a, b), merged):
        expected_model = moved(folder, 0.01 if folder == a else -0.01)
        encoded = encode(load_tokenizer(folder), texts, 32, config=expected_model.config)
        assert torch.allclose(torch.from_numpy(logits), torch.from_numpy(predict_logits(expected_model, encoded)),
                              atol=1e-5)
    assert merge.info["distance_from_base"]["a"] == 0.0 and merge.info["distance_from_base"]["b"] > 0


def test_a_student_built_on_the_base_takes_the_merged_encoder(assets, tmp_path):
    from types import SimpleNamespace

    from transformers import BertForSequenceClassification

    from kamalcli.merge.merged import load_merged, merge_teachers
    from kamalcli.models.loading import build_student

    a = head_on(assets["encoder"], tmp_path / "a", ["world", "sports"], 1)
    b = head_on(assets["encoder"], tmp_path / "b", ["business", "scitech"], 2)
    model = BertForSequenceClassification.from_pretrained(str(b))
    with torch.no_grad():
        for p in model.bert.parameters():
            p.add_(0.02)
    model.save_pretrained(str(b))
    teachers = [SimpleNamespace(name="a", path=str(a)), SimpleNamespace(name="b", path=str(b))]
    student = build_student(assets["encoder"], ["world", "sports", "business", "scitech"], seed=3)
    head = student.classifier.weight.detach().clone()
    base = BertForSequenceClassification.from_pretrained(str(a)).bert.state_dict()
    load_merged(student, merge_teachers(teachers, str(assets["encoder"]), "average"))
    for name, value in student.bert.state_dict().items():
        if value.is_floating_point():
            assert torch.allclose(value, base[name] + 0.01, atol=1e-6), name
    assert torch.equal(student.classifier.weight, head)  # the student's own head over the union stays


def test_amalgamate_init_merge_records_it(two_teachers, assets):
    train = ["--student", assets["encoder"], "--epochs", "1", "--lr", "2e-3", "--batch-size", "16",
             "--max-length", "32"]
    result = two_teachers("amalgamate", "--method", "vanilla-kd", "--init", "merge", "--name", "m", *train)
    assert (f"The student starts from the teachers' encoders merged from {assets['encoder']} (task-arithmetic)."
            in result.stderr)
    [student] = two_teachers.json("students")
    assert student["train"]["init"] == "merge:task-arithmetic"
    run = next(r for r in two_teachers.json("runs") if r["name"] == "m")
    assert run["params"]["init"] == "merge:task-arithmetic"  # a resumed run starts from the same


@pytest.mark.parametrize("args, message", [
    (["--init", "soup"], "unknown merge 'soup': merge or merge:METHOD (average, task-arithmetic, ties)"),
    (["--init", "merge:soup"], "unknown merge 'merge:soup'"),
    (["--init", "merge", "--student-layers", "1"], "--init merge: teacher news (bert, 2 layers of 32, vocabulary "),
    (["--init", "merge", "--student", "{small}"], "--init merge: teacher news (bert, 2 layers of 32, vocabulary "),
    (["--resume", "x", "--init", "merge"], "--resume continues a run with its own settings; drop --init"),
])
def test_init_merge_refusals(two_teachers, assets, tmp_path, args, message):
    paths = {"small": tiny.make_encoder(tmp_path / "small", layers=1)}
    args = [a.format(**paths) for a in args]
    student = [] if "--student" in args or "--resume" in args else ["--student", str(assets["encoder"])]
    method = [] if "--resume" in args else ["--method", "vanilla-kd"]
    result = two_teachers("amalgamate", *method, *student, *args, "--epochs", "1", "--max-length", "32", code=2)
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert two_teachers.json("students") == []


def test_teachers_of_a_bases_first_layers_merge_into_a_student_of_that_depth(kamal, assets):
    """train-teacher --base-layers 1 on a 2-layer base: --init merge with --student-layers 1 starts from their merge
    (the first layer of the base, moved by their task vectors); a student of the full depth is refused."""
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    kamal("add-data", assets["pool"], "--name", "transfer")
    settings = ["--base", assets["encoder"], "--base-layers", "1", "--epochs", "2", "--lr", "3e-3", "--batch-size",
                "16", "--max-length", "32"]
    kamal("train-teacher", "train", "--labels", "world,sports", "--name", "news", *settings)
    kamal("train-teacher", "train", "--labels", "business,scitech", "--name", "money", *settings)
    train = ["--method", "vanilla-kd", "--init", "merge", "--student", assets["encoder"], "--steps", "2",
             "--max-length", "32"]
    refused = kamal("amalgamate", *train, "--name", "full", code=2)
    assert ("--init merge: teacher news (bert, 1 layers of 32, vocabulary" in refused.output
            and "(bert, 2 layers of 32," in refused.output and "--student-layers their depth" in refused.output)
    result = kamal("amalgamate", *train, "--student-layers", "1", "--name", "shallow")
    assert f"merged from {assets['encoder']} (task-arithmetic)" in result.stderr
    [student] = kamal.json("students")
    assert student["name"] == "shallow" and student["train"]["init"] == "merge:task-arithmetic"


def test_the_zero_shot_baseline_is_each_texts_nearest_label_template_in_the_encoder(two_teachers, assets, ws):
    """No teacher is read: a label's vector is the mean of its templates' sentence vectors; each text takes the label
    whose vector is nearest (cosine), over the teachers' union of labels."""
    import json

    import numpy as np

    from kamalcli.probe.encoder import text_vectors
    from kamalcli.students.evaluate import ZERO_SHOT_TEMPLATES, zero_shot_scores
    from kamalcli.train.metrics import classification_metrics
    from kamalcli.workspace.folder import Workspace

    metrics = two_teachers.json("eval", "--baseline", "zero-shot", "--base", assets["encoder"], "--data", "test")
    names = metrics["labels"]  # the union of the teachers' labels, in the label space's order
    assert sorted(names) == ["business", "scitech", "sports", "world"]
    rows = [json.loads(line) for line in assets["test"].read_text().splitlines()]
    texts = [r["text"] for r in rows]
    [test] = [d for d in two_teachers.json("data") if d["name"] == "test"]
    scores = zero_shot_scores(Workspace(ws), str(assets["encoder"]), texts, test["content_hash"], names, 128, "cpu")
    # the scores are cosines with the mean template vector of each label
    labels = text_vectors(str(assets["encoder"]), [t.format(label=n) for n in names for t in ZERO_SHOT_TEMPLATES])
    labels = labels.reshape(len(names), len(ZERO_SHOT_TEMPLATES), -1).mean(axis=1)
    labels /= np.linalg.norm(labels, axis=1, keepdims=True)
    np.testing.assert_allclose(scores, text_vectors(str(assets["encoder"]), texts, max_length=128) @ labels.T, atol=1e-5)
    gold = np.array([names.index(r["label"]) for r in rows])
    assert {k: v for k, v in metrics.items() if k != "zero_shot"} == classification_metrics(scores.argmax(1), gold, names)
    assert metrics["zero_shot"]["templates"] == list(ZERO_SHOT_TEMPLATES)
    refused = two_teachers("eval", "--baseline", "zero-shot", "--teacher", "news", "--data", "test", code=2).stderr
    assert "zero-shot reads no teacher" in refused


def test_the_prior_alone_is_each_texts_nearest_class_prototype_of_a_labelled_set(two_teachers, assets):
    """--baseline prior:DATA reads no teacher: a class's prototype is the unit mean of DATA's unit sentence vectors
    of that class; each text takes the class whose prototype is nearest (cosine), over the teachers' union."""
    import json

    import numpy as np

    from kamalcli.probe.encoder import text_vectors
    from kamalcli.train.metrics import classification_metrics

    two_teachers("add-data", assets["train"], "--name", "train", "--role", "eval")
    metrics = two_teachers.json("eval", "--baseline", "prior:train", "--base", assets["encoder"], "--data", "test")
    names = metrics["labels"]
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    fit = [json.loads(line) for line in assets["train"].read_text().splitlines()]
    vectors = unit(text_vectors(str(assets["encoder"]), [r["text"] for r in fit], max_length=128).astype(np.float64))
    prototypes = unit(np.stack([vectors[[r["label"] == n for r in fit]].mean(axis=0) for n in names]))
    rows = [json.loads(line) for line in assets["test"].read_text().splitlines()]
    cosines = unit(text_vectors(str(assets["encoder"]), [r["text"] for r in rows], max_length=128)) @ prototypes.T
    gold = np.array([names.index(r["label"]) for r in rows])
    assert {k: v for k, v in metrics.items() if k != "prior"} == classification_metrics(cosines.argmax(1), gold, names)
    assert metrics["prior"] == {"encoder": str(assets["encoder"]), "data": "train"}
    assert "prior:DATA reads no teacher" in two_teachers("eval", "--baseline", "prior:train", "--teacher", "news",
                                                         "--data", "test", code=2).stderr
    assert "unknown baseline 'prior:'" in two_teachers("eval", "--baseline", "prior:", "--data", "test", code=2).stderr
