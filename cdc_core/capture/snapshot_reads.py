"""Initial load, the source side: consistent reads of one chunk, bounds and row estimates (docs/snapshot.md)."""


from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pymysql

from cdc_core.capture.source import SourceParams, connect, source_error_from
from cdc_core.model.changes import RowChange, SourceColumn, TableSchema
from cdc_core.model.errors import SourceError, StateConflict
from cdc_core.model.manifest import OP_INSERT
from cdc_core.model.naming import quote_mysql
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.snapshot_state import (
    FETCH_ROWS,
    ChunkSpec,
    TableProgress,
    after,
    chunk_of,
    chunk_plan,
    chunk_predicate,
    chunk_version,
    decode_key,
    encode_key,
    key_columns,
    key_select,
    order_by,
    render,
)
from cdc_core.model.sources import command_target
from cdc_core.model.window_plan import WindowPlan

if TYPE_CHECKING:
    pass

log = logging.getLogger("cdc.snapshot")


# ------------------------------------------------------------------------- source I/O: watermark


def _status_value(cur: Any, name: str) -> str | None:
    cur.execute("SHOW STATUS LIKE %s", (name,))
    row = cur.fetchone()
    return None if row is None else str(row[1])


def _begin_consistent_read(cur: Any, identity: ServerIdentity, epoch: int) -> BinlogPosition:
    """Open a consistent read (snapshot) and return the binlog position it corresponds to."""
    cur.execute("SET SESSION time_zone = '+00:00'")  # TIMESTAMP values (and bounds) in UTC, as the binlog has them
    if identity.flavor == "mariadb":
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        # Exactly the read view's position: MariaDB keeps it consistent through commit ordering.
        file = _status_value(cur, "binlog_snapshot_file")
        pos = _status_value(cur, "binlog_snapshot_position")
        if not file or not pos:
            raise SourceError("the source reports no binlog snapshot position (is binary logging on?)")
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, int(pos)))
        row = cur.fetchone()
        gtid = str(row[0]) if row and row[0] is not None else None
        return BinlogPosition(file, int(pos), identity, gtid=gtid, epoch=epoch)
    # MySQL: the position before the read view opens (see the module docstring for what that implies),
    # unless the server reports the snapshot's own position (Percona Server ported MariaDB's feature).
    cur.execute("SELECT VERSION()")
    version = str(cur.fetchone()[0])
    major_minor = tuple(int(x) for x in version.split("-", maxsplit=1)[0].split(".")[:2])
    cur.execute("SHOW BINARY LOG STATUS" if major_minor >= (8, 2) else "SHOW MASTER STATUS")
    row = cur.fetchone()
    if row is None:
        raise SourceError("the source reports no binlog position (is binary logging on?)")
    gtid = str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else None
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
    file = _status_value(cur, "binlog_snapshot_file")
    pos = _status_value(cur, "binlog_snapshot_position")
    if file and pos:
        return BinlogPosition(file, int(pos), identity, epoch=epoch)
    return BinlogPosition(str(row[0]), int(row[1]), identity, gtid=gtid, epoch=epoch)


def _check_identity(cur: Any, identity: ServerIdentity, what: str) -> None:
    cur.execute("SELECT @@server_id")
    server_id = int(cur.fetchone()[0])
    if server_id != identity.server_id:
        raise SourceError(
            f"{what}: the source now answers as server_id {server_id}, the snapshot's watermark was read on "
            f"{identity}; a chunk cannot be read on another server. Let the stream rebase onto the new server "
            "(next run), then re-request the snapshot of this table"
        )


def estimate_rows(conn: Any, table: str) -> int | None:
    """InnoDB's row estimate for `schema.table` (information_schema; cheap, approximate)."""
    schema, _, name = table.partition(".")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (schema, name),
        )
        row = cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _qualified(table: TableSchema) -> str:
    return f"{quote_mysql(table.schema)}.{quote_mysql(table.table)}"


def find_bounds(
    cur: Any, table: TableSchema, lower: tuple[Any, ...] | None, chunk_rows: int
) -> tuple[tuple[Any, ...] | None, bool]:
    """(upper bound, last) of the chunk after `lower`, in the open consistent read.

    upper = the key of the chunk_rows-th row after lower; when no row follows it, or fewer rows remain,
    the largest key (the last chunk); None when no row remains (an empty last chunk).
    """
    cols = key_columns(table)
    where, params = render(after(cols, lower)) if lower is not None else ("1=1", [])
    base = f"SELECT {key_select(cols)} FROM {_qualified(table)} WHERE {where}"
    # Two rows from the chunk's end: the second one tells whether a further chunk is needed.
    cur.execute(f"{base} ORDER BY {order_by(cols)} LIMIT 2 OFFSET {int(chunk_rows) - 1}", params)
    rows = cur.fetchall()
    if rows:
        return tuple(rows[0]), len(rows) == 1
    cur.execute(f"{base} ORDER BY {order_by(cols, desc=True)} LIMIT 1", params)
    row = cur.fetchone()
    return (tuple(row) if row is not None else None), True


