"""A group pipeline under faults (docs/group-pipelines.md), for tests/faults/test_fault_group.py and the soak's
group shape (tests/faults/soak.py): two to four shards' sources with a seeded workload that moves rows between them
(`Source`, `Txn`), the oracle that checks every invariant of every source after each run (`GroupOracle`; what
it checks: test_fault_group.py's docstring), and the rig that drives `cdc run` over the group (`GroupRig`)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_core.coordination import STATE_ACKED, Cursor, PipelineCoordinator, WindowRecord
from cdc_core.lake import delta_state
from cdc_core.model import layout
from cdc_core.model.naming import table_id
from cdc_core.model.sources import KEY_PRIMARY, Route, lineage, unit_name
from tests.faults.harness import RC_OK, RC_PARTIAL, RC_SOURCE, CliResult, Rig, Running
from tests.faults.scenarios import CRASH_POINTS
from tests.faults.workload import DDL_ALL

BIG_CAPS = {"max_events": 100_000, "max_bytes": 1 << 30, "max_transactions": 1000}
SOURCES = ("a", "b")  # test_fault_group.py's two sources
SOURCE_IDS = ("a", "b", "c", "d")  # a rig's sources, one per shard
KEYS = 10  # orders ids 1..KEYS, items (1..KEYS/2, 1..3): equal keys in every schema of every shard
COLUMNS = {"orders": ("id", "amount", "note"), "items": ("order_id", "line", "qty", "sku"),
           "accounts": ("id", "balance", "note")}
KEY = {"orders": ("id",), "items": ("order_id", "line"), "accounts": ("id",)}
DDL = {
    "orders": "CREATE TABLE `{s}`.orders (id INT PRIMARY KEY, amount INT NOT NULL, note VARCHAR(40) NULL)",
    "items": "CREATE TABLE `{s}`.items (order_id INT NOT NULL, line SMALLINT NOT NULL, qty INT NOT NULL, "
             "sku VARCHAR(16) NULL, PRIMARY KEY (order_id, line))",
    "accounts": "CREATE TABLE `{s}`.accounts (id INT PRIMARY KEY, balance INT NOT NULL, note VARCHAR(40) NULL)",
}
LINEAGE_KEYED = ("orders", "items")  # `key: source` routes: (_cdc_source, _cdc_source_table) lead the lake key
GLOBAL = "accounts"  # the `key: primary_key` route: ids unique across every shard and schema (one allocator)
BASE = "accounts.base"  # the oracle's name for its base table, <lake>/_cdc.base/shop/accounts
# Schema changes a group seed with `ddl=DDL_ALL` makes between transactions (the soak's `--ddl all`), each on one
# source table of one shard: the lake table takes the union of its routed tables' shapes and the change acts on that
# table's rows only (docs/schema-changes.md, "Group pipelines and routed tables"). Added columns are INT, named
# x<n> per source (two sources may add one name: the union has one column).
SCHEMA_CHANGES = ("add_null", "add_default", "drop_added", "widen", "truncate")
WIDEN = {"orders": "amount", "items": "qty", "accounts": "balance"}  # INT NOT NULL -> BIGINT NOT NULL
# Every point a group run with a global-keys route passes through: the single-source ones and the derived
# table's own (between its base commit and its derived commit, in the merge job).
POINTS = (*CRASH_POINTS, "mid_derive")


def gtid_seq(gtid: str | None, domain: int) -> int:
    """The sequence number of `domain` in a MariaDB GTID state ('1-101-42,2-102-7', domain 1 -> 42); 0 if absent."""
    for part in (gtid or "").split(","):
        d, _, rest = part.strip().partition("-")
        if d == str(domain) and rest:
            return int(rest.rsplit("-", 1)[1])
    return 0


# ------------------------------------------------------------------------------------------ the sources


Change = tuple[str, Any, Any]  # (schema.table, key, row or None: deleted), or (schema.table, None, a schema change)


def apply_schema_change(rows: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]], cols: dict[str, list[str]],
                        ever: dict[str, set[str]], table: str, change: tuple[Any, ...]) -> None:
    """`change` (("add", column, value older rows take) | ("drop", column) | ("truncate",) | ("widen", column))
    applied to a source's rows and shapes, in place: the live model and its replay (`Source.replay`) share it."""
    what = change[0]
    if what == "add":
        cols[table].append(change[1])
        ever[table].add(change[1])
        for k in [k for k in rows if k[0] == table]:
            rows[k] = (*rows[k], change[2])
    elif what == "drop":
        i = cols[table].index(change[1])
        del cols[table][i]
        for k in [k for k in rows if k[0] == table]:
            rows[k] = rows[k][:i] + rows[k][i + 1:]
    elif what == "truncate":
        for k in [k for k in rows if k[0] == table]:
            del rows[k]


