"""The workspace database: connection settings, and the migrations of workspace/migrations.py applied on open."""

from __future__ import annotations

import sys
from pathlib import Path


def _import_sqlite_utils():
    # sqlite-utils imports pandas when it can (0.4 s here) only to map pandas
    # column types, which kamal never passes; hide it for that one import.
    if "sqlite_utils" not in sys.modules and "pandas" not in sys.modules:
        sys.modules["pandas"] = None  # type: ignore[assignment]
        try:
            import sqlite_utils  # noqa: F401
        finally:
            del sys.modules["pandas"]
    import sqlite_utils

    return sqlite_utils


def _migrations():
    from sqlite_utils.migrations import Migrations

    from kamalcli.workspace.migrations import MIGRATIONS

    migrations = Migrations("kamal")
    for fn in MIGRATIONS:
        migrations()(fn)
    return migrations


def open_database(path: Path):
    """Open (creating if needed) and migrate. Foreign keys on, WAL for concurrent readers."""
    sqlite_utils = _import_sqlite_utils()
    db = sqlite_utils.Database(path, execute_plugins=False)
    db.conn.execute("PRAGMA foreign_keys = ON")
    db.conn.execute("PRAGMA busy_timeout = 5000")
    if db.journal_mode != "wal":
        db.enable_wal()
    migrations = _migrations()
    if migrations.pending(db):
        migrations.apply(db)
    return db
