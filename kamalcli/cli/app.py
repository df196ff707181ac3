"""What every command shares: the workspace, the store, and the single-writer rule."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import click

from kamalcli.errors import KamalError
from kamalcli.workspace.config import SETTINGS_DEFAULT
from kamalcli.workspace.folder import Workspace, find_workspace


@dataclass
class App:
    workspace_option: str | None = None
    verbose: bool = False  # --verbose: the evidence behind each decision (kamal's lines are short without it)
    _workspace: Workspace | None = field(default=None, repr=False)

    @property
    def workspace(self) -> Workspace:
        if self._workspace is None:
            self._workspace = find_workspace(self.workspace_option)
        return self._workspace

    def setting(self, section: str, key: str, given=None, default=SETTINGS_DEFAULT):
        """A command-line value if given, else the workspace's kamal.toml, else the default (the setting's own
        unless another is given)."""
        return given if given is not None else self.workspace.setting(section, key, default)

    @property
    def detail(self):
        """Where the evidence lines go: stderr with --verbose, nowhere without it."""
        from kamalcli.cli.render import evidence

        return evidence if self.verbose else None

    def device(self, given: str | None) -> str:
        return self.setting("workspace", "device", given)

    @contextlib.contextmanager
    def reader(self) -> Iterator["Store"]:  # noqa: F821
        from kamalcli.workspace.store import Store

        store = Store.open(self.workspace)
        try:
            yield store
        finally:
            store.close()

    @contextlib.contextmanager
    def writer(self) -> Iterator["Store"]:  # noqa: F821
        """A store for a command that writes. Writers run side by side, each claiming the teachers,
        datasets and students it touches (store.claim); runs whose process is gone are recorded
        interrupted, and when no other command runs, what killed or failed commands left is removed."""
        from kamalcli import distributed
        from kamalcli.workspace.cleanup import clean_leftovers
        from kamalcli.workspace.store import Store

        command = click.get_current_context().info_name
        if distributed.current().size > 1 and not distributed.current().distributed:
            raise KamalError(f"kamal {command} runs in one process; under torchrun "
                             "only probe, amalgamate, extend and train-teacher run")

        def clean_up() -> None:
            store = Store.open(self.workspace)
            try:
                store.mark_stale_runs()  # first: a cut-off run's checkpoints stay for --resume
                clean_leftovers(self.workspace, store, _has_progress)
            finally:
                store.close()

        with self.workspace.shared_write_lock(when_alone=clean_up):
            store = Store.open(self.workspace, holder=f"kamal {command}")
            try:
                store.mark_stale_runs()
                yield store
            finally:
                store.close()

    @contextlib.contextmanager
    def job(self, device: str, backend: str | None) -> Iterator["Store"]:  # noqa: F821
        """writer() for a command that may run on several processes (torchrun).

        Rank 0 takes the write lock once for the whole job (and cleans up) before
        any other rank starts work, and tells them whether that worked; the other
        ranks never touch the lock: they serve rank 0's jobs, then the command
        ends for them (WorkerDone)."""
        from kamalcli import distributed
        from kamalcli.runtime import resolve_device

        world = distributed.current()
        if world.size > 1 or backend not in (None, "auto"):
            backend = distributed.resolve_backend(backend, resolve_device(device))
        if world.size < 2:
            with self.writer() as store:
                yield store
            return
        world.start(backend)
        if not world.main:
            refused = world.broadcast(None)
            if refused is None:
                distributed.serve(world)
            distributed.leave()
            raise distributed.WorkerDone(refused or 0)
        with contextlib.ExitStack() as stack:
            try:
                store = stack.enter_context(self.writer())
            except KamalError as e:
                world.broadcast(e.exit_code)
                distributed.leave()  # a process group left alive at exit aborts the process (SIGABRT)
                raise
            world.broadcast(None)
            stack.callback(distributed.stop_workers, world)
            yield store


pass_app = click.make_pass_decorator(App)


def _has_progress(kind: str, workdir: Path) -> bool:
    """What a resumed run of this kind would pick up from its folder (checkpoints, generated units)."""
    from kamalcli.synth.synthesize import KIND as SYNTHESIZE, has_units
    from kamalcli.train.phases import started

    return has_units(workdir) if kind == SYNTHESIZE else started(workdir)
