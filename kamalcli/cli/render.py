"""Output: rich tables for people, JSON with stable keys for scripts, one-line notes."""

from __future__ import annotations

import json
import shutil
import sys
from typing import Any, Iterable, Sequence

import click


WIDTH = 160  # every line kamal prints by default fits this; the evidence goes to --verbose and --json


def console(stderr: bool = False):
    from rich.console import Console

    # Created per call so test runners that swap sys.stdout see the output.
    # Piped output (a log, a file) gets wide tables rather than 80-column wrapping.
    # A terminal narrower than a table folds its cells to nothing (rows print as empty boxes): at least 80.
    stream = sys.stderr if stderr else sys.stdout
    width = min(max(shutil.get_terminal_size((80, 24)).columns, 80), WIDTH) if stream.isatty() else WIDTH
    return Console(file=stream, highlight=False, soft_wrap=False, width=width)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def note(message: str) -> None:
    """A line for the person at the terminal (stderr, so --json output stays clean), folded at WIDTH."""
    click.echo(fitted(message), err=True)


def evidence(message: str) -> None:
    """A line of evidence (--verbose): stderr, whole, however long."""
    click.echo(message, err=True)


def echo(message: str) -> None:
    """A line of a command's own output (stdout), folded at WIDTH."""
    click.echo(fitted(message))


def fitted(message: str) -> str:
    """message with every line longer than WIDTH folded at spaces, the rest indented by two."""
    import textwrap

    out = []
    for line in message.splitlines() or [""]:
        if len(line) <= WIDTH:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(line, WIDTH, subsequent_indent=indent + "  ", break_long_words=True,
                             break_on_hyphens=False)
    return "\n".join(out)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]], empty: str = "nothing yet") -> None:
    from rich.table import Table

    rows = list(rows)
    out = console()
    if not rows:
        out.print(f"{title}: {empty}" if title else empty)
        return
    t = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*[fmt(v) for v in row])
    out.print(t)


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (stable keys) instead of a table.")(f)
