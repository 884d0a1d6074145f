"""What the integration tests ask (and tell) the real MariaDB servers: helpers imported by the test modules."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def throwaway_database(server: Any, prefix: str) -> Iterator[str]:
    """A fresh utf8mb4 database named `prefix` + a random suffix on a test server; dropped afterwards."""
    name = prefix + uuid.uuid4().hex[:10]
    run_sql(server, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield name
    finally:
        run_sql(server, f"DROP DATABASE IF EXISTS `{name}`")


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
