"""`benchmarks/run.py steering-speed`, where the GPU steering figures come from, runs from a shapes folder (tiny here)."""

import subprocess
import sys
from pathlib import Path

import pytest
import tiny

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


@pytest.mark.slow  # a subprocess that imports torch and transformers: the real-model tier's
def test_steering_speed_runs_from_shapes_and_prints_every_configuration(tmp_path):
    tiny.make_causal_lm(tmp_path / "shapes" / "lm")
    tiny.make_classifier(tmp_path / "shapes" / "teacher", ["a", "b"])
    done = subprocess.run([sys.executable, str(SCRIPT), "steering-speed", "--shapes", str(tmp_path / "shapes"), "--device", "cpu",
                           "--batches", "1", "--batch-size", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| generation")}
    assert list(rows) == ["plain", "steered (default: x8 then x3)", "steered, x8 every chunk"]
    assert float(rows["plain"][1]) == 1.0
    teacher_rows = {name: int(cells[5]) for name, cells in rows.items()}
    # plain runs no teacher; the default scores 8 candidates for the first chunk and 3 for each later one
    assert teacher_rows["plain"] == 0
    assert 0 < teacher_rows["steered (default: x8 then x3)"] < teacher_rows["steered, x8 every chunk"]
    assert "random weights of the shapes in" in done.stdout
