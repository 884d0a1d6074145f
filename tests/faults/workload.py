"""A seeded random workload against the source, and its exact replay (the fault suite's ground truth).

`Workload(seed, database)` creates a few tables covering the type map (signed and unsigned integers up
to BIGINT UNSIGNED, DECIMAL up to (50,10), FLOAT, DOUBLE, DATE, DATETIME(6), TIMESTAMP(6), TIME(6), YEAR,
CHAR/VARCHAR/TEXT in utf8mb4 with emoji, BLOB/VARBINARY/BINARY with 0x00 and 0xFF, JSON, ENUM, SET,
BIT, latin1 text, NULLs; and each type's empty, zero and edge values: empty strings and sets, trailing
spaces, zero and partial dates, TIMESTAMP's zero value, ENUM index 0, BINARY zero padding), with single
and composite keys, and then writes transactions of every shape: one row to thousands, inserts, updates of
a few columns, range updates and deletes, primary-key changes, deleting and re-inserting a key (also
inside one transaction), rolled-back transactions and partial rollbacks to a savepoint; between
transactions it rotates the binlog (FLUSH BINARY LOGS) and adds or drops columns. With `ddl=DDL_ALL` its
schema changes are of every kind the product follows (DDL_DECK, docs/schema-changes.md): columns added with
and without defaults, dropped, renamed, changed and widened; tables truncated, dropped, re-created, renamed,
created LIKE others, and migrated online as gh-ost and pt-online-schema-change do, the DML on the migrated
table mirrored into the ghost table in the same transaction.

Deterministic per seed: the same seed writes the same statements with the same values in the same
order (the generator's only state is its RNG and a model of which keys exist). Each committed
transaction is recorded (`Txn`: its MariaDB GTID sequence number and its statements with parameters),
so `Shadow` can replay any prefix of the history into a replica database with binary logging off: "what
the source table looked like right after GTID n", exactly, with the server's own types and conversions. The
oracle (tests/faults/oracle.py) compares the lake with that.

Every statement is deterministic (no NOW(), RAND(), LIMIT without ORDER BY), which is what makes the replay
exact; the replay is of the whole history in order, so statements over several tables (RENAME TABLE, CREATE
TABLE ... LIKE, a ghost table's INSERT ... SELECT) replay as the source ran them.
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
# Column redefinitions run strict, as the servers' default sql_mode has it: without a strict mode the server may
# convert values without row events, so the pipeline re-reads the table after any MODIFY / CHANGE
# (cdc_core.model.ddl.conversions), which the oracle's comparison at each window cannot follow (see DDL_DECK).
STRICT_SQL_MODE = "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'"
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
    # Wider kinds a MODIFY / CHANGE turns a column into (DDL_ALL).
    "decx": ("DECIMAL(24,6)", lambda r: _decimal(r, 24, 6)),
    "vcw": ("VARCHAR(128) CHARACTER SET utf8mb4", lambda r: _text(r, 128)),
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

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.key)

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


def make_tables(all_kinds: bool = False) -> list[TableModel]:
    """The fault suite's tables; `all_kinds` (DDL_ALL): also two small ones, t1 and t2, of a few columns."""
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
        *([
            TableModel("t1", (Col("id", "i64", False),),
                       [Col("n", "i32"), Col("amount", "dec"), Col("label", "vc"), Col("at", "dt6", False),
                        Col("state", "enum", False), Col("ratio", "flt")], _seq_key, int_key=True),
            TableModel("t2", (Col("id", "i64", False),),
                       [Col("u", "u32", False), Col("whole", "dec0"), Col("latin", "lat"), Col("day", "date"),
                        Col("body", "txt"), Col("tags", "set"), Col("bits", "bit"), Col("seen", "dt6")], _seq_key,
                       int_key=True),
        ] if all_kinds else []),
    ]


def make_simple(name: str, rng: random.Random) -> TableModel:
    """A new table of 2 to 5 random columns (DDL_ALL's CREATE TABLE: a re-created name takes another shape), one
    of them a DATETIME (NTZ_GUARD)."""
    kinds = rng.sample([k for k in SIMPLE_KINDS if k != "dt6"], rng.randint(1, 4))
    kinds.insert(rng.randint(0, len(kinds)), "dt6")
    cols = [Col(f"c{i}_{k}", k, rng.random() < 0.8) for i, k in enumerate(kinds)]
    return TableModel(name, (Col("id", "i64", False),), cols, _seq_key, int_key=True)


# ------------------------------------------------------------------------------------ schema changes

