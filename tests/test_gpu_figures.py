"""`benchmarks/run.py gpu-figures`, the suite the GPU figures come from, runs on a CPU too (small sizes)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


@pytest.mark.slow
def test_gpu_figures_run_on_the_cpu_and_print_every_figure():
    done = subprocess.run([sys.executable, str(SCRIPT), "gpu-figures", "--small"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for what in ("probe K=1", "probe K=16 exact", "probe K=16 adaptive", "amalgamate (training loop, muki-hard)"):
        line = next(line for line in out.splitlines() if line.startswith(f"| {what}"))
        assert float(line.split("|")[2]) > 0, line
    assert "Per-row cost on cpu (ms)" in out
    engines = [line.split("|")[2].strip() for line in out.splitlines() if line.startswith("| batch ")]
    assert engines.count("PyTorch fp32") == 2
    assert sum(e.startswith("onnxruntime fp32 (CPUExecutionProvider") for e in engines) == 2
    assert "available providers:" in out


@pytest.mark.slow
def test_cpu_overhead_times_kamal_and_a_plain_loop_side_by_side(tmp_path):
    out = tmp_path / "cpu-overhead.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "cpu-overhead", "--rows", "16", "--batch-size", "8",
                           "--repeats", "1", "--layers", "1", "--out", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| ")][1:]
    assert [r[0].strip().split(" ")[0] for r in rows] == ["kamal", "plain", "kamal", "plain"]
    assert all(float(r[1]) > 0 for r in rows) and rows[1][2].strip().endswith("x kamal")
