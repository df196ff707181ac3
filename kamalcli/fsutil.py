"""Files that are either complete or absent: write to a temporary name, then rename."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from kamalcli.errors import KamalError


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
        os.rename(final, old)
        os.rename(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staging, final)


def sha256_files(paths: Iterable[Path], chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                digest.update(block)
    return digest.hexdigest()


def remove_artifacts(workspace, paths) -> None:
    """Delete files and folders the database no longer points at (only inside the workspace)."""
    root = workspace.artifacts.resolve()
    for path in map(Path, paths):
        path = path.resolve()
        if root not in path.parents:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()
