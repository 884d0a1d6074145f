"""A seeded random workload against the source, and its exact replay (the fault suite's ground truth).

`Workload(seed, database)` creates a few tables covering the type map (signed and unsigned integers up
to BIGINT UNSIGNED, DECIMAL up to (50,10), FLOAT, DOUBLE, DATE, DATETIME(6), TIMESTAMP(6), TIME(6), YEAR,
CHAR/VARCHAR/TEXT in utf8mb4 with emoji, BLOB/VARBINARY/BINARY with 0x00 and 0xFF, JSON, ENUM, SET,
BIT, latin1 text, NULLs; and each type's empty, zero and edge values: empty strings and sets, trailing
spaces, zero and partial dates, TIMESTAMP's zero value, ENUM index 0, BINARY zero padding), with single
and composite keys, and then writes transactions of every shape: one row to thousands, inserts, updates of
a few columns, range updates and deletes, primary-key changes, deleting and re-inserting a key (also
inside one transaction), rolled-back transactions and partial rollbacks to a savepoint; between
transactions it rotates the binlog (FLUSH BINARY LOGS) and adds or drops columns.

Deterministic per seed: the same seed writes the same statements with the same values in the same
order (the generator's only state is its RNG and a model of which keys exist). Each committed
transaction is recorded (`Txn`: its MariaDB GTID sequence number and its statements with parameters),
so `Shadow` can replay any prefix of the history, table by table, into a shadow database with binary
logging off: "what the source table looked like right after GTID n", exactly, with the server's own
types and conversions. The oracle (tests/faults/oracle.py) compares the lake with that.

Every statement touches exactly one table and is deterministic (no NOW(), RAND(), LIMIT without ORDER
BY), which is what makes the per-table replay exact.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import Any

EMOJI = "😀🚀🧪🇺🇦👩‍💻"
TEXT_PALETTE = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.;:-_'\"\\%`"
    "éüßçøñ漢字かなשלוםمرحبا" + EMOJI + "\u200d\u0301"
)
LATIN1_PALETTE = "abcXYZ 019'\\\"éüßçøñ€Ÿ\x81\x8d\x8f\x90\x9d\x00ÿ"
ENUM_LABELS = ("new", "paid", "shipped", "cancelled", "ünïcödé")
# Not in alphabetical order on purpose. No 4-byte characters: MariaDB keeps ENUM/SET labels in utf8mb3.
SET_LABELS = ("zeta", "alpha", "mid", "ñu")

U64_MAX = 2**64 - 1
# Not strict: ENUM index 0 (the invalid value '') can be written; zero dates need no mode (MariaDB's
# default has neither NO_ZERO_DATE nor NO_ZERO_IN_DATE). Every value the generator makes is in range, so
# nothing is silently clipped. The shadow replays under the same mode.
SQL_MODE = "SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'"
_WIDE = Context(prec=100)


# ------------------------------------------------------------------------------------------ values


def _text(rng: random.Random, max_len: int, *, min_len: int = 0, palette: str = TEXT_PALETTE) -> str:
    r = rng.random()
    if min_len == 0 and r < 0.05:
        return ""
    if r < 0.1:
        return " " * rng.randint(1, max(1, min(3, max_len)))  # CHAR trims trailing spaces, VARCHAR keeps them
    n = rng.randint(min_len, max_len)
    s = "".join(rng.choice(palette) for _ in range(n))
    if n and r < 0.2:
        s = s[:-1] + " "  # a trailing space
    return s


def _bytes(rng: random.Random, max_len: int, *, min_len: int = 0) -> bytes:
    n = rng.randint(min_len, max_len)
    edge = rng.random()
    if edge < 0.2:
        return bytes([0x00, 0xFF] * (n // 2))
    b = bytes(rng.getrandbits(8) for _ in range(n))
    if n and edge < 0.4:
        b = b[:-1] + b"\x00"  # trailing zero byte: the binlog drops it for BINARY(n)
    return b


def _int(rng: random.Random, lo: int, hi: int) -> int:
    r = rng.random()
    if r < 0.1:
        return lo
    if r < 0.2:
        return hi
    if r < 0.3:
        return 0 if lo <= 0 <= hi else lo
    return rng.randint(lo, hi)


def _decimal(rng: random.Random, precision: int, scale: int) -> Decimal:
    bound = 10**precision - 1
    r = rng.random()
    unscaled = bound if r < 0.05 else -bound if r < 0.1 else rng.randint(-bound, bound)
    return Decimal(unscaled).scaleb(-scale, context=_WIDE)  # the default context would round to 28 digits


def _datetime(rng: random.Random, lo: dt.datetime, hi: dt.datetime, micros: bool = True) -> dt.datetime:
    span = int((hi - lo).total_seconds())
    v = lo + dt.timedelta(seconds=rng.randint(0, span))
    if micros:
        v = v.replace(microsecond=rng.choice((0, 999_999, rng.randint(0, 999_999))))
    return v


def _date(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.05:
        return "0000-00-00"  # zero and partial dates land as NULL (docs/type-map.md)
    if r < 0.08:
        return rng.choice(("2024-00-10", "2024-02-00", "0000-01-01"))
    return _datetime(rng, dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31), False).date()


def _datetime6(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.04:
        return "0000-00-00 00:00:00"
    if r < 0.06:
        return "2024-00-00 10:00:00.5"
    return _datetime(rng, dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59))


def _timestamp6(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.04:
        return "0000-00-00 00:00:00"  # TIMESTAMP's zero value
    if r < 0.06:
        return rng.choice((dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7, 999999)))
    return _datetime(rng, dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7))


def _time(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.05:
        return "-838:59:59"
    if r < 0.1:
        return "838:59:59"
    if r < 0.15:
        return "-00:00:01.250000"
    secs = rng.randint(0, 838 * 3600 + 59 * 60 + 58)
    sign = "-" if rng.random() < 0.3 else ""
    return f"{sign}{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}.{rng.randint(0, 999_999):06d}"


def _json(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice([None, True, False, rng.randint(-(2**53), 2**53), rng.random(), _text(rng, 12)])
    if r < 0.65:
        return {_text(rng, 6, min_len=1): _json(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]


# name -> (DDL type, generator). Every captured type of the type map, with its edge values.
KINDS: dict[str, tuple[str, Callable[[random.Random], Any]]] = {
    "i8": ("TINYINT", lambda r: _int(r, -128, 127)),
    "u8": ("TINYINT UNSIGNED", lambda r: _int(r, 0, 255)),
    "i16": ("SMALLINT", lambda r: _int(r, -32768, 32767)),
    "u16": ("SMALLINT UNSIGNED", lambda r: _int(r, 0, 65535)),
    "i24": ("MEDIUMINT", lambda r: _int(r, -8388608, 8388607)),
    "u24": ("MEDIUMINT UNSIGNED", lambda r: _int(r, 0, 16777215)),
    "i32": ("INT", lambda r: _int(r, -(2**31), 2**31 - 1)),
    "u32": ("INT UNSIGNED", lambda r: _int(r, 0, 2**32 - 1)),
    "i64": ("BIGINT", lambda r: _int(r, -(2**63), 2**63 - 1)),
    "u64": ("BIGINT UNSIGNED", lambda r: _int(r, 0, U64_MAX)),
    "dec": ("DECIMAL(18,4)", lambda r: _decimal(r, 18, 4)),
    "dec0": ("DECIMAL(10,0)", lambda r: _decimal(r, 10, 0)),
    "decw": ("DECIMAL(50,10)", lambda r: _decimal(r, 50, 10)),
    # Exactly representable in 4 bytes (21-bit mantissa), so the value is unambiguous.
    "flt": ("FLOAT", lambda r: r.randint(-(2**20), 2**20) / 2 ** r.randint(0, 10)),
    "dbl": ("DOUBLE",
            lambda r: r.choice((r.uniform(-1e15, 1e15), 1e-300, -2.5e307, 0.1 + 0.2, r.random(), -0.0, 5e-324))),
    "date": ("DATE", _date),
    "dt6": ("DATETIME(6)", _datetime6),
    "ts6": ("TIMESTAMP(6) NULL DEFAULT NULL", _timestamp6),
    "time6": ("TIME(6)", _time),
    "year": ("YEAR", lambda r: r.choice((1901, 2155, 0, r.randint(1901, 2155)))),
    "vc": ("VARCHAR(64) CHARACTER SET utf8mb4", lambda r: _text(r, 64)),
    "ch": ("CHAR(8) CHARACTER SET utf8mb4", lambda r: _text(r, 8)),
    "txt": ("TEXT CHARACTER SET utf8mb4", lambda r: _text(r, r.choice((20, 300, 3000)))),
    "blob": ("BLOB", lambda r: _bytes(r, r.choice((8, 200, 2000)))),
    "vbin": ("VARBINARY(16)", lambda r: _bytes(r, 16)),
    "bin": ("BINARY(6)", lambda r: _bytes(r, 6)),
    "json": ("JSON", lambda r: json.dumps(_json(r), ensure_ascii=r.random() < 0.5)),
    # 0 is the invalid value '' (ENUM index 0; the sessions run without strict mode).
    "enum": ("ENUM(" + ",".join(f"'{x}'" for x in ENUM_LABELS) + ")",
             lambda r: 0 if r.random() < 0.05 else r.choice(ENUM_LABELS)),
    # Any subset, the empty set included, labels in any order (MariaDB stores definition order).
    "set": ("SET(" + ",".join(f"'{x}'" for x in SET_LABELS) + ")",
            lambda r: ",".join(r.sample(SET_LABELS, r.randint(0, len(SET_LABELS))))),
    # MariaDB's latin1 is cp1252 with the C1 controls in its five holes.
    "lat": ("VARCHAR(12) CHARACTER SET latin1", lambda r: _text(r, 12, palette=LATIN1_PALETTE)),
    "bit": ("BIT(10)", lambda r: _int(r, 0, 1023)),
    "bit64": ("BIT(64)", lambda r: _int(r, 0, U64_MAX)),
}
ADDABLE = ("i32", "u64", "dec", "dbl", "dt6", "vc", "txt", "blob", "json", "enum", "bit", "time6", "flt", "set",
           "date", "lat")


# ------------------------------------------------------------------------------------------ tables


@dataclass(frozen=True)
class Col:
    name: str
    kind: str  # key of KINDS
    nullable: bool = True

    def ddl(self) -> str:
        return f"`{self.name}` {KINDS[self.kind][0]}{'' if self.nullable else ' NOT NULL'}"


@dataclass
class TableModel:
    """What the generator knows about one table: its columns and which keys exist (not the values)."""

    name: str
    key: tuple[Col, ...]
    cols: list[Col]  # non-key columns, current
    key_gen: Callable[[random.Random, TableModel], tuple[Any, ...]]
    live: dict[tuple[Any, ...], None] = field(default_factory=dict)  # insertion-ordered: deterministic
    dead: list[tuple[Any, ...]] = field(default_factory=list)
    next_id: int = 1
    added: int = 0
    droppable: list[str] = field(default_factory=list)
    int_key: bool = False  # a single integer key: range statements allowed

    def create_sql(self) -> str:
        cols = [c.ddl() for c in (*self.key, *self.cols)]
        pk = ", ".join(f"`{c.name}`" for c in self.key)
        return (
            f"CREATE TABLE `{self.name}` ({', '.join(cols)}, PRIMARY KEY ({pk})) "
            "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        )

    def where(self, key: tuple[Any, ...]) -> tuple[str, list[Any]]:
        return " AND ".join(f"`{c.name}` = %s" for c in self.key), list(key)


def _seq_key(rng: random.Random, t: TableModel) -> tuple[Any, ...]:
    t.next_id += rng.choice((1, 1, 1, 2, 7))
    return (t.next_id,)


def _order_key(rng: random.Random, t: TableModel) -> tuple[Any, ...]:
    t.next_id += 1
    region = rng.choice(("eu", "us", "apac", "ü-nord", "😀x"))
    order_no = rng.choice((t.next_id, U64_MAX - t.next_id, 2**63 + t.next_id))
    return (region, order_no, rng.randint(1, 32767))


def _event_key(rng: random.Random, t: TableModel) -> tuple[Any, ...]:
    t.next_id += 1
    day = dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 3000))
    return (day, t.next_id)


def make_tables() -> list[TableModel]:
    kinds_cols = [
        Col(k, k) for k in ("i8", "u8", "i16", "u16", "i24", "u24", "i32", "u32", "i64", "u64", "dec", "dec0", "decw",
                            "flt", "dbl", "date", "dt6", "ts6", "time6", "year", "vc", "ch", "txt", "blob", "vbin",
                            "bin", "json", "enum", "set", "bit", "bit64", "lat")
    ]
    return [
        TableModel("kinds", (Col("id", "i64", False),), kinds_cols, _seq_key, int_key=True,
                   droppable=["i24", "ch", "year"]),
        TableModel(
            "orders",
            (Col("region", "vc", False), Col("order_no", "u64", False), Col("line", "i16", False)),
            [Col("amount", "dec"), Col("status", "enum", False), Col("note", "vc"), Col("updated", "dt6"),
             Col("flags", "set")],
            _order_key,
            droppable=["note"],
        ),
        TableModel(
            "events",
            (Col("day", "date", False), Col("n", "u32", False)),
            [Col("payload", "blob"), Col("doc", "json"), Col("body", "txt"), Col("at", "ts6"), Col("dur", "time6"),
             Col("score", "flt"), Col("bits", "bit")],
            _event_key,
            droppable=["body"],
        ),
    ]


# ------------------------------------------------------------------------------------- the history


@dataclass(frozen=True)
class Stmt:
    table: str
    sql: str
    params: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Txn:
    """One committed transaction (or DDL statement): MariaDB's GTID sequence number and its statements."""

    gtid_seq: int
    statements: tuple[Stmt, ...]
    ddl: bool = False
    rows: int = 0  # rows the statements changed (the server's counts)
    committed_at: float = 0.0


