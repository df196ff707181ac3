"""kamal: merge fine-tuned text classifiers into one student (knowledge amalgamation).

From Python (docs/api.md): `ws = kamalcli.init("proj")` or `kamalcli.open("proj")`, then the commands as methods;
errors raise kamalcli.KamalError with the line the command prints."""

import importlib

__version__ = "0.2.0"
__all__ = ["KamalError", "Workspace", "init", "open"]


def __getattr__(name: str):
    """The API is imported on first use, so that `kamal --help` loads none of it."""
    if name in ("Workspace", "init", "open"):
        # import_module, not `from kamalcli import api`: every layer reads kamalcli.__version__, and a static import
        # here would look (to lint-imports) like each of them importing the API above it
        return getattr(importlib.import_module("kamalcli.api"), name)
    if name == "KamalError":
        from kamalcli.errors import KamalError

        return KamalError
    raise AttributeError(f"module 'kamalcli' has no attribute {name!r}")
