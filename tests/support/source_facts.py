"""What the integration tests ask (and tell) the real MariaDB servers: helpers imported by the test modules."""

from __future__ import annotations

from typing import Any

from cdc_core.capture.source import SourceFacts, SourceParams, connect, inspect_source


def facts_now(params: SourceParams) -> SourceFacts:
    """The source's facts (binlog files, end position, identity) right now, on a connection of its own."""
    conn = connect(params)
    try:
        return inspect_source(conn)
    finally:
        conn.close()


def run_sql(server: Any, *statements: str, database: str | None = None) -> None:
    """Run statements as root on a test server (the shared services, a private one or a shard), in order."""
    conn = server.root_connect(database)
    try:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(s)
    finally:
        conn.close()


def drop_databases(server: Any, like: str) -> None:
    """Drop every database whose name is LIKE `like` on a test-owned server (a shard): tests that share the
    servers of a session reuse schema names, and a table left by another test would be captured too."""
    conn = server.root_connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE %s", (like,))
            for (name,) in cur.fetchall():
                cur.execute(f"DROP DATABASE `{name}`")
    finally:
        conn.close()
