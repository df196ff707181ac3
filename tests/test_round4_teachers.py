"""Round 4 (issue 66, teachers and labels): multi-label teachers, label names, the dropout advice, --init merge's
shapes, remove-teacher of kamal's own folders, the labels merge/split messages, missing folders in `kamal teachers`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import tiny
from conftest import unfolded
from test_model_folders import make_gpt2_classifier

SMALL = ["--epochs", 1, "--batch-size", 16, "--max-length", 16]


def errors(result) -> list[str]:
    """The command's stderr lines; a refusal is exactly one, with no traceback."""
    assert "Traceback" not in result.output
    return result.stderr.strip().splitlines()


def multi_label(folder: Path) -> Path:
    config = json.loads((folder / "config.json").read_text())
    config["problem_type"] = "multi_label_classification"
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# round 4, item 1 (since issue 67 a multi-label teacher is added with a task of its own: tests/test_tasks.py)
def test_a_multi_label_teacher_without_a_task_is_refused_at_add_teacher(kamal, assets, tmp_path):
    folder = multi_label(Path(shutil.copytree(assets["teacher_a"], tmp_path / "toxic")))
    before = kamal.db_snapshot()
    [line] = errors(kamal("add-teacher", folder, "--name", "toxic", code=2))
    assert line == ("Error: toxic is multi-label (problem_type multi_label_classification, a sigmoid per label): give "
                    "it a task of its own with --task NAME")
    assert kamal.db_snapshot() == before


# round 4, item 1
def test_a_registered_multi_label_teacher_is_refused_by_probe_and_amalgamate(kamal, assets, tmp_path):
    folder = Path(shutil.copytree(assets["teacher_a"], tmp_path / "toxic"))
    kamal("add-teacher", folder, "--name", "toxic")
    kamal("add-teacher", assets["teacher_b"], "--name", "b")
    kamal("add-data", assets["pool"], "--name", "pool")
    kamal("probe", "--mc-samples", 1, "--no-rmd", "--max-length", 16)  # cached outputs read through a softmax
    multi_label(folder)  # added by an older kamal, or its config rewritten since
    before = kamal.db_snapshot()
    [probe] = errors(kamal("probe", "--mc-samples", 1, "--no-rmd", "--max-length", 16, code=2))
    assert probe == ("Error: teacher toxic is multi-label (problem_type multi_label_classification) but was added as "
                     "single-label: remove it and add it again with a task of its own (--task NAME)")
    [amalgamate] = errors(kamal("amalgamate", "--method", "vanilla-kd", "--name", "s", "--mc-samples", 1,
                                "--student", assets["encoder"], *SMALL, code=2))
    assert amalgamate == probe
    assert kamal.db_snapshot() == before


# round 4, item 8
@pytest.mark.parametrize("name, problem", [
    ("a,b", "holds a comma"),
    ("x\ny", "holds a line break, tab or other control character"),
    ("tab\there", "holds a line break, tab or other control character"),
    (" pad ", "has spaces around it"),
])
def test_unusable_label_names_are_refused_at_add_teacher(kamal, assets, tmp_path, name, problem):
    folder = tiny.make_classifier(tmp_path / "odd", ["world", name], seed=3)
    before = kamal.db_snapshot()
    [line] = errors(kamal("add-teacher", folder, "--name", "odd", code=2))
    assert f"odd: label name {name!r} {problem}" in line
    assert line.endswith("; name its 2 classes in order with --labels a,b,...")
    assert kamal.db_snapshot() == before
    # the same rule for names given with --labels; what it says to do works
    [line] = errors(kamal("add-teacher", folder, "--name", "odd", "--labels", "world,x\ty", code=2))
    assert "label name 'x\\ty' holds a line break, tab or other control character" in line
    kamal("add-teacher", folder, "--name", "odd", "--labels", "world,pad")
    assert kamal.json("teachers")[0]["labels"] == ["world", "pad"]


# round 4, item 8
@pytest.mark.parametrize("name, problem", [("a\nb", "holds a line break"), ("a,b", "holds a comma"),
                                           (" sports ", "has spaces around it")])