@dataclass
class Stats:
    transactions: int = 0
    rolled_back: int = 0
    savepoint_rollbacks: int = 0
    rotations: int = 0
    ddl: int = 0
    rows: int = 0
    largest_txn_rows: int = 0
    pk_changes: int = 0
    reinserts: int = 0


# --------------------------------------------------------------------------------------- generator


class Workload:
    """Writes seeded transactions into `database` and records them (see the module docstring)."""

    def __init__(self, seed: int, database: str, *, big_txn_rows: tuple[int, int] = (1000, 3000),
                 ddl_every: int = 25, rotate_every: int = 15):
        self.seed = seed
        self.database = database
        self.rng = random.Random(seed)
        self.tables = make_tables()
        self.history: list[Txn] = []
        self.stats = Stats()
        self.big_txn_rows = big_txn_rows
        self.ddl_every = ddl_every
        self.rotate_every = rotate_every
        self._only = self.tables

    def table(self, name: str) -> TableModel:
        return next(t for t in self.tables if t.name == name)

    @property
    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]

    # ------------------------------------------------------------------------------------ schema

    def create(self, conn: Any) -> None:
        """Create the tables (DDL; recorded in the history so the shadow replays it too)."""
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(SQL_MODE)
            for t in self.tables:
                self._ddl(cur, t.name, t.create_sql())

    # ---------------------------------------------------------------------------------- running

    def run(self, conn: Any, transactions: int, tables: tuple[str, ...] | None = None) -> list[Txn]:
        """Write `transactions` more units of work (transactions, rollbacks, DDL), to `tables` only if given;
        returns the committed ones."""
        start = len(self.history)
        self._only = [t for t in self.tables if tables is None or t.name in tables]
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(SQL_MODE)
            for _ in range(transactions):
                self._one(conn, cur)
        return self.history[start:]

    def _one(self, conn: Any, cur: Any) -> None:
        rng = self.rng
        if rng.random() < 1 / self.rotate_every:
            cur.execute("FLUSH BINARY LOGS")
            self.stats.rotations += 1
        if rng.random() < 1 / self.ddl_every:
            self._schema_change(cur)
            return
        r = rng.random()
        if r < 0.05:
            self._transaction(conn, cur, rollback=True)
        elif r < 0.08:
            self._transaction(conn, cur, savepoint=True)
        elif r < 0.11:
            self._transaction(conn, cur, big=True)
        else:
            self._transaction(conn, cur)

    def _ddl(self, cur: Any, table: str, sql: str) -> None:
        cur.execute(f"USE `{self.database}`")
        cur.execute(sql)
        cur.execute("SELECT @@last_gtid")
        seq = int(str(cur.fetchone()[0]).rsplit("-", 1)[1])
        self.history.append(Txn(seq, (Stmt(table, sql),), ddl=True))
        self.stats.ddl += 1

    def _schema_change(self, cur: Any) -> None:
        rng = self.rng
        t = rng.choice(self._only)
        if t.droppable and rng.random() < 0.4:
            name = t.droppable.pop(rng.randrange(len(t.droppable)))
            t.cols = [c for c in t.cols if c.name != name]
            self._ddl(cur, t.name, f"ALTER TABLE `{t.name}` DROP COLUMN `{name}`")
            return
        t.added += 1
        col = Col(f"add{t.added}_{rng.choice(ADDABLE)}", "")
        col = Col(col.name, col.name.split("_", 1)[1])
        where = ""
        if t.cols and rng.random() < 0.3:
            where = f" AFTER `{rng.choice(t.cols).name}`"  # not at the end: positions shift
        t.cols.append(col)
        t.droppable.append(col.name)
        self._ddl(cur, t.name, f"ALTER TABLE `{t.name}` ADD COLUMN {col.ddl()}{where}")

    # ----------------------------------------------------------------------------- transactions

    def _snapshot(self) -> list[tuple[dict[Any, None], list[Any], int]]:
        return [(dict(t.live), list(t.dead), t.next_id) for t in self.tables]

    def _restore(self, snap: list[tuple[dict[Any, None], list[Any], int]]) -> None:
        for t, (live, dead, next_id) in zip(self.tables, snap, strict=True):
            # next_id is NOT restored: a rolled-back insert's key stays unused, like an AUTO_INCREMENT gap
            t.live, t.dead = live, dead
            t.next_id = max(t.next_id, next_id)

    def _transaction(self, conn: Any, cur: Any, *, rollback: bool = False, savepoint: bool = False,
                     big: bool = False) -> None:
        rng = self.rng
        snap = self._snapshot()
        stmts: list[Stmt] = []
        rows = 0
        conn.begin()
        cur.execute(f"USE `{self.database}`")
        try:
            if big:
                t = rng.choice(self._only)
                n = rng.randint(*self.big_txn_rows)
                while n > 0:
                    k = min(n, 250)
                    rows += self._exec(cur, stmts, self._insert(t, k))
                    n -= k
                for _ in range(rng.randint(1, 5)):
                    rows += self._random_op(cur, stmts)
            else:
                for _ in range(rng.choice((1, 1, 1, 2, 3, 5, 8, 20))):
                    rows += self._random_op(cur, stmts)
            if savepoint:
                cur.execute("SAVEPOINT sp")
                before, before_rows, snap_sp = len(stmts), rows, self._snapshot()
                for _ in range(rng.randint(1, 5)):
                    rows += self._random_op(cur, stmts)
                cur.execute("ROLLBACK TO SAVEPOINT sp")
                del stmts[before:]
                rows = before_rows
                self._restore(snap_sp)
                self.stats.savepoint_rollbacks += 1
                rows += self._random_op(cur, stmts)
            if rollback:
                conn.rollback()
                self._restore(snap)
                self.stats.rolled_back += 1
                return
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        if not stmts:
            return
        cur.execute("SELECT @@last_gtid")
        seq = int(str(cur.fetchone()[0]).rsplit("-", 1)[1])
        if self.history and seq <= self.history[-1].gtid_seq:
            return  # nothing was logged (every statement matched no row)
        self.history.append(Txn(seq, tuple(stmts), rows=rows))
        self.stats.transactions += 1
        self.stats.rows += rows
        self.stats.largest_txn_rows = max(self.stats.largest_txn_rows, rows)

    def _exec(self, cur: Any, stmts: list[Stmt], stmt: Stmt | None) -> int:
        if stmt is None:
            return 0
        n = cur.execute(stmt.sql, stmt.params)
        stmts.append(stmt)
        return int(n or 0)

    def _random_op(self, cur: Any, stmts: list[Stmt]) -> int:
        rng = self.rng
        t = rng.choice(self._only)
        r = rng.random()
        if r < 0.35 or len(t.live) < 3:
            return self._exec(cur, stmts, self._insert(t, rng.choice((1, 1, 2, 5, 20))))
        if r < 0.6:
            return self._exec(cur, stmts, self._update(t))
        if r < 0.7:
            return self._exec(cur, stmts, self._delete(t))
        if r < 0.78:
            self.stats.pk_changes += 1
            return self._exec(cur, stmts, self._pk_change(t))
        if r < 0.84:  # the same row twice in one transaction
            key = self._pick(t)
            n = self._exec(cur, stmts, self._update(t, key))
            return n + self._exec(cur, stmts, self._update(t, key))
        if r < 0.9:  # delete and re-insert one key in one transaction
            key = self._pick(t)
            n = self._exec(cur, stmts, self._delete(t, key))
            self.stats.reinserts += 1
            return n + self._exec(cur, stmts, self._insert(t, 1, keys=[key]))
        if t.int_key and r < 0.95:
            return self._exec(cur, stmts, self._range_update(t))
        if t.int_key:
            return self._exec(cur, stmts, self._range_delete(t))
        return self._exec(cur, stmts, self._update(t))

    def _pick(self, t: TableModel) -> tuple[Any, ...]:
        """A live key; dict order is insertion order, which only our own operations decide."""
        keys = list(t.live)
        return keys[self.rng.randrange(len(keys))]

    def _row(self, t: TableModel, key: tuple[Any, ...]) -> list[Any]:
        rng = self.rng
        vals = list(key)
        for c in t.cols:
            if c.nullable and rng.random() < 0.12:
                vals.append(None)
            else:
                vals.append(KINDS[c.kind][1](rng))
        return vals

    def _insert(self, t: TableModel, n: int, keys: list[tuple[Any, ...]] | None = None) -> Stmt:
        rng = self.rng
        if keys is None:
            keys = []
            for _ in range(n):
                if t.dead and rng.random() < 0.2:  # resurrect a key deleted earlier (tombstones!)
                    keys.append(t.dead.pop(rng.randrange(len(t.dead))))
                    self.stats.reinserts += 1
                else:
                    k = t.key_gen(rng, t)
                    while k in t.live:
                        k = t.key_gen(rng, t)
                    keys.append(k)
        else:
            for k in keys:
                if k in t.dead:
                    t.dead.remove(k)
        names = [c.name for c in (*t.key, *t.cols)]
        rows = [self._row(t, k) for k in keys]
        for k in keys:
            t.live[k] = None
        placeholders = ", ".join(["(" + ", ".join(["%s"] * len(names)) + ")"] * len(rows))
        sql = f"INSERT INTO `{t.name}` ({', '.join(f'`{n}`' for n in names)}) VALUES {placeholders}"
        return Stmt(t.name, sql, tuple(v for r in rows for v in r))

    def _update(self, t: TableModel, key: tuple[Any, ...] | None = None) -> Stmt | None:
        rng = self.rng
        if not t.cols or not t.live:
            return None
        if key is None:
            key = self._pick(t)
        cols = rng.sample(t.cols, rng.randint(1, min(4, len(t.cols))))
        sets, params = [], []
        for c in cols:
            sets.append(f"`{c.name}` = %s")
            params.append(None if c.nullable and rng.random() < 0.15 else KINDS[c.kind][1](rng))
        where, wparams = t.where(key)
        return Stmt(t.name, f"UPDATE `{t.name}` SET {', '.join(sets)} WHERE {where}", tuple(params + wparams))

    def _delete(self, t: TableModel, key: tuple[Any, ...] | None = None) -> Stmt | None:
        if not t.live:
            return None
        if key is None:
            key = self._pick(t)
        del t.live[key]
        t.dead.append(key)
        where, params = t.where(key)
        return Stmt(t.name, f"DELETE FROM `{t.name}` WHERE {where}", tuple(params))

    def _pk_change(self, t: TableModel) -> Stmt | None:
        rng = self.rng
        if not t.live:
            return None
        old = self._pick(t)
        new = t.key_gen(rng, t)
        while new in t.live:
            new = t.key_gen(rng, t)
        if len(t.key) > 1 and rng.random() < 0.5:  # change one part of a composite key
            i = rng.randrange(len(t.key))
            new = tuple(new[j] if j == i else old[j] for j in range(len(old)))
            if new in t.live:
                return None
        del t.live[old]
        t.dead.append(old)
        t.live[new] = None
        if new in t.dead:
            t.dead.remove(new)
        sets = ", ".join(f"`{c.name}` = %s" for c in t.key)
        where, wparams = t.where(old)
        return Stmt(t.name, f"UPDATE `{t.name}` SET {sets} WHERE {where}", (*new, *wparams))

    def _range(self, t: TableModel) -> tuple[int, int]:
        ids = sorted(k[0] for k in t.live)
        i = self.rng.randrange(len(ids))
        j = min(len(ids) - 1, i + self.rng.choice((2, 5, 30)))
        return ids[i], ids[j]

    def _range_update(self, t: TableModel) -> Stmt | None:
        if not t.cols or not t.live:
            return None
        lo, hi = self._range(t)
        c = self.rng.choice(t.cols)
        v = KINDS[c.kind][1](self.rng)
        return Stmt(t.name, f"UPDATE `{t.name}` SET `{c.name}` = %s WHERE `id` BETWEEN %s AND %s", (v, lo, hi))

    def _range_delete(self, t: TableModel) -> Stmt | None:
        if not t.live:
            return None
        lo, hi = self._range(t)
        gone = [k for k in t.live if lo <= k[0] <= hi]
        for k in gone:
            del t.live[k]
            t.dead.append(k)
        return Stmt(t.name, f"DELETE FROM `{t.name}` WHERE `id` BETWEEN %s AND %s", (lo, hi))


