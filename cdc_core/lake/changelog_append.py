"""A window's change-log rows appended with delta-rs, without Spark (docs/output-modes.md, "What it costs").

A change log is append-only: its rows are keyed by (key, change version, op), and the Spark job lands a window
with a MERGE that inserts the rows the log does not hold yet (a backfill re-delivers changes in new windows). A
pipeline moving forward never re-delivers: every change of a window is newer than every change the log holds.
When the log's file statistics prove that (the largest change version of every file below the window's
smallest), the MERGE can only insert every row, and an append of them is the same commit: this module makes it,
in milliseconds instead of a Spark MERGE's seconds, whatever the log's size. Anything it cannot prove (a file
without statistics for the version column, a backfill, a table feature delta-rs does not write) answers
`Ineligible` and the Spark job merges as before.

Same identity and the same checks as cdc_core.lake.small_writer: the window's txn (`app_id`, `seq`) and commit
record, everything read at one table version V, the commit made at V+1 or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.lake import small_writer
from cdc_core.lake.delta_rs_rules import unsupported, untested_deltalake
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model.logfmt import kv
from cdc_core.model.manifest import COL_VERSION
from cdc_core.model.merge_semantics import holds_window

log = logging.getLogger("cdc.merge")


def newest_version(table: Any) -> int | str | None:
    """The largest change version the table holds by its files' statistics (None: no file), or why unknown."""
    adds = pa.table(table.get_add_actions(flatten=True))
    if adds.num_rows == 0:
        return None
    spelled = {c.lower(): c for c in adds.column_names}
    column = spelled.get(f"max.{COL_VERSION}".lower())
    if column is None or adds[column].null_count:
        return f"a file without statistics for {COL_VERSION}"
    return int(pc.max(adds[column]).as_py())


def append(
    c: small_writer.WindowCommit, uri: str, rows: pa.Table, fence: Callable[[], None], *,
    storage: Storage = AMBIENT, attempts: int = 2,
) -> small_writer.Landed | small_writer.Ineligible:
    """Append `rows` (the window's change-log rows, change version in `_cdc_version`) to the change log at `uri`
    as the window's commit, exactly once, when no row of the log can be one of them; else say why not."""
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    refused = small_writer.NO_ATOMIC_COMMIT if not storage.may_commit(uri) else untested_deltalake()
    if refused is not None:
        return small_writer.Ineligible(refused)
    for attempt in range(1, attempts + 1):
        table = small_writer.open_table(uri, storage)  # version V: every check below reads it
        if table is None:
            return small_writer.Ineligible("no table yet", missing=True)
        if holds_window(table.transaction_version(c.app_id), c.seq):
            return small_writer.Landed("already")
        given = _appendable(table, rows)
        if isinstance(given, str):
            return small_writer.Ineligible(given)
        read_version = int(table.version())
        fence()
        try:
            if given.num_rows:
                write_deltalake(table, given, mode="append", commit_properties=small_writer.commit_properties(c))
            else:  # nothing staged: the window's txn alone
                small_writer.commit_txn_only_at(table, c)
        except CommitFailedError as e:
            if small_writer.lost_race(c, uri, f"append to {c.label}", e, attempt=attempt, attempts=attempts,
                                      storage=storage):
                return small_writer.Landed("already")
            continue
        log.debug("%s", kv(event="merge.changelog_append", table=c.label, rows=given.num_rows,
                           writer=small_writer.WRITER_NAME))
        return small_writer.Landed("committed", inserted=given.num_rows, version=read_version + 1)
    raise AssertionError("unreachable")


def _appendable(table: Any, rows: pa.Table) -> pa.Table | str:
    """`rows` in the table's schema when appending them is the MERGE's outcome at this table version, else why not."""
    why = unsupported(table)
    if why is not None:
        return why
    given = small_writer.in_table_schema(rows, table)
    if isinstance(given, str) or given.num_rows == 0:
        return given
    newest = newest_version(table)
    if isinstance(newest, str):
        return newest
    version = next(n for n in given.column_names if n.lower() == COL_VERSION.lower())
    oldest = pc.min(given[version]).as_py()
    if oldest is None or (newest is not None and newest >= oldest):
        return "the window re-delivers changes the log may hold (a backfill)"
    return given
