"""The benchmark data ships with kamal: a fresh clone can rerun every scenario."""

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_topics10_is_in_the_repository_and_is_the_default():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from common import DEFAULT_DATA, HALF_A, HALF_B, load_split
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert DEFAULT_DATA == ROOT / "benchmarks" / "data" / "debian-topics"
    sizes = {split: len(load_split(DEFAULT_DATA, split)) for split in ("train", "dev", "test")}
    assert sizes == {"train": 5437, "dev": 736, "test": 1602}  # the counts in its README
    train = load_split(DEFAULT_DATA, "train")
    assert set(Counter(r["label"] for r in train)) == set(HALF_A + HALF_B)
    assert {"text", "label", "package", "source"} <= set(train[0])
    shipped = sum(p.stat().st_size for p in (DEFAULT_DATA / "topics10").iterdir())
    assert shipped < 3_000_000
    assert "Licence" in (DEFAULT_DATA / "README.md").read_text()


def test_nothing_points_outside_the_repository_for_data():
    docs = sorted((ROOT / "docs").glob("*.md"))
    assert ROOT / "docs" / "benchmarks.md" in docs  # the benchmark narrative and its tables live there
    for path in [*(ROOT / "benchmarks").glob("*.py"), ROOT / "README.md", ROOT / "CONTRIBUTING.md", *docs]:
        assert "shared/data" not in path.read_text(), path


def test_the_realistic_transfer_rows_are_none_of_the_teachers_rows():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from common import PROFILES, Bench
        from default_student import pool_rows, teacher_rows
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for profile in ("quick", "full"):
        bench = Bench("default-student", PROFILES[profile])
        taught = {r["text"] for r in teacher_rows(bench)}
        pool = pool_rows(bench)
        assert pool and not taught & {r["text"] for r in pool}
    quick = Bench("default-student", PROFILES["quick"])
    assert len(teacher_rows(quick)) == len(pool_rows(quick)) == 2000  # the same size under both protocols


def test_a_run_under_one_protocol_keeps_the_other_protocols_stored_figures():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from default_student import with_earlier_protocols
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    stored = {"protocols": ["muki", "realistic"], "seeds": [1],
              "students": {"muki": "muki s1", "realistic": "realistic s1"},
              "supervised": {"muki": "ref muki s1", "realistic": "ref realistic s1"}}
    rerun = {"protocols": ["realistic"], "seeds": [1, 2], "students": {"realistic": "realistic s1,2"},
             "supervised": {"realistic": "ref realistic s1,2"}}
    merged = with_earlier_protocols(rerun, stored)
    assert merged["protocols"] == ["muki", "realistic"]
    assert merged["seeds_by_protocol"] == {"muki": [1], "realistic": [1, 2]}
    assert merged["students"] == {"muki": "muki s1", "realistic": "realistic s1,2"}
    assert merged["supervised"] == {"muki": "ref muki s1", "realistic": "ref realistic s1,2"}
    again = with_earlier_protocols({**rerun, "protocols": ["muki"], "seeds": [3], "students": {"muki": "muki s3"},
                                    "supervised": {"muki": "ref muki s3"}}, merged)
    assert again["seeds_by_protocol"] == {"muki": [3], "realistic": [1, 2]}  # stored per protocol, not the run's
    assert with_earlier_protocols(stored, {}) is stored  # nothing stored: the run as it is