# ------------------------------------------------------------------------------------------- replay


class Shadow:
    """Replays the recorded history, table by table, into `<database>_sh` (binary logging off).

    `advance(table, gtid_seq)` applies every recorded statement of `table` from transactions with a
    GTID sequence number up to `gtid_seq` that were not applied yet. Tables only move forward.
    """

    def __init__(self, services: Any, workload: Workload):
        self.workload = workload
        self.database = f"{workload.database}_sh"
        self.at: dict[str, int] = {}
        self._next: dict[str, int] = {}  # index into the history of the next transaction to look at
        self.reconnect(services)
        with self.conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            cur.execute(f"CREATE DATABASE `{self.database}` CHARACTER SET utf8mb4")
            cur.execute(f"USE `{self.database}`")

    def reconnect(self, services: Any) -> None:
        """A new session (also after a server restart): binary logging off, UTC."""
        old = getattr(self, "conn", None)
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        self.conn = services.root_connect()
        with self.conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(SQL_MODE)
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database}` CHARACTER SET utf8mb4")
            cur.execute(f"USE `{self.database}`")

    def close(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
        self.conn.close()

    def advance(self, table: str, gtid_seq: int) -> None:
        if gtid_seq < self.at.get(table, -1):
            raise AssertionError(f"shadow of {table} cannot move back from GTID {self.at[table]} to {gtid_seq}")
        history = self.workload.history
        i = self._next.get(table, 0)
        with self.conn.cursor() as cur:
            while i < len(history) and history[i].gtid_seq <= gtid_seq:
                txn = history[i]
                mine = [s for s in txn.statements if s.table == table]
                if mine and not txn.ddl:
                    self.conn.begin()
                    for s in mine:
                        cur.execute(s.sql, s.params)
                    self.conn.commit()
                for s in mine if txn.ddl else ():
                    cur.execute(s.sql)
                i += 1
        self._next[table] = i
        self.at[table] = gtid_seq

    def exists(self, table: str) -> bool:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                (self.database, table),
            )
            return bool(cur.fetchone()[0])

    def row_count(self, table: str) -> int:
        if not self.exists(table):
            return 0
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{self.database}`.`{table}`")
            return int(cur.fetchone()[0])


def changed_between(workload: Workload, table: str, after: int, upto: int) -> list[int]:
    """GTID sequence numbers of committed row changes of `table` in (after, upto]."""
    return [
        t.gtid_seq for t in workload.history
        if after < t.gtid_seq <= upto and not t.ddl and any(s.table == table for s in t.statements)
    ]


def clone_model(workload: Workload) -> list[TableModel]:
    return copy.deepcopy(workload.tables)