def count_rows(cur: Any, table: TableSchema, lower: tuple[Any, ...] | None, upper: tuple[Any, ...] | None) -> int:
    """Rows with lower < key <= upper in the open consistent read."""
    where, params = render(chunk_predicate(key_columns(table), lower, upper))
    cur.execute(f"SELECT COUNT(*) FROM {_qualified(table)} WHERE {where}", params)
    row = cur.fetchone()
    return int(row[0]) if row else 0


def plan_next_chunk_from_source(
    params: SourceParams,
    identity: ServerIdentity,
    *,
    epoch: int,
    pipeline: str,
    seq: int,
    progress: TableProgress,
    table: TableSchema | None,
    now: float,
    holder: str = "",
    following: Sequence[tuple[TableProgress, TableSchema | None]] = (),
    max_tables: int = 1,
) -> WindowPlan:
    """Read the watermark and the next chunk's bounds in one consistent read; return the chunk's plan.

    When the chunk finishes its table and `following` tables are given, the window also takes the whole
    remainder of each next table, in order, while the rows stay within the chunk's row budget
    (`progress.chunk_rows`) and the window within `max_tables` tables: all read in the same consistent
    read, so every chunk of the window has the same watermark. A table whose remainder does not fit
    waits for the next window (where it is the current table and goes chunk by chunk).
    """
    conn = connect(params)
    extra: list[tuple[TableProgress, TableSchema | None, tuple[Any, ...] | None, bool]] = []
    try:
        with conn.cursor() as cur:
            watermark = _begin_consistent_read(cur, identity, epoch)
            try:
                _check_identity(cur, identity, f"pipeline {pipeline!r}: snapshot of {progress.table}")
                if table is None:
                    upper, last, empty = None, True, True
                else:
                    lower = decode_key(progress.after)
                    bound, last = find_bounds(cur, table, lower, progress.chunk_rows)
                    upper, empty = bound, bound is None
                if last and following and max_tables > 1:
                    budget = progress.chunk_rows
                    if table is not None and not empty:
                        budget -= count_rows(cur, table, decode_key(progress.after), upper)
                    for prog, tbl in following:
                        if len(extra) + 1 >= max_tables or budget <= 0:
                            break
                        if tbl is None:
                            extra.append((prog, None, None, True))  # gone: an empty last chunk
                            continue
                        if prog.key and tuple(tbl.key) != tuple(prog.key):
                            break  # its key changed: it restarts when it is the current table
                        low = decode_key(prog.after)
                        b, fits = find_bounds(cur, tbl, low, budget)
                        if not fits:
                            break  # more than the budget left: next window, chunk by chunk
                        if b is not None:
                            budget -= count_rows(cur, tbl, low, b)
                        extra.append((prog, tbl, b, b is None))
            finally:
                cur.execute("COMMIT")
    except pymysql.err.MySQLError as e:
        raise source_error_from(e, params, f"plan a snapshot chunk of {progress.table} on") from None
    finally:
        conn.close()
    version = chunk_version(watermark)

    def spec_for(
        prog: TableProgress, tbl: TableSchema | None, up: tuple[Any, ...] | None, is_last: bool, is_empty: bool
    ) -> ChunkSpec:
        return ChunkSpec(
            table=prog.table,
            key=tuple(tbl.key) if tbl is not None else tuple(prog.key),
            chunk=prog.chunks + 1,
            round=prog.round,
            lower=prog.after,
            upper=encode_key(up) if up is not None else None,
            last=is_last,
            empty=is_empty,
            missing=tbl is None,
            version=version,
            estimate=prog.estimate,
            chunk_rows=prog.chunk_rows,
            read_at=now,
            sweep_below=prog.sweep_below,
        )

    first = spec_for(progress, table, upper, last, empty)
    more = [spec_for(prog, tbl, up, True, is_empty) for prog, tbl, up, is_empty in extra]
    return chunk_plan(pipeline, seq, watermark, first, now=now, holder=holder, more=more)


# ------------------------------------------------------------------------------ source I/O: rows

_ZERO_DATE_TYPES = ("date", "datetime", "timestamp")


def _time_as_reader(v: dt.timedelta) -> dt.timedelta:
    """A correct TIME (SELECT) expressed the way python-mysql-replication decodes it from the binlog.

    The type map's TIME converter undoes the reader's decoding of negative fractional values
    (-(S + f) arrives as -(S + (1 - f))); SELECT returns the true value, so apply the reader's skew
    here and the shared converter lands both paths on the same microseconds.
    """
    us = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    frac = -us % 1_000_000
    if us < 0 and frac:
        us = us - 1_000_000 + 2 * frac
    return dt.timedelta(microseconds=us)


