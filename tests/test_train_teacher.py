"""kamal train-teacher: the same loop as amalgamate, registered as a teacher, Ctrl-C safe."""

import pytest

SETTINGS = ["--epochs", "3", "--lr", "3e-3", "--batch-size", "16", "--max-length", "32"]


def test_train_teacher_registers_a_teacher_with_its_data(kamal, assets):
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    result = kamal("train-teacher", "train", "--labels", "health,arts", "--name", "life", "--base", assets["encoder"], *SETTINGS)
    assert "Trained teacher life on 120 rows (health, arts)" in result.stdout
    [teacher] = kamal.json("teachers")
    assert teacher["origin"] == "trained" and teacher["labels"] == ["health", "arts"]
    [run] = kamal.json("runs")
    assert run["kind"] == "train-teacher" and run["status"] == "done" and run["result"]["held_out_rows"] == 6
    assert run["result"]["embeddings"] == "trained"


def test_the_embeddings_policy_comes_from_the_flag_or_kamal_toml(kamal, assets, ws):
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    args = ["train", "--labels", "health,arts", "--base", assets["encoder"], *SETTINGS]
    kamal("train-teacher", *args, "--name", "flag", "--embeddings", "freeze")
    toml = ws / "kamal.toml"
    toml.write_text(toml.read_text().replace('embeddings = "train"', 'embeddings = "freeze"'))
    kamal("train-teacher", *args, "--name", "toml", "--seed", "1")  # other weights than "flag"
    assert [r["result"]["embeddings"] for r in kamal.json("runs")] == ["frozen", "frozen"]
    toml.write_text(toml.read_text().replace('embeddings = "freeze"', 'embeddings = "thaw"'))
    result = kamal("train-teacher", *args, "--name", "bad", code=2)
    assert result.stderr.strip().splitlines()[-1].endswith("embeddings must be one of train, freeze (got 'thaw')")


def test_interrupt_and_resume(kamal, assets, interrupt_training):
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    interrupt_training(4)
    args = ["train", "--labels", "world,sports", "--name", "news", "--base", assets["encoder"], *SETTINGS]
    result = kamal("train-teacher", *args, code=130)
    assert "kamal train-teacher --resume news" in result.stderr
    assert kamal.json("teachers") == []
    interrupt_training(None)
    kamal("train-teacher", "--resume", "news")
    assert [t["name"] for t in kamal.json("teachers")] == ["news"]
    assert [r["status"] for r in kamal.json("runs")] == ["interrupted", "done"]


@pytest.mark.parametrize("args, message", [
    (["pool", "--labels", "a,b", "--name", "x"], "has no labels to train on"),
    (["train", "--labels", "world", "--name", "x"], "at least two labels"),
    (["train", "--labels", "world,cooking", "--name", "x"], "no rows labelled cooking"),
    (["train", "--labels", "world,sports"], "give DATA, --labels"),
])
def test_bad_input(kamal, assets, args, message):
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    kamal("add-data", assets["pool"], "--name", "pool")
    assert message in kamal("train-teacher", *args, "--base", assets["encoder"], code=2).stderr


def test_weights_identical_to_a_teacher_are_refused_and_leave_nothing_behind(kamal, assets, ws):
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    args = ["train", "--labels", "health,arts", "--base", assets["encoder"], *SETTINGS]
    kamal("train-teacher", *args, "--name", "life")
    result = kamal("train-teacher", *args, "--name", "twin", code=2)  # deterministic: the very same weights
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: the trained weights are identical to those of teacher 'life' (the same rows, labels, base and settings): "
        "use life, or train with another --seed")
    teachers_dir = ws / ".kamal" / "artifacts" / "teachers"
    assert sorted(p.name for p in teachers_dir.iterdir()) == ["life"]
    assert not list((ws / ".kamal" / "artifacts" / "tmp").iterdir())
    assert [r["status"] for r in kamal.json("runs")] == ["done", "failed"]
    kamal("train-teacher", *args, "--name", "twin", "--seed", "1")  # the name is free again
    assert [t["name"] for t in kamal.json("teachers")] == ["life", "twin"]
