"""Initial load: a lock-free, chunked snapshot of existing rows, reconciled with the binlog by version.

A snapshot reads each requested table in primary-key order, one *chunk* at a time, with plain
consistent `SELECT`s (no `FLUSH TABLES WITH READ LOCK`, no table locks). Every chunk is a window of
kind `snapshot` in the pipeline's one sequence of windows, so the stream's machinery applies
unchanged: the plan is stored (fenced) before anything is read, the rows are staged (Parquet +
manifest), the Spark job MERGEs them (idempotent by Delta txn app id/version), and the fenced ack
moves the cursor's seq and, in the same ZooKeeper multi-op, the snapshot's progress. Chunks and
stream windows alternate under the lease, so the stream keeps flowing while a large table loads.

Why the result is right (the DBLog argument, adapted to "only newer wins")
--------------------------------------------------------------------------
Each chunk is planned at a *low watermark* W: the binlog position of a consistent read of the
source. Every row of the chunk is staged as an insert with the change version of W
(`chunk_version(W) = change_version(W)`, see `positions.change_version`). A binlog change carries
the version of its row event's start. Then:

1. A change committed after W starts after W: its transaction's first event (GTID/BEGIN) is at or
   after W, its row events strictly after. So its version is strictly greater than the chunk's, and
   the merge (`s._cdc_version >= t._cdc_version`) lets it win whatever order the two reach Delta
   in: a row updated after W ends with the update, a row deleted after W stays deleted (the delete's
   tombstone is newer than the chunk row, which `drop_superseded` then drops; or the delete removes
   the row the chunk wrote before it).
2. A change committed before W has a smaller version than the chunk, and the chunk's read already
   reflects it (or a later change to the same key that the read also reflects). Such a change can
   only come from the stream if the stream started before W; landing it later loses to the chunk row,
   which is at least as new.
3. The stream never misses anything after W: a chunk is only planned when the stream cursor is at or
   before W (`coordination.check_plan` enforces it), and the stream applies every change after its
   cursor. On a new pipeline the cursor is set *before* the first chunk's watermark is read.

So for every key, the lake ends with the change of the highest version among {the chunk row, every
binlog change after the cursor}, which is the source's current row once the stream has passed the
last watermark. Nothing is read under a lock and nothing waits for the stream.

The watermark must describe the read exactly: a transaction already in the binlog at W but not yet
visible to the read would break rule 2 (the server writes the binlog before the storage engine
commit completes, so `SHOW MASTER STATUS` followed by a `SELECT` can see a position whose last
transactions the SELECT does not see yet). On MariaDB, `START TRANSACTION WITH CONSISTENT SNAPSHOT`
reports the binlog position that matches its read view exactly (`Binlog_snapshot_file/position`,
kept consistent by the server's commit ordering; the same mechanism `mariadb-dump
--single-transaction --master-data` uses without FTWRL). Stock MySQL has no such status (Percona
Server has, and it is used when present): there the watermark is `SHOW BINARY LOG STATUS` read
before the read view opens, and the chunk is read by the stage step (a later statement, after the
plan was stored in ZooKeeper), which in practice leaves the commit that many microseconds to
complete; see "Known limits" in the README.

Replay of a planned chunk (why the staged copy need not be kept)
----------------------------------------------------------------
A chunk's plan records the table, the key columns, the exclusive lower bound, the inclusive upper
bound (or "to the end"), and W. Staging reads exactly that key range in a *new* consistent read R
(R >= W on the same server; checked) and stages it with W's version. If the staged copy is lost and
the chunk is staged again later, R is newer and the rows may differ: a row changed between W and R
shows its newer image, but tagged with W's version, which is older than that change's own version,
so the change (which the stream applies: it is after the cursor) still wins; a row deleted in
between is simply absent (its delete lands from the stream); a row inserted in between is present
and also arrives from the stream with a newer version. Under only-newer-wins every re-read of the
same range with the same W version converges on the same lake, so the plan, not the staged bytes,
is the immutable record, exactly as for binlog windows. Bounds are fixed at plan time (never "the
next N rows at read time"): two stagings of one chunk by a zombie and its successor then cover the
same keys, and the chunk that the ack records as done is the one that landed.

Chunk bounds
------------
Keyset pagination over the key: the next chunk's upper bound is the key of the `chunk_rows`-th row
after the lower bound in the consistent read at W (`... WHERE key > lower ORDER BY key LIMIT 1
OFFSET n-1`), or the table's largest key when fewer rows remain (the last chunk); rows inserted
beyond that key after W come from the stream. "key > bound" is expanded to
`k1 > b1 OR (k1 = b1 AND k2 > b2)`: MariaDB does not use an index range for row constructors
(`(k1, k2) > (b1, b2)`), which would make every chunk scan the table from its start. The predicates
are NULL-safe (a full-row key may have nullable columns; NULL sorts first) and never evaluate to
NULL, and a chunk's lower predicate is the exact complement of the previous chunk's upper one, so
the chunks partition the key space whatever the literals' rounding. ENUM/SET key columns compare
and sort by their index number.

Windows of several tables
-------------------------
A schema of many small tables would otherwise cost a window (a Spark job) per table. When a chunk
finishes its table, the window also takes the *whole remainders* of the next tables in the snapshot's
order, while the rows stay within the chunk's row budget (`chunk_rows`, counted in the consistent
read) and the tables within `snapshot.max_tables_per_window`; a table whose remainder does not fit
waits and becomes the next window's current table (big tables still go chunk by chunk). Every chunk of
such a window is planned in the same consistent read at the same watermark W and carries W's version,
so the argument above holds for each of them unchanged: each is a chunk of its table at W, and the
stream cursor is at or before W. Staging reads each chunk in a consistent read R >= W of its own (the
replay argument is per chunk, too). The plan check requires the chunks to be the snapshot's next
tables in order (all but the last finished), and the ack moves every table's progress in its one
multi-op. The merge lands the window's tables concurrently; a crash between their commits replays
the window, whose tables that committed are skipped by their txn version.

Progress lives in ZooKeeper (`<root>/pipelines/<name>/snapshot`): per table the last boundary done,
chunks done, rows, and the row estimate. The chunk's plan is checked against it when stored, and it
advances in the ack's multi-op, fenced like everything else. A killed run resumes at the pending
chunk (replayed exactly) or at the next one.

Snapshot rows are staged with `_cdc_op = 'I'` (the merge needs nothing new); the Delta row's
`_cdc_window_seq` names a window of kind `snapshot`, `_cdc_commit_ts` the time the watermark was read.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pymysql

from cdc_core.changes import RowChange, SourceColumn, TableSchema
from cdc_core.errors import ConfigError, CoordinationError, SourceError, StateConflict
from cdc_core.manifest import OP_INSERT
from cdc_core.naming import quote_mysql
from cdc_core.positions import BinlogPosition, ServerIdentity
from cdc_core.source import SourceParams, connect, source_error_from
from cdc_core.window_plan import KIND_SNAPSHOT, WindowPlan

if TYPE_CHECKING:
    from cdc_core.coordination import Cursor, LeaseGrant
    from cdc_core.manifest import Manifest
    from cdc_core.pipeline import Pipeline

log = logging.getLogger("cdc.snapshot")

SNAPSHOT_FORMAT = 1
DEFAULT_CHUNK_ROWS = 100_000
FETCH_ROWS = 5_000  # rows per fetchmany from the unbuffered cursor: bounds the reader's memory

STATUS_PENDING = "pending"
STATUS_RUNNING = "running"
STATUS_DONE = "done"
STATUS_CANCELLED = "cancelled"
_STATUSES = (STATUS_PENDING, STATUS_RUNNING, STATUS_DONE, STATUS_CANCELLED)


# ------------------------------------------------------------------------------------ key values
# Bounds travel through ZooKeeper as JSON. ints (BIGINT UNSIGNED included: Python's JSON keeps them
# exact), strings, floats and None are JSON as they are; the rest is tagged.


def encode_value(v: Any) -> Any:
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int | str | float):
        return v
    if isinstance(v, Decimal):
        return {"$": "decimal", "v": str(v)}
    if isinstance(v, bytes | bytearray | memoryview):
        return {"$": "bytes", "v": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, dt.datetime):
        return {"$": "datetime", "v": v.isoformat()}
    if isinstance(v, dt.date):
        return {"$": "date", "v": v.isoformat()}
    if isinstance(v, dt.timedelta):
        return {"$": "timedelta", "v": (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds}
    raise ConfigError(f"a key value of type {type(v).__name__} ({v!r}) cannot be stored as a snapshot bound")


def decode_value(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    tag, raw = v.get("$"), v.get("v")
    if not isinstance(raw, str | int):
        raise ConfigError(f"malformed snapshot bound value {v!r}")
    if tag == "decimal":
        return Decimal(str(raw))
    if tag == "bytes":
        return base64.b64decode(str(raw))
    if tag == "datetime":
        return dt.datetime.fromisoformat(str(raw))
    if tag == "date":
        return dt.date.fromisoformat(str(raw))
    if tag == "timedelta":
        return dt.timedelta(microseconds=int(raw))
    raise ConfigError(f"unknown snapshot bound value {v!r}")


def encode_key(values: Sequence[Any] | None) -> list[Any] | None:
    return None if values is None else [encode_value(v) for v in values]


def decode_key(values: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(decode_value(v) for v in values)


# ------------------------------------------------------------------------------- keyset predicates


@dataclass(frozen=True)
class KeyColumn:
    name: str
    nullable: bool = False
    by_index: bool = False  # ENUM/SET: compare and sort by the index number (what ORDER BY uses)


def key_columns(schema: TableSchema) -> tuple[KeyColumn, ...]:
    by_name = {c.name: c for c in schema.columns}
    out = []
    for k in schema.key:
        col = by_name.get(k)
        if col is None:
            raise SourceError(f"table {schema.name}: key column {k!r} is not a column of the table")
        base = col.mysql_type.split("(", 1)[0].split(" ", 1)[0]
        out.append(KeyColumn(k, col.nullable, base in ("enum", "set")))
    return tuple(out)


@dataclass(frozen=True)
class Cmp:
    col: str
    op: str  # '>', '<', '<=', '=', '<=>'
    value: Any


@dataclass(frozen=True)
class IsNull:
    col: str
    negate: bool = False


@dataclass(frozen=True)
class Const:
    value: bool


@dataclass(frozen=True)
class And:
    parts: tuple[Any, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Any, ...]


Expr = Cmp | IsNull | Const | And | Or


def _and(*parts: Expr) -> Expr:
    flat = [p for p in parts if p != Const(True)]
    if any(p == Const(False) for p in flat):
        return Const(False)
    return flat[0] if len(flat) == 1 else (And(tuple(flat)) if flat else Const(True))


def _or(*parts: Expr) -> Expr:
    flat = [p for p in parts if p != Const(False)]
    if any(p == Const(True) for p in flat):
        return Const(True)
    return flat[0] if len(flat) == 1 else (Or(tuple(flat)) if flat else Const(False))


# One column against one bound value; NULL sorts first (as in ORDER BY ... ASC) and none of these
# ever evaluates to NULL, so NOT-free complements stay exact.
def _gt1(c: KeyColumn, x: Any) -> Expr:
    if x is None:
        return IsNull(c.name, negate=True)
    cmp = Cmp(c.name, ">", x)
    return _and(IsNull(c.name, negate=True), cmp) if c.nullable else cmp


def _le1(c: KeyColumn, x: Any) -> Expr:
    if x is None:
        return IsNull(c.name)
    cmp = Cmp(c.name, "<=", x)
    return _or(IsNull(c.name), cmp) if c.nullable else cmp


def _lt1(c: KeyColumn, x: Any) -> Expr:
    if x is None:
        return Const(False)
    cmp = Cmp(c.name, "<", x)
    return _or(IsNull(c.name), cmp) if c.nullable else cmp


def _eq1(c: KeyColumn, x: Any) -> Expr:
    if x is None:
        return IsNull(c.name)
    return Cmp(c.name, "<=>" if c.nullable else "=", x)


def after(cols: Sequence[KeyColumn], bound: Sequence[Any]) -> Expr:
    """key > bound, in ORDER BY order: `k1 > b1 OR (k1 = b1 AND (k2 > b2 OR ...))`."""
    if len(cols) != len(bound) or not cols:
        raise ValueError(f"bound {list(bound)!r} does not match key columns {[c.name for c in cols]}")
    c, x = cols[0], bound[0]
    if len(cols) == 1:
        return _gt1(c, x)
    return _or(_gt1(c, x), _and(_eq1(c, x), after(cols[1:], bound[1:])))


def at_or_before(cols: Sequence[KeyColumn], bound: Sequence[Any]) -> Expr:
    """key <= bound: the exact complement of `after(cols, bound)`."""
    if len(cols) != len(bound) or not cols:
        raise ValueError(f"bound {list(bound)!r} does not match key columns {[c.name for c in cols]}")
    c, x = cols[0], bound[0]
    if len(cols) == 1:
        return _le1(c, x)
    return _or(_lt1(c, x), _and(_eq1(c, x), at_or_before(cols[1:], bound[1:])))


def chunk_predicate(
    cols: Sequence[KeyColumn], lower: Sequence[Any] | None, upper: Sequence[Any] | None
) -> Expr:
    """lower < key <= upper (None: unbounded on that side)."""
    return _and(
        after(cols, lower) if lower is not None else Const(True),
        at_or_before(cols, upper) if upper is not None else Const(True),
    )


def render(expr: Expr) -> tuple[str, list[Any]]:
    """SQL text with %s placeholders (pymysql paramstyle), and the parameters in order."""
    params: list[Any] = []

    def walk(e: Expr) -> str:
        if isinstance(e, Cmp):
            params.append(e.value)
            return f"{quote_mysql(e.col)} {e.op} %s"
        if isinstance(e, IsNull):
            return f"{quote_mysql(e.col)} IS {'NOT ' if e.negate else ''}NULL"
        if isinstance(e, Const):
            return "1=1" if e.value else "1=0"
        joiner = " AND " if isinstance(e, And) else " OR "
        return "(" + joiner.join(walk(p) for p in e.parts) + ")"

    return walk(expr), params


def evaluate(expr: Expr, row: dict[str, Any]) -> bool | None:
    """SQL three-valued evaluation over Python values (None = NULL). For tests of the predicates."""
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, IsNull):
        return (row[expr.col] is None) != expr.negate
    if isinstance(expr, Cmp):
        a, b = row[expr.col], expr.value
        if expr.op == "<=>":
            return a == b if a is not None and b is not None else (a is None and b is None)
        if a is None or b is None:
            return None
        result: bool = {">": a > b, "<": a < b, "<=": a <= b, "=": a == b}[expr.op]
        return result
    values = [evaluate(p, row) for p in expr.parts]
    if isinstance(expr, And):
        return False if False in values else (None if None in values else True)
    return True if True in values else (None if None in values else False)


def order_by(cols: Sequence[KeyColumn], desc: bool = False) -> str:
    suffix = " DESC" if desc else ""
    return ", ".join(quote_mysql(c.name) + suffix for c in cols)


def key_select(cols: Sequence[KeyColumn]) -> str:
    # ENUM/SET bounds are index numbers (`col+0`): comparisons with an integer use the index too.
    return ", ".join(f"{quote_mysql(c.name)}+0" if c.by_index else quote_mysql(c.name) for c in cols)


# ------------------------------------------------------------------------------------- versions


def chunk_version(watermark: BinlogPosition) -> int:
    """The change version of every row a chunk read at `watermark` stages (see the module docstring).

    A transaction boundary's own version: every binlog change committed after it starts strictly
    later (its GTID/BEGIN event sits at the boundary, its row events after), every change before it
    starts strictly earlier. Same epoch as the stream cursor, so a later epoch's changes win too.
    """
    return watermark.change_version


# ------------------------------------------------------------------------------------ chunk plans


@dataclass(frozen=True)
class ChunkSpec:
    """What a snapshot window reads (stored in its plan's `info["snapshot"]`; immutable once stored)."""

    table: str
    key: tuple[str, ...]
    chunk: int  # 1-based within this table's round
    round: int  # the table's request generation (a re-request starts a new round)
    lower: list[Any] | None  # encoded exclusive lower bound; None = from the first row
    upper: list[Any] | None  # encoded inclusive upper bound; None = to the end (only with last)
    last: bool  # the table is done once this chunk is acked
    empty: bool = False  # nothing to read (the table was empty, or is gone, at the watermark)
    missing: bool = False  # the table no longer exists
    version: int = 0  # chunk_version(watermark)
    estimate: int | None = None
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    read_at: float = 0.0  # unix seconds when the watermark was read (the rows' _cdc_commit_ts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "table": self.table,
            "key": list(self.key),
            "chunk": self.chunk,
            "round": self.round,
            "lower": self.lower,
            "upper": self.upper,
            "last": self.last,
            "empty": self.empty,
            "missing": self.missing,
            "version": self.version,
            "estimate": self.estimate,
            "chunk_rows": self.chunk_rows,
            "read_at": self.read_at,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChunkSpec:
        if d.get("format") != SNAPSHOT_FORMAT:
            raise ConfigError(
                f"unsupported snapshot chunk format {d.get('format')!r} (this version reads {SNAPSHOT_FORMAT})"
            )
        return cls(
            table=str(d["table"]),
            key=tuple(d["key"]),
            chunk=int(d["chunk"]),
            round=int(d["round"]),
            lower=d.get("lower"),
            upper=d.get("upper"),
            last=bool(d["last"]),
            empty=bool(d.get("empty", False)),
            missing=bool(d.get("missing", False)),
            version=int(d.get("version", 0)),
            estimate=d.get("estimate"),
            chunk_rows=int(d.get("chunk_rows", DEFAULT_CHUNK_ROWS)),
            read_at=float(d.get("read_at", 0.0)),
        )


def chunk_of(plan: WindowPlan) -> ChunkSpec:
    """The window's first chunk (the one of the snapshot's current table)."""
    raw = plan.info.get("snapshot")
    if plan.kind != KIND_SNAPSHOT or not isinstance(raw, dict):
        raise StateConflict(f"window {plan.label()} is not a snapshot chunk (kind {plan.kind!r})")
    return ChunkSpec.from_dict(raw)


def chunks_of(plan: WindowPlan) -> tuple[ChunkSpec, ...]:
    """Every chunk of a snapshot window, in load order: the first, then the whole remainders of the next
    tables that fit the window's row budget (`info["snapshot_more"]`, see `plan_chunk`)."""
    first = chunk_of(plan)
    more = plan.info.get("snapshot_more") or []
    if not isinstance(more, list):
        raise StateConflict(f"window {plan.label()}: malformed snapshot_more {more!r}")
    return (first, *(ChunkSpec.from_dict(d) for d in more))


def chunk_label(plan: WindowPlan) -> dict[str, Any]:
    """The chunk in a few fields (for a step's XCom and the logs)."""
    specs = chunks_of(plan)
    spec = specs[0]
    out: dict[str, Any] = {"table": spec.table, "chunk": spec.chunk, "last": spec.last, "empty": spec.empty}
    if len(specs) > 1:
        out["tables"] = len(specs)
    return out


def chunk_plan(
    pipeline: str,
    seq: int,
    watermark: BinlogPosition,
    spec: ChunkSpec,
    *,
    now: float,
    holder: str = "",
    more: Sequence[ChunkSpec] = (),
) -> WindowPlan:
    """A snapshot window: the empty binlog range [W, W) at its watermark, with the chunk(s) in `info`.

    `more`: whole remainders of the tables after `spec`'s (all read at the same watermark)."""
    specs = (spec, *more)
    if any(s.version != chunk_version(watermark) for s in specs):
        raise ValueError("the chunk's version must be its watermark's")
    if any(not s.last for s in specs[:-1]):
        raise ValueError("only the last chunk of a window may leave its table unfinished")
    info: dict[str, Any] = {"snapshot": spec.to_dict()}
    if more:
        info["snapshot_more"] = [m.to_dict() for m in more]
    if holder:
        info["holder"] = holder
    return WindowPlan(
        pipeline=pipeline, seq=seq, start=watermark, end=watermark, kind=KIND_SNAPSHOT, planned_at=now,
        tables=tuple(s.table for s in specs), info=info,
    )


# -------------------------------------------------------------------------------------- progress


@dataclass(frozen=True)
class TableProgress:
    """One table's snapshot progress (a ZooKeeper record; bounds encoded as in ChunkSpec)."""

    table: str
    status: str = STATUS_PENDING
    key: tuple[str, ...] = ()  # set by the first chunk
    after: list[Any] | None = None  # the last boundary done (the next chunk's exclusive lower bound)
    chunks: int = 0
    rows: int = 0
    estimate: int | None = None
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    round: int = 1
    requested_at: float | None = None
    requested_by: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    last_seq: int | None = None

    @property
    def done(self) -> bool:
        return self.status in (STATUS_DONE, STATUS_CANCELLED)

    def chunks_total(self) -> int:
        """Chunks done plus an estimate of those left (at least one while not done)."""
        if self.done:
            return self.chunks
        left = math.ceil(max(0, (self.estimate or 0) - self.rows) / max(1, self.chunk_rows))
        return self.chunks + max(1, left)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": self.status,
            "key": list(self.key),
            "after": self.after,
            "chunks": self.chunks,
            "rows": self.rows,
            "estimate": self.estimate,
            "chunk_rows": self.chunk_rows,
            "round": self.round,
            "requested_at": self.requested_at,
            "requested_by": self.requested_by,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "last_seq": self.last_seq,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableProgress:
        status = str(d.get("status", STATUS_PENDING))
        if status not in _STATUSES:
            raise ConfigError(f"unknown snapshot table status {status!r}")
        return cls(
            table=str(d["table"]),
            status=status,
            key=tuple(d.get("key") or ()),
            after=d.get("after"),
            chunks=int(d.get("chunks", 0)),
            rows=int(d.get("rows", 0)),
            estimate=d.get("estimate"),
            chunk_rows=int(d.get("chunk_rows", DEFAULT_CHUNK_ROWS)),
            round=int(d.get("round", 1)),
            requested_at=d.get("requested_at"),
            requested_by=str(d.get("requested_by", "")),
            started_at=d.get("started_at"),
            finished_at=d.get("finished_at"),
            last_seq=d.get("last_seq"),
        )


@dataclass(frozen=True)
class SnapshotState:
    """The pipeline's snapshot record: tables in the order they are loaded, one at a time."""

    tables: tuple[TableProgress, ...] = ()
    # The seq of the last acked chunk (interleaving: a binlog window comes next); -1 right after a request.
    last_chunk_seq: int = 0
    updated_at: float | None = None

    @property
    def active(self) -> bool:
        return any(not t.done for t in self.tables)

    def current(self) -> TableProgress | None:
        """The table the next chunk belongs to."""
        return next((t for t in self.tables if not t.done), None)

    def table(self, name: str) -> TableProgress | None:
        return next((t for t in self.tables if t.table == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "tables": [t.to_dict() for t in self.tables],
            "last_chunk_seq": self.last_chunk_seq,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SnapshotState:
        if d.get("format") != SNAPSHOT_FORMAT:
            raise ConfigError(
                f"unsupported snapshot record format {d.get('format')!r} (this version reads {SNAPSHOT_FORMAT}); "
                "a newer release wrote it: upgrade this one"
            )
        return cls(
            tables=tuple(TableProgress.from_dict(t) for t in d.get("tables") or ()),
            last_chunk_seq=int(d.get("last_chunk_seq", 0)),
            updated_at=d.get("updated_at"),
        )

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> SnapshotState:
        if not data:
            return cls()  # the node exists from the layout, empty until the first request
        return cls.from_dict(json.loads(data))


@dataclass(frozen=True)
class TableRequest:
    table: str
    estimate: int | None = None
    chunk_rows: int = DEFAULT_CHUNK_ROWS


def with_requests(state: SnapshotState, requests: Sequence[TableRequest], now: float, by: str) -> SnapshotState:
    """The state after (re-)requesting tables: each starts from its first row in a new round.

    A table not yet done is restarted where it stands in the order; a done (or new) table is
    appended. Restarting is always safe: rows already loaded are overwritten only by newer reads.
    """
    if not requests:
        raise ConfigError("a snapshot request names at least one table")
    if any(r.chunk_rows < 1 for r in requests):
        raise ConfigError("snapshot chunk_rows must be >= 1")
    tables = list(state.tables)
    for r in requests:
        old = next((i for i, t in enumerate(tables) if t.table == r.table), None)
        fresh = TableProgress(
            table=r.table, estimate=r.estimate, chunk_rows=r.chunk_rows, requested_at=now, requested_by=by,
            round=(tables[old].round + 1) if old is not None else 1,
        )
        if old is not None and not tables[old].done:
            tables[old] = fresh
        else:
            if old is not None:
                del tables[old]
            tables.append(fresh)
    # -1: no window has that seq, so the next window is a chunk (what was asked for comes first).
    return replace(state, tables=tuple(tables), last_chunk_seq=-1, updated_at=now)


def cancelled(state: SnapshotState, tables: Sequence[str] | None, now: float) -> SnapshotState:
    """Stop loading `tables` (None: every table not done). Rows already loaded stay."""
    out = [
        replace(t, status=STATUS_CANCELLED, finished_at=now)
        if not t.done and (tables is None or t.table in tables) else t
        for t in state.tables
    ]
    return replace(state, tables=tuple(out), updated_at=now)


def restarted(state: SnapshotState, table: str, now: float, reason: str) -> SnapshotState:
    """Restart one table from its first row (e.g. its key changed): a new round."""
    t = state.table(table)
    if t is None:
        return state
    return with_requests(state, [TableRequest(table, t.estimate, t.chunk_rows)], now, f"restart: {reason}")


def chunk_turn(state: SnapshotState, cursor_seq: int) -> bool:
    """Interleaving: a chunk comes next unless the last acked window was a chunk (then the binlog's turn)."""
    return state.active and state.last_chunk_seq != cursor_seq


def check_chunk(pipeline: str, state: SnapshotState, plan: WindowPlan) -> None:
    """Raise StateConflict unless `plan` holds the next chunk of the snapshot's current table (then,
    for a window of several tables, the whole remainders of the tables that follow it, in order)."""
    specs = chunks_of(plan)
    pending = [t for t in state.tables if not t.done]
    for i, spec in enumerate(specs):
        where = f"pipeline {pipeline!r}: cannot store snapshot chunk {spec.table}#{spec.chunk} as window {plan.seq}"
        if not pending:
            raise StateConflict(
                f"{where}: no snapshot is active (request one with `cdc snapshot {pipeline} --table ...`)"
            )
        if i >= len(pending):
            raise StateConflict(f"{where}: the snapshot has only {len(pending)} tables left to load; re-plan")
        cur = pending[i]
        if cur.table != spec.table or cur.round != spec.round:
            what = "current table" if i == 0 else f"table number {i + 1} still to load"
            raise StateConflict(
                f"{where}: the snapshot's {what} is {cur.table} (round {cur.round}), not {spec.table} "
                f"(round {spec.round}); re-plan"
            )
        if spec.chunk != cur.chunks + 1 or spec.lower != cur.after:
            raise StateConflict(
                f"{where}: {cur.table} has {cur.chunks} chunks done up to {cur.after!r}, the plan is chunk "
                f"{spec.chunk} from {spec.lower!r}; re-plan"
            )
        if spec.upper is None and not spec.last:
            raise StateConflict(f"{where}: only the last chunk may be open-ended")
        if i < len(specs) - 1 and not spec.last:
            raise StateConflict(f"{where}: a window may only move on to the next table once this one is finished")


def after_ack(
    state: SnapshotState, plan: WindowPlan, rows: int, now: float, table_rows: dict[str, int] | None = None
) -> SnapshotState:
    """The state once chunk window `plan` is acked with `rows` staged rows (per table: `table_rows`,
    needed when the window holds chunks of several tables).

    A chunk that no longer matches its table's progress (the table was re-requested or cancelled while
    the chunk was pending) is acked without moving the progress: its rows landed and are correct
    (they carry their watermark's version), the new round reads the range again.
    """
    specs = chunks_of(plan)
    tables = list(state.tables)
    for spec in specs:
        got = rows if len(specs) == 1 else int((table_rows or {}).get(spec.table, 0))
        for i, t in enumerate(tables):
            if t.table != spec.table:
                continue
            if t.round == spec.round and not t.done and t.chunks == spec.chunk - 1 and t.after == spec.lower:
                tables[i] = replace(
                    t,
                    status=STATUS_DONE if spec.last else STATUS_RUNNING,
                    key=tuple(spec.key),
                    after=spec.upper if spec.upper is not None else t.after,
                    chunks=t.chunks + 1,
                    rows=t.rows + max(0, got),
                    estimate=spec.estimate if spec.estimate is not None else t.estimate,
                    started_at=t.started_at if t.started_at is not None else now,
                    finished_at=now if spec.last else None,
                    last_seq=plan.seq,
                )
            break
    return replace(state, tables=tuple(tables), last_chunk_seq=plan.seq, updated_at=now)


def progress_view(state: SnapshotState) -> dict[str, Any]:
    """Per table: status, chunks done / estimated total, rows, estimate (for status, logs, monitor)."""
    tables = []
    for t in state.tables:
        total = t.chunks_total()
        tables.append(
            {
                "table": t.table,
                "status": t.status,
                "chunks_done": t.chunks,
                "chunks_total": total,
                "rows": t.rows,
                "estimate": t.estimate,
                "percent": 100.0 if t.status == STATUS_DONE else round(100.0 * t.chunks / max(1, total), 1),
                "requested_at": t.requested_at,
                "requested_by": t.requested_by,
                "started_at": t.started_at,
                "finished_at": t.finished_at,
                "round": t.round,
            }
        )
    cur = state.current()
    return {
        "active": state.active,
        "current": cur.table if cur else None,
        "tables": tables,
        "updated_at": state.updated_at,
    }


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
    None when they already agree. The type map (`cdc_core.types`) then lands both the same way.

    Zero and partial dates come back as text: `zero_dates="null"` lands them as NULL, "refuse" raises
    UnsupportedType (`table` and `where` name the table and pipeline in the message)."""
    base = col.mysql_type.split("(", 1)[0].split(" ", 1)[0]
    if base in _ZERO_DATE_TYPES:
        if zero_dates == "refuse":

            def refuse(v: Any) -> Any:
                if v.__class__ is str:
                    from cdc_core.rowdecode import zero_date_error

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
            f"(cdc snapshot {plan.pipeline} --table {spec.table})"
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


# ------------------------------------------------------------------------ the pipeline's side


def _describe_one(p: Pipeline, name: str, plan: WindowPlan | None = None) -> TableSchema | None:
    """The table as it is now (None when gone), with the full-row-key settings of `plan` when given."""
    from cdc_core.errors import UnknownTable

    try:
        if plan is None:
            return p.describe((name,)).get(name)
        _, full_row_key = p.plan_capture(plan)
        schema, _, table = name.partition(".")
        found: TableSchema | None = p.schema_lookup(full_row_key)(schema, table)
        return found
    except UnknownTable:
        return None


def _describe_many(p: Pipeline, names: Sequence[str], plan: WindowPlan | None = None) -> dict[str, TableSchema]:
    """Several tables as they are now, in one information_schema round (absent: gone)."""
    from cdc_core.errors import UnknownTable
    from cdc_core.source import TableFilter, describe_tables

    full_row_key = p.plan_capture(plan)[1] if plan is not None else tuple(p.config.tables.full_row_key)
    conn = connect(p.source)
    try:
        try:
            found: dict[str, TableSchema] = describe_tables(
                conn, TableFilter(include=tuple(names), exclude=()), p.name, full_row_key
            )
            return found
        except UnknownTable:  # one of them is gone: ask one by one
            pass
    finally:
        conn.close()
    out: dict[str, TableSchema] = {}
    for n in names:
        one = _describe_one(p, n, plan)
        if one is not None:
            out[n] = one
    return out


def request(
    p: Pipeline,
    grant: LeaseGrant,
    tables: Sequence[str] | None = None,
    chunk_rows: int | None = None,
    requested_by: str = "",
) -> SnapshotState:
    """Request a snapshot of `tables` (None: every table the pipeline captures). Fenced on the lease."""
    captured = p.describe()
    if tables:
        unknown = sorted(set(tables) - set(captured))
        if unknown:
            raise ConfigError(
                f"pipeline {p.name!r}: cannot snapshot {unknown}: not captured by this pipeline (it captures "
                f"{sorted(captured)}); add them to tables.include first"
            )
        names = list(dict.fromkeys(tables))
    else:
        names = sorted(captured)
    rows = chunk_rows if chunk_rows is not None else p.config.snapshot.chunk_rows
    if rows < 1:
        raise ConfigError(f"pipeline {p.name!r}: snapshot chunk_rows must be >= 1 (got {rows})")
    conn = connect(p.source)
    try:
        reqs = [TableRequest(n, estimate_rows(conn, n), rows) for n in names]
    finally:
        conn.close()
    by = requested_by or grant.holder
    if not reqs:
        p._log("snapshot.nothing_to_do", grant, reason="the pipeline captures no existing table")
        return p.coordinator.read_snapshot()
    state = p.coordinator.update_snapshot(
        grant, "request a snapshot", lambda s: with_requests(s, reqs, time.time(), by), "snapshot.requested",
        tables=",".join(names),
    )
    for r in reqs:
        p._log("snapshot.table_requested", grant, table=r.table, estimate=r.estimate, chunk_rows=r.chunk_rows)
    return state


def cancel(p: Pipeline, grant: LeaseGrant, tables: Sequence[str] | None = None) -> SnapshotState:
    return p.coordinator.update_snapshot(
        grant, "cancel the snapshot", lambda s: cancelled(s, tables, time.time()), "snapshot.cancelled",
        tables=",".join(tables) if tables else "all",
    )


def on_first_start(p: Pipeline, grant: LeaseGrant) -> None:
    """A new pipeline (no stream position yet) with `snapshot.on_start`: request every captured table.

    Called before the stream's start is set, so the start is at or before every chunk's watermark
    (nothing between the snapshot and the stream is missed). A crash between this request and the
    start being set repeats the request next time, harmlessly (no chunk can have run: chunks need
    the start).
    """
    if not p.config.snapshot_on_start():
        return
    state = p.coordinator.read_snapshot()
    # Tables already waiting (an earlier attempt that crashed before setting the start, or a table
    # requested by hand before the first run) are not requested again.
    waiting = {t.table for t in state.tables if not t.done}
    missing = [t for t in sorted(p.describe()) if t not in waiting]
    if missing:
        request(p, grant, missing, requested_by=f"on_start:{grant.holder}")


def plan_chunk(p: Pipeline, grant: LeaseGrant, cursor: Cursor, state: SnapshotState) -> WindowPlan | None:
    """The next chunk's plan (not stored), or None when no chunk can be planned now."""
    cur = state.current()
    if cur is None or cursor.position is None:
        return None
    facts = p.source_facts(refresh=True)
    if not facts.identity.same_server(cursor.position.server):
        return None  # a failover: the binlog path rebases the cursor first
    table = _describe_one(p, cur.table)
    if table is not None and cur.key and tuple(table.key) != tuple(cur.key):
        name = cur.table
        p._log("snapshot.key_changed", grant, table=name, old=",".join(cur.key), new=",".join(table.key))
        state = p.coordinator.update_snapshot(
            grant, "restart a table whose key changed", lambda s: restarted(s, name, time.time(), "key changed"),
            "snapshot.restarted", table=name,
        )
        cur = state.current()
        if cur is None:
            return None
    max_tables = p.config.snapshot.max_tables_per_window
    following: list[tuple[TableProgress, TableSchema | None]] = []
    if max_tables > 1:
        nxt = [t for t in state.tables if not t.done and t.table != cur.table][: max_tables - 1]
        if nxt:
            described = _describe_many(p, [t.table for t in nxt])
            following = [(t, described.get(t.table)) for t in nxt]
    plan = plan_next_chunk_from_source(
        p.source, facts.identity, epoch=cursor.position.epoch, pipeline=p.name, seq=cursor.seq + 1, progress=cur,
        table=table, now=time.time(), holder=grant.holder, following=following, max_tables=max_tables,
    )
    if plan.start < cursor.position:
        # Cannot happen on one server (the watermark is read after the cursor was written); should the
        # server say otherwise, let a binlog window go first rather than fail the plan step.
        p._log("snapshot.watermark_behind_cursor", grant, watermark=plan.start.label(), cursor=cursor.position.label())
        return None
    return replace(plan, capture=p.capture_settings(plan.tables))  # re-staging describes the table the same way


def log_planned(p: Pipeline, grant: LeaseGrant, plan: WindowPlan, state: SnapshotState) -> None:
    specs = chunks_of(plan)
    for spec in specs:
        t = state.table(spec.table)
        total = t.chunks_total() if t is not None else spec.chunk
        p._log(
            "snapshot.chunk_planned", grant, seq=plan.seq, table=spec.table,
            chunk=f"{spec.chunk}/{max(total, spec.chunk)}", lower=json.dumps(spec.lower), upper=json.dumps(spec.upper),
            last=spec.last, watermark=plan.start.label(), version=spec.version,
            **({"window_tables": len(specs)} if len(specs) > 1 else {}),
        )


def stage_chunk(p: Pipeline, grant: LeaseGrant, plan: WindowPlan) -> Manifest:
    """Read and stage the window's chunk(s) (bounded memory); the first chunk of a table declares it, so
    an empty source table still gets its (empty) Delta table."""
    from cdc_core import faults, staging

    specs = chunks_of(plan)
    wanted = [s.table for s in specs if not s.missing]
    if len(specs) == 1:
        one = _describe_one(p, specs[0].table, plan) if wanted else None
        described = {specs[0].table: one} if one is not None else {}
    else:
        described = dict(_describe_many(p, wanted, plan)) if wanted else {}
    t0 = time.time()
    last = [t0]
    done_rows = [0]

    def on_rows(rows: int) -> None:
        faults.point("mid_stage")  # crash suite: a chunk half read
        now = time.time()
        if now - last[0] >= 10:
            last[0] = now
            p._log("snapshot.reading", grant, seq=plan.seq, table=current[0], rows=done_rows[0] + rows)
            p.renew(grant)  # a long chunk keeps the lease alive (and notices a lost one)

    current = [specs[0].table]
    declare: list[TableSchema] = []
    readers: list[tuple[ChunkSpec, TableSchema]] = []
    for spec in specs:
        table = described.get(spec.table)
        if table is None:
            if not spec.missing:
                p._log("snapshot.table_gone", grant, seq=plan.seq, table=spec.table)
            continue
        readers.append((spec, table))
        if spec.chunk == 1:
            declare.append(table)

    def changes() -> Iterator[RowChange]:
        for spec, table in readers:
            current[0] = spec.table
            n = 0
            for change in read_chunk(
                p.source, plan, table, on_rows=on_rows, spec=spec, first_ordinal=done_rows[0] + 1,
                zero_dates=p.config.zero_dates,
            ):
                n += 1
                yield change
            done_rows[0] += n

    manifest = staging.stage_window(plan, changes(), p.staging_root, declare=tuple(declare))
    p._log(
        "snapshot.chunk_staged", grant, seq=plan.seq, table=specs[0].table, chunk=specs[0].chunk,
        rows=manifest.changes, secs=f"{time.time() - t0:.2f}",
        **({"window_tables": len(specs)} if len(specs) > 1 else {}),
    )
    return manifest


def log_acked(p: Pipeline, grant: LeaseGrant, plan: WindowPlan) -> None:
    try:
        state = p.coordinator.read_snapshot()
    except CoordinationError:
        return
    for spec in chunks_of(plan):
        t = state.table(spec.table)
        if t is None:
            continue
        p._log(
            "snapshot.progress", grant, seq=plan.seq, table=t.table, status=t.status,
            chunks=f"{t.chunks}/{t.chunks_total()}", rows=t.rows, estimate=t.estimate,
        )
        if t.status == STATUS_DONE and t.last_seq == plan.seq:
            p._log("snapshot.table_done", grant, table=t.table, chunks=t.chunks, rows=t.rows)
