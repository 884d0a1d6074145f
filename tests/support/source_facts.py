"""What the integration tests ask the real MariaDB about its binlog: one helper, imported by the test modules."""

from __future__ import annotations

from cdc_core.capture.source import SourceFacts, SourceParams, connect, inspect_source


def facts_now(params: SourceParams) -> SourceFacts:
    """The source's facts (binlog files, end position, identity) right now, on a connection of its own."""
    conn = connect(params)
    try:
        return inspect_source(conn)
    finally:
        conn.close()
