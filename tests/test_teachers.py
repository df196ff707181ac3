"""kamal add-teacher / teachers / remove-teacher, and every way a source can be wrong."""

import json
import shutil
from pathlib import Path

import pytest

import tiny


def test_add_teacher_records_what_the_model_is(kamal, assets):
    result = kamal("add-teacher", assets["teacher_a"], "--name", "news-a")
    assert "Added teacher news-a: 2 labels (world, sports)" in result.stdout
    [t] = kamal.json("teachers")
    assert t["name"] == "news-a" and t["labels"] == ["world", "sports"]
    assert t["model_type"] == "bert" and t["architecture"] == "BertForSequenceClassification"
    assert (t["num_layers"], t["hidden_size"], t["vocab_size"]) == (2, 32, len(tiny.vocabulary()))
    assert t["dropout"] == 0.1 and len(t["fingerprint"]) == 64 and t["origin"] == "added"
    assert t["path"] == str(assets["teacher_a"].resolve())


def test_union_label_space_follows_registration_order(kamal, assets):
    kamal("add-teacher", assets["teacher_b"], "--name", "b")
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    assert kamal.json("status")["labels"] == ["business", "scitech", "world", "sports"]


def test_generic_labels_need_names(kamal, assets):
    before = kamal.db_snapshot()
    result = kamal("add-teacher", assets["generic"], code=2)
    assert "generic class names" in result.stderr and "--labels" in result.stderr
    assert kamal.db_snapshot() == before
    result = kamal("add-teacher", assets["generic"], "--labels", "a,b", code=2)
    assert "--labels gives 2 names but" in result.stderr and "has 3 classes" in result.stderr
    kamal("add-teacher", assets["generic"], "--labels", "health,arts,music", "--name", "g")
    assert kamal.json("teachers")[0]["labels"] == ["health", "arts", "music"]


def test_two_class_model_without_id2label_needs_names(kamal, assets, tmp_path):
    # transformers 5 leaves id2label out of config.json for a default 2-class model;
    # kamal reads the head's size from the weights instead.
    folder = tiny.make_classifier(tmp_path / "two", None, seed=8, generic_count=2)
    assert "id2label" not in json.loads((folder / "config.json").read_text())
    assert "name its 2 classes" in kamal("add-teacher", folder, code=2).stderr


def test_the_same_weights_twice_are_refused_with_their_name(kamal, assets):
    kamal("add-teacher", assets["teacher_a"], "--name", "first")
    before = kamal.db_snapshot()
    result = kamal("add-teacher", assets["teacher_a"], "--name", "second", code=2)
    assert "already registered as teacher 'first'" in result.stderr
    assert kamal.db_snapshot() == before


def test_shared_label_is_reported_and_mapped_once(kamal, assets, tmp_path):
    overlap = tiny.make_classifier(tmp_path / "overlap", ["sports", "health"], seed=9)
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    result = kamal("add-teacher", overlap, "--name", "o")
    assert "Label 'sports' is also taught by a" in result.stderr
    status = kamal.json("status")
    assert status["labels"] == ["world", "sports", "health"] and status["shared_labels"] == ["sports"]


def test_a_different_tokenizer_is_allowed_and_reported(kamal, assets, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(assets["teacher_b"], other)
    spec = json.loads((other / "tokenizer.json").read_text())
    spec["model"]["vocab"]["zebra"] = len(spec["model"]["vocab"])
    (other / "tokenizer.json").write_text(json.dumps(spec))
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    result = kamal("add-teacher", other, "--name", "b")
    assert "different tokenizer" in result.stderr


def _broken(tmp_path, assets, edit):
    folder = tmp_path / "broken"
    shutil.copytree(assets["teacher_a"], folder)
    config = json.loads((folder / "config.json").read_text())
    edit(folder, config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("case, edit, message", [
    ("encoder", lambda f, c: c.update(architectures=["BertModel"]), "is neither a sequence nor a token classifier"),
    ("remote code", lambda f, c: c.update(auto_map={"AutoModel": "x.Y"}), "never runs remote code"),
    ("no labels", lambda f, c: (c.pop("id2label"), c.pop("label2id")), "names no labels"),
    ("no weights", lambda f, c: (f / "model.safetensors").unlink(), "holds no weights"),
    ("unknown type", lambda f, c: c.update(model_type="nonsense"), "unknown to the installed transformers"),
])
def test_bad_sources_exit_2_with_one_line_and_change_nothing(kamal, assets, tmp_path, case, edit, message):
    folder = _broken(tmp_path, assets, edit)
    before = kamal.db_snapshot()
    result = kamal("add-teacher", folder, code=2)
    assert message in result.stderr, case
    assert len(result.stderr.strip().splitlines()) == 1
    assert kamal.db_snapshot() == before


def test_missing_folder_and_file_and_bad_name(kamal, assets, tmp_path):
    assert "no such folder" in kamal("add-teacher", tmp_path / "nope", code=2).stderr
    assert "is a file" in kamal("add-teacher", assets["pool"], code=2).stderr
    assert "not usable" in kamal("add-teacher", assets["teacher_a"], "--name", "bad name!", code=2).stderr
    assert "no config.json" in kamal("add-teacher", tmp_path, code=2).stderr


def test_copy_puts_the_model_inside_the_workspace(kamal, assets, ws):
    kamal("add-teacher", assets["teacher_a"], "--name", "a", "--copy")
    path = kamal.json("teachers")[0]["path"]
    assert path.startswith(str(ws / ".kamal" / "artifacts" / "teachers"))
    assert {p.name for p in Path(path).iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}


def test_remove_teacher_forgets_it_and_its_labels(kamal, assets):
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    kamal("add-teacher", assets["teacher_b"], "--name", "b")
    kamal("remove-teacher", "a")
    assert [t["name"] for t in kamal.json("teachers")] == ["b"]
    assert kamal.json("status")["labels"] == ["business", "scitech"]
    assert "no teacher named 'zzz'" in kamal("remove-teacher", "zzz", code=2).stderr
    assert assets["teacher_a"].is_dir()