DDL_COLUMNS = "columns"  # ADD / DROP COLUMN between transactions, the tables fixed
DDL_ALL = "all"  # every kind of DDL the product follows (docs/schema-changes.md), dealt from DDL_DECK
# The kinds DDL_ALL deals (each names a Workload._ddl_<kind> method), once per shuffled deck. Left out on
# purpose: statements whose rows the lake re-reads from the source (partition operations, non-constant or
# TIMESTAMP defaults, JSON NOT NULL without a default, incompatible MODIFY): the oracle compares the lake
# with the source at each window, which a re-read in flight would not equal (docs/faults.md).
DDL_DECK = (
    "add_default_not_null", "add_default_nullable", "add_implicit_default", "add_nullable", "drop_column",
    "rename_column", "change_column", "modify_column", "truncate_table", "drop_table", "create_table",
    "rename_table", "create_table_like", "online_schema_change",
)
MIN_TABLES, MAX_TABLES = 2, 6  # live tables DDL_ALL keeps between
# Every DDL_ALL table keeps a DATETIME column (created with one, never dropping its last), so every lake table has
# Delta's timestampNtz feature from its creation: a DATETIME reaching a lake table without it by a schema change
# (a re-created or renamed-in table, DATE -> DATETIME) fails the window, a known bug
# (test_a_datetime_column_reaching_a_lake_table_without_one) that would stop every seed.
NTZ_GUARD = "dt6"
# A renamed column (named ren<N>) is never dropped or renamed again: rows staged before the rename, merged after
# both changes (the same window, a replay, a backfill), land in the lake under the rename's name, which comes
# back, a known bug (test_rows_older_than_a_column_renamed_then_dropped_or_renamed_again).
RENAMED = "ren"
SIMPLE_KINDS = ("i8", "i32", "u32", "u64", "dec", "dec0", "flt", "dbl", "date", "dt6", "time6", "vc", "ch", "txt",
                "blob", "vbin", "lat", "enum", "set", "bit", "json", "year")
# Kinds an ADD COLUMN gives the new column, per variant: with a constant DEFAULT (NOT NULL or nullable), NOT NULL
# without one (MySQL's implicit default: 0, '', the first ENUM label, the zero date), nullable without one.
_DEFAULTABLE = ("i8", "i32", "u32", "u64", "dec", "dec0", "flt", "dbl", "date", "dt6", "time6", "vc", "txt", "blob",
                "lat", "enum", "set", "bit")
ADD_KINDS = {"default_not_null": _DEFAULTABLE, "default_null": _DEFAULTABLE, "implicit": _DEFAULTABLE,
             "nullable": (*ADDABLE, "json")}
# MODIFY / CHANGE widenings the lake computes exactly (cdc_core.model.schema_evolution.exact_cast), or that keep
# the lake type (VARCHAR(64) -> (128), INT UNSIGNED -> BIGINT).
WIDEN = {"i8": ("i16", "i32"), "i16": ("i32", "i64"), "i24": ("i32",), "i32": ("i64", "dbl", "vcw"), "u8": ("u16",),
         "u16": ("u32",), "u32": ("u64", "i64"), "dec": ("decx",), "dec0": ("dec", "decx"), "flt": ("dbl",),
         "vc": ("vcw",), "date": ("dt6",)}


def default_literal(rng: random.Random, kind: str) -> str:
    """A constant DEFAULT for a column of `kind`, as SQL: quotes, backslash escapes, NUL, non-ASCII text."""
    from pymysql.converters import escape_string

    v: Any
    if kind == "date":
        v = "0000-00-00" if rng.random() < 0.1 else _datetime(rng, dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31),
                                                              False).date().isoformat()
    elif kind == "dt6":
        v = "0000-00-00 00:00:00" if rng.random() < 0.1 else _datetime(
            rng, dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59)).isoformat(sep=" ")
    elif kind == "time6":
        v = _time(rng)
    elif kind == "blob":
        v = "".join(rng.choice("abcXYZ019 _-") for _ in range(rng.randint(0, 12)))  # ASCII: else it is re-read
    elif kind in ("vc", "txt"):
        v = _text(rng, 24)
    elif kind == "lat":
        v = _text(rng, 12, palette=LATIN1_PALETTE)
    elif kind == "enum":
        v = rng.choice(ENUM_LABELS)
    elif kind == "set":
        v = ",".join(rng.sample(SET_LABELS, rng.randint(0, len(SET_LABELS))))
    else:
        n = KINDS[kind][1](rng)
        return format(n, "f") if isinstance(n, Decimal) else repr(n) if isinstance(n, float) else str(n)
    return "'" + escape_string(v) + "'"


