"""The library-path reader: a window's changes as `RowChange`s, decoded by python-mysql-replication.

`read_changes` replays exactly one planned window `[plan.start, plan.end)` as `RowChange`s and
`SchemaChangeEvent`s, in binlog order: the pipeline's `decoder: library` setting, and the reference the
columnar path (`columnar_reader`) is tested against.

Values in `RowChange.values` are what the library decodes (see `cdc_core.model.types` for how each lands):
ints, `Decimal`, `float`, `str` (text, ENUM label, MariaDB JSON text, BIT as a '0101' string), `bytes`,
`date`, naive `datetime` (DATETIME as written, TIMESTAMP in UTC), `timedelta` (TIME), `set` (SET), None.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import replace
from typing import Any

from pymysqlreplication.constants.NONE_SOURCE import EMPTY_SET as _NONE_EMPTY_SET
from pymysqlreplication.constants.NONE_SOURCE import OUT_OF_DATE_RANGE as _NONE_ZERO_DATE
from pymysqlreplication.constants.NONE_SOURCE import OUT_OF_DATETIME2_RANGE as _NONE_ZERO_DATETIME2
from pymysqlreplication.constants.NONE_SOURCE import OUT_OF_DATETIME_RANGE as _NONE_ZERO_DATETIME
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_core.capture.binlog.savepoints import Savepoints
from cdc_core.capture.binlog.schema_events import SchemaChangeEvent, ddl_typer
from cdc_core.capture.binlog.stream import (
    FORGET_TABLES,
    full_images,
    partial_images_error,
    pos_key,
    random_replica_server_id,
    stream_events,
)
from cdc_core.capture.binlog.table_maps import SchemaBuilder
from cdc_core.capture.binlog.transactions import TxnAssembler, check_window_read, verify_identity, with_pipeline
from cdc_core.capture.binlog.xa import PreparedHold
from cdc_core.capture.source import SourceParams, TableFilter
from cdc_core.model.changes import RowChange, TableSchema
from cdc_core.model.manifest import OP_BEFORE, OP_DELETE, OP_INSERT, OP_UPDATE
from cdc_core.model.positions import ServerIdentity, change_version
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.window_plan import WindowPlan


def read_changes(
    params: SourceParams,
    identity: ServerIdentity,
    plan: WindowPlan,
    table_filter: TableFilter,
    schemas: Callable[[str, str], TableSchema | None] | None = None,
    *,
    server_id_for_replica: int | None = None,
    zero_dates: str = "null",
    schema_policy: SchemaPolicy | None = None,
    before_images: Callable[[str, str], bool] | None = None,
) -> Iterator[RowChange | SchemaChangeEvent]:
    """The window's changes, exactly `[plan.start, plan.end)`, in binlog order.

    `zero_dates` is the pipeline setting: "refuse" raises UnsupportedType on a zero or partial
    DATE/DATETIME/TIMESTAMP value, "null" lands it as NULL. `before_images(schema, table)`: whether an update
    of the table that keeps its key also yields its before image (op 'B') just before it, with its ordinal.

    Rows of one transaction are buffered until its commit event (that is where the commit time is),
    so memory grows with the largest transaction in the window, not with the window. Raises
    SourceError when the binlog does not hold the planned window (server replaced, files purged,
    transaction count differs from the plan).
    """
    if plan.start.same_point(plan.end):
        return
    verify_identity(params, identity)
    flavor = identity.flavor
    builder = SchemaBuilder(flavor, schemas, params, plan.pipeline)
    typer = ddl_typer(table_filter, schema_policy, plan.pipeline, builder)
    asm = TxnAssembler(identity, plan.start.epoch, plan.start.gtid, plan.start.commit_ts)
    start_key = pos_key(plan.start.file, plan.start.offset)
    end_key = pos_key(plan.end.file, plan.end.offset)
    epoch = plan.start.epoch
    # table_id -> schema (None: not captured); kept across transactions like the library's own map
    tables: dict[int, TableSchema | None] = {}
    with_before: set[int] = set()  # table ids whose updates yield their before images
    # The open transaction's changes in binlog order: row tuples (op, schema, values, version) and DDL
    # tuples ("DDL", schema name, query, version).
    pending: list[tuple[Any, ...]] = []
    ordinal = 0
    commit_ts = float(plan.start.commit_ts or 0.0)
    prepared: PreparedHold[list[tuple[Any, ...]]] = PreparedHold(f"pipeline {plan.pipeline!r}: window {plan.label()}")
    savepoints: Savepoints[int] = Savepoints()
    transactions = 0
    last_end: tuple[int, int] | None = None
    last_label = "nothing"
    events = stream_events(
        params,
        plan.start.file,
        plan.start.offset,
        server_id=server_id_for_replica or random_replica_server_id(),
        only_schemas=table_filter.literal_schemas(),
    )
    with closing(events):
        for ev in events:
            if ev.kind in FORGET_TABLES:
                tables.clear()
            if ev.end == 0:
                continue
            key = pos_key(ev.file, ev.start)
            if key < start_key:
                continue
            if key >= end_key:
                break
            if ev.kind == "gtid":
                pending.clear()
                savepoints.clear()
            elif ev.kind == "tablemap":
                tm = ev.raw
                if table_filter.matches(tm.schema, tm.table):
                    tables[tm.table_id] = builder.build(tm)
                    if before_images is not None and before_images(tm.schema, tm.table):
                        with_before.add(tm.table_id)
                    else:
                        with_before.discard(tm.table_id)
                else:
                    tables[tm.table_id] = None
            elif ev.kind == "rows":
                rows_ev = ev.raw
                schema = tables.get(rows_ev.table_id)
                if schema is not None:
                    if not full_images(rows_ev.number_of_columns, *_column_bitmaps(rows_ev)):
                        raise partial_images_error(plan.pipeline, schema.name, ev.file, ev.start)
                    version = change_version(epoch, ev.file, ev.start)
                    _row_changes(rows_ev, schema, version, pending,
                                 with_before=rows_ev.table_id in with_before)
                    if zero_dates == "refuse":
                        _refuse_zero_dates(plan.pipeline, schema, rows_ev.rows)
            elif ev.kind == "query":
                # DDL is a statement of its own, or opens a group (CREATE ... SELECT); DML logged as a statement
                # is refused (cdc_core.model.ddl.dml); a savepoint statement marks or drops pending changes.
                ddl = None
                if not (asm.in_txn and savepoints.statement(ev.query, lambda: len(pending), _truncate(pending))):
                    ddl = typer(ev)
                if ddl is not None:
                    pending.append(("DDL", replace(ddl, version=change_version(epoch, ev.file, ev.start)), None, 0))
            b = asm.feed(ev)
            if b is None:
                if not asm.in_txn:  # an event without row changes after the last transaction (QuietTail)
                    last_end = pos_key(ev.file, ev.end)
                    last_label = f"up to {ev.file}:{ev.end}"
                continue
            transactions += 1
            savepoints.clear()
            last_end = pos_key(b.end.file, b.end.offset)
            last_label = f"up to {b.end.file}:{b.end.offset}"
            commit_ts = float(b.end.commit_ts or 0.0)
            txn = change_version(epoch, b.start_file, b.start_offset)
            if asm.closed_prepare is not None:  # changes once its XA COMMIT is read (xa)
                prepared.prepare(asm.closed_prepare, list(pending), txn)
                pending.clear()
                continue
            if asm.closed_outcome is not None:
                committed = prepared.outcome(asm.closed_outcome)
                if committed is not None:
                    pending[:0], txn = committed
            ordinal = yield from _committed(pending, ordinal, commit_ts, txn)
    check_window_read(plan, params, reached_end=last_end == end_key, last_label=last_label, transactions=transactions)
    for held, txn in prepared.left_open():
        ordinal = yield from _committed(held, ordinal, commit_ts, txn)


def _truncate(pending: list[tuple[Any, ...]]) -> Callable[[int], None]:
    def truncate(mark: int) -> None:
        del pending[mark:]

    return truncate


def _committed(
    pending: list[tuple[Any, ...]], ordinal: int, commit_ts: float, txn: int
) -> Generator[RowChange | SchemaChangeEvent, None, int]:
    """A committed transaction's changes (emptying `pending`), numbered from `ordinal`; returns the last ordinal."""
    for op, schema, values, version in pending:
        if op == "DDL":
            ordinal += 1
            yield SchemaChangeEvent.of(ordinal, schema)
            continue
        if op != OP_BEFORE:  # a before image takes the ordinal of its update, which follows it
            ordinal += 1
        yield RowChange(
            op=op, table=schema, values=values, version=version,
            ordinal=ordinal + 1 if op == OP_BEFORE else ordinal, commit_ts=commit_ts, txn=txn,
        )
    pending.clear()
    return ordinal


