"""Initial load, the pure part: chunk specs and predicates, key encoding, the snapshot's progress record.

Why chunked snapshots reconciled by version are correct: docs/snapshot.md.
"""


from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdc_core.model.changes import TableSchema
from cdc_core.model.errors import ConfigError, SourceError, StateConflict
from cdc_core.model.naming import quote_mysql
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.sources import command_target
from cdc_core.model.window_plan import KIND_SNAPSHOT, WindowPlan

if TYPE_CHECKING:
    pass

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
    # A re-read asked for by a schema change at this version (docs/schema-changes.md): once the table's last
    # chunk lands, lake rows older than it were not read again, so they are gone at the source (0: none).
    sweep_below: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = self._fields()
        if self.sweep_below:
            d["sweep_below"] = self.sweep_below
        return d

    def _fields(self) -> dict[str, Any]:
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
            sweep_below=int(d.get("sweep_below", 0)),
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
    sweep_below: int = 0  # this round re-reads the table for a schema change at that version (ChunkSpec)

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
            **({"sweep_below": self.sweep_below} if self.sweep_below else {}),
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
            sweep_below=int(d.get("sweep_below", 0)),
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
    sweep_below: int = 0  # a re-read for a schema change at that version (TableProgress.sweep_below)


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
            # A restart keeps a pending re-read's sweep: the new round reads every row again too.
            sweep_below=max(r.sweep_below, tables[old].sweep_below if old is not None and not tables[old].done else 0),
        )
        if old is not None and not tables[old].done:
            tables[old] = fresh
        else:
            if old is not None:
                del tables[old]
            tables.append(fresh)
    # -1: no window has that seq, so the next window is a chunk (what was asked for comes first).
    return replace(state, tables=tuple(tables), last_chunk_seq=-1, updated_at=now)


def reread_requests(state: SnapshotState, wanted: Sequence[TableRequest]) -> list[TableRequest]:
    """The re-reads (TableRequest with sweep_below) not yet asked for: a table whose latest round already
    serves a schema change at that version or later is not asked again (an ack replayed, a later window)."""
    out = []
    for r in wanted:
        t = state.table(r.table)
        if t is None or t.sweep_below < r.sweep_below:
            out.append(r)
    return out


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
                f"{where}: no snapshot is active "
                f"(request one with `cdc snapshot {command_target(pipeline)} --table ...`)"
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
