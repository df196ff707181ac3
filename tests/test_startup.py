"""`kamal --help` must start without the heavy libraries (torch and transformers load inside the commands that need them)."""

import json
import subprocess
import sys

HEAVY = {"torch", "transformers", "datasets", "onnx", "onnxruntime", "sqlite_utils", "pandas"}


def test_help_imports_no_heavy_library():
    code = (
        "import sys, json\n"
        "from kamalcli.cli import cli\n"
        "try:\n"
        "    cli(['--help'], prog_name='kamal')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted(set(sys.modules) & set({sorted(HEAVY)!r}))), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "amalgamate" in done.stdout and "probe" in done.stdout
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert loaded == [], f"kamal --help imported {loaded}"


def test_console_script_runs():
    done = subprocess.run([sys.executable, "-m", "kamalcli", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "kamal" in done.stdout


def test_every_command_has_help(tmp_path):
    from click.testing import CliRunner

    from kamalcli.cli import cli

    for name in cli.commands:
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, name
        assert "Usage:" in result.output


def test_a_reader_that_goes_away_stops_kamal_quietly(monkeypatch, capsys):
    """`kamal data | head`: a write fails once the reader is gone; click's main ends it with status 1 and no line
    (kamal's own catch-all printed `Error: BrokenPipeError` before)."""
    import errno

    import pytest

    from kamalcli.cli import cli

    def write_to_a_closed_pipe(**_):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(cli.commands["methods"], "callback", write_to_a_closed_pipe)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["methods"], prog_name="kamal")
    assert stopped.value.code == 1 and capsys.readouterr().err == ""