def test_labels_merge_as_follows_the_same_rule(kamal, assets, tmp_path, name, problem):
    kamal("add-teacher", assets["teacher_a"], "--name", "news")
    kamal("add-teacher", tiny.make_classifier(tmp_path / "club", ["sport", "business"], seed=8), "--name", "club")
    before = kamal.db_snapshot()
    [line] = errors(kamal("labels", "merge", "sports", "sport", "--as", name, code=2))
    assert line == f"Error: --as: label name {name!r} {problem}" + line.split(problem, 1)[1]
    assert line.endswith("; pick another --as")
    assert kamal.db_snapshot() == before


# round 4, item 11
def test_dropout_advice_names_the_command_that_has_the_option(kamal, assets):
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    added = kamal("add-teacher", assets["no_dropout"], "--name", "nd").stderr
    assert "nd has dropout 0: MC-dropout probing needs a rate (kamal probe --teacher nd --dropout 0.1) or --mc-samples 1." \
        in added
    kamal("add-data", assets["pool"], "--name", "pool")
    train = ["--method", "muki-hard", "--name", "s", "--student", assets["encoder"], *SMALL]
    [line] = [e for e in errors(kamal("amalgamate", *train, code=2)) if e.startswith("Error")]
    assert line == ("Error: MC dropout is impossible for teacher nd (no dropout above 0): use --mc-samples 1, or give "
                    "it a rate: kamal probe --teacher nd --dropout 0.1")
    kamal("probe", "--teacher", "nd", "--dropout", "0.1", "--no-rmd", "--max-length", 16)
    assert "Trained student s" in kamal("amalgamate", *train).stdout  # amalgamate reads that probe


# round 4, item 12
def test_init_merge_reads_a_gpt2_teachers_depth_as_add_teacher_does(kamal, assets, tmp_path):
    kamal("add-teacher", make_gpt2_classifier(tmp_path / "gpt2", ["world", "sports"], seed=3), "--name", "g2")
    kamal("add-teacher", assets["teacher_b"], "--name", "b")
    kamal("add-data", assets["pool"], "--name", "pool")
    [line] = errors(kamal("amalgamate", "--method", "vanilla-kd", "--init", "merge", "--name", "m",
                          "--student", assets["encoder"], *SMALL, code=2))
    vocab = len(tiny.vocabulary())
    assert (f"--init merge: teacher g2 (gpt2, 2 layers of 32, vocabulary {vocab}) was not fine-tuned from the "
            f"student {assets['encoder']} (bert, 2 layers of 32, vocabulary {vocab})") in line
    assert "None" not in line


# round 4, item 14
def test_remove_teacher_removes_the_folder_kamal_made_and_the_name_trains_again(kamal, assets, ws):
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    teach = ["train-teacher", "train", "--labels", "world,sports", "--name", "t1", "--base", assets["encoder"], *SMALL]
    left = ws / ".kamal" / "artifacts" / "teachers" / "t1"
    left.mkdir(parents=True)  # what an older kamal's remove-teacher kept
    (left / "config.json").write_text("{}")
    assert f"Replaced {left}, the folder of a teacher t1 removed earlier." in kamal(*teach).stderr
    folder = Path(kamal.json("teachers")[0]["path"])
    assert folder == left and (folder / "model.safetensors").is_file()

    removed = kamal("remove-teacher", "t1").stdout
    assert f"the folder kamal made for it ({folder.resolve()})" in removed and not folder.exists()
    trained = kamal(*teach)
    assert "Replaced" not in trained.stderr and "Trained teacher t1" in trained.stdout

    # a user's own folder stays; a copy kamal made goes
    kamal("add-teacher", assets["teacher_a"], "--name", "mine")
    assert "were not touched" in kamal("remove-teacher", "mine").stdout and assets["teacher_a"].is_dir()
    kamal("add-teacher", assets["teacher_b"], "--name", "copied", "--copy")
    copy = Path(next(t["path"] for t in kamal.json("teachers") if t["name"] == "copied"))
    kamal("remove-teacher", "copied")
    assert not copy.exists() and assets["teacher_b"].is_dir()


