"""What every converter shares: a file found inside an installed distribution, and a
conversion made once into kamal's cache (staged, renamed into place, verified by sha256)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.files import publish_dir, sha256_files, write_json_atomic

MARKER = "kamal-conversion.json"


def packaged_file(package: str, version: str, file_name: str) -> Path:
    """A file shipped inside an installed distribution, found without importing its module."""
    pin = f"{package}=={version}"
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise KamalError(f"the model package {pin!r} is not installed: pip install {pin}") from None
    for file in dist.files or ():
        if file.name == file_name:
            return Path(dist.locate_file(file))
    raise KamalError(f"{package} {dist.version} is installed but holds no {file_name}: "
                     f"pip install --force-reinstall {pin}")


def cached_conversion(cache_root: Path, prefix: str, source: Path, expected_sha: str, package: str, version: str,
                      convert, required: tuple[str, ...], notes: dict | None = None) -> Path:
    """The folder `convert(source, folder)` builds, made once in the cache (staged, then renamed into
    place) and named by the source's sha256; reused only while its weights match the recorded sha256."""
    source_sha = sha256_files([source])
    if source_sha != expected_sha:
        raise KamalError(f"{source} has changed (sha256 {source_sha[:12]}, expected {expected_sha[:12]}): "
                         f"conversion is verified only for {package}=={version}")
    cache_root = Path(cache_root)
    final = cache_root / f"{prefix}-{source_sha[:12]}"
    if _verified(final, required):
        return final
    cache_root.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(cache_root, final.name)
    staging = cache_root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        convert(source, staging)
        write_json_atomic(staging / MARKER, {
            "source": source.name,
            "source_sha256": source_sha,
            "expected_source_sha256": expected_sha,
            "package": package,
            "package_version": importlib.metadata.version(package),
            "model_sha256": sha256_files([staging / "model.safetensors"]),
            "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **(notes or {}),
        })
        if not _verified(final, required):  # another process may have finished first
            publish_dir(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def fingerprint_of(folder: Path) -> str | None:
    """The sha256 of a converted folder's weights, as recorded at conversion (None: not a conversion)."""
    try:
        return json.loads((Path(folder) / MARKER).read_text(encoding="utf-8")).get("model_sha256")
    except (OSError, ValueError, AttributeError):
        return None


def _verified(folder: Path, required: tuple[str, ...]) -> bool:
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        complete = all((folder / name).is_file() for name in required)
        return complete and record.get("model_sha256") == sha256_files([folder / "model.safetensors"])
    except (OSError, ValueError, AttributeError):
        return False


def _remove_abandoned(cache_root: Path, name: str) -> None:
    """Staging folders left by a process that died mid-conversion."""
    for path in cache_root.glob(f".{name}.tmp-*"):
        try:
            os.kill(int(path.name.rsplit("-", 1)[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (ValueError, OSError):  # alive (perhaps another user's), or not a pid
            pass
