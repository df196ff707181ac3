"""A run is a database row that moves running -> done | failed | interrupted."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator


@dataclass
class RunRecord:
    id: int
    result: dict = field(default_factory=dict)


@contextlib.contextmanager
def recorded_run(store, kind: str, name: str | None, params: dict, workdir: str | None = None) -> Iterator[RunRecord]:
    """Whatever happens inside, the run row ends in a final state (a crash leaves a record)."""
    record = RunRecord(store.start_run(kind, name, params, workdir))
    try:
        yield record
    except KeyboardInterrupt:
        store.finish_run(record.id, "interrupted", record.result or None, "interrupted by the user (Ctrl-C)")
        raise
    except BaseException as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        store.finish_run(record.id, "failed", record.result or None, message[:500])
        raise
    else:
        store.finish_run(record.id, "done", record.result)
