"""Round 4 (issue 66): test rows never trained on, probes checked against the teachers' weights on disk,
label-queue's --out, and label queues filled in by hand."""

import csv
import json
from pathlib import Path

import pytest
import tiny
from conftest import TRAIN, Kamal, add_copied_teacher, add_teachers_and_data, unfolded


def _one_line(result, fits: bool = True) -> str:
    """The one line of an error; fits: within 160 characters (false where it names the test's long paths)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and (not fits or len(lines[0]) <= 160), result.stderr
    return lines[0]


# round 4, item 3
@pytest.mark.parametrize("command", [
    ("amalgamate", "--method", "vanilla-kd", "--name", "on-test", "--data", "held", *TRAIN),
    ("extend", "kd", "--teacher", "life", "--data", "held", *TRAIN),
    ("scope", "kd", "--data", "held"),
    ("label-queue", "--data", "held", "--n", "5", "--out", "{tmp}/q.csv"),
], ids=lambda command: command[0])
def test_a_test_set_is_never_trained_or_fitted_on(kd_student, assets, trained, tmp_path, command):
    kd_student("add-data", assets["test"], "--name", "held", "--role", "test")
    kd_student("add-teacher", trained["life"], "--name", "life")
    before = kd_student.db_snapshot()
    args = [str(a).format(tmp=tmp_path) for a in command]
    if command[0] == "amalgamate":
        args += ["--student", assets["encoder"]]
    line = _one_line(kd_student(*args, code=2))
    assert "--data held: held is a test set, which kamal only measures on" in line
    assert not (tmp_path / "q.csv").exists()
    assert kd_student.db_snapshot() == before


def _retrain(folder, seed: int) -> None:
    """Fine-tuned again into the same folder: same labels and shapes, other weights."""
    tiny.make_classifier(folder, ["world", "sports"], seed=seed)


def _afresh(path, folder, assets) -> Kamal:
    """A new workspace with teacher a's folder as it is now (no cached output), b, the pool and the test set."""
    Kamal(None)("init", path)
    fresh = Kamal(path)
    add_teachers_and_data(fresh, {"a": folder, "b": assets["teacher_b"]}, assets)
    return fresh


def _queue(kamal, out) -> list[tuple[str, str]]:
    kamal("label-queue", "--data", "pool", "--n", "5", "--out", out)
    with open(out, newline="") as f:
        return [(r["row"], r["suggested"]) for r in csv.DictReader(f)]


# round 4, item 5
def test_baselines_and_the_label_queue_read_no_probe_of_old_weights(kamal, assets, tmp_path):
    folder = add_copied_teacher(kamal, assets, tmp_path / "a")
    kamal("add-data", assets["test"], "--name", "test", "--role", "eval")
    old = kamal.json("eval", "--baseline", "teacher:a", "--data", "test")
    old_queue = _queue(kamal, tmp_path / "old.csv")
    changed = "teacher a changed on disk since it was added"

    _retrain(folder, seed=77)
    result = kamal("eval", "--baseline", "teacher:a", "--data", "test", "--json")
    assert changed in result.stderr and "its cached probes are stale and will be recomputed" in result.stderr
    expected = _afresh(tmp_path / "fresh-77", folder, assets).json("eval", "--baseline", "teacher:a", "--data", "test")
    assert json.loads(result.stdout)["confusion"] == expected["confusion"] != old["confusion"]

    _retrain(folder, seed=78)
    result = kamal("eval", "--baseline", "ensemble", "--data", "test", "--json")
    expected = _afresh(tmp_path / "fresh-78", folder, assets).json("eval", "--baseline", "ensemble", "--data", "test")
    assert changed in result.stderr and json.loads(result.stdout)["confusion"] == expected["confusion"]

    _retrain(folder, seed=79)
    queue = _queue(kamal, tmp_path / "q.csv")
    assert queue == _queue(_afresh(tmp_path / "fresh-79", folder, assets), tmp_path / "expected.csv") != old_queue
    assert "changed on disk" not in kamal("teachers").stderr


# round 4, items 7 (a folder that is not there) and 15 (kamal's own files, a model's folder)
@pytest.mark.parametrize("place, why", [
    ("{tmp}/missing-folder/q.csv", "no folder {tmp}/missing-folder"),
    ("{ws}/.kamal/q.csv", "it is inside the workspace's state"),
    ("{tmp}/a/q.csv", "it is inside teacher a's folder"),
])
def test_label_queue_writes_only_where_report_html_may(kamal, assets, ws, tmp_path, place, why):
    add_copied_teacher(kamal, assets, tmp_path / "a")
    before = kamal.db_snapshot()
    out = Path(place.format(tmp=tmp_path, ws=ws))
    line = _one_line(kamal("label-queue", "--data", "pool", "--n", "5", "--out", out, code=2), fits=False)
    assert line.startswith(f"Error: cannot write the queue to {out}: {why.format(tmp=tmp_path)}"), line
    assert not out.exists()
    assert kamal.db_snapshot() == before  # refused before any teacher ran: no probe cached


