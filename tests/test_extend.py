"""kamal extend: old label ids stay, new labels are appended, lineage is kept."""

import json
from pathlib import Path

import torch
from conftest import unfolded

TRAIN = ["--epochs", "4", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]


def setup(kamal, assets, trained):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["pool6"], "--name", "pool")
    kamal("add-data", assets["test6"], "--name", "test", "--role", "eval")
    kamal("amalgamate", "--method", "muki-soft", "--name", "soft-v1", "--student", assets["encoder"], *TRAIN)
    kamal("add-teacher", trained["life"], "--name", "life")


def test_extend_appends_labels_and_keeps_old_rows(kamal, assets, trained):
    setup(kamal, assets, trained)
    result = kamal("extend", "soft-v1", "--teacher", "life", *TRAIN)
    assert "Registered student soft-v1 as teacher soft-v1-as-teacher" in result.stderr
    assert "Trained student soft-v2 (muki-soft) over 6 labels" in result.stdout
    students = {s["name"]: s for s in kamal.json("students")}
    v1, v2 = students["soft-v1"], students["soft-v2"]
    assert v2["labels"][:4] == v1["labels"] and v2["labels"][4:] == ["health", "arts"]
    assert v2["parent"] == "soft-v1" and [t["name"] for t in v2["teachers"]] == ["soft-v1-as-teacher", "life"]
    config = json.loads((Path(v2["path"]) / "config.json").read_text())
    assert [config["id2label"][str(i)] for i in range(6)] == v2["labels"]
    metrics = kamal.json("eval", "soft-v2", "--data", "test")
    assert metrics["old_label_accuracy"] is not None and metrics["new_label_accuracy"] is not None
    assert "old labels" in kamal("eval", "soft-v2", "--data", "test").stdout


def test_grown_head_starts_from_the_old_rows(assets, tmp_path):
    from kamalcli.models.loading import grow_classifier, load_classifier

    import tiny

    folder = tiny.make_classifier(tmp_path / "s", ["a", "b"], seed=3)
    model = load_classifier(folder)
    old = model.classifier.weight.detach().clone(), model.classifier.bias.detach().clone()
    grown = grow_classifier(model, ["c"])
    assert grown.classifier.weight.shape == (3, 32)
    assert torch.equal(grown.classifier.weight[:2], old[0]) and torch.equal(grown.classifier.bias[:2], old[1])
    assert grown.config.id2label == {0: "a", 1: "b", 2: "c"}


def test_a_chain_and_the_refusals(kamal, assets, trained, tmp_path):
    setup(kamal, assets, trained)
    kamal("extend", "soft-v1", "--teacher", "life", "--name", "v2", *TRAIN)
    before = kamal.db_snapshot()
    assert "already part of student v2" in kamal("extend", "v2", "--teacher", "life", code=2).stderr
    assert "already part of student v2" in kamal("extend", "v2", "--teacher", "news", code=2).stderr
    assert "no student named 'ghost'" in kamal("extend", "ghost", "--teacher", "life", code=2).stderr
    assert "no teacher named 'ghost'" in kamal("extend", "v2", "--teacher", "ghost", code=2).stderr
    assert kamal.db_snapshot() == before

    import tiny

    extra = tiny.make_classifier(tmp_path / "extra", ["sports", "arts"], seed=21)
    kamal("add-teacher", extra, "--name", "extra")
    result = kamal("extend", "v2", "--teacher", "extra", code=2)
    assert "only knows labels v2 has already (arts, sports)" in result.stderr
    kamal("extend", "v2", "--teacher", "extra", "--refine", "--name", "v3", *TRAIN)
    v3 = {s["name"]: s for s in kamal.json("students")}["v3"]
    assert v3["parent"] == "v2" and len(v3["labels"]) == 6

    v2 = {s["name"]: s for s in kamal.json("students")}["v2"]
    moved = Path(v2["path"]).with_name("moved")
    Path(v2["path"]).rename(moved)
    assert "folder is missing on disk" in kamal("extend", "v2", "--teacher", "extra", "--refine", code=2).stderr


def test_extend_counts_a_merged_label_as_known(kamal, assets, trained, tmp_path):
    # round 4, item 13: after `labels merge`, a new teacher's alias of a known class is not a new label
    import tiny

    setup(kamal, assets, trained)
    extra = tiny.make_classifier(tmp_path / "extra", ["planet", "health"], seed=22)
    kamal("add-teacher", extra, "--name", "extra")
    kamal("labels", "merge", "world", "planet")
    result = kamal("extend", "soft-v1", "--teacher", "extra", "--name", "v2", *TRAIN)
    said = unfolded(result.stderr)
    assert "with 1 new: health." in said
    assert "Labels world are known to soft-v1" in said
    v2 = {s["name"]: s for s in kamal.json("students")}["v2"]
    assert v2["labels"] == ["world", "sports", "business", "scitech", "health"]
