"""The schema: named migrations, idempotent, with foreign keys and WAL."""

import sqlite3

from kamalcli.workspace.db import _migrations, open_database


def test_migrations_apply_once_and_again_change_nothing(tmp_path):
    path = tmp_path / "k.db"
    open_database(path).close()
    conn = sqlite3.connect(path)
    schema = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    applied = conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id").fetchall()
    conn.close()
    open_database(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == schema
    assert conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id").fetchall() == applied
    assert [a[0] for a in applied] == [m.name for m in _migrations()._migrations]


def test_tables_columns_and_foreign_keys(tmp_path):
    db = open_database(tmp_path / "k.db")
    tables = set(db.table_names())
    assert {"teachers", "labels", "teacher_labels", "datasets", "runs", "probes", "probe_rows", "rmd_fits",
            "selection", "students", "student_teachers", "evaluations", "exports"} <= tables
    columns = {c.name for c in db["teachers"].columns}
    assert {"name", "path", "fingerprint", "architecture", "num_layers", "hidden_size", "vocab_size", "dropout",
            "tokenizer_fingerprint"} <= columns
    fks = {(fk.column, fk.other_table) for fk in db["teacher_labels"].foreign_keys}
    assert fks == {("teacher_id", "teachers"), ("label_id", "labels")}
    assert ("teacher_id", "teachers") in {(fk.column, fk.other_table) for fk in db["probes"].foreign_keys}
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.journal_mode == "wal"
    db.close()


def test_foreign_keys_are_enforced(tmp_path):
    import pytest

    db = open_database(tmp_path / "k.db")
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("INSERT INTO teacher_labels (teacher_id, position, label_id) VALUES (99, 0, 99)")
    db.close()
