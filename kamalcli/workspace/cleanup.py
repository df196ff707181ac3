"""What killed or failed commands leave behind, removed when the next writer starts.

Called holding the write lock: no other kamal command is writing, so scratch
folders, half-published folders and run folders no resumable run needs belong
to no one. Nothing the database points at is touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from kamalcli.workspace.folder import ARTIFACT_KINDS

Progress = Callable[[str, Path], bool]  # (run kind, run folder) -> whether it holds work a resume would use


def clean_leftovers(workspace, store, has_progress: Progress) -> list[Path]:
    """Remove the leftovers; returns what was removed. The caller says what progress looks like in a
    run folder of each kind (a checkpoint, generated units): those of runs that can resume stay."""
    removed = []
    tmp = workspace.artifact_dir("tmp")
    if tmp.is_dir():
        removed += [_remove(entry) for entry in tmp.iterdir()]
    for kind in ARTIFACT_KINDS:
        folder = workspace.artifact_dir(kind)
        if kind != "tmp" and folder.is_dir():
            removed += [_remove(entry) for entry in folder.glob(".*") if _half_written(entry.name)]
    removed += [_remove(p) for p in _export_staging(store)]
    removed += [_remove(p) for p in _dead_run_folders(workspace, store, has_progress)]
    return removed


def _half_written(name: str) -> bool:
    """Names kamalcli.files and the exporters give files and folders before they are renamed into place."""
    return name.startswith(".") and (".tmp" in name or ".old-" in name)


def _export_staging(store) -> list[Path]:
    """`.NAME.tmp-PID` beside the --out folder of an export that never finished (it may be outside the workspace)."""
    found = []
    for run in store.runs(kind="export"):
        out = run.params.get("out")
        if run.status != "done" and out and run.pid:
            staging = Path(out).parent / f".{Path(out).name}.tmp-{run.pid}"
            if staging.is_dir():
                found.append(staging)
    return found


def _dead_run_folders(workspace, store, has_progress: Progress) -> list[Path]:
    """Run folders (checkpoints, best weights) except those of an unfinished run that can still be resumed."""
    runs_dir = workspace.artifact_dir("runs")
    folders = [p for p in runs_dir.iterdir() if p.is_dir()] if runs_dir.is_dir() else []
    if not folders:
        return []
    students, teachers = {s.name for s in store.students()}, {t.name for t in store.teachers()}
    finished = {"amalgamate": students, "extend": students, "train-teacher": teachers,
                "synthesize": {d.name for d in store.datasets()}}
    keep = {Path(r.workdir).resolve() for r in store.runs()
            if r.status in ("interrupted", "failed") and r.workdir and r.name not in finished.get(r.kind, ())
            and has_progress(r.kind, Path(r.workdir))}
    return [p for p in folders if p.resolve() not in keep]


def _remove(path: Path) -> Path:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    return path