def _values(row: dict[str, Any], values: str, sources: str) -> dict[str, Any]:
    """A row image's values, with the empty sets the library hands back as None restored.

    python-mysql-replication returns None for both a NULL and an empty SET, but records which it was in
    the row's none-sources (the image's null bitmap vs a zero mask); an empty set is `set()`, which
    the type map lands as `''` like SELECT prints it."""
    vals: dict[str, Any] = row[values]
    empty = [name for name, why in (row.get(sources) or {}).items() if why == _NONE_EMPTY_SET]
    if not empty:
        return vals
    vals = dict(vals)
    for name in empty:
        if vals.get(name) is None:
            vals[name] = set()
    return vals


_ZERO_SOURCES = {_NONE_ZERO_DATE, _NONE_ZERO_DATETIME, _NONE_ZERO_DATETIME2}
_ZERO_TIMESTAMPS = (dt.datetime(1970, 1, 1), dt.datetime(1970, 1, 1, tzinfo=dt.UTC))


def _refuse_zero_dates(pipeline: str, schema: TableSchema, rows: list[dict[str, Any]]) -> None:
    """`zero_dates: refuse` on the library path: the library turns a zero or partial DATE/DATETIME into
    None (its none-source says why) and TIMESTAMP's zero value into the epoch."""
    from cdc_core.capture.rowdecode import zero_date_error

    types = {c.name: c.mysql_type for c in schema.columns}
    stamps = [c.name for c in schema.columns if c.mysql_type.startswith("timestamp")]
    for row in rows:
        for values, sources in (("values", "none_sources"), ("before_values", "before_none_sources"),
                                ("after_values", "after_none_sources")):
            for name, why in (row.get(sources) or {}).items():
                if why in _ZERO_SOURCES:
                    typ = types.get(name, "date")
                    raise with_pipeline(pipeline, zero_date_error(schema.name, name, typ, "zero or partial"))
            vals = row.get(values)
            if vals:
                for name in stamps:
                    if vals.get(name) in _ZERO_TIMESTAMPS:
                        err = zero_date_error(schema.name, name, "timestamp", "0000-00-00 00:00:00")
                        raise with_pipeline(pipeline, err)


