"""A workspace made by an earlier kamal opens and works: its schema history is kept, nothing is re-migrated.

tests/data/workspace-6240e6b.tar.gz was made with kamal at commit 6240e6b (before the package was split into
sub-packages), with tiny models: `kamal init`, add-data train/pool/test, two `train-teacher` (news: world,
sports; money: business, scitech), `probe --mc-samples 4 --max-length 32`, `amalgamate --method muki-hard
--name v1 --epochs 1`, `eval v1 --data test`, `export v1 --onnx`.
"""

from __future__ import annotations

import json
import sqlite3
import tarfile
from pathlib import Path

import pytest

from conftest import Kamal
from kamalcli.workspace.migrations import MIGRATIONS

ARCHIVE = Path(__file__).parent / "data" / "workspace-6240e6b.tar.gz"
SHIPPED = ["m001_registry", "m002_probes", "m003_students", "m004_exports", "m005_relative_paths",
           "m006_loss_history", "m007_dataset_provenance", "m008_token_task"]


@pytest.fixture
def old(tmp_path) -> Kamal:
    root = tmp_path / "old-ws"
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(root, filter="data")
    return Kamal(root)


def _migrations(root: Path) -> list[str]:
    conn = sqlite3.connect(root / ".kamal" / "kamal.db")
    try:
        return [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations WHERE migration_set = 'kamal' ORDER BY rowid")]
    finally:
        conn.close()


def test_the_shipped_migrations_are_the_ones_kamal_applies():
    from kamalcli.workspace.migrations import MIGRATIONS

    assert [m.__name__ for m in MIGRATIONS][: len(SHIPPED)] == SHIPPED


def test_an_old_workspace_lists_what_it_holds(old):
    assert [t["name"] for t in old.json("teachers")] == ["news", "money"]
    assert [t["labels"] for t in old.json("teachers")] == [["world", "sports"], ["business", "scitech"]]
    assert [(d["name"], d["role"]) for d in old.json("data")] == [("train", "eval"), ("pool", "transfer"),
                                                                  ("test", "eval")]  # m012: not test sets
    (student,) = old.json("students")
    assert student["name"] == "v1" and student["method"] == "muki-hard"
    assert [r["status"] for r in old.json("runs")] == ["done"] * 5
    # opened by this kamal: nothing re-run, the migrations added since it shipped applied once, after them
    assert _migrations(old.workspace) == [m.__name__ for m in MIGRATIONS]


def test_an_old_student_evaluates_as_it_did_and_its_export_predicts(old):
    recorded = old.json("eval", "v1", "--data", "test")
    conn = sqlite3.connect(old.workspace / ".kamal" / "kamal.db")
    try:
        first = json.loads(conn.execute("SELECT metrics FROM evaluations ORDER BY id LIMIT 1").fetchone()[0])
    finally:
        conn.close()
    assert recorded["accuracy"] == first["accuracy"] and recorded["confusion"] == first["confusion"]
    onnx = old.json("predict", "v1", "--onnx", "the coach said the match was big")
    torch = old.json("predict", "v1", "the coach said the match was big")
    assert onnx[0]["label"] == torch[0]["label"]


def test_an_old_workspace_takes_new_work(old, assets):
    probed = old("probe", "--mc-samples", 4, "--max-length", 32)
    assert "Nothing to do: all 6 probes were cached" in probed.output  # its probes are found and reused
    old("add-data", assets["test6"], "--name", "test6", "--role", "eval")
    assert [d["name"] for d in old.json("data")] == ["train", "pool", "test", "test6"]
