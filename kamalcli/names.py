"""Names users give things, and comma-separated lists."""

from __future__ import annotations

import re

from kamalcli.errors import KamalError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(name: str, what: str) -> str:
    if not _NAME.match(name or ""):
        raise KamalError(
            f"{what} name {name!r} is not usable: use letters, digits, '.', '_' or '-' "
            "(at most 64, starting with a letter or digit)"
        )
    return name


def default_name(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._") or "item"
    return cleaned[:64]


def split_labels(text: str) -> list[str]:
    labels = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in labels):
        raise KamalError(f"--labels {text!r}: give names separated by commas, none empty")
    return labels
