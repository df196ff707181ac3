"""Model folders kamal loads (teachers, students, causal LMs): other config key names, moved folders, bad weights."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import tiny
from conftest import add_copied_teacher
from test_feature_methods import train_args


def make_gpt2_classifier(folder: Path, labels: list[str], *, seed: int = 0) -> Path:
    """A tiny GPT2ForSequenceClassification: its config says n_layer / n_embd, not num_hidden_layers / hidden_size."""
    import torch
    from transformers import GPT2Config, GPT2ForSequenceClassification

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tiny.vocabulary()), n_layer=2, n_embd=32, n_head=2, n_positions=64,
                        pad_token_id=0, bos_token_id=2, eos_token_id=3, num_labels=len(labels),
                        id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    GPT2ForSequenceClassification(config).save_pretrained(str(folder), safe_serialization=True)
    tiny.make_tokenizer(folder)  # the same word ids as the tiny BERTs: per-token features line up
    return folder


@pytest.fixture(scope="session")
def gpt2(tmp_path_factory) -> Path:
    return make_gpt2_classifier(tmp_path_factory.mktemp("gpt2") / "gpt2", ["world", "sports"], seed=3)


def one_line(result) -> str:
    """The command's error: one line, the last it wrote, no traceback (progress notes may come before it)."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and result.stderr.strip().splitlines()[-1] == errors[0], result.output
    assert "Traceback" not in result.output
    return errors[0]


def _null_depth(workspace: Path, teacher: str) -> None:
    """The teacher's row as an older kamal recorded it: no layers, no hidden size."""
    with sqlite3.connect(workspace / ".kamal" / "kamal.db") as conn:
        conn.execute("UPDATE teachers SET num_layers = NULL, hidden_size = NULL WHERE name = ?", [teacher])


# -- 7: depth and width under other key names -------------------------------------------------

def test_a_gpt2_teacher_records_its_layers_and_hidden_size(kamal, gpt2):
    out = kamal("add-teacher", gpt2, "--name", "g2").stdout
    assert "gpt2, 2 layers, hidden 32" in out
    [teacher] = kamal.json("teachers")
    assert teacher["num_layers"] == 2 and teacher["hidden_size"] == 32


@pytest.fixture
def with_gpt2(kamal, assets, gpt2):
    kamal("add-teacher", gpt2, "--name", "g2")
    kamal("add-teacher", assets["teacher_b"], "--name", "money")
    kamal("add-data", assets["pool"], "--name", "pool")
    return kamal


@pytest.mark.parametrize("method", ["dfa", "cfl", "mt-bert"])
def test_feature_methods_train_with_a_gpt2_teacher(with_gpt2, assets, method):
    with_gpt2("amalgamate", "--method", method, "--name", "s", *train_args(assets, epochs=1))
    [student] = with_gpt2.json("students")
    assert student["name"] == "s" and Path(student["path"], "model.safetensors").is_file()


@pytest.mark.parametrize("method", ["dfa", "cfl"])  # per-token states in the loop; pooled ones from the probe
def test_a_teacher_recorded_without_its_depth_is_read_from_its_folder(with_gpt2, assets, method):
    _null_depth(with_gpt2.workspace, "g2")
    with_gpt2("amalgamate", "--method", method, "--name", "s", *train_args(assets, epochs=1))


def test_depth_that_cannot_be_read_is_refused_naming_the_teacher(with_gpt2, assets, monkeypatch):
    from kamalcli.models import folder

    _null_depth(with_gpt2.workspace, "g2")
    monkeypatch.setattr(folder, "depth_and_width", lambda path: (None, None))
    line = one_line(with_gpt2("amalgamate", "--method", "dfa", "--name", "s", *train_args(assets, epochs=1), code=2))
    assert "feature-level methods need the number of layers and hidden size of teacher g2" in line
    assert with_gpt2.json("students") == []


# -- 12: a teacher's folder moved -------------------------------------------------------------

def test_a_moved_teacher_folder_is_named_with_how_to_re_point_it(kamal, assets, tmp_path):
    folder = add_copied_teacher(kamal, assets, tmp_path / "news", names=("news", "money"))
    kamal("probe", "--mc-samples", 2, "--max-length", 32)
    folder.rename(tmp_path / "moved")
    line = one_line(kamal("amalgamate", "--method", "dfa", "--name", "s", *train_args(assets, epochs=1), code=2))
    assert f"teacher news's folder {folder} is missing" in line
    assert "kamal remove-teacher news, then kamal add-teacher NEW_FOLDER --name news" in line
    assert "Repo id" not in line
    # what the message says to do works
    kamal("remove-teacher", "news")
    kamal("add-teacher", tmp_path / "moved", "--name", "news")
    kamal("amalgamate", "--method", "dfa", "--name", "s", *train_args(assets, epochs=1))


