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
