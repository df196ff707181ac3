"""A workspace opened for kamal's jobs: the settings every job resolves, and the single-writer rule. The command
line's App and the Python API (kamalcli.api.workspace) are both sessions."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from kamalcli.errors import KamalError
from kamalcli.workspace.config import SETTINGS_DEFAULT
from kamalcli.workspace.folder import Workspace, find_workspace


@dataclass
class Session:
    """A workspace opened for kamal's jobs (a command, or the Python API): settings resolved in one place (a given
    value, else kamal.toml, else the default), stores opened under the single-writer rule."""

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

    def command_name(self) -> str:
        """What the write lock says holds the workspace ("kamal amalgamate" from the command line)."""
        return "python"

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

        command = self.command_name()
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

    def train_settings(self, epochs, steps, batch_size, lr, max_length, seed, checkpoint_every, embeddings=None,
                       default_epochs: int | None = None, fit: str | None = None) -> dict:
        """default_epochs None: the step budget with early stopping unless --epochs (or kamal.toml) says otherwise."""
        from kamalcli.train.embeddings import check_mode

        from kamalcli.train.head import check_fit

        embeddings = self.setting("train", "embeddings", embeddings)
        check_mode(embeddings)  # before any probe or model is loaded
        fit = self.setting("train", "fit", fit)
        check_fit(fit)
        return {
            # --steps on the command line beats an `epochs` in kamal.toml; --epochs beats both
            "epochs": epochs if epochs is not None or steps is not None else self.setting("train", "epochs", None,
                                                                                          default_epochs),
            "steps": self.setting("train", "steps", steps),
            "eval_every": self.setting("train", "eval_every"),
            "patience": self.setting("train", "patience"),
            "batch_size": self.setting("train", "batch_size", batch_size),
            "lr": float(self.setting("train", "lr", lr)),
            "max_length": self.setting("train", "max_length", max_length),
            "warmup": float(self.setting("train", "warmup")),
            "weight_decay": float(self.setting("train", "weight_decay")),
            "grad_clip": float(self.setting("train", "grad_clip")),
            "seed": self.setting("workspace", "seed", seed),
            "checkpoint_every": self.setting("train", "checkpoint_every", checkpoint_every),
            "embeddings": embeddings,
            "fit": fit,
        }

    def probe_settings(self, mc_samples: int | None = None, mc_exact: bool | None = None) -> dict:
        return {
            "mc_samples": self.setting("probe", "mc_samples", mc_samples),
            "mc_exact": bool(self.setting("probe", "mc_exact", mc_exact)),
            "dropout": self.setting("probe", "dropout"),
            "max_length": self.setting("probe", "max_length"),
            "layers": "default",
            "seed": self.setting("workspace", "seed"),
        }


def _has_progress(kind: str, workdir: Path) -> bool:
    """What a resumed run of this kind would pick up from its folder (checkpoints, generated units)."""
    from kamalcli.synth.synthesize import KIND as SYNTHESIZE, has_units
    from kamalcli.train.phases import started

    return has_units(workdir) if kind == SYNTHESIZE else started(workdir)