def _write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


# round 4, item 9
def test_csv_texts_and_labels_that_look_like_missing_values_are_kept(kamal, tmp_path):
    words = ["NA", "N/A", "None", "null", "NaN", "nan", "n/a", "NULL"]
    path = _write_csv(tmp_path / "filled.csv", [{"text": w, "label": w, "id": i} for i, w in enumerate(words)])
    kamal("add-data", path, "--name", "gold", "--label-column", "label", "--role", "eval")
    [gold] = kamal.json("data")
    assert gold["rows"] == len(words) and gold["label_counts"] == {w: 1 for w in words}
    blank = _write_csv(tmp_path / "blank.csv", [{"text": "fine", "label": "x"}, {"text": "", "label": "y"}])
    assert "row 2 has no text in column 'text'" in _one_line(kamal("add-data", blank, "--role", "eval", code=2))


# round 4, item 10
def test_a_label_queue_filled_in_part_way(kamal, tmp_path):
    rows = [{"row": i, "text": f"text number {i}", "label": "world" if i % 4 else ""} for i in range(12)]
    path = _write_csv(tmp_path / "queue.csv", rows)
    before = kamal.db_snapshot()
    line = _one_line(kamal("add-data", path, "--name", "gold", "--label-column", "label", code=2))
    assert ("queue.csv: 3 of 12 rows have no label in column 'label' (rows 1, 5, 9): fill in every label, or pass "
            "--skip-unlabelled to leave them out") in line
    assert kamal.db_snapshot() == before
    result = kamal("add-data", path, "--name", "gold", "--label-column", "label", "--skip-unlabelled")
    assert "Left out 3 of 12 rows: they have no label in column 'label'." in result.stderr
    [gold] = kamal.json("data")
    assert gold["rows"] == 9 and gold["label_counts"] == {"world": 9}
    one = _write_csv(tmp_path / "one.csv", [{"text": "a", "label": "x"}, {"text": "b", "label": ""}])
    assert "1 of 2 rows has no label in column 'label' (row 2)" in _one_line(
        kamal("add-data", one, "--label-column", "label", code=2))
    empty = _write_csv(tmp_path / "empty.csv", [{"text": "a", "label": ""}])
    assert "no row has a label" in _one_line(kamal("add-data", empty, "--label-column", "label", "--skip-unlabelled",
                                                    code=2))
    assert "name the labels with --label-column" in _one_line(kamal("add-data", path, "--skip-unlabelled", code=2))


# round 4, item 5: the readers that cannot refresh (report, labels) say their probes are stale
def test_report_and_labels_say_a_teachers_probes_are_stale(kamal, assets, tmp_path):
    folder = add_copied_teacher(kamal, assets, tmp_path / "a")
    kamal("probe", "--data", "pool", "--mc-samples", "2")
    assert "stale" not in kamal("report").stderr + kamal("labels").stderr
    _retrain(folder, seed=80)
    stale = ("teacher a changed on disk since it was added (fingerprint {old} -> {new}): its probes are stale until "
             "kamal probe runs again")
    [a] = [t for t in kamal.json("teachers") if t["name"] == "a"]
    line = stale.format(old=a["fingerprint"][:12], new=a["fingerprint_on_disk"][:12])
    assert line in unfolded(kamal("report").stderr)
    assert any(r["teacher"] == "a" for r in kamal.json("report")["probes"])
    labels = kamal("labels")
    assert line in unfolded(labels.stderr)
    assert "only the names were compared" in unfolded(labels.stdout + labels.stderr)


# round 4, item 3: a teacher is not trained on a test set either
def test_train_teacher_refuses_a_test_set(kamal, assets):
    kamal("add-data", assets["train"], "--name", "held", "--role", "test")
    before = kamal.db_snapshot()
    result = kamal("train-teacher", "held", "--labels", "world,sports", "--name", "t", "--base", assets["encoder"],
                   code=2)
    assert _one_line(result, fits=False).startswith("Error: kamal train-teacher held: held is a test set")
    assert kamal.db_snapshot() == before
