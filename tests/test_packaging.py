"""Every package under kamalcli/ ships; the README's test commands are the ones CI runs."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_found():
    from setuptools import find_namespace_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set(find_namespace_packages(str(ROOT), include=config["include"]))
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kamalcli").rglob("*.py")}
    assert on_disk <= found
    assert "kamalcli.templates" in found and (ROOT / "kamalcli" / "templates" / "report.html").is_file()


def test_torch_pin_and_console_script():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch>=2.2,<=2.13" in project["dependencies"]
    assert project["scripts"]["kamal"] == "kamalcli.cli:main"
    assert project["requires-python"] == ">=3.11"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test " in readme and "make test-all" in readme and "make demo " in readme
    assert "\nmake test-all\n" in (ROOT / ".ci" / "run").read_text()