def test_a_missing_model_folder_is_one_line_wherever_it_is_loaded(tmp_path):
    from kamalcli.errors import KamalError
    from kamalcli.models.loading import build_student, load_classifier, load_tokenizer

    gone = tmp_path / "gone"
    for load in (load_classifier, load_tokenizer, lambda f: build_student(f, ["a", "b"])):
        with pytest.raises(KamalError, match=f"model folder {gone} is missing"):
            load(gone)


# -- 14: weights kamal will not load --------------------------------------------------------

def _pickled_with_an_object(folder: Path) -> Path:
    """model.safetensors replaced by a pytorch_model.bin that holds a numpy array beside the tensors."""
    import numpy as np
    import torch
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save({**state, "extra": np.zeros(3)}, folder / "pytorch_model.bin")
    return folder


def _garbage_safetensors(folder: Path) -> Path:
    (folder / "model.safetensors").write_bytes(b"\xff" * 64)
    return folder



@pytest.mark.parametrize("damage, message", [
    (_pickled_with_an_object, "pytorch_model.bin is not a readable weight file: kamal loads only safetensors"),
    (_garbage_safetensors, "model.safetensors is not a safetensors file"),
])
def test_bad_lm_weights_are_named_in_one_line(kamal, assets, lm, tmp_path, damage, message):
    folder = damage(Path(shutil.copytree(lm, tmp_path / "lm")))
    kamal("add-teacher", assets["teacher_a"], "--name", "news")
    before = kamal.db_snapshot()
    line = one_line(kamal("synthesize", "--lm", folder, "--name", "s", "--per-class", 1, code=2))
    assert f"{folder}/{message}" in line
    assert "Weights only load failed" not in line and "deserializing" not in line
    assert kamal.db_snapshot() == before


def test_pickle_advice_says_how_to_convert(kamal, assets, lm, tmp_path):
    folder = _pickled_with_an_object(Path(shutil.copytree(lm, tmp_path / "lm")))
    kamal("add-teacher", assets["teacher_a"], "--name", "news")
    line = one_line(kamal("synthesize", "--lm", folder, "--name", "s", "--per-class", 1, code=2))
    assert "weights_only=True" in line and "save_file" in line and "model.safetensors" in line


@pytest.mark.parametrize("damage, message", [
    (_pickled_with_an_object, "pytorch_model.bin is not a readable weight file: kamal loads only safetensors"),
    (_garbage_safetensors, "model.safetensors is not a safetensors file"),
])
def test_bad_student_base_weights_are_named_in_one_line(kamal, assets, tmp_path, damage, message):
    base = damage(Path(shutil.copytree(assets["encoder"], tmp_path / "base")))
    kamal("add-teacher", assets["teacher_a"], "--name", "news")
    kamal("add-data", assets["pool"], "--name", "pool")
    args = train_args(assets, epochs=1)
    args[args.index("--student") + 1] = base
    line = one_line(kamal("amalgamate", "--method", "vanilla-kd", "--name", "s", *args, code=2))
    assert f"{base}/{message}" in line


@pytest.mark.parametrize("damage, message", [
    (_pickled_with_an_object, "pytorch_model.bin is not a readable weight file: kamal loads only safetensors"),
    (_garbage_safetensors, "model.safetensors is not a safetensors file"),
])
def test_bad_weights_are_named_by_every_loader(assets, tmp_path, damage, message):
    from kamalcli.errors import KamalError
    from kamalcli.models.loading import load_classifier

    folder = damage(Path(shutil.copytree(assets["teacher_a"], tmp_path / "t")))
    with pytest.raises(KamalError) as error:
        load_classifier(folder)
    assert f"{folder}/{message}" in str(error.value)


# -- 11: --lm must be a causal LM --------------------------------------------------------------

@pytest.mark.parametrize("which", ["bert", "gpt2"])
def test_a_classifier_given_as_lm_is_refused(kamal, assets, gpt2, which):
    folder = assets["teacher_a"] if which == "bert" else gpt2
    kamal("add-teacher", assets["teacher_b"], "--name", "money")
    before = kamal.db_snapshot()
    line = one_line(kamal("synthesize", "--lm", folder, "--name", "s", "--per-class", 1, code=2))
    architecture = "BertForSequenceClassification" if which == "bert" else "GPT2ForSequenceClassification"
    assert f"--lm {folder} is not a causal LM (architectures: {architecture})" in line
    assert kamal.db_snapshot() == before and kamal.json("runs") == []