def _column_bitmaps(rows_ev: Any) -> list[bytes]:
    """A rows event's column bitmaps: one, an update's two (before and after image)."""
    if isinstance(rows_ev, UpdateRowsEvent):
        return [rows_ev.columns_present_bitmap, rows_ev.columns_present_bitmap2]
    return [rows_ev.columns_present_bitmap]


def _row_changes(ev: Any, schema: TableSchema, version: int, out: list[tuple[Any, ...]], *,
                 with_before: bool) -> None:
    if isinstance(ev, WriteRowsEvent):
        for row in ev.rows:
            out.append((OP_INSERT, schema, _values(row, "values", "none_sources"), version))
    elif isinstance(ev, DeleteRowsEvent):
        for row in ev.rows:
            out.append((OP_DELETE, schema, _values(row, "values", "none_sources"), version))
    else:
        key = schema.key
        for row in ev.rows:
            before = _values(row, "before_values", "before_none_sources")
            after = _values(row, "after_values", "after_none_sources")
            if any(before.get(k) != after.get(k) for k in key):
                # A key change is a delete of the old key and an insert of the new one.
                out.append((OP_DELETE, schema, before, version))
                out.append((OP_INSERT, schema, after, version))
            elif with_before:
                out.append((OP_BEFORE, schema, before, version))
                out.append((OP_UPDATE, schema, after, version))
            else:
                out.append((OP_UPDATE, schema, after, version))
