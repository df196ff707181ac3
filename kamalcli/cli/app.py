"""What every command shares: the workspace session (kamalcli.workspace.session), named after the command."""

from __future__ import annotations

from dataclasses import dataclass

import click

from kamalcli.api.session import Session


@dataclass
class App(Session):
    def command_name(self) -> str:
        return click.get_current_context().info_name

    @property
    def detail(self):
        """Where the evidence lines go: stderr with --verbose, nowhere without it."""
        from kamalcli.cli.render import evidence

        return evidence if self.verbose else None

    def api(self):
        """The Python API's workspace over this session: the commands call it, with kamal's own lines."""
        from kamalcli.api.workspace import Workspace
        from kamalcli.cli.render import note

        return Workspace(session=self, say=note, detail=self.detail)


pass_app = click.make_pass_decorator(App)
