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
    """Whatever happens inside, the run row ends in a final state (a crash leaves a record). A signal that
    arrives while that state is written (torchrun's SIGTERM once a rank is lost, a second Ctrl-C) is
    ignored: acted on, it would end the process between the run and its record."""
    record = RunRecord(store.start_run(kind, name, params, workdir))
    with _sigterm_as_sigint() as signals:
        def finish(status: str, result, error: str | None = None) -> None:
            with signals.deferred():
                store.finish_run(record.id, status, result, error)

        try:
            yield record
        except KeyboardInterrupt as e:
            reason = getattr(e, "reason", None)
            how = f"because {reason}" if reason else ("by SIGTERM" if signals.received else "by the user (Ctrl-C)")
            finish("interrupted", record.result or None, f"interrupted {how}")
            raise
        except BaseException as e:
            finish("failed", record.result or None, first_line(e, 500))
            raise
        else:
            finish("done", record.result)


@dataclass
class _Signals:
    """What _sigterm_as_sigint saw (`received`: the SIGTERMs), and whether signals are being ignored (deferred)."""
    received: list = field(default_factory=list)
    deferring: bool = False
    main_thread: bool = True

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside, SIGINT and SIGTERM are ignored: the run's final state is being written, and the command ends
        right after (or goes on to its next step, where a new Ctrl-C stops it)."""
        if not self.main_thread:
            yield
            return
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _sigterm_as_sigint() -> Iterator[_Signals]:
    """SIGTERM (kill, a shutdown) stops a run the way Ctrl-C does: whatever handles SIGINT now
    (the training loop's finish-the-step-and-checkpoint handler, say) handles it. Yields what it saw."""
    signals = _Signals(main_thread=threading.current_thread() is threading.main_thread())
    if not signals.main_thread:
        yield signals
        return

    def handler(signum, frame):
        signals.received.append(signum)
        if signals.deferring:
            return
        on_interrupt = signal.getsignal(signal.SIGINT)
        if callable(on_interrupt):
            on_interrupt(signal.SIGINT, frame)
        else:  # SIGINT ignored (a background job): still stop
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield signals
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
