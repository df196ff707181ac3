"""Who may touch what while other kamal commands run in the same workspace.

Every writer holds the workspace lock shared, so writers run side by side;
each claims only what it reads or writes:

- a *claim* on a named thing (a teacher, a dataset, a student, a student's
  export, a probe being computed): shared to read it, exclusive to make,
  replace or remove it. A second command that wants the same thing in a
  conflicting way is refused with one line naming who holds it (or, for a
  probe, waits for it and then reads it from the cache);
- a *run lock* per running run: held by the process doing the run, so a
  run whose lock is free was cut off, whichever process has its pid today.

The locks are flock(2) locks on files under .kamal/locks: the kernel drops
them when the process ends, however it ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from pathlib import Path
from typing import Callable, Iterator

from kamalcli.errors import KamalError

LOCKS_DIR = "locks"
BOOKKEEPING = "runs.lock"  # held for milliseconds: starting a run, and deciding which runs were cut off
READERS = "another kamal command"


def _flock(fd: int, exclusive: bool, wait: bool) -> bool:
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        return False


def _holder(fd: int) -> str:
    return os.pread(fd, 200, 0).decode(errors="replace").strip() or "a kamal command"


class Locks:
    """The locks this process holds in one workspace; all released by release_all() or when it ends."""

    def __init__(self, state_dir: Path, holder: str = "kamal"):
        self.folder = Path(state_dir) / LOCKS_DIR
        self.holder = holder
        self._claims: dict[str, tuple[int, bool]] = {}
        self._runs: dict[int, int] = {}

    def _open(self, name: str) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        return os.open(self.folder / name, os.O_RDWR | os.O_CREAT, 0o644)

    def _sign(self, fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.holder} (pid {os.getpid()})".encode(), 0)

    # -- claims ----------------------------------------------------------
    def claim(self, kind: str, name: str, *, exclusive: bool, wait: bool = False,
              on_wait: Callable[[str], None] | None = None) -> None:
        """Claim `kind name` for the rest of this command, or refuse in one line when another command
        holds it in a conflicting way. With wait, wait for it instead (on_wait hears who holds it)."""
        key = f"{kind}-{hashlib.sha256(name.encode()).hexdigest()[:20]}.lock"
        held = self._claims.get(key)
        if held and (held[1] or not exclusive):
            return
        fd = held[0] if held else self._open(key)
        if not _flock(fd, exclusive, wait=False):
            holder = self._holder_in_the_way(fd, held is not None)
            if not wait:
                if not held:
                    os.close(fd)
                doing = "reads it" if holder == READERS else "is writing it"
                raise KamalError(f"{kind} {name} is in use: {holder} {doing}; try again when it has finished")
            if on_wait:
                on_wait(holder)
            _flock(fd, exclusive, wait=True)
        if exclusive:
            self._sign(fd)
        self._claims[key] = (fd, exclusive)

    @staticmethod
    def _holder_in_the_way(fd: int, holding_shared: bool) -> str:
        """A writer signs the file; readers (shared holders) do not."""
        if holding_shared:  # nobody writes what this process reads
            return READERS
        if not _flock(fd, False, wait=False):
            return _holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return READERS

    # -- runs ------------------------------------------------------------
    @contextlib.contextmanager
    def bookkeeping(self) -> Iterator[None]:
        fd = self._open(BOOKKEEPING)
        try:
            _flock(fd, exclusive=True, wait=True)
            yield
        finally:
            os.close(fd)

    def hold_run(self, run_id: int) -> None:
        """Call inside bookkeeping(), right after the run's row is written."""
        fd = self._open(f"run-{run_id}.lock")
        _flock(fd, exclusive=True, wait=False)
        self._sign(fd)
        self._runs[run_id] = fd

    def release_run(self, run_id: int) -> None:
        fd = self._runs.pop(run_id, None)
        if fd is not None:
            (self.folder / f"run-{run_id}.lock").unlink(missing_ok=True)
            os.close(fd)

    def run_alive(self, run_id: int) -> bool:
        """Call inside bookkeeping(). Whether a process still holds the run's lock (a run started by a
        kamal older than run locks has none: it held the whole workspace, so it is not running now)."""
        if run_id in self._runs:
            return True
        path = self.folder / f"run-{run_id}.lock"
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDWR)
        try:
            if _flock(fd, exclusive=True, wait=False):
                path.unlink(missing_ok=True)
                return False
            return True
        finally:
            os.close(fd)

    def release_all(self) -> None:
        for run_id in list(self._runs):
            self.release_run(run_id)
        for fd, _ in self._claims.values():
            os.close(fd)
        self._claims.clear()


@contextlib.contextmanager
def workspace_lock(path: Path, *, exclusive: bool, wait_seconds: float = 0.0,
                   when_alone: Callable[[], None] | None = None) -> Iterator[None]:
    """The workspace lock. Writers hold it shared; exclusive is for what must run alone (init --force).
    A shared holder that finds itself alone first runs when_alone (removing what dead commands left)
    holding it exclusively. An exclusive holder is brief, so a shared request waits up to wait_seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if exclusive:
            if not _flock(fd, True, wait=False):
                raise KamalError("the workspace is busy: other kamal commands are running in it; "
                                 "wait for them to finish")
            yield
            return
        if when_alone is not None and _flock(fd, True, wait=False):
            when_alone()
        deadline = time.monotonic() + wait_seconds
        while not _flock(fd, False, wait=False):  # converting exclusive to shared never blocks
            if time.monotonic() >= deadline:
                raise KamalError("the workspace is busy: another kamal command has it to itself (an older kamal "
                                 "version, or `kamal init --force`); wait for it to finish")
            time.sleep(0.05)
        yield
    finally:
        os.close(fd)