@dataclass
class Source:
    """One shard's schemas, the seeded workload written to them, and every committed transaction's changes
    (with its GTID) so that the source's tables can be replayed up to any window's end."""

    sid: str
    shard: Any
    schemas: tuple[str, ...]
    rng: random.Random
    ids: Any = None  # accounts ids: one allocator shared by every source (ids are globally unique)
    rows: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]] = field(default_factory=dict)  # (table, key) -> row
    txns: list[tuple[int, list[Change]]] = field(default_factory=list)  # (GTID sequence, changes)

    def __post_init__(self) -> None:
        self.conn = self.shard.root_connect()
        self.domain = int(self.shard.gtid_domain_id)
        # Each table's columns now (a row is a tuple in this order), and every column it has had: schema changes
        # (`schema_change`) move both.
        self.cols: dict[str, list[str]] = {t: list(COLUMNS[t.split(".", 1)[1]]) for t in self.tables()}
        self.ever: dict[str, set[str]] = {t: set(c) for t, c in self.cols.items()}
        self.nullable: set[tuple[str, str]] = set()  # added columns that take NULL
        self.widened: set[tuple[str, str]] = set()
        self._added = itertools.count(1)

    def reconnect(self) -> None:
        """After the shard restarted."""
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn = self.shard.root_connect()

    def tables(self) -> list[str]:
        return [f"{s}.{t}" for s in self.schemas for t in COLUMNS]

    def create(self) -> None:
        with self.conn.cursor() as cur:
            for s in self.schemas:
                cur.execute(f"DROP DATABASE IF EXISTS `{s}`")
                cur.execute(f"CREATE DATABASE `{s}` CHARACTER SET utf8mb4")
                for ddl in DDL.values():
                    cur.execute(ddl.format(s=s))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            with self.conn.cursor() as cur:
                for s in self.schemas:
                    cur.execute(f"DROP DATABASE IF EXISTS `{s}`")
            self.conn.close()

    # -------------------------------------------------------------------------------- transactions

    def transaction(self) -> Txn:
        return Txn(self, dict(self.rows))

    def commit(self, txn: Txn) -> None:
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for sql, params in txn.statements:
                cur.execute(sql, params)
            cur.execute("COMMIT")
            cur.execute("SELECT @@last_gtid")
            gtid = str(cur.fetchone()[0])
        seq = gtid_seq(gtid, self.domain)
        assert seq > (self.txns[-1][0] if self.txns else 0), f"GTID {gtid} of source {self.sid}"
        self.txns.append((seq, txn.changes))
        self.rows = txn.work

    def state_at(self, seq: int) -> dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]]:
        """The source's rows after its transactions up to GTID sequence `seq` (of its domain)."""
        return self.replay(seq)[0]

    def replay(self, seq: int) -> tuple[dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]], dict[str, list[str]],
                                        dict[str, set[str]]]:
        """The source after its transactions up to GTID sequence `seq`: its rows (each a tuple in its table's
        column order then), each table's columns then, and every column each table had by then."""
        state: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]] = {}
        cols = {t: list(COLUMNS[t.split(".", 1)[1]]) for t in self.tables()}
        ever = {t: set(c) for t, c in cols.items()}
        for g, changes in self.txns:
            if g > seq:
                break
            for table, key, row in changes:
                if key is None:
                    apply_schema_change(state, cols, ever, table, row)
                elif row is None:
                    state.pop((table, key), None)
                else:
                    state[(table, key)] = row
        return state, cols, ever

    def real_rows(self) -> dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]]:
        """What the shard holds now (SELECT)."""
        out = {}
        with self.conn.cursor() as cur:
            for table in self.tables():
                t = table.split(".", 1)[1]
                cur.execute(f"SELECT {', '.join(f'`{c}`' for c in self.cols[table])} FROM {_q(table)}")
                for row in cur.fetchall():
                    out[(table, tuple(row[: len(KEY[t])]))] = tuple(row)
        return out

    def last_gtid_seq(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            return gtid_seq(str(cur.fetchone()[0]), self.domain)

    # ------------------------------------------------------------------------------------- workload

    def _row(self, table: str, key: tuple[Any, ...]) -> tuple[Any, ...]:
        r = self.rng
        big = 10**12 if (table, WIDEN[table.split(".", 1)[1]]) in self.widened else 0  # past INT once widened
        if table.endswith(".orders"):
            row = (*key, r.randint(1, 10**6) + big, r.choice([None, f"n{r.randint(0, 999)}", "größe ✓", ""]))
        elif table.endswith(".accounts"):
            row = (*key, r.randint(-1000, 10**5) - big, r.choice([None, f"acct {self.sid}{r.randint(0, 99)}", ""]))
        else:
            row = (*key, r.randint(0, 500) + big, r.choice([None, f"sku-{r.randint(0, 99)}"]))
        return (*row, *(self._value(table, c) for c in self.cols[table][len(row):]))

    def _value(self, table: str, column: str) -> Any:
        """A value of an added column (INT; NULL sometimes where it takes NULL)."""
        if (table, column) in self.nullable and self.rng.random() < 0.3:
            return None
        return self.rng.randint(-99, 999)

    def fit(self, table: str, cols: list[str], row: tuple[Any, ...]) -> tuple[Any, ...]:
        """A row of another table (columns `cols`) in `table`'s shape: its values by name, the rest new."""
        base = table.split(".", 1)[1]
        by_name = dict(zip(cols, row, strict=True))

        def keeps(c: str) -> bool:
            v = by_name.get(c)
            if v is None:  # absent here, or NULL where `table` may not take it
                return c in by_name and (c in COLUMNS[base] or (table, c) in self.nullable)
            return not (c == WIDEN[base] and (table, c) not in self.widened and not -(2**31) <= v < 2**31)

        return tuple(by_name[c] if keeps(c) else self._value(table, c) for c in self.cols[table])

    def schema_change(self, table: str | None = None, kind: str | None = None) -> str:
        """One schema change on one of this source's tables (SCHEMA_CHANGES; a drop without an added column to
        drop, or a second widening, adds one instead), its own transaction. Returns its kind."""
        r = self.rng
        table = table or r.choice(self.tables())
        kind = kind or r.choice(SCHEMA_CHANGES)
        base = table.split(".", 1)[1]
        added = [c for c in self.cols[table] if c not in COLUMNS[base]]
        if (kind == "drop_added" and not added) or (kind == "widen" and (table, WIDEN[base]) in self.widened):
            kind = "add_null"
        if kind in ("add_null", "add_default"):
            name = f"x{self.sid}{next(self._added)}"
            if kind == "add_null":
                sql, change = f"ALTER TABLE {_q(table)} ADD COLUMN `{name}` INT NULL", ("add", name, None)
                self.nullable.add((table, name))
            else:
                k = r.randint(-5, 500)
                sql, change = f"ALTER TABLE {_q(table)} ADD COLUMN `{name}` INT NOT NULL DEFAULT {k}", ("add", name, k)
        elif kind == "drop_added":
            name = r.choice(added)
            sql, change = f"ALTER TABLE {_q(table)} DROP COLUMN `{name}`", ("drop", name)
        elif kind == "widen":
            sql, change = f"ALTER TABLE {_q(table)} MODIFY `{WIDEN[base]}` BIGINT NOT NULL", ("widen", WIDEN[base])
            self.widened.add((table, WIDEN[base]))
        else:
            sql, change = f"TRUNCATE TABLE {_q(table)}", ("truncate",)
        with self.conn.cursor() as cur:
            cur.execute(sql)
            cur.execute("SELECT @@last_gtid")
            gtid = str(cur.fetchone()[0])
        seq = gtid_seq(gtid, self.domain)
        assert seq > (self.txns[-1][0] if self.txns else 0), f"GTID {gtid} of source {self.sid} ({sql})"
        self.txns.append((seq, [(table, None, change)]))
        apply_schema_change(self.rows, self.cols, self.ever, table, change)
        return kind

    def _free_key(self, txn: Txn, table: str) -> tuple[Any, ...] | None:
        if table.endswith(".accounts"):  # a new id from the shared allocator: never on any shard before
            return (next(self.ids),)
        if table.endswith(".orders"):
            keys: list[tuple[Any, ...]] = [(i,) for i in range(1, KEYS + 1)]
        else:
            keys = [(o, line) for o in range(1, KEYS // 2 + 1) for line in range(1, 4)]
        free = [k for k in keys if (table, k) not in txn.work]
        return self.rng.choice(free) if free else None

    def random_change(self, txn: Txn, table: str | None = None, op: str | None = None) -> None:
        r = self.rng
        table = table or r.choice(self.tables())
        present = sorted(k for t, k in txn.work if t == table)
        op = op or r.choices(["insert", "update", "delete", "rekey"], [4, 3, 2, 1])[0]
        if op == "rekey" and table.endswith(".items"):
            op = "update"
        free = self._free_key(txn, table)
        if op == "insert" or not present:
            if free is not None:
                txn.put(table, free, self._row(table, free))
                return
            op = "update"
        victim = r.choice(present)
        if op == "update":
            txn.put(table, victim, self._row(table, victim))
        elif op == "delete" or free is None:
            txn.delete(table, victim)
        else:  # the primary key changes: one update event whose before and after images differ in the key
            txn.rekey(table, victim, free)

    def batch(self, transactions: int) -> None:
        """`transactions` random ones; the first touches every table with an insert, an update and a delete, so
        that every window has several lake tables and deletes (the merge job's fault points can fire), and
        adds an account to each accounts table (more ids to move and derive)."""
        txn = self.transaction()
        for table in self.tables():
            for op in ("insert", "update", "delete", *(("insert",) if table.endswith(".accounts") else ())):
                self.random_change(txn, table, op)
        self.commit(txn)
        for _ in range(transactions - 1):
            txn = self.transaction()
            for _ in range(self.rng.randint(1, 5)):
                self.random_change(txn)
            self.commit(txn)

    def move_to(self, other: Source) -> tuple[Any, ...]:
        """A row of this source's first schema's orders moves to `other`'s first schema, keeping its key and
        values: a delete here, an insert there (two servers, two transactions)."""
        here, there = f"{self.schemas[0]}.orders", f"{other.schemas[0]}.orders"
        ids = [k for t, k in sorted(self.rows) if t == here and (there, k) not in other.rows]
        if not ids:
            free = [(i,) for i in range(1, KEYS + 1)
                    if (here, (i,)) not in self.rows and (there, (i,)) not in other.rows]
            if not free:  # every id is held here or there (a long workload): `other` deletes one first
                held = sorted(k for t, k in self.rows if t == here)  # each also held there
                gone = held[0] if held else min(k for t, k in other.rows if t == there)
                txn = other.transaction()
                txn.delete(there, gone)
                other.commit(txn)
                ids, free = ([gone], []) if held else ([], [gone])
            if not ids:
                txn = self.transaction()
                txn.put(here, free[0], self._row(here, free[0]))
                self.commit(txn)
                ids = [free[0]]
        key = self.rng.choice(ids)
        return self._move(here, key, other, there)

    def _move(self, here: str, key: tuple[Any, ...], other: Source, there: str) -> tuple[Any, ...]:
        """A DELETE of `key` here, then an INSERT of the same row in `other`'s table `there`: two transactions."""
        row = self.rows[(here, key)]
        txn = self.transaction()
        txn.delete(here, key)
        self.commit(txn)
        txn = other.transaction()
        row = other.fit(there, self.cols[here], row)  # the same values where the two tables' shapes differ
        txn.put(there, key, row)
        other.commit(txn)
        return row

    def move_account(self, other: Source) -> tuple[Any, ...]:
        """An account (a global id) moves from one of this source's schemas to one of `other`'s (another
        schema when `other` is this source): a DELETE here, then an INSERT of the same id and values there,
        two transactions (on two servers when `other` is another source). Returns the row."""
        held = [(t, k) for t, k in sorted(self.rows) if t.endswith(".accounts")]
        if not held:
            txn = self.transaction()
            self.random_change(txn, f"{self.schemas[0]}.accounts", "insert")
            self.commit(txn)
            held = [(t, k) for t, k in sorted(self.rows) if t.endswith(".accounts")]
        here, key = self.rng.choice(held)
        there = self.rng.choice([f"{s}.accounts" for s in other.schemas if f"{s}.accounts" != here])
        return self._move(here, key, other, there)

    def accounts(self, rows: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]]) -> dict[int, dict[str, Any]]:
        """id -> {_cdc_source, _cdc_source_table, id, balance, note and the columns added since} of `rows`'
        accounts (rows in the tables' shapes now)."""
        return {k[0]: {"_cdc_source": self.sid, "_cdc_source_table": t, **dict(zip(self.cols[t], row, strict=True))}
                for (t, k), row in rows.items() if t.endswith(".accounts")}


class Txn:
    """One transaction's statements and changes, applied to a copy of the rows as they are built."""

    def __init__(self, source: Source, work: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...]]):
        self.source = source
        self.work = work
        self.statements: list[tuple[str, tuple[Any, ...]]] = []
        self.changes: list[Change] = []

    def put(self, table: str, key: tuple[Any, ...], row: tuple[Any, ...]) -> None:
        cols = self.source.cols[table]
        if (table, key) in self.work:
            sets = ", ".join(f"`{c}` = %s" for c in cols)
            self.statements.append((f"UPDATE {_q(table)} SET {sets} WHERE {_where(table)}", (*row, *key)))
        else:
            self.statements.append((f"INSERT INTO {_q(table)} VALUES ({', '.join(['%s'] * len(row))})", row))
        self.changes.append((table, key, row))
        self.work[(table, key)] = row

    def delete(self, table: str, key: tuple[Any, ...]) -> None:
        self.statements.append((f"DELETE FROM {_q(table)} WHERE {_where(table)}", key))
        self.changes.append((table, key, None))
        del self.work[(table, key)]

    def rekey(self, table: str, old: tuple[Any, ...], new: tuple[Any, ...]) -> None:
        cols = KEY[table.split(".", 1)[1]]
        sets = ", ".join(f"`{c}` = %s" for c in cols)
        self.statements.append((f"UPDATE {_q(table)} SET {sets} WHERE {_where(table)}", (*new, *old)))
        row = (*new, *self.work[(table, old)][len(new):])
        self.changes += [(table, old, None), (table, new, row)]
        del self.work[(table, old)]
        self.work[(table, new)] = row


