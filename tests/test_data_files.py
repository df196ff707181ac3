"""Files users really have: tag case and BIO consistency, csv delimiters, empty and mistyped files."""

from __future__ import annotations

import json

import pytest
import tiny


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -- tag case and BIO consistency (token teachers and token data) -----------

def test_add_teacher_upper_cases_entity_types_and_says_so(kamal, tmp_path):
    folder = tiny.make_token_classifier(tmp_path / "lower", ["O", "B-per", "I-per", "B-Loc", "I-Loc"])
    result = kamal("add-teacher", folder, "--name", "lower")
    assert "B-per -> B-PER" in result.stderr and "B-Loc -> B-LOC" in result.stderr
    [teacher] = kamal.json("teachers")
    assert teacher["labels"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    # a second teacher tagging PER in upper case shares the union's PER tags instead of adding new ones
    upper = tiny.make_token_classifier(tmp_path / "upper", ["O", "B-PER", "I-PER"])
    assert "also taught by lower" in kamal("add-teacher", upper, "--name", "upper").stderr


@pytest.mark.parametrize("tags, message", [
    (["O", "B-PER", "I-PER", "B-per"], "B-PER and B-per differ only in case"),
    (["O", "B-ORG", "I-PER"], "I-PER has no B-PER"),
])
def test_add_teacher_refuses_inconsistent_tags_in_one_line(kamal, tmp_path, tags, message):
    folder = tiny.make_token_classifier(tmp_path / "bad", tags)
    before = kamal.db_snapshot()
    result = kamal("add-teacher", folder, "--name", "bad", code=2)
    assert message in _one_line(result)
    assert kamal.db_snapshot() == before


def test_add_teacher_accepts_a_type_with_only_a_b_tag(kamal, tmp_path):
    folder = tiny.make_token_classifier(tmp_path / "single", ["O", "B-PER", "I-PER", "B-DATE"])
    kamal("add-teacher", folder, "--name", "single")
    assert kamal.json("teachers")[0]["labels"] == ["O", "B-PER", "I-PER", "B-DATE"]


def test_add_data_upper_cases_tags_and_says_so(kamal, tmp_path):
    path = _jsonl(tmp_path / "mixed.jsonl", [{"tokens": ["Ann", "Lee", "ran"], "tags": ["B-per", "I-per", "O"]},
                                             {"tokens": ["Bob", "ran"], "tags": ["B-PER", "O"]}])
    result = kamal("add-data", path, "--name", "mixed", "--role", "eval")
    assert "entity types PER (" in result.stdout
    assert "B-per -> B-PER" in result.stderr and "I-per -> I-PER" in result.stderr
    [record] = kamal.json("data")
    assert record["label_counts"] == {"B-PER": 2, "I-PER": 1, "O": 2}


def test_add_data_accepts_iob1_tags_and_counts_them(kamal, tmp_path):
    conll = tmp_path / "iob1.conll"
    conll.write_text("Ann I-PER\nLee I-PER\nran O\n\nin O\nParis I-LOC\nand O\nRome I-LOC\nRome B-LOC\n",
                     encoding="utf-8")
    result = kamal("add-data", conll, "--name", "iob1", "--role", "eval")
    assert "3 entities begin with I- rather than B-" in result.stderr
    assert kamal.json("data")[0]["label_counts"] == {"I-PER": 2, "O": 3, "I-LOC": 2, "B-LOC": 1}


# -- csv delimiters ------------------------------------------------------------

@pytest.mark.parametrize("sep, shown", [(";", "';'"), ("|", "'|'"), ("\t", "tab")])
def test_csv_delimiter_is_detected_and_named(kamal, tmp_path, sep, shown):
    path = tmp_path / "semi.csv"
    path.write_text(f"text{sep}label\ngame play{sep}games\nnice match{sep}sports\n", encoding="utf-8")
    result = kamal("add-data", path, "--name", "semi", "--role", "eval")
    assert f"columns separated by {shown}" in result.stderr
    [record] = kamal.json("data")
    assert record["columns"] == ["text", "label"] and record["label_counts"] == {"games": 1, "sports": 1}


def test_comma_csv_with_semicolons_in_texts_is_read_with_commas(kamal, tmp_path):
    path = tmp_path / "comma.csv"
    path.write_text('text,label\n"one; two",a\nthree;four,b\n', encoding="utf-8")
    result = kamal("add-data", path, "--name", "comma", "--role", "eval")
    assert "separated by" not in result.stderr
    assert kamal.json("data")[0]["label_counts"] == {"a": 1, "b": 1}


def test_one_column_header_over_split_rows_is_refused(kamal, tmp_path):
    path = tmp_path / "onecol.csv"
    path.write_text("text\nhello, world\nfoo, bar\n", encoding="utf-8")
    before = kamal.db_snapshot()
    line = _one_line(kamal("add-data", path, code=2))
    assert "onecol.csv: the header has one column but row 1 has 2 fields separated by ','" in line
    assert kamal.db_snapshot() == before


def test_one_column_csv_with_semicolons_in_texts_stays_one_column(kamal, tmp_path):
    path = tmp_path / "texts.csv"
    path.write_text("text\nhello; world\nfoo; bar\n", encoding="utf-8")
    kamal("add-data", path, "--name", "texts")
    assert kamal.json("data")[0]["columns"] == ["text"]


# -- files with nothing to read, or not what they seem -----------------------

@pytest.mark.parametrize("name, content, message", [
    ("header.csv", "text,label\n", "header.csv has a header (text, label) but no rows"),
    ("header.tsv", "text\tlabel\n\n", "header.tsv has a header (text, label) but no rows"),
    ("blank.csv", "\n\n", "blank.csv holds no rows (only blank lines)"),
    ("blank.jsonl", "\n \n", "blank.jsonl holds no rows (only blank lines)"),
])
def test_files_without_rows_say_so(kamal, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert _one_line(kamal("add-data", path, code=2)) == f"Error: {message}"


def test_parquet_text_column_of_numbers_names_its_type(kamal, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"text": [1, 2], "label": ["a", "b"]}), path)
    line = _one_line(kamal("add-data", path, "--text-column", "text", code=2))
    assert "column 'text' holds int values, not text" in line


def test_one_number_among_texts_is_named_by_its_row(kamal, tmp_path):
    path = _jsonl(tmp_path / "mixed.jsonl", [{"text": "a"}, {"text": 5}])
    assert "row 2 holds int 5 in column 'text', not text" in _one_line(kamal("add-data", path, code=2))


@pytest.mark.parametrize("name, content, where", [
    ("broken.jsonl", '{"text": "a"}\n{"text": "b"}\n\n{"text": "c" "x"}\n', "broken.jsonl line 4: not valid JSON: "),
    ("open.jsonl", '{"text": "a"}\n{"text": "b"\n{"text": "c"}\n', "open.jsonl line 2: not valid JSON: "),
    ("array.json", '[{"text": "a"},\n {"text": "b"\n]\n', "array.json line 3: not valid JSON: "),
])
def test_broken_json_is_located_by_line(kamal, tmp_path, name, content, where):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    line = _one_line(kamal("add-data", path, code=2))
    assert line.startswith(f"Error: {where}"), line
    assert "position" not in line
