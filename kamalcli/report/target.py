"""Where `kamal report --html` (and `kamal label-queue --out`) may write: never the workspace's own files or a
model's folder, and over an existing file only when it is an earlier kamal report (or with --force)."""

from __future__ import annotations

import os
from pathlib import Path

from kamalcli.errors import KamalError

GENERATOR = '<meta name="generator" content="kamal '  # in the head of every report templates/report.html renders
HEAD_BYTES = 4096


def is_stdout(path: str) -> bool:
    """`-`, or a name of this process's standard output (/dev/stdout, /dev/fd/1)."""
    return path == "-" or os.path.realpath(path) == os.path.realpath("/dev/stdout")


def is_kamal_report(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return False
    return GENERATOR.encode() in head


def check_writable(workspace, store, path: Path, what: str) -> None:
    """A KamalError (one line) unless a file of the user's (what: "the report", "the queue") may be written to
    path (absolute, symbolic links resolved): not kamal's own or a model's, in a folder that exists."""
    taken = _taken(workspace, store, path)
    if taken:
        raise KamalError(f"cannot write {what} to {path}: {taken}; choose another file")
    if not path.parent.is_dir():
        raise KamalError(f"cannot write {what} to {path}: no folder {path.parent}")


def check_target(workspace, store, path: Path, force: bool) -> None:
    """A KamalError (one line) unless the report may be written to path (absolute, symbolic links resolved)."""
    check_writable(workspace, store, path, "the report")
    if not path.exists():
        return
    if not path.is_file():
        raise KamalError(f"cannot write the report to {path}: not a regular file (--html - writes it to standard "
                         "output)")
    if not force and not is_kamal_report(path):
        raise KamalError(f"{path} exists and is not a kamal report; use --force to replace it")


def _taken(workspace, store, path: Path) -> str | None:
    """Why path belongs to kamal or to a model (never replaced, even with --force); None when it does not."""
    if path == workspace.config_path.resolve():
        return "it is the workspace's settings (kamal.toml)"
    for owner, folder in _protected_folders(workspace, store):
        if path == folder or folder in path.parents:
            return f"it is inside {owner} ({folder})"
    if _is_export(path.parent):  # an export the database does not record (--hf, or another workspace's)
        return f"it is inside an export folder ({path.parent})"
    return None


def _is_export(folder: Path) -> bool:
    from kamalcli.export.hf import has_marker
    from kamalcli.export.onnx import EXPORT_MARKER

    return (folder / EXPORT_MARKER).is_file() or has_marker(folder)


def _protected_folders(workspace, store):
    """(whose, folder): the models kamal reads or wrote, then the workspace's state."""
    for teacher in store.teachers():
        yield f"teacher {teacher.name}'s folder", Path(teacher.path).resolve()
    for student in store.students():
        yield f"student {student.name}'s folder", Path(student.path).resolve()
    for export in store.exports():
        yield "an export folder", Path(export.path).resolve()
    yield "the workspace's state", workspace.state_dir.resolve()