def _q(table: str) -> str:
    schema, name = table.split(".", 1)
    return f"`{schema}`.`{name}`"


def _where(table: str) -> str:
    return " AND ".join(f"`{c}` = %s" for c in KEY[table.split(".", 1)[1]])


# ------------------------------------------------------------------------------------------- the oracle


@dataclass
class Figures:
    checks: int = 0
    rows_compared: int = 0
    rows_lost: int = 0
    rows_duplicated: int = 0
    wrong_values: int = 0  # rows with a wrong value, or rows the source does not have
    windows_acked: Counter[str] = field(default_factory=Counter)
    derived_whole: int = 0  # checks where shop.accounts held every source's base window: all of it compared
    derived_partial: int = 0  # checks where some base window was not derived yet: the other ids compared
    derived_rows: int = 0  # shop.accounts rows compared with the function of the base
    contested: int = 0  # ids with two alive base rows (a move half landed), counted per check
    ties: int = 0  # ... of which the two latest have equal commit times (the tie rule decides)


class GroupOracle:
    """Every invariant of a group pipeline's sources, their shared lake tables and their Delta identities."""

    LAKE_SCHEMA = "shop"

    def __init__(self, zk_client: Any, zk_root: str, pipeline: str, lake_root: Path, staging_root: Path,
                 sources: dict[str, Source], routes: tuple[Route, ...]):
        self.zk_client = zk_client
        self.pipeline = pipeline
        self.lake_root = lake_root
        self.staging_root = staging_root
        self.sources = sources
        self.routes = routes
        self.coordinators = {sid: PipelineCoordinator(zk_client, zk_root, pipeline, source=sid) for sid in sources}
        self.coordinator = next(iter(self.coordinators.values()))  # the lease is the pipeline's (Rig.lease)
        self.figures = Figures()
        self.log: list[str] = []
        self._plans: dict[tuple[str, int], str] = {}
        self._acked: dict[tuple[str, int], str] = {}
        self._cursors: dict[str, Cursor] = {}
        self._commits: dict[str, dict[str, tuple[tuple[str, int], ...]]] = {}

    def close(self) -> None:
        for co in self.coordinators.values():
            co.close()

    def unit(self, sid: str) -> str:
        return unit_name(self.pipeline, sid)

    def uri(self, table: str) -> str:
        """A lake table's location; BASE: the base of the derived table (`<lake>/_cdc.base/shop/accounts`)."""
        if table == BASE:
            return layout.base_uri(str(self.lake_root), self.LAKE_SCHEMA, GLOBAL)
        return layout.table_uri(str(self.lake_root), self.LAKE_SCHEMA, table)

    def label(self, table: str) -> str:
        return f"base of shop.{GLOBAL}" if table == BASE else f"shop.{table}"

    @staticmethod
    def kind(table: str) -> str:
        """The source tables whose rows a Delta table holds (COLUMNS, KEY)."""
        return GLOBAL if table == BASE else table

    def lake_table(self, sid: str, source_table: str) -> str:
        """The lake table (`orders` or `items` of schema `shop`) a source table lands in."""
        schema, table = source_table.split(".", 1)
        where = lineage(self.routes, sid, schema, table)
        assert where.lake_schema == self.LAKE_SCHEMA, where
        return where.lake_table

    # ------------------------------------------------------------------------------------ check

    def check(self, label: str, *, final: bool = False) -> None:
        problems: list[str] = []
        windows = {sid: self._check_zk(sid, problems) for sid in self.sources}
        snapshots = self._check_delta(windows, problems)
        self._check_rows(windows, snapshots, problems, final=final)
        self._check_derived(windows, snapshots, problems, final=final)
        if final:
            for sid, src in self.sources.items():
                cursor = self._cursors[sid]
                last = src.last_gtid_seq()
                at = gtid_seq(cursor.position.gtid, src.domain) if cursor.position else 0
                if at != last:
                    problems.append(f"source {sid}: drained, but its cursor is at GTID {at}, its shard's last "
                                    f"transaction is {last}")
                if self.coordinators[sid].pending_window() is not None:
                    problems.append(f"source {sid}: a window is still pending after the final run")
                if src.state_at(last) != src.real_rows():  # the replay itself (this test's own bookkeeping)
                    problems.append(f"source {sid}: the recorded workload does not replay to the shard's rows")
        self.figures.checks += 1
        self.log.append(f"{label}: " + ", ".join(f"{sid} cursor {self._cursors[sid].seq}" for sid in self.sources)
                        + f", problems {len(problems)}")
        if problems:
            raise AssertionError(f"oracle, after {label}:\n  " + "\n  ".join(problems))

    def _check_zk(self, sid: str, problems: list[str]) -> dict[int, WindowRecord]:
        """Window records immutable, acked ones stay acked; the cursor never moves back and stands at the end
        of the last acked window, every window up to it acked, at most the next one planned."""
        co = self.coordinators[sid]
        cursor = co.read_cursor()
        windows = {s: rec for s in co.window_record_seqs() if (rec := co.get_window(s)) is not None}
        for (who, s) in self._plans:
            if who == sid and s not in windows:
                problems.append(f"source {sid}: window {s} disappeared from ZooKeeper")
        for s, rec in windows.items():
            if rec.plan.pipeline != self.unit(sid):
                problems.append(f"source {sid}: window {s} is planned for {rec.plan.pipeline!r}")
            plan = json.dumps(rec.plan.to_dict(), sort_keys=True)
            if self._plans.setdefault((sid, s), plan) != plan:
                problems.append(f"source {sid}: window {s} was re-planned: {self._plans[(sid, s)]} -> {plan}")
            if rec.state == STATE_ACKED:
                result = json.dumps(rec.result, sort_keys=True)
                if (sid, s) not in self._acked:
                    self.figures.windows_acked[sid] += 1
                if self._acked.setdefault((sid, s), result) != result:
                    problems.append(f"source {sid}: acked window {s} changed its result")
            elif (sid, s) in self._acked:
                problems.append(f"source {sid}: window {s} went from acked back to {rec.state}")
            if s <= cursor.seq and rec.state != STATE_ACKED:
                problems.append(f"source {sid}: window {s} <= cursor {cursor.seq} is {rec.state}, not acked")
            if s > cursor.seq and rec.state == STATE_ACKED:
                problems.append(f"source {sid}: window {s} is acked but the cursor says {cursor.seq}")
            if s > cursor.seq + 1:
                problems.append(f"source {sid}: window {s} planned beyond the next one ({cursor.seq + 1})")
        prev = self._cursors.get(sid)
        if prev is not None:
            if cursor.seq < prev.seq:
                problems.append(f"cursor of {sid} moved back from window {prev.seq} to {cursor.seq}")
            if prev.position is not None and (cursor.position is None or cursor.position < prev.position):
                problems.append(f"cursor of {sid} moved back from {prev.position.label()} to "
                                f"{cursor.position.label() if cursor.position else None}")
        acked = [windows[s] for s in sorted(windows) if s <= cursor.seq]
        if acked and cursor.position is not None and not acked[-1].plan.end.same_point(cursor.position):
            problems.append(f"cursor of {sid} ({cursor.position.label()}) is not the end of its last acked window "
                            f"{acked[-1].seq} ({acked[-1].plan.end.label()})")
        if cursor.seq and cursor.seq not in windows:
            problems.append(f"cursor of {sid} says window {cursor.seq}, which has no record")
        self._cursors[sid] = cursor
        return windows

    def _delta_log_txns(self, uri: str) -> dict[str, tuple[tuple[str, int], ...]]:
        """commit file -> its (appId, version) txn actions (commit files are immutable: cached)."""
        log_dir = Path(uri) / "_delta_log"
        cache = self._commits.setdefault(uri, {})
        try:
            names = sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit())
        except FileNotFoundError:
            self._commits[uri] = {}
            return {}
        for stale in set(cache) - set(names):
            del cache[stale]
        for n in names:
            if n not in cache:
                actions = [json.loads(line) for line in (log_dir / n).read_text().splitlines()]
                cache[n] = tuple((a["txn"]["appId"], int(a["txn"]["version"])) for a in actions if "txn" in a)
        return cache

    def _check_delta(
        self, windows: dict[str, dict[int, WindowRecord]], problems: list[str]
    ) -> dict[str, tuple[int, dict[str, int | None]] | None]:
        """Per lake table: (the Delta version read, each source's txn version in it), None without a table."""
        from deltalake import DeltaTable

        snapshots: dict[str, tuple[int, dict[str, int | None]] | None] = {}
        # The derived table before its base: a commit landing meanwhile can only make the base newer.
        for table in (*LINEAGE_KEYED, GLOBAL, BASE):
            uri = self.uri(table)
            logs = [(self.label(table), uri)]
            if table != GLOBAL:  # the derived table's hard deletes are its base's tombstones
                logs.append((f"tombstones of shop.{self.kind(table)}",
                             layout.tombstone_uri(str(self.lake_root), self.LAKE_SCHEMA, self.kind(table))))
            for what, u in logs:
                seen: dict[tuple[str, int], str] = {}
                for commit, txns in sorted(self._delta_log_txns(u).items()):
                    for txn in txns:
                        if txn in seen:
                            problems.append(f"{what}: window {txn[1]} of {txn[0]!r} committed twice "
                                            f"({seen[txn]}, {commit})")
                        seen[txn] = commit
                        sid = next((s for s in self.sources if self.unit(s) == txn[0]), None)
                        if sid is None:
                            problems.append(f"{what}: a commit of an unknown txnAppId {txn[0]!r}")
                        elif txn[1] > max(windows[sid], default=0):
                            problems.append(f"{what} holds window {txn[1]} of source {sid}, which was never planned")
            if not delta_state.table_exists(uri):
                snapshots[table] = None
                continue
            # One snapshot for the txn versions and, later, the rows: a merge the killed run left behind in the
            # merge server may still be committing while the oracle looks.
            dt = DeltaTable(uri)
            txns: dict[str, int | None] = {}
            for sid in self.sources:
                v = dt.transaction_version(self.unit(sid))
                txns[sid] = None if v is None else int(v)
            snapshots[table] = (int(dt.version()), txns)
        # The cursor never gets ahead of Delta: every table an acked window of a source landed in holds that
        # window (or a later one) under the source's txnAppId (a derived table: it and its base).
        for sid, recs in windows.items():
            for s, rec in sorted(recs.items()):
                if rec.state != STATE_ACKED:
                    continue
                for source_table in sorted((rec.result or {}).get("tables") or {}):
                    lake_table = self.lake_table(sid, source_table)
                    for table in (lake_table, BASE) if lake_table == GLOBAL else (lake_table,):
                        snap = snapshots.get(table)
                        v = snap[1][sid] if snap else None
                        if v is None or v < s:
                            problems.append(
                                f"source {sid}: window {s} is acked (cursor {self._cursors[sid].seq}) but Delta table "
                                f"{self.label(table)} holds only window {v} of {self.unit(sid)!r} ({source_table}): "
                                "the cursor got ahead of Delta"
                            )
        return snapshots

    def _check_rows(self, windows: dict[str, dict[int, WindowRecord]],
                    snapshots: dict[str, tuple[int, dict[str, int | None]] | None], problems: list[str],
                    *, final: bool) -> None:
        """No duplicate key in a lake table; each source's rows in it equal the source replayed to the end of the
        window the table holds for that source (final: equal the shard's real rows), on the columns its table had
        then; a column its table never had is NULL in its rows (the union of routed shapes; what the lake keeps of
        a column the source dropped is not the source's)."""
        real = {sid: src.real_rows() for sid, src in self.sources.items()} if final else {}
        for table in (*LINEAGE_KEYED, BASE):  # lineage-keyed: the routed tables and the derived table's base
            snap, kind, name = snapshots[table], self.kind(table), self.label(table)
            lineage_key = ("_cdc_source", "_cdc_source_table", *KEY[kind])
            listed = [] if snap is None else delta_state.read_rows(self.uri(table), version=snap[0]).to_pylist()
            data_cols = [c for c in (listed[0] if listed else ()) if not c.startswith("_cdc_")]
            keys = Counter(tuple(r[c] for c in lineage_key) for r in listed)
            dups = sum(n - 1 for n in keys.values() if n > 1)
            if dups:
                self.figures.rows_duplicated += dups
                problems.append(f"{name}: duplicated {dups} (count {len(listed)} != distinct keys {len(keys)}): "
                                f"{sorted(k for k, n in keys.items() if n > 1)[:5]}")
            strangers = {r["_cdc_source"] for r in listed} - set(self.sources)
            if strangers:
                problems.append(f"{name}: rows of unknown sources {sorted(map(str, strangers))}")
            for sid, src in self.sources.items():
                actual = {(r["_cdc_source_table"], tuple(r[c] for c in KEY[kind])): r
                          for r in listed if r["_cdc_source"] == sid}
                v = snap[1][sid] if snap else None
                if final:
                    state, cols, ever, at = real[sid], src.cols, src.ever, "the shard now"
                elif v is None:
                    state, cols, ever, at = {}, src.cols, src.ever, "no window"
                elif v not in windows[sid]:
                    problems.append(f"{name} holds window {v} of source {sid}, which has no record")
                    continue
                else:
                    g = gtid_seq(windows[sid][v].plan.end.gtid, src.domain)
                    (state, cols, ever), at = src.replay(g), f"window {v} (to GTID {src.domain}-..-{g})"
                expected = {k: dict(zip(cols[k[0]], row, strict=True)) for k, row in state.items()
                            if k[0].endswith(f".{kind}")}
                missing = sorted(set(expected) - set(actual))
                extra = sorted(set(actual) - set(expected))

                def differs(k: tuple[Any, ...]) -> bool:
                    row = actual[k]
                    return (any(row.get(c, "<no column>") != want for c, want in expected[k].items())
                            or any(row[c] is not None for c in data_cols if c not in ever[k[0]]))

                wrong = sorted(k for k in set(expected) & set(actual) if differs(k))
                self.figures.rows_compared += len(expected)
                self.figures.rows_lost += len(missing)
                self.figures.wrong_values += len(extra) + len(wrong)
                if missing or extra or wrong:
                    problems.append(
                        f"{name}, rows of source {sid} differ from the source at {at}: missing {len(missing)} "
                        f"{missing[:3]}, extra {len(extra)} {extra[:3]}, wrong {len(wrong)} "
                        f"{[(k, {c: actual[k].get(c) for c in data_cols}, expected[k]) for k in wrong[:3]]}"
                    )

    def _check_derived(self, windows: dict[str, dict[int, WindowRecord]],
                       snapshots: dict[str, tuple[int, dict[str, int | None]] | None], problems: list[str],
                       *, final: bool) -> None:
        """The derived table shop.accounts (docs/group-pipelines.md, "Global keys"): one row per id; per source
        its txn version is at most the base's (a window is derived after it landed in the base); each id is
        the function of the base (`derive`): exactly for every id when the table holds every source's base
        window, else for the ids no base-only window touched. Final: the union of the shards' accounts."""
        snap_d, snap_b = snapshots[GLOBAL], snapshots[BASE]
        held = {sid: snap_d[1][sid] if snap_d else None for sid in self.sources}
        in_base = {sid: snap_b[1][sid] if snap_b else None for sid in self.sources}
        pending: set[int] = set()  # ids a window that landed in the base but not in the derived table touched
        for sid, src in self.sources.items():
            d, b = held[sid] or 0, in_base[sid] or 0
            if d > b:
                problems.append(f"shop.{GLOBAL} holds window {d} of source {sid}, its base only "
                                f"{in_base[sid]}: derived from a base that did not hold it")
            elif d < b:
                lo, hi = (gtid_seq(windows[sid][v].plan.end.gtid, src.domain) if v in windows[sid] else 0
                          for v in (d, b))
                pending |= {k[0] for g, changes in src.txns if lo < g <= hi
                            for t, k, _ in changes if t.endswith(f".{GLOBAL}")}
        derived = delta_state.read_rows(self.uri(GLOBAL), version=snap_d[0]).to_pylist() if snap_d else []
        base = delta_state.read_rows(self.uri(BASE), version=snap_b[0]).to_pylist() if snap_b else []
        ids = Counter(r["id"] for r in derived)
        dups = sorted(i for i, n in ids.items() if n > 1)
        if dups:
            self.figures.rows_duplicated += sum(ids[i] - 1 for i in dups)
            problems.append(f"shop.{GLOBAL}: more than one row for id {dups[:5]} (count {len(derived)} != "
                            f"distinct ids {len(ids)})")
        cols = sorted(set(base[0] if base else ()) & set(derived[0] if derived else ()))  # the whole row
        actual = {r["id"]: tuple(r[c] for c in cols) for r in derived}
        expected = {i: tuple(r[c] for c in cols) for i, r in derive_rows(base).items()}
        alive = Counter(r["id"] for r in base if not r.get("_cdc_deleted"))
        for i in (i for i, n in alive.items() if n > 1):
            self.figures.contested += 1
            times = sorted((r["_cdc_commit_ts"] for r in base if r["id"] == i and not r.get("_cdc_deleted")),
                           key=lambda t: (t is not None, t and t.timestamp()), reverse=True)
            self.figures.ties += times[0] == times[1]
        compare = (set(actual) | set(expected)) - pending
        self._diff_accounts(f"shop.{GLOBAL} differs from the function of its base (txn versions {held}, base "
                            f"{in_base}; ids of base-only windows left out: {len(pending)})",
                            {i: actual[i] for i in compare if i in actual},
                            {i: expected[i] for i in compare if i in expected}, problems)
        if pending:
            self.figures.derived_partial += 1
        else:
            self.figures.derived_whole += 1
        if final:  # the shards' accounts, keyed by id alone: exactly one row each, from the shard holding it
            shards: dict[int, dict[str, Any]] = {}
            for src in self.sources.values():
                for i, row in src.accounts(src.real_rows()).items():
                    if i in shards:
                        problems.append(f"id {i} is on two shards ({shards[i]}, {row}): the test broke its own "
                                        "guarantee")
                    shards[i] = row
            lineage_cols = ["_cdc_source", "_cdc_source_table", *COLUMNS[GLOBAL]]
            self._diff_accounts(f"shop.{GLOBAL} differs from the union of the shards' accounts",
                                {r["id"]: tuple(r.get(c) for c in shards[r["id"]]) if r["id"] in shards
                                 else tuple(r[c] for c in lineage_cols) for r in derived},
                                {i: tuple(row.values()) for i, row in shards.items()}, problems)

    def _diff_accounts(self, what: str, actual: dict[int, tuple[Any, ...]], expected: dict[int, tuple[Any, ...]],
                       problems: list[str]) -> None:
        missing = sorted(set(expected) - set(actual))
        extra = sorted(set(actual) - set(expected))
        wrong = sorted(i for i in set(expected) & set(actual) if expected[i] != actual[i])
        self.figures.derived_rows += len(expected)
        self.figures.rows_lost += len(missing)
        self.figures.wrong_values += len(extra) + len(wrong)
        if missing or extra or wrong:
            problems.append(f"{what}: missing {len(missing)} {missing[:3]}, extra {len(extra)} "
                            f"{[actual[i] for i in extra[:3]]}, wrong {len(wrong)} "
                            f"{[(actual[i], expected[i]) for i in wrong[:3]]}")

    # ----------------------------------------------------------------------------- what is pending

    def pending(self) -> dict[str, str]:
        """Per source, its unfinished window: none, planned, half-staged, staged, half-merged (some of its Delta
        commits landed: tables or tombstones), half-derived (the base of shop.accounts holds it, the derived
        table not: the merge job stopped between the two) or merged (all landed, not acked)."""
        out = {}
        for sid, co in self.coordinators.items():
            rec = co.pending_window()
            if rec is None:
                out[sid] = "none"
                continue
            seq, unit = rec.plan.seq, self.unit(sid)
            wdir = Path(layout.window_dir(str(self.staging_root), unit, seq))
            if not (wdir / "manifest.json").exists():
                partial = list(wdir.parent.glob(f".{wdir.name}.tmp-*")) if wdir.parent.exists() else []
                out[sid] = "half-staged" if partial else "planned"
                continue
            manifest = json.loads((wdir / "manifest.json").read_text())
            tables = {self.lake_table(sid, table_id(t["schema"], t["table"])) for t in manifest["tables"]}
            landed = [(delta_state.last_txn_version(self.uri(t), unit) or 0) >= seq for t in tables]
            tombs = [layout.tombstone_uri(str(self.lake_root), self.LAKE_SCHEMA, t) for t in tables]
            tombs_landed = [(delta_state.last_txn_version(u, unit) or 0) >= seq for u in tombs]
            base_landed = GLOBAL in tables and (delta_state.last_txn_version(self.uri(BASE), unit) or 0) >= seq
            if base_landed and (delta_state.last_txn_version(self.uri(GLOBAL), unit) or 0) < seq:
                out[sid] = "half-derived"
            elif landed and all(landed):
                out[sid] = "merged"
            elif any(landed) or any(tombs_landed):
                out[sid] = "half-merged"
            else:
                out[sid] = "staged"
        return out


