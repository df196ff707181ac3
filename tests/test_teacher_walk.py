"""Teachers on the README's path (issue 34): what a trained teacher's folder says about it, the notes
add-teacher prints, the held-out accuracy with its interval, and the training's expected time."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

import tiny

SETTINGS = ["--epochs", "3", "--lr", "3e-3", "--batch-size", "16", "--max-length", "32"]
INTERVAL = re.compile(r"held-out accuracy (\d+\.\d)% on (\d+) rows \(95% CI (\d+\.\d)-(\d+\.\d)%\)")
EXPECTED = re.compile(r"about \d+ (s|min) for up to (\d+) steps( \(early stopping may end sooner\))?")


def _train(kamal, assets, *extra, name="life"):
    kamal("add-data", assets["train"], "--name", "clinic-notes-2024", "--role", "eval")
    return kamal("train-teacher", "clinic-notes-2024", "--labels", "health,arts", "--name", name,
                 "--base", assets["encoder"], *extra)


# 7. a trained teacher's kamal.json


def test_a_trained_teachers_kamal_json_names_no_local_data_or_path(kamal, assets, ws):
    _train(kamal, assets, *SETTINGS)
    [teacher] = kamal.json("teachers")
    text = (Path(teacher["path"]) / "kamal.json").read_text()
    meta = json.loads(text)
    for private in ("clinic-notes-2024", str(ws), str(assets["encoder"]), str(assets["train"])):
        assert private not in text
    assert "data" not in meta
    assert meta["labels"] == ["health", "arts"] and meta["rows"] == 120 and meta["held_out_rows"] == 6
    assert meta["base"] == "encoder (a local folder)"
    assert meta["train"]["lr"] == 3e-3 and meta["train"]["epochs"] == 3
    assert 0 <= meta["held_out_accuracy"] <= 1 and len(meta["held_out_accuracy_interval"]) == 2


def test_the_workspace_keeps_the_link_to_the_data_a_teacher_was_trained_on(kamal, assets, ws):
    _train(kamal, assets, *SETTINGS)
    conn = sqlite3.connect(ws / ".kamal" / "kamal.db")
    try:
        [(name,)] = conn.execute("SELECT d.name FROM teachers t JOIN datasets d ON d.id = t.train_dataset_id").fetchall()
    finally:
        conn.close()
    assert name == "clinic-notes-2024"


def test_a_named_base_stays_named_in_kamal_json():
    from kamalcli.teachers.train import base_for_folder

    assert base_for_folder("minilm-l6") == "minilm-l6"
    assert base_for_folder("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"


# 9. one note for the labels a new teacher shares


def _also_taught(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "also taught by" in line]


def test_a_teacher_over_the_same_labels_gets_one_note_listing_them(kamal, assets, tmp_path):
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    twin = tiny.make_classifier(tmp_path / "twin", ["world", "sports"], seed=9)
    [line] = _also_taught(kamal("add-teacher", twin, "--name", "twin").stderr)
    assert "Labels 'world', 'sports' are also taught by a:" in line


def test_labels_shared_with_different_teachers_are_one_note_too(kamal, assets, tmp_path):
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    kamal("add-teacher", assets["teacher_b"], "--name", "b")
    mixed = tiny.make_classifier(tmp_path / "mixed", ["world", "business", "health"], seed=9)
    [line] = _also_taught(kamal("add-teacher", mixed, "--name", "mixed").stderr)
    assert "Labels 'world' (a), 'business' (b) are also taught by other teachers:" in line


def test_one_shared_label_keeps_its_own_wording(kamal, assets, tmp_path):
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    one = tiny.make_classifier(tmp_path / "one", ["world", "health"], seed=9)
    [line] = _also_taught(kamal("add-teacher", one, "--name", "one").stderr)
    assert "Label 'world' is also taught by a:" in line


# 10. held-out accuracy with a 95% Wilson interval


@pytest.mark.parametrize("successes, n, low, high", [
    (62, 100, 0.5221, 0.7090),  # by hand: the roots p of (0.62 - p)^2 = 1.96^2 p (1 - p) / 100
    (81, 263, 0.2553, 0.3662),  # Newcombe (1998), Statistics in Medicine 17:857, table I, method 3
    (15, 148, 0.0624, 0.1605),  # ibid.
    (0, 20, 0.0, 0.1611),       # ibid.
    (1, 29, 0.0061, 0.1718),    # ibid.
])
def test_wilson_interval_golden_values(successes, n, low, high):
    from kamalcli.probs import wilson_interval

    got = wilson_interval(successes, n)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_interval_bounds_solve_its_quadratic():
    from kamalcli.probs import Z95, wilson_interval

    for successes, n in [(62, 100), (5, 6), (3, 7)]:
        share = successes / n
        for p in wilson_interval(successes, n):
            assert (share - p) ** 2 == pytest.approx(Z95 ** 2 * p * (1 - p) / n, abs=1e-12)


@pytest.mark.parametrize("successes, n", [(0, 0), (5, 4), (-1, 3)])
def test_wilson_interval_refuses_impossible_counts(successes, n):
    from kamalcli.probs import wilson_interval

    with pytest.raises(ValueError):
        wilson_interval(successes, n)


def test_train_teacher_says_the_interval_and_the_rows_and_records_them(kamal, assets):
    from kamalcli.probs import wilson_interval

    result = _train(kamal, assets, *SETTINGS)
    found = INTERVAL.search(result.stdout)
    assert found, result.stdout
    accuracy, rows, low, high = float(found[1]), int(found[2]), float(found[3]), float(found[4])
    [run] = kamal.json("runs")
    recorded = run["result"]
    assert rows == recorded["held_out_rows"] == 6
    correct = round(recorded["held_out_accuracy"] * rows)
    assert recorded["held_out_accuracy_interval"] == pytest.approx(list(wilson_interval(correct, rows)))
    assert (accuracy, low, high) == tuple(round(100 * x, 1) for x in (correct / rows, *wilson_interval(correct, rows)))


# 8. the training's expected time, measured on its first steps


def test_the_expected_time_is_measured_on_the_steps_after_the_first():
    from kamalcli.train.loop import ExpectedTime

    clock = ExpectedTime(total=600, first_step=0, early_stopping=True, at=100.0)
    said = [clock.after_step(step, at) for step, at in [(1, 130.0), (2, 131.0), (3, 132.0)]]
    assert said == [None, None, None]  # the first step warms up; then 3 steps are measured
    line = clock.after_step(4, 133.0)
    # 1 s a step over steps 2-4; 596 steps left: 33 s done + 596 s = about 10 min
    assert line == "about 10 min for up to 600 steps (early stopping may end sooner)"
    assert clock.after_step(5, 134.0) is None  # said once


def test_one_slow_step_among_the_measured_does_not_scale_the_expected_time():
    from kamalcli.train.loop import ExpectedTime

    clock = ExpectedTime(total=600, first_step=0, early_stopping=False, at=0.0)
    said = [clock.after_step(step, at) for step, at in [(1, 30.0), (2, 34.0), (3, 35.0), (4, 36.0)]]
    # steps of 4, 1 and 1 s: the median, 1 s; 36 s so far + 596 steps left x 1 s = 632 s
    assert said == [None, None, None, "about 11 min for up to 600 steps"]


def test_a_slow_step_brings_the_expected_time_before_three_steps():
    from kamalcli.train.loop import ExpectedTime

    clock = ExpectedTime(total=40, first_step=10, early_stopping=False, at=0.0)
    assert clock.after_step(11, 5.0) is None
    # resumed at step 10: 30 steps to run; 15 s a step, so 20 s so far + 28 steps left x 15 s = 440 s
    assert clock.after_step(12, 20.0) == "about 7 min for up to 30 steps"


def test_a_quick_training_says_no_expected_time(kamal, assets):
    result = _train(kamal, assets, *SETTINGS)
    assert not EXPECTED.search(result.stderr)


def test_train_teacher_says_its_expected_time_once(kamal, assets, monkeypatch):
    from kamalcli.train import loop

    monkeypatch.setattr(loop, "SAY_EXPECTED_FROM_S", 0.0)  # a tiny model: say it however short
    result = _train(kamal, assets, "--steps", "12", "--lr", "3e-3", "--batch-size", "16", "--max-length", "32")
    [line] = [line for line in result.stderr.splitlines() if EXPECTED.search(line)]
    found = EXPECTED.search(line)
    assert found[2] == "12" and found[3]  # the budget, and early stopping may end it sooner


def test_amalgamate_says_its_expected_time_once(two_teachers, assets, monkeypatch):
    from kamalcli.train import loop

    monkeypatch.setattr(loop, "SAY_EXPECTED_FROM_S", 0.0)
    result = two_teachers("amalgamate", "--method", "vanilla-kd", "--name", "v1", "--student", assets["encoder"],
                          "--steps", "10", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32")
    [line] = [line for line in result.stderr.splitlines() if EXPECTED.search(line)]
    assert line.startswith("vanilla-kd -> v1: ") and EXPECTED.search(line)[2] == "10"