@dataclass
class Migration:
    """An online schema change in progress (DDL_ALL), as gh-ost or pt-online-schema-change runs it."""

    tool: str  # "gh-ost" or "pt-osc"
    table: TableModel  # the table migrated (nothing else alters, renames or drops it meanwhile)
    ghost: str  # _t_gho (gh-ost) or _t_new (pt-osc)
    trash: str  # _t_del or _t_old: the old table after the swap, then dropped
    changelog: str | None  # gh-ost's _t_ghc
    column: Col  # what the migration adds: NOT NULL DEFAULT 5
    next_lo: int  # the next chunk's first id
    last: int  # the highest id when the copy started: copied up to there, later rows come mirrored
    chunk: int
    kind: str  # the DDL_DECK kind (counted at the swap)


# ------------------------------------------------------------------------------------- the history


@dataclass(frozen=True)
class Stmt:
    table: str
    sql: str
    params: tuple[Any, ...] = ()
    # The keys of the rows the statement may change (before and after), or the id range it covers: what an
    # online schema change in progress mirrors into its ghost table.
    keys: tuple[tuple[Any, ...], ...] = ()
    span: tuple[Any, Any] | None = None


@dataclass(frozen=True)
class Txn:
    """One committed transaction (or DDL statement): MariaDB's GTID sequence number and its statements."""

    gtid_seq: int
    statements: tuple[Stmt, ...]
    ddl: bool = False
    rows: int = 0  # rows the statements changed (the server's counts)
    committed_at: float = 0.0
    # DDL: the captured tables whose lake tables the statement changes (a rename: both names; an online schema
    # change's ghost DDL and swap: the real table). Row changes: the tables of the statements.
    touched: tuple[str, ...] = ()

    @property
    def tables(self) -> tuple[str, ...]:
        return self.touched if self.ddl else tuple(dict.fromkeys(s.table for s in self.statements))


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
    ddl_kinds: dict[str, int] = field(default_factory=dict)  # DDL_ALL: statements by kind (DDL_DECK)
    osc_chunks: int = 0  # rows copied into ghost tables by online schema changes, in chunks


# --------------------------------------------------------------------------------------- generator