def derive_rows(base: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """The derived table as the documented function of its base rows: per id, the alive row with the latest
    `_cdc_commit_ts` (no time: last, as Spark orders NULLs descending), ties to the smaller `_cdc_source`,
    then `_cdc_source_table` (byte order); an id without an alive row has none."""
    out: dict[Any, dict[str, Any]] = {}
    for r in base:
        if r.get("_cdc_deleted"):
            continue
        best = out.get(r["id"])
        if best is None or _derive_order(r) < _derive_order(best):
            out[r["id"]] = r
    return out


def _derive_order(r: dict[str, Any]) -> tuple[Any, ...]:
    ts = r["_cdc_commit_ts"]
    newest_first = (0, -ts.timestamp()) if ts is not None else (1, 0.0)
    return (*newest_first, r["_cdc_source"].encode(), r["_cdc_source_table"].encode())


# ---------------------------------------------------------------------------------------------- the rig


@dataclass
class GroupRig(Rig):
    """A `Rig` whose pipeline is a group over shards: the CLI runner, lease handling and `check` are Rig's; the
    sources, the configuration and the oracle are the group's."""

    shards: tuple[Any, ...] = ()
    # Rig's scenarios (the soak) run `run`/`start_run`: with this, each is a whole-group run half of the time, or a
    # run of one source; without, always the whole group.
    vary_units: bool = False

    def __post_init__(self) -> None:
        self.created_at = time.time()
        tag = uuid.uuid4().hex[:6]
        self.name = f"g{self.seed}_{tag}"
        self.zk_root = f"/cdc-faults-group-{tag}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / "pipelines.json"
        self._storage()
        self.write_rng, self.run_rng = random.Random(f"{self.seed}-writes"), random.Random(f"{self.seed}-runs")
        self.prefix = f"g{tag}"
        # Source a: two schemas on shard 1 (equal keys in both); b, c, d: one schema each on shards 2, 3, 4.
        if not 2 <= len(self.shards) <= len(SOURCE_IDS):
            raise ValueError(f"a group rig takes 2 to {len(SOURCE_IDS)} shards, not {len(self.shards)}")
        layout_ = {"a": (self.shards[0], ("00", "01"))}
        for i, (sid, shard) in enumerate(zip(SOURCE_IDS[1:], self.shards[1:]), start=2):
            layout_[sid] = (shard, (f"0{i}",))
        ids = itertools.count(1)  # accounts ids, shared: globally unique across both shards and all schemas
        self.sources = {
            sid: Source(sid, shard, tuple(f"{self.prefix}_{n}" for n in nums), random.Random(f"{self.seed}-{sid}"),
                        ids)
            for sid, (shard, nums) in layout_.items()
        }
        self.routes = (
            Route(rf"{self.prefix}_0[0-9]\.(orders|items)", r"shop.\1"),
            Route(rf"{self.prefix}_0[0-9]\.{GLOBAL}", f"shop.{GLOBAL}", key=KEY_PRIMARY),
        )
        self.starts: dict[str, dict[str, Any]] = {}
        for sid, src in self.sources.items():
            src.create()
            self.starts[sid] = dict(src.shard.binlog_end())
        self.write_config()
        self.oracle = GroupOracle(self.zk_client, self.zk_root, self.name, self.lake, self.staging, self.sources,
                                  self.routes)
        self._n = 0
        self._clock_offset = 0.0
        self.schema_changes: Counter[str] = Counter()  # by kind, with ddl=DDL_ALL (`write`)

    def conn_id(self, sid: str) -> str:
        return f"cdc_faults_{self.prefix}_{sid}"

    def connections(self) -> dict[str, Any]:
        return {self.conn_id(sid): src.shard for sid, src in self.sources.items()}

    def write_config(self, **overrides: Any) -> None:
        pipeline = {
            "name": self.name,
            "sources": [{"id": sid, "conn_id": self.conn_id(sid), "start": self.starts[sid]} for sid in self.sources],
            "tables": {"include": [f"{self.prefix}_0*.{t}" for t in COLUMNS]},
            "routes": [r.to_dict() for r in self.routes],
            "snapshot": {"on_start": False},
            "zookeeper": {"hosts": self.services.zk_hosts, "root": self.zk_root},
            "lease_seconds": self.lease_seconds,
            "schedule": None,
            "retries": 1,
            "caps": self.caps,
            # One table at a time in the merge job: a crash inside it leaves a known set of tables committed.
            **self.storage_config({"merge_parallelism": 1}),
            **overrides,
        }
        self.config_path.write_text(json.dumps({"pipelines": [pipeline]}, indent=2))

    def close(self) -> None:
        if self.merge_server is not None:
            self.merge_server.close()
        for running in self._running:
            if running.proc.poll() is None:
                running.cont()
                running.kill()
                running.proc.wait()
        self.oracle.close()
        for src in self.sources.values():
            src.close()
        with contextlib.suppress(Exception):
            self.zk_client.delete(self.zk_root, recursive=True)

    def run_units(self, source: str | None = None, windows: int = 1, **kw: Any) -> CliResult:
        """`cdc run <pipeline> --max-windows N [--source <id>]`: one source, or the whole group (None)."""
        return self.cli("run", self.name, "--max-windows", str(windows), *(("--source", source) if source else ()),
                        **kw)

    # ------------------------------------------------ Rig's interface, for Rig's scenarios (tests/faults/soak.py)

    def write(self, transactions: int, tables: tuple[str, ...] | None = None) -> None:
        """Seeded writes: `transactions` spread over one source or more (`Source.batch`: its first transaction
        touches every table), and, half of the time each, an order moved between two shards keeping its key and
        an account (a global id) moved to another shard or between a's schemas. With `ddl=DDL_ALL`, a schema
        change (SCHEMA_CHANGES) amid a source's writes more often than not."""
        rng = self.write_rng
        sources = [self.sources[sid] for sid in sorted(self.sources)]
        picked = rng.sample(sources, rng.randint(1, len(sources)))
        for src in picked:
            src.batch(max(1, transactions // 2))  # // 2 as when a group had two shards: their seeds replay
            if self.ddl == DDL_ALL and rng.random() < 0.6:  # a schema change amid the writes, a window's middle
                self.schema_changes[src.schema_change()] += 1
                src.batch(2)
        if rng.random() < 0.5:
            x, y = rng.sample(sources, 2)
            x.move_to(y)
        if rng.random() < 0.5:
            # Only a has two schemas: no move inside another source.
            src, dst = rng.choice([(x, y) for x in sources for y in sources if x is not y or len(x.schemas) > 1])
            src.move_account(dst)

    def _who(self) -> tuple[str, ...]:
        """A whole-group run half of the time, else one source's."""
        sids = sorted(self.sources)
        who = self.run_rng.choice((*[None] * len(sids), *sids)) if self.vary_units else None
        return ("--source", who) if who else ()

    def run(self, windows: int | None = None, **kw: Any) -> CliResult:
        return self.cli("run", self.name, "--max-windows", str(windows or self.windows_per_run), *self._who(), **kw)

    def start_run(self, windows: int | None = None, **kw: Any) -> Running:
        return self.start_cli("run", self.name, "--max-windows", str(windows or self.windows_per_run),
                              *self._who(), **kw)

    def finish(self, label: str) -> None:
        """Clean whole-group runs until every source is at its shard's end, then the final oracle."""
        drain(self, max_runs=20)
        self.check(f"{label}: final", final=True)

    def caught_up(self) -> bool:
        for sid, src in self.sources.items():
            cursor = self.oracle.coordinators[sid].read_cursor()
            at = gtid_seq(cursor.position.gtid, src.domain) if cursor.position else 0
            if at != src.last_gtid_seq() or self.oracle.coordinators[sid].pending_window() is not None:
                return False
        return True


def crash(rig: GroupRig, point: str, source: str | None, windows: int = 1) -> CliResult:
    """SIGKILL a run (of one source, or of the whole group) at `point`; it must fire there."""
    rig.let_next_run_take_lease()
    r = rig.run_units(source, windows=windows, fault=point)
    rig.check(f"crash at {point} ({source or 'group'} run, rc {r.rc})")
    if not (r.killed and point in r.fired):
        raise AssertionError(f"the {source or 'group'} run was not killed at {point}:\n{r.explain()}")
    return r


def drain(rig: GroupRig, max_runs: int = 5) -> int:
    """Clean whole-group runs until every source is at its shard's end; checks each. Returns how many."""
    for i in range(1, max_runs + 1):
        rig.let_next_run_take_lease()
        r = rig.run_units(None, windows=100)
        rig.check(f"clean run {i} (rc {r.rc})")
        if r.rc != RC_OK or (r.report or {}).get("failed"):
            raise AssertionError(f"a clean run failed:\n{r.explain()}")
        if rig.caught_up():
            return i
    raise AssertionError(f"not caught up after {max_runs} clean runs")


def shard_down(rig: GroupRig, rng: random.Random, txns: int = 4) -> str:
    """One source's shard stopped for a run of the whole group: the other sources land their windows, the stopped
    one fails with a source error (a partial failure, exit 9; or exit 3 when the others had nothing to land), and
    nothing of the stopped source moves. The shard comes back; later runs catch it up."""
    rig.write(txns)
    sid = rng.choice(sorted(rig.sources))
    src = rig.sources[sid]
    rig.let_next_run_take_lease()
    src.shard.stop_mariadb()
    try:
        r = rig.run_units(None, windows=2)
    finally:
        src.shard.start_mariadb()
        src.reconnect()
    rig.check(f"the shard of source {sid} down for a run (rc {r.rc})")
    if r.rc not in (RC_PARTIAL, RC_SOURCE):
        raise AssertionError(f"a group run with source {sid}'s shard down exited {r.rc}:\n{r.explain()}")
    return f"shard of {sid} down for a run: rc {r.rc}"
