"""kamal add-data: every format, label checks, and every way a file can be wrong."""

import json

import pytest


def test_jsonl_transfer_data(kamal, assets):
    result = kamal("add-data", assets["pool"], "--name", "pool")
    assert "Added transfer data pool: 240 rows" in result.stdout
    [d] = kamal.json("data")
    assert d["rows"] == 240 and d["role"] == "transfer" and d["labelled"] is False and d["text_column"] == "text"
    assert len(d["content_hash"]) == 64


@pytest.mark.parametrize("fmt", ["csv", "tsv", "json", "parquet", "jsonl.gz"])
def test_formats_give_the_same_content_hash(kamal, tmp_path, fmt):
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"body": f"text number {i}", "topic": "sports" if i % 2 else "world"} for i in range(10)]
    reference = tmp_path / "ref.jsonl"
    reference.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / f"data.{fmt}"
    if fmt in ("csv", "tsv"):
        sep = "," if fmt == "csv" else "\t"
        path.write_text(f"body{sep}topic\n" + "".join(f"{r['body']}{sep}{r['topic']}\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_bytes(gzip.compress(reference.read_bytes()))
    args = ["--text-column", "body", "--label-column", "topic", "--role", "eval"]
    kamal("add-data", reference, "--name", "ref", *args)
    kamal("add-data", path, "--name", "other", *args)
    ref, other = kamal.json("data")
    assert other["rows"] == 10 and other["label_counts"] == {"sports": 5, "world": 5}
    assert other["content_hash"] == ref["content_hash"]


def test_txt_is_one_text_per_line(kamal, tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("first text\n\nsecond text\nthird\n")
    kamal("add-data", path)
    assert kamal.json("data")[0]["rows"] == 3


def test_eval_labels_are_checked_against_the_union(kamal, assets):
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    result = kamal("add-data", assets["test"], "--name", "test", "--role", "eval")
    assert "have labels no teacher knows: business (20), scitech (20)" in result.stderr
    assert kamal.json("data")[0]["label_counts"]["business"] == 20


def test_eval_needs_labels(kamal, assets):
    before = kamal.db_snapshot()
    result = kamal("add-data", assets["pool"], "--name", "x", "--role", "eval", code=2)
    assert "the eval set needs gold labels" in result.stderr
    assert kamal.db_snapshot() == before


@pytest.mark.parametrize("name, content, message", [
    ("empty.jsonl", b"", "is empty"),
    ("latin.csv", "text,label\ncaf\xe9 cr\xe8me,world\n".encode("latin-1"), "not valid UTF-8"),
    ("cols.csv", b"body,topic\nhello,world\n", "which column holds the text"),
    ("nulls.jsonl", b'{"text": "a", "label": "x"}\n{"text": null, "label": "y"}\n', "row 2 has no text"),
    ("notes.pdf", b"%PDF-1.4", "unknown file type"),
    ("broken.jsonl", b'{"text": "a"\n', "broken.jsonl line 1: not valid JSON"),
])
def test_bad_files_exit_2_with_one_line_and_change_nothing(kamal, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    before = kamal.db_snapshot()
    result = kamal("add-data", path, code=2)
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert kamal.db_snapshot() == before


def test_missing_columns_and_files(kamal, assets, tmp_path):
    assert "has no column 'body'" in kamal("add-data", assets["pool"], "--text-column", "body", code=2).stderr
    assert "has no column 'topic'" in kamal("add-data", assets["test"], "--label-column", "topic", code=2).stderr
    assert "no such file" in kamal("add-data", tmp_path / "missing.csv", code=2).stderr


def test_names_are_unique(kamal, assets):
    kamal("add-data", assets["pool"], "--name", "pool")
    assert "exists already" in kamal("add-data", assets["pool"], "--name", "pool", code=2).stderr


def test_no_cache_files_left_behind(kamal, assets, ws):
    kamal("add-data", assets["pool"], "--name", "pool")
    leftovers = [p for p in (ws / ".kamal" / "artifacts" / "tmp").rglob("*") if p.is_file()]
    assert leftovers == []
