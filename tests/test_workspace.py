"""kamal init, workspace discovery, the write lock, and errors as one line."""

import os

import pytest

from conftest import Kamal
from kamalcli.errors import KamalError
from kamalcli.workspace.folder import find_workspace


def test_init_writes_config_database_and_artifact_folders(tmp_path):
    result = Kamal(None)("init", tmp_path / "proj")
    root = tmp_path / "proj"
    assert "Initialised" in result.stdout
    assert (root / "kamal.toml").read_text().startswith("# kamal workspace configuration")
    assert (root / ".kamal" / "kamal.db").is_file()
    for kind in ("teachers", "data", "probes", "students", "exports", "runs"):
        assert (root / ".kamal" / "artifacts" / kind).is_dir()
    assert ".kamal/" in (root / ".gitignore").read_text()


def test_init_refuses_an_existing_workspace_and_changes_nothing(ws):
    config = (ws / "kamal.toml").read_text() + "\n# my edit\n"
    (ws / "kamal.toml").write_text(config)
    result = Kamal(None)("init", ws, code=2)
    assert result.stderr.strip().startswith("Error:") and "already a kamal workspace" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (ws / "kamal.toml").read_text() == config


def test_init_force_keeps_the_old_state_aside(ws, kamal, assets):
    kamal("add-data", assets["pool"], "--name", "pool")
    Kamal(None)("init", ws, "--force")
    backups = list(ws.glob(".kamal.old-*"))
    assert len(backups) == 1 and (backups[0] / ".kamal" / "kamal.db").is_file()
    assert kamal.json("data") == []


def test_discovery_by_option_environment_and_parents(ws, monkeypatch, tmp_path):
    deep = ws / "a" / "b"
    deep.mkdir(parents=True)
    assert find_workspace(start=deep).root == ws
    monkeypatch.setenv("KAMAL_WORKSPACE", str(ws))
    assert find_workspace(start=tmp_path).root == ws
    monkeypatch.delenv("KAMAL_WORKSPACE")
    with pytest.raises(KamalError, match="not inside a kamal workspace"):
        find_workspace(start=tmp_path)
    with pytest.raises(KamalError, match="is not a kamal workspace"):
        find_workspace(tmp_path)


def test_commands_outside_a_workspace_fail_with_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KAMAL_WORKSPACE", raising=False)
    result = Kamal(None)("teachers", code=2)
    assert result.stderr.strip() == "Error: not inside a kamal workspace: run `kamal init PATH`, or pass --workspace"


def test_a_writer_of_the_same_dataset_is_refused_while_readers_and_other_writers_work(ws, kamal, assets):
    from kamalcli.workspace.folder import Workspace
    from kamalcli.workspace.store import Store

    store = Store.open(Workspace(ws), holder="kamal add-data")
    store.claim("dataset", "pool", exclusive=True)  # another command is writing dataset pool
    try:
        result = kamal("add-data", assets["pool"], "--name", "pool", code=2)
        assert result.stderr == (f"Error: dataset pool is in use: kamal add-data (pid {os.getpid()}) is writing it; "
                                 "try again when it has finished\n")
        assert kamal.json("data") == []          # readers are not blocked
        kamal("status")
        kamal("add-data", assets["test"], "--name", "test", "--role", "eval")  # nor writers of other things
    finally:
        store.close()
    kamal("add-data", assets["pool"], "--name", "pool")  # the claim ends with the command that held it


def test_unexpected_errors_are_one_line_and_debug_shows_the_traceback(kamal, monkeypatch):
    import kamalcli.workspace.store

    def boom(self):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(kamalcli.workspace.store.Store, "teachers", boom)
    result = kamal("teachers", code=1)
    assert result.stderr.strip() == "Error: RuntimeError: disk on fire (KAMAL_DEBUG=1 shows the traceback)"
    monkeypatch.setenv("KAMAL_DEBUG", "1")
    with pytest.raises(RuntimeError):
        kamal("teachers")


def test_status_json_has_stable_keys(kamal):
    data = kamal.json("status")
    assert set(data) == {"workspace", "counts", "labels", "shared_labels", "running", "recent_runs"}
    assert data["counts"]["teachers"] == 0


def test_first_line_of_an_error():
    from kamalcli.errors import first_line

    assert first_line(ValueError()) == "ValueError"  # no message: its type, not an IndexError
    assert first_line(OSError("\n disk full\nmore detail")) == "disk full"
    assert first_line(RuntimeError("x" * 300), 10) == "x" * 10
