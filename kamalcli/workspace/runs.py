"""A run is a database row that moves running -> done | failed | interrupted."""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from kamalcli.errors import StopRequested, first_line


@dataclass
class RunRecord:
    id: int
    result: dict = field(default_factory=dict)


@contextlib.contextmanager
def recorded_run(store, kind: str, name: str | None, params: dict, workdir: str | None = None) -> Iterator[RunRecord]:
    """Whatever happens inside, the run row ends in a final state (a crash leaves a record)."""
    record = RunRecord(store.start_run(kind, name, params, workdir))
    received: list = []
    try:
        with _sigterm_as_sigint() as received:
            yield record
    except KeyboardInterrupt as e:
        reason = getattr(e, "reason", None)
        how = f"because {reason}" if reason else ("by SIGTERM" if received else "by the user (Ctrl-C)")
        store.finish_run(record.id, "interrupted", record.result or None, f"interrupted {how}")
        raise
    except BaseException as e:
        store.finish_run(record.id, "failed", record.result or None, first_line(e, 500))
        raise
    else:
        store.finish_run(record.id, "done", record.result)


@contextlib.contextmanager
def _sigterm_as_sigint() -> Iterator[list]:
    """SIGTERM (kill, a shutdown) stops a run the way Ctrl-C does: whatever handles SIGINT now
    (the training loop's finish-the-step-and-checkpoint handler, say) handles it. Yields a list
    that is non-empty once SIGTERM came."""
    received: list = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum, frame):
        received.append(signum)
        on_interrupt = signal.getsignal(signal.SIGINT)
        if callable(on_interrupt):
            on_interrupt(signal.SIGINT, frame)
        else:  # SIGINT ignored (a background job): still stop
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def training_run(workspace, store, kind: str, name: str, params: dict, *, resume_run=None,
                 resume_hint: str, say=print) -> Iterator[tuple[RunRecord, Path]]:
    """A recorded run with a checkpoint folder (the interrupted run's when resuming), removed once done."""

    if resume_run:
        params = {**params, "resumed_from": resume_run.id}
    with recorded_run(store, kind, name, params) as run:
        workdir = Path(resume_run.workdir) if resume_run else workspace.artifact_dir("runs") / f"run-{run.id}"
        store.update_run(run.id, workdir=str(workdir))
        try:
            yield run, workdir
        except StopRequested:
            say(f"Stopped: a checkpoint was saved. Continue with `{resume_hint}`.")
            raise
    shutil.rmtree(workdir, ignore_errors=True)  # checkpoints matter only to an unfinished run


def resumable_run(store, kinds: tuple[str, ...], name: str, has_progress: Callable[[Path], bool]):
    """The latest interrupted or failed run of that name whose folder `has_progress` (a checkpoint, say),
    and its parameters; or (None, None)."""
    candidates = [r for r in store.runs(name=name) if r.kind in kinds and r.status in ("interrupted", "failed")
                  and r.workdir and has_progress(Path(r.workdir))]
    if not candidates:
        return None, None
    run = candidates[-1]
    return run, {k: v for k, v in run.params.items() if k != "resumed_from"}
