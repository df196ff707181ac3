"""Files that are either complete or absent: write to a temporary name, then rename."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Iterator

from kamalcli.errors import KamalError


def open_maybe_gzipped(path: Path, mode: str = "rb", **kwargs):
    """open(), or gzip.open() for a name ending in .gz."""
    import gzip

    return (gzip.open if Path(path).name.lower().endswith(".gz") else open)(path, mode, **kwargs)


def write_text_atomic(path: Path, text: str) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def ensure_writable_dir(folder: Path) -> None:
    """Create folder if needed; a KamalError (one line) if that fails or it is read-only."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KamalError(f"cannot create {folder}: {e.strerror}") from None
    if not os.access(folder, os.W_OK):
        raise KamalError(f"cannot write to {folder}")


def publish_dir(staging: Path, final: Path) -> None:
    """Move a finished folder into place; an existing folder of that name is replaced."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)  # aside until the new folder is in place
        try:
            os.rename(staging, final)
        except BaseException:
            os.rename(old, final)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staging, final)
    if staging.parent != final.parent and staging.parent.parent.name == "tmp":  # an emptied Workspace.tmp_dir()
        with contextlib.suppress(OSError):
            staging.parent.rmdir()


@contextlib.contextmanager
def removed_on_failure(staging: Path) -> Iterator[Path]:
    """A folder being written before it is published: removed, with whatever it holds, if the block fails."""
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def sha256_files(paths: Iterable[Path], chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                digest.update(block)
    return digest.hexdigest()


def in_artifacts(workspace, path) -> bool:
    """Whether a path lies inside the workspace's artifacts: the only place kamal deletes from."""
    return workspace.artifacts.resolve() in Path(path).resolve().parents


def remove_artifacts(workspace, paths) -> None:
    """Delete files and folders the database no longer points at (only inside the workspace)."""
    for path in map(Path, paths):
        path = path.resolve()
        if not in_artifacts(workspace, path):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def stored_path(path: str | os.PathLike | None, root: Path | None) -> str | None:
    """How the database records a path: relative to the workspace root when inside it, so the
    workspace can be moved or copied; absolute otherwise."""
    if path is None or root is None:
        return None if path is None else str(path)
    absolute = Path(path)
    if not absolute.is_absolute():
        return str(path)
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def resolved_path(text: str | None, root: Path | None) -> str | None:
    """A path read from the database, absolute again (relative ones are inside the workspace)."""
    if text is None or root is None or os.path.isabs(text):
        return text
    return str(root / text)
