"""A small history's window landed with delta-rs, without Spark (docs/output-modes.md, "What it costs").

The Spark job recomputes the touched keys' versions with a dozen Spark jobs and MERGEs them: seconds per table
however small the table, so a pipeline keeping the history of many small tables spent minutes per window. For a
history of at most `max_rows` rows (and a window of as few), this module reads the history with delta-rs at one
table version V, recomputes the versions in plain Python (cdc_core.model.history_versions: the same rules), and
MERGEs them keyed on (key, `_cdc_valid_from_version`) as the window's commit (its txn and commit record), made at
V+1 or not at all, as cdc_core.lake.small_writer commits. Anything it may not write (deletion vectors, a table
grown past the limit, a column it cannot cast) answers `Ineligible` and the Spark job lands the window as before.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.lake import small_writer
from cdc_core.lake.delta_rs_rules import unsupported, untested_deltalake
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model import history_versions
from cdc_core.model.logfmt import kv
from cdc_core.model.merge_semantics import DATAFUSION, holds_window, key_condition
from cdc_core.model.output_modes import COL_LAST_VERSION, COL_VALID_FROM_VERSION, COL_VALID_TO_VERSION

log = logging.getLogger("cdc.merge")


@dataclass(frozen=True)
class HistoryWindow:
    """What the recompute needs besides the rows: the key, the value columns, the tracked ones, the DDL that
    cleared the table in this window."""

    key: tuple[str, ...]
    values: tuple[str, ...]
    tracked: tuple[str, ...]
    cleared: tuple[tuple[int, dt.datetime], ...] = ()


def land(  # noqa: PLR0911 (each way out says why)
    c: small_writer.WindowCommit, uri: str, changes: pa.Table, w: HistoryWindow, fence: Callable[[], None], *,
    max_rows: int, storage: Storage = AMBIENT, attempts: int = 2,
) -> small_writer.Landed | small_writer.Ineligible:
    """Land the window's `changes` (the value columns and `_cdc_op`, `_cdc_version`, `_cdc_ordinal`,
    `_cdc_commit_ts`) in the history at `uri`, exactly once, or say why delta-rs may not."""
    from deltalake.exceptions import CommitFailedError

    refused = small_writer.NO_ATOMIC_COMMIT if not storage.may_commit(uri) else untested_deltalake()
    if refused is not None:
        return small_writer.Ineligible(refused)
    if changes.num_rows > max_rows:
        return small_writer.Ineligible(f"{changes.num_rows} staged rows")
    spelled = {n.lower(): n for n in changes.column_names}  # the key as the table spells it (Spark's is any case)
    if len(spelled) != changes.num_columns or any(k.lower() not in spelled for k in w.key):
        return small_writer.Ineligible("key columns not spelled as the table's")
    w = dataclasses.replace(w, key=tuple(spelled[k.lower()] for k in w.key))
    for attempt in range(1, attempts + 1):
        table = small_writer.open_table(uri, storage)  # version V: every read below is of it
        if table is None:
            return small_writer.Ineligible("no table yet", missing=True)
        if holds_window(table.transaction_version(c.app_id), c.seq):
            return small_writer.Landed("already")
        why = unsupported(table) or _too_big(table, max_rows)
        if why is not None:
            return small_writer.Ineligible(why)
        schema = pa.schema(table.schema())
        lake = _rows_of(table.to_pyarrow_table(), changes, w).to_pylist()
        rows = history_versions.recompute(changes.to_pylist(), lake, w.key, w.values, w.tracked, c.seq, w.cleared)
        try:
            source = pa.Table.from_pylist(rows, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            return small_writer.Ineligible(f"versions not in the table's types ({e})")
        read_version = int(table.version())
        fence()
        try:
            metrics = _merge(table, source, w.key, c) if rows else {}
            version = int(table.version())
            if version == read_version:  # nothing changed (a replay's versions as the lake holds them)
                small_writer.commit_txn_only_at(table, c)
                version = read_version + 1
        except CommitFailedError as e:
            if small_writer.lost_race(c, uri, f"MERGE into {c.label}", e, attempt=attempt, attempts=attempts,
                                      storage=storage):
                return small_writer.Landed("already")
            continue
        log.debug("%s", kv(event="merge.history_small", table=c.label, versions=len(rows),
                           writer=small_writer.WRITER_NAME))
        return small_writer.Landed(
            "committed", inserted=int(metrics.get("num_target_rows_inserted") or 0),
            updated=int(metrics.get("num_target_rows_updated") or 0), version=version,
        )
    raise AssertionError("unreachable")


def _rows_of(lake: pa.Table, changes: pa.Table, w: HistoryWindow) -> pa.Table:
    """The history's rows the recompute may need: those whose first key column holds a value the window's changes
    hold (a superset of the touched keys' rows), or every row when DDL cleared the table (every current version
    closes then)."""
    if w.cleared or not w.key or lake.num_rows == 0:
        return lake
    first = w.key[0]
    try:
        wanted = pc.unique(changes[first]).cast(lake[first].type)
        return lake.filter(pc.is_in(lake[first], value_set=wanted, skip_nulls=False))
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return lake


def _too_big(table: Any, max_rows: int) -> str | None:
    rows = small_writer.table_rows(table)
    if rows is None:
        return "files without row counts"
    return f"a history of {rows} rows" if rows > max_rows else None


def _merge(table: Any, source: pa.Table, key: Sequence[str], c: small_writer.WindowCommit) -> dict[str, Any]:
    """The Spark job's history MERGE (spark_apps.merge.outputs.history_merge_sql) for delta-rs: new versions
    inserted, changed ones (closed, or holding newer untracked values) updated, the rest untouched."""
    spelled = {f.name.lower(): f.name for f in table.schema().fields}

    def names(column: str) -> str:
        return str(spelled[column.lower()])

    q = DATAFUSION.quote
    same = " AND ".join(f"(t.{q(names(x))} IS NOT DISTINCT FROM s.{q(names(x))})"
                        for x in (COL_VALID_TO_VERSION, COL_LAST_VERSION))
    on = f"{key_condition(key, DATAFUSION, names)} AND (t.{q(names(COL_VALID_FROM_VERSION))} = " \
         f"s.{q(names(COL_VALID_FROM_VERSION))})"
    merger = table.merge(source, on, source_alias="s", target_alias="t",
                         commit_properties=small_writer.commit_properties(c))
    merger = merger.when_matched_update_all(predicate=f"NOT ({same})").when_not_matched_insert_all()
    return dict(merger.execute())