def select_normaliser(
    col: SourceColumn, zero_dates: str = "null", table: str = "?", where: str = ""
) -> Callable[[Any], Any] | None:
    """How a SELECT value (pymysql, session in UTC) becomes the binlog reader's value for `col`, or
    None when they already agree. The type map (`cdc_core.model.types`) then lands both the same way.

    Zero and partial dates come back as text: `zero_dates="null"` lands them as NULL, "refuse" raises
    UnsupportedType (`table` and `where` name the table and pipeline in the message)."""
    base = col.mysql_type.split("(", 1)[0].split(" ", 1)[0]
    if base in _ZERO_DATE_TYPES:
        if zero_dates == "refuse":

            def refuse(v: Any) -> Any:
                if v.__class__ is str:
                    from cdc_core.capture.rowdecode import zero_date_error

                    raise zero_date_error(table, col.name, col.mysql_type, v, where)
                return v

            return refuse
        return lambda v: None if v.__class__ is str else v
    if base == "time":
        return lambda v: _time_as_reader(v) if v.__class__ is dt.timedelta else v
    return None


def select_list(table: TableSchema) -> str:
    cols = []
    for c in table.columns:
        q = quote_mysql(c.name)
        base = c.mysql_type.split("(", 1)[0].split(" ", 1)[0]
        # FLOAT's text form keeps 6 digits (16777216 -> 1.67772e7); as a DOUBLE it is exact.
        cols.append(f"{q} + 0e0 AS {q}" if base == "float" else q)
    return ", ".join(cols)


def read_chunk(
    params: SourceParams,
    plan: WindowPlan,
    table: TableSchema,
    *,
    on_rows: Callable[[int], None] | None = None,
    spec: ChunkSpec | None = None,
    first_ordinal: int = 1,
    zero_dates: str = "null",
) -> Iterator[RowChange]:
    """The chunk's rows as RowChanges (op 'I', version = the watermark's), streamed in key order.

    Reads `lower < key <= upper` in a new consistent read at R >= W (on MariaDB R is checked against
    W); memory stays bounded by FETCH_ROWS rows (unbuffered cursor). `spec`: which of the window's
    chunks (default: the first); `first_ordinal`: the first row's ordinal (ordinals grow strictly
    across a window's chunks).
    """
    spec = spec if spec is not None else chunk_of(plan)
    if spec.empty or spec.missing:
        return
    if tuple(table.key) != tuple(spec.key):
        raise StateConflict(
            f"pipeline {plan.pipeline!r}: table {spec.table}'s key is now {list(table.key)}, the snapshot chunk "
            f"{spec.chunk} was planned on {list(spec.key)}; re-request the snapshot of this table "
            f"(cdc snapshot {command_target(plan.pipeline)} --table {spec.table})"
        )
    cols = key_columns(table)
    where, args = render(chunk_predicate(cols, decode_key(spec.lower), decode_key(spec.upper)))
    sql = f"SELECT {select_list(table)} FROM {_qualified(table)} WHERE {where} ORDER BY {order_by(cols)}"
    names = table.column_names
    context = f"pipeline {plan.pipeline!r}: snapshot chunk {spec.chunk}: "
    norms = [
        (i, f)
        for i, c in enumerate(table.columns)
        if (f := select_normaliser(c, zero_dates, table.name, context)) is not None
    ]
    version = spec.version
    commit_ts = spec.read_at
    conn = connect(params)
    try:
        with conn.cursor() as setup:
            read_at = _begin_consistent_read(setup, plan.start.server, plan.start.epoch)
            _check_identity(setup, plan.start.server, f"pipeline {plan.pipeline!r}: snapshot chunk {plan.seq}")
        if plan.start.server.flavor == "mariadb" and read_at < plan.start:
            raise SourceError(
                f"pipeline {plan.pipeline!r}: snapshot chunk {plan.seq} of {spec.table} was planned at "
                f"{plan.start.label()} but the source's consistent read is at {read_at.label()} (earlier): the "
                "binlog went backward (a restored or different server). Re-request the snapshot of this table"
            )
        cur = conn.cursor(pymysql.cursors.SSCursor)  # unbuffered: rows stream, memory stays bounded
        try:
            cur.execute(sql, args)
            ordinal = first_ordinal - 1
            while True:
                rows = cur.fetchmany(FETCH_ROWS)
                if not rows:
                    break
                for raw in rows:
                    values = list(raw) if norms else raw
                    for i, f in norms:
                        if values[i] is not None:
                            values[i] = f(values[i])
                    ordinal += 1
                    row = dict(zip(names, values, strict=True))
                    yield RowChange(OP_INSERT, table, row, version, ordinal, commit_ts)
                if on_rows is not None:
                    on_rows(ordinal - first_ordinal + 1)
            cur.execute("COMMIT")
        finally:
            cur.close()
    except pymysql.err.MySQLError as e:
        raise source_error_from(e, params, f"read snapshot chunk {plan.seq} ({spec.table}) from") from None
    finally:
        conn.close()