# round 4, item 14
def test_train_teacher_refuses_a_folder_another_teacher_reads_before_training(kamal, assets, ws):
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    left = ws / ".kamal" / "artifacts" / "teachers" / "t1"
    shutil.copytree(assets["teacher_a"], left)
    kamal("add-teacher", left, "--name", "kept")  # the user re-added what an older remove-teacher kept
    before = kamal.db_snapshot()
    [line] = errors(kamal("train-teacher", "train", "--labels", "world,sports", "--name", "t1",
                          "--base", assets["encoder"], *SMALL, code=2))
    assert line == f"Error: {left} is the folder of teacher kept; choose another --name"
    assert kamal.db_snapshot() == before and (left / "model.safetensors").is_file()


@pytest.fixture
def two_named(kamal, assets, tmp_path):
    """news (world, sports) and club (sport, business)."""
    kamal("add-teacher", assets["teacher_a"], "--name", "news")
    kamal("add-teacher", tiny.make_classifier(tmp_path / "club", ["sport", "business"], seed=8), "--name", "club")
    return kamal


# round 4, item 17
def test_o_as_a_class_name_is_refused_for_what_it_is(two_named):
    before = two_named.db_snapshot()
    [line] = errors(two_named("labels", "merge", "sports", "sport", "--as", "O", code=2))
    assert line == "Error: 'O' is kept for every token teacher's 'outside' tag; pick another --as"
    assert two_named.db_snapshot() == before


# round 4, item 17
def test_merging_bio_tags_says_to_merge_entity_types(kamal, tmp_path):
    kamal("add-teacher", tiny.make_token_classifier(tmp_path / "t1", ["O", "B-PER", "I-PER"], seed=1), "--name", "per")
    kamal("add-teacher", tiny.make_token_classifier(tmp_path / "t2", ["O", "B-ORG", "I-ORG"], seed=2), "--name", "org")
    before = kamal.db_snapshot()
    [line] = errors(kamal("labels", "merge", "B-PER", "B-ORG", code=2))
    assert line == "Error: 'B-PER' is a tag of token teachers: merge their entity types (kamal labels merge PER ORG)"
    assert kamal.db_snapshot() == before
    kamal("labels", "merge", "PER", "ORG")  # what it says to do works


# round 4, item 17
def test_split_names_only_the_labels_that_are_classes_again(two_named):
    two_named("labels", "merge", "sports", "sport", "--as", "gm")
    out = two_named("labels", "split", "gm").stdout
    assert out.strip() == "Split gm: sports, sport are separate classes again."
    assert two_named.json("labels")["labels"] == ["world", "sports", "sport", "business"]


# round 4, item 17
def test_a_merge_goes_with_the_last_of_its_teachers(two_named, tmp_path):
    two_named("labels", "merge", "sports", "sport", "--as", "gm")
    two_named("remove-teacher", "news")
    assert [c["name"] for c in two_named.json("labels")["classes"]] == ["gm"]  # club's sport is still gm
    removed = two_named("remove-teacher", "club")
    assert "Forgot the merge gm = gm, sports, sport: no teacher has those labels now" in unfolded(removed.stderr)
    assert two_named.json("labels")["classes"] == [] and "Merged" not in two_named("teachers").output
    two_named("add-teacher", tiny.make_classifier(tmp_path / "club2", ["sport", "arts"], seed=9), "--name", "club")
    assert two_named.json("labels")["labels"] == ["sport", "arts"]  # its own name, not the forgotten gm


# round 4, item 21
def test_teachers_flags_a_missing_folder(kamal, assets, tmp_path):
    folder = Path(shutil.copytree(assets["teacher_a"], tmp_path / "news"))
    kamal("add-teacher", folder, "--name", "news")
    kamal("add-teacher", assets["teacher_b"], "--name", "money")
    folder.rename(tmp_path / "moved")
    result = kamal("teachers")
    assert (f"teacher news's folder {folder} is missing (moved or deleted?): move it back, or kamal remove-teacher "
            "news, then kamal add-teacher NEW_FOLDER --name news") in unfolded(result.stderr)
    assert "(folder missing)" in result.stdout and result.stdout.count("(folder missing)") == 1
    listed = {t["name"]: t["folder_missing"] for t in kamal.json("teachers")}
    assert listed == {"news": True, "money": False}
