"""Every package under kamalcli/ ships (pyproject lists packages explicitly)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kamalcli").rglob("__init__.py")}
    assert found | {"kamalcli.templates"} == listed


def test_torch_pin_and_console_script():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch>=2.2,<=2.13" in project["dependencies"]
    assert project["scripts"]["kamal"] == "kamalcli.cli:main"
    assert project["requires-python"] == ">=3.11"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test " in readme and "make demo " in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
