"""A kamal workspace: where it is, how it is made, and who may write to it."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from kamalcli.errors import KamalError
from kamalcli.files import ensure_writable_dir, write_text_atomic
from kamalcli.workspace.locks import workspace_lock
from kamalcli.workspace.config import (CONFIG_NAME, SETTINGS_DEFAULT, config_setting, read_config, render_config,
                                       template_text)

STATE_DIR = ".kamal"
ARTIFACT_KINDS = ("teachers", "data", "probes", "students", "exports", "runs", "tmp")


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def db_path(self) -> Path:
        return self.state_dir / "kamal.db"

    @property
    def artifacts(self) -> Path:
        return self.state_dir / "artifacts"

    @property
    def lock_path(self) -> Path:
        return self.state_dir / "write.lock"

    def artifact_dir(self, kind: str) -> Path:
        assert kind in ARTIFACT_KINDS, kind
        return self.artifacts / kind

    def tmp_dir(self) -> Path:
        """A fresh folder on the same filesystem as the artifacts, for write-then-rename."""
        base = self.artifact_dir("tmp")
        base.mkdir(parents=True, exist_ok=True)
        import tempfile

        return Path(tempfile.mkdtemp(dir=base))

    # -- configuration -------------------------------------------------
    def config(self) -> dict[str, Any]:
        return read_config(self.config_path)

    def setting(self, section: str, key: str, default: Any = SETTINGS_DEFAULT) -> Any:
        """A kamal.toml value (or the default: the setting's own unless another is given), type-checked."""
        return config_setting(self.config_path, section, key, default)

    # -- database ------------------------------------------------------
    def db(self):
        """The workspace database; refused when missing or empty (only `kamal init` makes one)."""
        from kamalcli.workspace.db import open_database

        if not self.db_path.is_file() or self.db_path.stat().st_size == 0:
            found = "missing" if not self.db_path.exists() else (
                "not a file" if not self.db_path.is_file() else "empty (0 bytes)")
            raise KamalError(
                f"the workspace database {self.db_path} is {found}{self._artifacts_found()}; kamal will not "
                "start an empty one: restore it from a backup, or run `kamal init --force` (the old state is kept aside)"
            )
        return open_database(self.db_path)

    def _artifacts_found(self) -> str:
        counts = {kind: sum(1 for _ in self.artifact_dir(kind).iterdir())
                  for kind in ARTIFACT_KINDS if kind != "tmp" and self.artifact_dir(kind).is_dir()}
        held = [f"{n} in {kind}" for kind, n in counts.items() if n]
        return f" while {self.artifacts} holds {', '.join(held)}" if held else ""

    # -- writers -------------------------------------------------------
    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        """The workspace to this process alone (init --force); refused while any other command writes."""
        with workspace_lock(self.lock_path, exclusive=True):
            yield

    @contextlib.contextmanager
    def shared_write_lock(self, when_alone: Callable[[], None]) -> Iterator[None]:
        """Writers run side by side, each claiming what it touches (workspace/locks.py); the first
        to find itself alone runs when_alone (the clean-up of what dead commands left) before sharing."""
        with workspace_lock(self.lock_path, exclusive=False, wait_seconds=10, when_alone=when_alone):
            yield


def find_workspace(explicit: str | os.PathLike | None = None, start: Path | None = None) -> Workspace:
    """--workspace, then KAMAL_WORKSPACE, then the nearest parent holding kamal.toml."""
    given = explicit or os.environ.get("KAMAL_WORKSPACE")
    if given:
        root = Path(given).expanduser().resolve()
        if not (root / STATE_DIR).is_dir():
            raise KamalError(f"{root} is not a kamal workspace (run `kamal init {given}`)")
        return Workspace(root)
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / CONFIG_NAME).is_file() and (candidate / STATE_DIR).is_dir():
            return Workspace(candidate)
    raise KamalError("not inside a kamal workspace: run `kamal init PATH`, or pass --workspace")


def _free_backup_path(root: Path) -> Path:
    """.kamal.old-DATE, or .kamal.old-DATE-2, -3... when one was made within the same second."""
    base = f"{STATE_DIR}.old-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = root / base, 1
    while candidate.exists():
        n += 1
        candidate = root / f"{base}-{n}"
    return candidate


def init_workspace(path: str | os.PathLike, force: bool = False) -> tuple[Workspace, Path | None]:
    """Create a workspace. With force, an existing one is moved aside, never deleted.

    Returns the workspace and where the previous state went (None if there was none).
    """
    root = Path(path).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise KamalError(f"{root} exists and is not a folder")
    ws = Workspace(root)
    existing = ws.state_dir.exists() or ws.config_path.exists()
    if existing and not force:
        raise KamalError(f"{root} is already a kamal workspace (use --force to start afresh; the old state is kept aside)")
    ensure_writable_dir(root)

    backup = None
    if existing:
        with ws.write_lock():  # never pull the state from under a running writer
            backup = _free_backup_path(root)
            backup.mkdir()
            for item in (ws.state_dir, ws.config_path):
                if item.exists():
                    shutil.move(str(item), str(backup / item.name))

    staging = root / f"{STATE_DIR}.init-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for kind in ARTIFACT_KINDS:
            (staging / "artifacts" / kind).mkdir(parents=True)
        from kamalcli.workspace.db import open_database

        open_database(staging / "kamal.db").close()
        write_text_atomic(root / CONFIG_NAME, render_config())
        gitignore = root / ".gitignore"
        if not gitignore.exists():
            write_text_atomic(gitignore, template_text("gitignore"))
        os.rename(staging, ws.state_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ws, backup
