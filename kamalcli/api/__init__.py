"""kamal from Python (docs/api.md): kamalcli.init / kamalcli.open return a Workspace whose methods are the commands."""

from kamalcli.api.workspace import Workspace, init, open  # noqa: A004

__all__ = ["Workspace", "init", "open"]
