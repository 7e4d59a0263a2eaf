"""A sidecar as an earlier memvault left it, for the tests of the migrations after it."""

from __future__ import annotations

import sqlite3

from memvault.records.sqlitefile import MIGRATIONS


def migrate_to(conn: sqlite3.Connection, version: int) -> None:
    """Run the first ``version`` migrations on a new database, each stamping its user_version."""
    for number, statements in enumerate(MIGRATIONS[:version], start=1):
        for statement in statements:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
