"""Progress bars for long work: rate, time left, and live figures (loss). On stderr."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator


class Bar:
    def __init__(self, progress, task, unit: str, live: bool, description: str, total: int):
        self._progress = progress
        self._task = task
        self._unit = unit
        self._live = live
        self._description = description
        self._total = total
        self._start = self._last_line = time.perf_counter()
        self.done = 0

    def advance(self, n: int = 1, **figures) -> None:
        self.done += n
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        info = rate_text(self.done / elapsed, self._unit)
        if figures:
            info += "  " + "  ".join(f"{k} {_fmt(v)}" for k, v in figures.items())
        self._progress.update(self._task, advance=n, info=info)
        if not self._live and time.perf_counter() - self._last_line > 30:
            # No live display (a pipe or a log): a line now and then.
            self._last_line = time.perf_counter()
            print(f"{self._description}: {self.done}/{self._total}  {info}", file=sys.stderr, flush=True)

    def say(self, line: str) -> None:
        """One line about the work, above a live bar or on stderr (nothing where the bar is not shown)."""
        line = f"{self._description}: {line}"
        if self._live:
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=sys.stderr, flush=True)

    @property
    def rate(self) -> float:
        return self.done / max(time.perf_counter() - self._start, 1e-9)


def rate_text(rate: float, unit: str) -> str:
    """Items per second, or seconds per item below one a second (0.14 text/s reads as 7.1 s/text)."""
    if 0 < rate < 1:
        return f"{1 / rate:,.1f} s/{unit}"
    return f"{rate:,.1f} {unit}/s"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


@contextlib.contextmanager
def progress_bar(total: int, description: str, unit: str = "ex", completed: int = 0,
                 show: bool = True) -> Iterator[Bar]:
    """show=False: counts, draws and prints nothing (the other processes of a torchrun job)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(file=sys.stderr, quiet=not show)
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("<"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
    ]
    with Progress(*columns, console=console, transient=False, disable=not (show and console.is_terminal)) as progress:
        task = progress.add_task(description, total=total, completed=completed, info="")
        bar = Bar(progress, task, unit, console.is_terminal or not show, description, total)
        yield bar
    if show and not console.is_terminal:
        print(f"{description}: {bar.done} {unit} at {rate_text(bar.rate, unit)}", file=sys.stderr)
