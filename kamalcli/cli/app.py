"""What every command shares: the workspace, the store, and the single-writer rule."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

import click

from kamalcli.workspace import Workspace, find_workspace


@dataclass
class App:
    workspace_option: str | None = None
    _workspace: Workspace | None = field(default=None, repr=False)

    @property
    def workspace(self) -> Workspace:
        if self._workspace is None:
            self._workspace = find_workspace(self.workspace_option)
        return self._workspace

    def setting(self, section: str, key: str, given=None, default=None):
        """A command-line value if given, else the workspace's kamal.toml, else the default."""
        return given if given is not None else self.workspace.setting(section, key, default)

    def device(self, given: str | None) -> str:
        return self.setting("workspace", "device", given, "auto")

    @contextlib.contextmanager
    def reader(self) -> Iterator["Store"]:  # noqa: F821
        from kamalcli.store import Store

        store = Store.open(self.workspace)
        try:
            yield store
        finally:
            store.close()

    @contextlib.contextmanager
    def writer(self) -> Iterator["Store"]:  # noqa: F821
        """Hold the workspace's write lock. Any run still 'running' now was cut off, and what
        killed or failed commands left behind is removed."""
        from kamalcli.leftovers import clean_leftovers
        from kamalcli.store import Store

        with self.workspace.write_lock():
            store = Store.open(self.workspace)
            try:
                store.mark_stale_runs()
                clean_leftovers(self.workspace, store)
                yield store
            finally:
                store.close()


pass_app = click.make_pass_decorator(App)
