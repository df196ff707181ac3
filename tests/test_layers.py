"""The package's layers (pyproject.toml [tool.importlinter]): each imports only the layers below it.

import-linter reads every import statement, those inside functions too: kamal imports
torch and much of itself lazily so that `kamal --help` starts fast, and a lazy import
that runs upwards is still a layering fault.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy in `root` before the installed package
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_every_import_runs_down_the_layers():
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kamal layers KEPT" in done.stdout


def test_a_lazy_import_up_the_layers_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "kamalcli", tmp_path / "kamalcli", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    words = tmp_path / "kamalcli" / "models" / "words.py"
    words.write_text(words.read_text(encoding="utf-8") + (
        "\n\ndef _reads_a_student():\n"
        "    from kamalcli.students.predict import read_texts  # models/ must not reach up to students/\n\n"
        "    return read_texts\n"), encoding="utf-8")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "kamal layers BROKEN" in done.stdout
    assert "kamalcli.models.words -> kamalcli.students.predict" in done.stdout