class Workload:
    """Writes seeded transactions into `database` and records them (see the module docstring).

    `ddl`: which schema changes it makes between transactions: DDL_COLUMNS (ADD / DROP COLUMN, the tables
    fixed) or DDL_ALL (every kind the product follows, docs/schema-changes.md: tables truncated, dropped,
    re-created, renamed, created LIKE others, and migrated online as gh-ost and pt-online-schema-change do;
    see DDL_DECK). With DDL_ALL, `tables` names the tables it starts with; the tables live at any moment are
    `tables` (the list changes), every captured name it ever used `all_names`, the online schema-change tools'
    tables `osc_names`."""

    def __init__(self, seed: int, database: str, *, big_txn_rows: tuple[int, int] = (1000, 3000),
                 ddl_every: int = 25, rotate_every: int = 15, ddl: str = DDL_COLUMNS,
                 tables: tuple[str, ...] | None = None):
        if ddl not in (DDL_COLUMNS, DDL_ALL):
            raise ValueError(f"ddl must be {DDL_COLUMNS!r} or {DDL_ALL!r}, not {ddl!r}")
        self.seed = seed
        self.database = database
        self.rng = random.Random(seed)
        self.ddl = ddl
        self.tables = make_tables(all_kinds=ddl == DDL_ALL)
        if ddl == DDL_ALL and tables is not None:
            self.tables[:] = [t for t in self.tables if t.name in tables]
        self.all_names: list[str] = [t.name for t in self.tables]  # every captured table name ever used
        self.osc_names: list[str] = []  # ghost, trash and changelog tables of online schema changes
        self.gone: list[str] = []  # captured names that no table holds now (dropped, renamed away)
        self.migration: Migration | None = None
        self.history: list[Txn] = []
        self.stats = Stats()
        self.big_txn_rows = big_txn_rows
        self.ddl_every = ddl_every
        self.rotate_every = rotate_every
        self._only = self.tables
        self._deck: list[str] = []
        self._names = 0  # new table names: n1, n2, ...
        self._renamed = 0  # renamed columns: ren1, ren2, ...
        self._migrations = 0
        self._gone_keys: dict[str, tuple[str, ...]] = {}  # a gone name -> its last table's key columns

    def table(self, name: str) -> TableModel:
        return next(t for t in self.tables if t.name == name)

    @property
    def all_ddl(self) -> bool:
        return self.ddl == DDL_ALL

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
        """Write `transactions` more units of work (transactions, rollbacks, DDL), to `tables` only if given
        (DDL_COLUMNS; DDL_ALL writes to every live table); returns the committed ones."""
        start = len(self.history)
        if self.ddl == DDL_ALL:
            self._only = self.tables  # the live list itself: tables come and go while it runs
        else:
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
        if self.migration is not None and rng.random() < 0.35:
            self._osc_step(conn, cur)
            return
        if rng.random() < 1 / self.ddl_every:
            if self.ddl == DDL_ALL:
                self._schema_change_all(cur)
            else:
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

    def _ddl(self, cur: Any, table: str, sql: str, *, kind: str | None = None,
             touched: tuple[str, ...] | None = None) -> None:
        cur.execute(f"USE `{self.database}`")
        redefines = " MODIFY COLUMN " in sql or " CHANGE COLUMN " in sql
        if redefines:
            cur.execute(STRICT_SQL_MODE)
        try:
            cur.execute(sql)
        finally:
            if redefines:
                cur.execute(SQL_MODE)
        cur.execute("SELECT @@last_gtid")
        seq = int(str(cur.fetchone()[0]).rsplit("-", 1)[1])
        self.history.append(Txn(seq, (Stmt(table, sql),), ddl=True, touched=(table,) if touched is None else touched))
        self.stats.ddl += 1
        if kind is not None:
            self.stats.ddl_kinds[kind] = self.stats.ddl_kinds.get(kind, 0) + 1

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

    # ------------------------------------------------------------------- every kind of DDL (DDL_ALL)

    def _schema_change_all(self, cur: Any) -> None:
        """One schema change, its kind dealt from a shuffled deck of DDL_DECK (every kind once per deck, so a
        few dozen statements cover them all); a kind that does not apply now (no table to drop, a migration
        already running) passes to the next card."""
        for _ in range(2 * len(DDL_DECK)):
            if not self._deck:
                self._deck = list(DDL_DECK)
                self.rng.shuffle(self._deck)
            kind = self._deck.pop()
            if getattr(self, f"_ddl_{kind}")(cur, kind):
                return

    def _alterable(self) -> list[TableModel]:
        """Live tables a schema change may act on: not the one an online schema change is migrating."""
        busy = self.migration.table if self.migration is not None else None
        return [t for t in self.tables if t is not busy]

    def _new_name(self, key: tuple[str, ...]) -> str:
        """A name for a table keyed by `key`: one no table holds now (dropped or renamed away: re-used, so it
        starts clean; its last table may have had other key columns), or a new one."""
        free = [n for n in self.gone if n not in self.table_names]
        if free and self.rng.random() < 0.6:
            return self.rng.choice(free)
        self._names += 1
        name = f"n{self._names}"
        self.all_names.append(name)
        return name

    def _took(self, name: str) -> None:
        if name in self.gone:
            self.gone.remove(name)

    def _left(self, name: str, key: tuple[str, ...]) -> None:
        self._gone_keys[name] = key
        if name not in self.gone:
            self.gone.append(name)

    def _add_column(self, cur: Any, kind_label: str, variant: str) -> bool:
        rng = self.rng
        tables = self._alterable()
        if not tables:
            return False
        t = rng.choice(tables)
        kind = rng.choice(ADD_KINDS[variant])
        t.added += 1
        sql_type = KINDS[kind][0]
        if variant == "default_not_null":
            lit = default_literal(rng, kind)
            col, spec = Col(f"add{t.added}_{kind}", kind, False), f"{sql_type} NOT NULL DEFAULT {lit}"
        elif variant == "default_null":
            lit = "NULL" if rng.random() < 0.15 else default_literal(rng, kind)
            col, spec = Col(f"add{t.added}_{kind}", kind), f"{sql_type} NULL DEFAULT {lit}"
        elif variant == "implicit":
            col, spec = Col(f"add{t.added}_{kind}", kind, False), f"{sql_type} NOT NULL"
        else:
            col, spec = Col(f"add{t.added}_{kind}", kind), f"{sql_type} NULL"
        r = rng.random()
        where = f" AFTER `{rng.choice(t.cols).name}`" if t.cols and r < 0.25 else " FIRST" if r < 0.3 else ""
        t.cols.append(col)
        self._ddl(cur, t.name, f"ALTER TABLE `{t.name}` ADD COLUMN `{col.name}` {spec}{where}", kind=kind_label)
        return True

    def _ddl_add_default_not_null(self, cur: Any, kind: str) -> bool:
        return self._add_column(cur, kind, "default_not_null")

    def _ddl_add_default_nullable(self, cur: Any, kind: str) -> bool:
        return self._add_column(cur, kind, "default_null")

    def _ddl_add_implicit_default(self, cur: Any, kind: str) -> bool:
        return self._add_column(cur, kind, "implicit")

    def _ddl_add_nullable(self, cur: Any, kind: str) -> bool:
        return self._add_column(cur, kind, "nullable")

    def _column_of(self, widenable: bool = False) -> tuple[TableModel, Col] | None:
        """A column to widen, or (`widenable` False) to rename: never one renamed before (RENAMED)."""
        rng = self.rng

        def fits(c: Col) -> bool:
            return c.kind in WIDEN if widenable else not c.name.startswith(RENAMED)

        tables = [t for t in self._alterable() if any(fits(c) for c in t.cols)]
        if not tables:
            return None
        t = rng.choice(tables)
        return t, rng.choice([c for c in t.cols if fits(c)])

    def _ddl_drop_column(self, cur: Any, kind: str) -> bool:
        def droppable(t: TableModel) -> list[Col]:
            guards = [c for c in t.cols if c.kind == NTZ_GUARD]
            return [c for c in t.cols if (c.kind != NTZ_GUARD or len(guards) > 1) and not c.name.startswith(RENAMED)
                    ] if len(t.cols) > 1 else []

        tables = [t for t in self._alterable() if droppable(t)]
        if not tables:
            return False
        t = self.rng.choice(tables)
        c = self.rng.choice(droppable(t))
        t.cols = [x for x in t.cols if x is not c]
        self._ddl(cur, t.name, f"ALTER TABLE `{t.name}` DROP COLUMN `{c.name}`", kind=kind)
        return True

    def _ddl_rename_column(self, cur: Any, kind: str) -> bool:
        found = self._column_of()
        if found is None:
            return False
        t, c = found
        self._renamed += 1
        new = Col(f"{RENAMED}{self._renamed}", c.kind, c.nullable)
        t.cols = [new if x is c else x for x in t.cols]
        self._ddl(cur, t.name, f"ALTER TABLE `{t.name}` RENAME COLUMN `{c.name}` TO `{new.name}`", kind=kind)
        return True

    def _ddl_change_column(self, cur: Any, kind: str) -> bool:
        """CHANGE: a rename, and a widening when the column's type has one."""
        found = self._column_of()
        if found is None:
            return False
        t, c = found
        self._renamed += 1
        wider = self.rng.choice(WIDEN[c.kind]) if c.kind in WIDEN and self.rng.random() < 0.7 else c.kind
        new = Col(f"{RENAMED}{self._renamed}", wider, c.nullable)
        t.cols = [new if x is c else x for x in t.cols]
        self._ddl(cur, t.name, f"ALTER TABLE `{t.name}` CHANGE COLUMN `{c.name}` {new.ddl()}", kind=kind)
        return True

    def _ddl_modify_column(self, cur: Any, kind: str) -> bool:
        """MODIFY to a wider type (INT -> BIGINT, DECIMAL(18,4) -> (24,6), VARCHAR(64) -> (128), ...)."""
        found = self._column_of(widenable=True)
        if found is None:
            return False
        t, c = found
        new = Col(c.name, self.rng.choice(WIDEN[c.kind]), c.nullable)
        t.cols = [new if x is c else x for x in t.cols]
        self._ddl(cur, t.name, f"ALTER TABLE `{t.name}` MODIFY COLUMN {new.ddl()}", kind=kind)
        return True

    def _ddl_truncate_table(self, cur: Any, kind: str) -> bool:
        tables = self._alterable()
        if not tables:
            return False
        t = self.rng.choice(tables)
        t.dead.extend(t.live)
        t.live = {}
        self._ddl(cur, t.name, f"TRUNCATE TABLE `{t.name}`", kind=kind)
        return True

    def _ddl_drop_table(self, cur: Any, kind: str) -> bool:
        tables = self._alterable()
        if len(self.tables) <= MIN_TABLES or not tables:
            return False
        t = self.rng.choice(tables)
        self.tables.remove(t)
        self._left(t.name, t.key_names)
        self._ddl(cur, t.name, f"DROP TABLE `{t.name}`", kind=kind)
        return True

    def _ddl_create_table(self, cur: Any, kind: str) -> bool:
        """A new table, often under a name a dropped or renamed-away table had (of another shape)."""
        if len(self.tables) >= MAX_TABLES:
            return False
        name = self._new_name(("id",))
        t = make_simple(name, self.rng)
        self._took(name)
        self.tables.append(t)
        self._ddl(cur, name, t.create_sql(), kind=kind)
        return True

    def _ddl_create_table_like(self, cur: Any, kind: str) -> bool:
        tables = self._alterable()
        if len(self.tables) >= MAX_TABLES or not tables:
            return False
        src = self.rng.choice(tables)
        # Always a new name (LIKE under a gone table's name is a regression of test_fault_schema_changes.py); a new
        # name here keeps the seeds' draws as they were.
        self._names += 1
        name = f"n{self._names}"
        self.all_names.append(name)
        t = TableModel(name, src.key, list(src.cols), src.key_gen, next_id=src.next_id, added=src.added,
                       int_key=src.int_key)
        self._took(name)
        self.tables.append(t)
        self._ddl(cur, name, f"CREATE TABLE `{name}` LIKE `{src.name}`", kind=kind)
        return True

    def _ddl_rename_table(self, cur: Any, kind: str) -> bool:
        """RENAME TABLE a TO b (b new, or a name a dropped table had); sometimes two pairs in one statement, or a
        swap of two tables through a third captured name."""
        rng = self.rng
        tables = self._alterable()
        if not tables:
            return False
        r = rng.random()
        same_key = [(a, b) for a in tables for b in tables if a is not b and a.key_names == b.key_names]
        if r < 0.2 and same_key:  # a swap: a -> tmp, b -> a, tmp -> b
            a, b = rng.choice(same_key)
            self._names += 1
            tmp = f"n{self._names}"
            self.all_names.append(tmp)
            self._left(tmp, a.key_names)
            sql = f"RENAME TABLE `{a.name}` TO `{tmp}`, `{b.name}` TO `{a.name}`, `{tmp}` TO `{b.name}`"
            a.name, b.name = b.name, a.name
            self._ddl(cur, a.name, sql, kind=kind, touched=(a.name, b.name, tmp))
            return True
        pairs = [rng.choice(tables)]
        if r < 0.35 and len(tables) >= 2:
            pairs = rng.sample(tables, 2)
        renames = []
        for t in pairs:
            new = self._new_name(t.key_names)
            while new in self.table_names or any(new == n for _, n in renames):
                self._names += 1
                new = f"n{self._names}"
                self.all_names.append(new)
            renames.append((t.name, new))
            self._left(t.name, t.key_names)
            self._took(new)
            t.name = new
        sql = "RENAME TABLE " + ", ".join(f"`{a}` TO `{b}`" for a, b in renames)
        self._ddl(cur, renames[0][1], sql, kind=kind, touched=tuple(n for pair in renames for n in pair))
        return True

    def _ddl_online_schema_change(self, cur: Any, kind: str) -> bool:
        """Start migrating a table as gh-ost or pt-online-schema-change does: a ghost table LIKE it with the new
        column; the rows are copied in chunks later (`_osc_step`) while every change to the table is mirrored
        into the ghost (`_exec`), then the tables are swapped."""
        rng = self.rng
        tables = [t for t in self.tables if t.int_key]
        if self.migration is not None or not tables:
            return False
        t = rng.choice(tables)
        tool = rng.choice(("gh-ost", "pt-osc"))
        ghost, trash = (
            (f"_{t.name}_gho", f"_{t.name}_del") if tool == "gh-ost" else (f"_{t.name}_new", f"_{t.name}_old")
        )
        changelog = f"_{t.name}_ghc" if tool == "gh-ost" else None
        self._migrations += 1
        col = Col(f"extra{self._migrations}", "i32", False)
        for n in (ghost, trash, changelog):
            if n is not None and n not in self.osc_names:
                self.osc_names.append(n)
        if changelog is not None:
            self._ddl(cur, changelog, f"CREATE TABLE `{changelog}` (`id` BIGINT NOT NULL PRIMARY KEY, "
                                      "`hint` VARCHAR(64), `value` VARCHAR(255))", touched=())
        self._ddl(cur, ghost, f"CREATE TABLE `{ghost}` LIKE `{t.name}`", touched=(t.name,))
        self._ddl(cur, ghost, f"ALTER TABLE `{ghost}` ADD COLUMN `{col.name}` INT NOT NULL DEFAULT 5",
                  touched=(t.name,))
        last = max((k[0] for k in t.live), default=0)
        self.migration = Migration(tool, t, ghost, trash, changelog, col, next_lo=0, last=last,
                                   chunk=max(1, (last + 3) // rng.choice((2, 3, 4))), kind=kind)
        return True

    def _osc_step(self, conn: Any, cur: Any) -> None:
        """The migration's next chunk copied into the ghost table, or, once every chunk is, the swap."""
        m = self.migration
        assert m is not None
        t = m.table
        if m.next_lo > m.last:
            self._ddl(cur, t.name, f"RENAME TABLE `{t.name}` TO `{m.trash}`, `{m.ghost}` TO `{t.name}`", kind=m.kind,
                      touched=(t.name,))
            self._ddl(cur, m.trash, f"DROP TABLE `{m.trash}`", touched=())
            if m.changelog is not None:
                self._ddl(cur, m.changelog, f"DROP TABLE `{m.changelog}`", touched=())
            t.cols.append(m.column)
            self.migration = None
            return
        lo, hi = m.next_lo, m.next_lo + m.chunk - 1
        m.next_lo = hi + 1
        cols = ", ".join(f"`{c.name}`" for c in (*t.key, *t.cols))
        stmts = [Stmt(m.ghost, f"INSERT IGNORE INTO `{m.ghost}` ({cols}) SELECT {cols} FROM `{t.name}` "
                               "WHERE `id` BETWEEN %s AND %s", (lo, hi))]
        if m.changelog is not None:
            stmts.append(Stmt(m.changelog, f"REPLACE INTO `{m.changelog}` VALUES (1, 'copy', %s)", (f"{lo}-{hi}",)))
        conn.begin()
        cur.execute(f"USE `{self.database}`")
        rows = 0
        try:
            for st in stmts:
                rows += int(cur.execute(st.sql, st.params) or 0)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        self.stats.osc_chunks += rows
        self._logged(cur, stmts, rows)

    def _mirror(self, stmt: Stmt) -> list[Stmt]:
        """What the online schema-change tool does in the ghost table when `stmt` changes the table it migrates
        (pt-online-schema-change's triggers, gh-ost's binlog applier): the rows of the keys the statement touched
        are replaced by the table's, in the same transaction."""
        m = self.migration
        if m is None or stmt.table != m.table.name:
            return []
        t = m.table
        if stmt.span is not None:
            where, params = "`id` BETWEEN %s AND %s", tuple(stmt.span)
        else:
            ids = sorted({k[0] for k in stmt.keys})
            if not ids:
                return []
            where, params = f"`id` IN ({', '.join(['%s'] * len(ids))})", tuple(ids)
        cols = ", ".join(f"`{c.name}`" for c in (*t.key, *t.cols))
        return [
            Stmt(m.ghost, f"DELETE FROM `{m.ghost}` WHERE {where}", params),
            Stmt(m.ghost, f"INSERT INTO `{m.ghost}` ({cols}) SELECT {cols} FROM `{t.name}` WHERE {where}", params),
        ]

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
        if self._logged(cur, stmts, rows):
            self.stats.transactions += 1
            self.stats.rows += rows
            self.stats.largest_txn_rows = max(self.stats.largest_txn_rows, rows)

    def _logged(self, cur: Any, stmts: list[Stmt], rows: int) -> bool:
        """Record the committed transaction, unless nothing was logged (every statement matched no row)."""
        cur.execute("SELECT @@last_gtid")
        seq = int(str(cur.fetchone()[0]).rsplit("-", 1)[1])
        if self.history and seq <= self.history[-1].gtid_seq:
            return False
        self.history.append(Txn(seq, tuple(stmts), rows=rows))
        return True

    def _exec(self, cur: Any, stmts: list[Stmt], stmt: Stmt | None) -> int:
        if stmt is None:
            return 0
        n = cur.execute(stmt.sql, stmt.params)
        stmts.append(stmt)
        for mirror in self._mirror(stmt):
            cur.execute(mirror.sql, mirror.params)
            stmts.append(mirror)
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
        return Stmt(t.name, sql, tuple(v for r in rows for v in r), keys=tuple(keys))

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
        return Stmt(t.name, f"UPDATE `{t.name}` SET {', '.join(sets)} WHERE {where}", tuple(params + wparams),
                    keys=(key,))

    def _delete(self, t: TableModel, key: tuple[Any, ...] | None = None) -> Stmt | None:
        if not t.live:
            return None
        if key is None:
            key = self._pick(t)
        del t.live[key]
        t.dead.append(key)
        where, params = t.where(key)
        return Stmt(t.name, f"DELETE FROM `{t.name}` WHERE {where}", tuple(params), keys=(key,))

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
        return Stmt(t.name, f"UPDATE `{t.name}` SET {sets} WHERE {where}", (*new, *wparams), keys=(old, new))

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
        return Stmt(t.name, f"UPDATE `{t.name}` SET `{c.name}` = %s WHERE `id` BETWEEN %s AND %s", (v, lo, hi),
                    span=(lo, hi))

    def _range_delete(self, t: TableModel) -> Stmt | None:
        if not t.live:
            return None
        lo, hi = self._range(t)
        gone = [k for k in t.live if lo <= k[0] <= hi]
        for k in gone:
            del t.live[k]
            t.dead.append(k)
        return Stmt(t.name, f"DELETE FROM `{t.name}` WHERE `id` BETWEEN %s AND %s", (lo, hi), span=(lo, hi))


# ------------------------------------------------------------------------------------------- replay


@dataclass
class _Replica:
    database: str
    point: int = -1  # every recorded transaction with a GTID sequence number up to this one is applied
    next: int = 0  # index into the history of the next transaction to apply


class Shadow:
    """Replicas of the source at chosen points of the recorded history: databases `<database>_sh<N>` (binary
    logging off) into which the history is replayed, whole and in order, so that statements over several
    tables (RENAME TABLE, CREATE TABLE ... LIKE, INSERT ... SELECT) replay as the source ran them.

    `advance(table, gtid_seq)` returns the name of a replica standing exactly after GTID `gtid_seq` ("the source
    right after transaction n"), for comparing `table` there: the replica furthest along but not past that point,
    moved forward, or a new one replayed from the start. Each table's points only move forward; the oracle
    needs two at a time (the cursor's window and the window in flight), so replicas are rarely rebuilt.
    """

    MAX_REPLICAS = 3

    def __init__(self, services: Any, workload: Workload):
        self.workload = workload
        self.database = f"{workload.database}_sh"  # the replicas' name prefix
        self.at: dict[str, int] = {}
        self._replicas: list[_Replica] = []
        self._made = 0
        self.reconnect(services)

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

    def close(self) -> None:
        with self.conn.cursor() as cur:
            for r in self._replicas:
                cur.execute(f"DROP DATABASE IF EXISTS `{r.database}`")
        self.conn.close()

    def _new_replica(self) -> _Replica:
        if len(self._replicas) >= self.MAX_REPLICAS:
            gone = min(self._replicas, key=lambda r: r.point)
            self._replicas.remove(gone)
            with self.conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{gone.database}`")
        self._made += 1
        replica = _Replica(f"{self.database}{self._made}")
        with self.conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{replica.database}`")
            cur.execute(f"CREATE DATABASE `{replica.database}` CHARACTER SET utf8mb4")
        self._replicas.append(replica)
        return replica

    def advance(self, table: str, gtid_seq: int) -> str:
        """The database of a replica right after GTID `gtid_seq`, for comparing `table` (see the class)."""
        if gtid_seq < self.at.get(table, -1):
            raise AssertionError(f"shadow of {table} cannot move back from GTID {self.at[table]} to {gtid_seq}")
        usable = [r for r in self._replicas if r.point <= gtid_seq]
        replica = max(usable, key=lambda r: r.point) if usable else self._new_replica()
        history = self.workload.history
        i = replica.next
        with self.conn.cursor() as cur:
            cur.execute(f"USE `{replica.database}`")
            while i < len(history) and history[i].gtid_seq <= gtid_seq:
                txn = history[i]
                if txn.ddl:
                    for s in txn.statements:
                        cur.execute(s.sql)
                else:
                    self.conn.begin()
                    for s in txn.statements:
                        cur.execute(s.sql, s.params)
                    self.conn.commit()
                i += 1
        replica.next = i
        replica.point = gtid_seq
        self.at[table] = gtid_seq
        return replica.database

    def exists(self, table: str, database: str) -> bool:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                (database, table),
            )
            return bool(cur.fetchone()[0])

    def row_count(self, table: str, database: str) -> int:
        if not self.exists(table, database):
            return 0
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{database}`.`{table}`")
            return int(cur.fetchone()[0])


def changed_between(workload: Workload, table: str, after: int, upto: int, *, ddl: bool = False) -> list[int]:
    """GTID sequence numbers of committed row changes of `table` in (after, upto]; with `ddl`, also of the DDL
    statements that change its lake table (`Txn.touched`: a truncate, a rename from or to its name, ...)."""
    return [
        t.gtid_seq for t in workload.history
        if after < t.gtid_seq <= upto and (ddl or not t.ddl) and table in t.tables
    ]


def clone_model(workload: Workload) -> list[TableModel]:
    return copy.deepcopy(workload.tables)
