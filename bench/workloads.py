"""Benchmark tables and workloads: the same column mix generated three ways.

- in MariaDB (`generate`): real binlog ranges for the capture figures, written as fast as the server
  allows: 1000-row transactions are one `INSERT ... SELECT FROM seq_a_to_b` each (MariaDB's SEQUENCE
  engine), 1-row transactions a stored procedure looping over autocommit INSERTs (one GTID each);
- as python values the binlog reader would return (`synthetic_changes`): staged windows for the
  merge and memory figures, without a binlog;
- as Spark SQL expressions (`spark_expr`): Delta tables of 1e5..1e7 rows for the merge figures.

Tables have 5, 20 or 60 columns: `id BIGINT PRIMARY KEY` plus a cycle over the column kinds below
(ints, bigint unsigned, decimal, varchar, datetime(6), timestamp, double, text, enum, blob, date,
tinyint, a nullable varchar). The capture workloads are inserts only (every row image decoded once).
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bench.common import log

ENUM_LABELS = ("new", "paid", "shipped", "cancelled")
_EPOCH = dt.datetime(1970, 1, 1)
_DT_BASE = dt.datetime(2024, 1, 1)
_DATE_BASE = dt.date(2020, 1, 1)
_UBIG_MAX = 18446744073709551615


@dataclass(frozen=True)
class Kind:
    tag: str
    ddl: str
    mysql_type: str  # normalised, as cdc_core.capture.source.describe_tables reports it
    charset: str | None
    sql: str  # MariaDB expression of the row number `{n}`
    spark: str  # Spark SQL expression of the column `id`
    py: Callable[[int, int], Any]  # (row number, salt) -> the value python-mysql-replication returns


KINDS: dict[str, Kind] = {
    k.tag: k
    for k in (
        Kind(
            "int",
            "INT NOT NULL",
            "int",
            None,
            "({n} * 7) % 1000003",
            "(id * 7) % 1000003",
            lambda n, s: (n * 7 + s) % 1000003,
        ),
        Kind(
            "ubig",
            "BIGINT UNSIGNED NOT NULL",
            "bigint unsigned",
            None,
            f"{_UBIG_MAX} - {{n}}",
            f"{_UBIG_MAX} - id",
            lambda n, s: _UBIG_MAX - n - s,
        ),
        Kind(
            "dec",
            "DECIMAL(12,2)",
            "decimal(12,2)",
            None,
            "{n} * 1.25",
            "CAST(id AS DECIMAL(20,2)) * 1.25",
            lambda n, s: decimal.Decimal(n * 125 + s).scaleb(-2),
        ),
        Kind(
            "vc",
            "VARCHAR(64) NOT NULL",
            "varchar(64)",
            "utf8mb4",
            "CONCAT('name-', {n})",
            "concat('name-', id)",
            lambda n, s: f"name-{n}" if not s else f"name-{n}-u{s}",
        ),
        Kind(
            "dt6",
            "DATETIME(6)",
            "datetime(6)",
            None,
            "TIMESTAMP'2024-01-01 00:00:00' + INTERVAL ({n} * 1001) MICROSECOND",
            "timestamp_micros(1704067200000000 + id * 1001)",
            lambda n, s: _DT_BASE + dt.timedelta(microseconds=n * 1001 + s),
        ),
        Kind(
            "ts",
            "TIMESTAMP NULL DEFAULT NULL",
            "timestamp",
            None,
            "FROM_UNIXTIME(1700000000 + {n})",
            "timestamp_seconds(1700000000 + id)",
            lambda n, s: _EPOCH + dt.timedelta(seconds=1700000000 + n + s),
        ),
        Kind("dbl", "DOUBLE", "double", None, "{n} / 3", "id / 3.0D", lambda n, s: n / 3 + s),
        Kind(
            "txt",
            "TEXT",
            "text",
            "utf8mb4",
            "REPEAT(CONCAT('t', {n}, ' '), 8)",
            "repeat(concat('t', id, ' '), 8)",
            lambda n, s: f"t{n + s} " * 8,
        ),
        Kind(
            "enm",
            "ENUM('new','paid','shipped','cancelled') NOT NULL",
            "enum('new','paid','shipped','cancelled')",
            "utf8mb4",
            "ELT(1 + {n} % 4, 'new','paid','shipped','cancelled')",
            "element_at(array('new','paid','shipped','cancelled'), CAST(id % 4 AS INT) + 1)",
            lambda n, s: ENUM_LABELS[(n + s) % 4],
        ),
        Kind(
            "blb",
            "BLOB",
            "blob",
            "binary",
            "UNHEX(SHA2({n}, 256))",
            "unhex(sha2(CAST(id AS STRING), 256))",
            lambda n, s: hashlib.sha256(str(n + s).encode()).digest(),
        ),
        Kind(
            "dte",
            "DATE",
            "date",
            None,
            "DATE'2020-01-01' + INTERVAL ({n} % 3650) DAY",
            "date_add(DATE'2020-01-01', CAST(id % 3650 AS INT))",
            lambda n, s: _DATE_BASE + dt.timedelta(days=(n + s) % 3650),
        ),
        Kind("tiny", "TINYINT NOT NULL", "tinyint", None, "{n} % 100", "id % 100", lambda n, s: (n + s) % 100),
        Kind(
            "nvc",
            "VARCHAR(32) NULL",
            "varchar(32)",
            "utf8mb4",
            "IF({n} % 10 = 0, NULL, CONCAT('v', {n}))",
            "IF(id % 10 = 0, NULL, concat('v', id))",
            lambda n, s: None if n % 10 == 0 else f"v{n + s}",
        ),
    )
}
_CYCLE = ("int", "ubig", "dec", "vc", "dt6", "ts", "dbl", "txt", "enm", "blb", "dte", "tiny", "nvc")
_FIVE = ("int", "vc", "dec", "dt6")


@dataclass(frozen=True)
class TableDef:
    name: str
    kinds: tuple[Kind, ...]  # the non-key columns

    @property
    def width(self) -> int:
        return 1 + len(self.kinds)

    @property
    def columns(self) -> tuple[str, ...]:
        return ("id", *(f"c{i:02d}_{k.tag}" for i, k in enumerate(self.kinds, 1)))

    def create_sql(self, db: str) -> str:
        cols = ["`id` BIGINT NOT NULL PRIMARY KEY"]
        cols += [f"`{c}` {k.ddl}" for c, k in zip(self.columns[1:], self.kinds, strict=False)]
        return f"CREATE TABLE `{db}`.`{self.name}` ({', '.join(cols)}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"

    def sql_values(self, n: str) -> str:
        return ", ".join([n, *(k.sql.format(n=n) for k in self.kinds)])

    def table_schema(self, db: str) -> Any:
        """The cdc_core TableSchema (as describe_tables would give it)."""
        from cdc_core.capture.source import column_attrs
        from cdc_core.model.changes import SourceColumn, TableSchema

        cols = [SourceColumn("id", "bigint", False, ())]
        for c, k in zip(self.columns[1:], self.kinds, strict=False):
            cols.append(SourceColumn(c, k.mysql_type, "NOT NULL" not in k.ddl, column_attrs(k.mysql_type, k.charset)))
        return TableSchema(schema=db, table=self.name, columns=tuple(cols), key=("id",))

    def py_row(self, n: int, salt: int = 0) -> dict[str, Any]:
        row: dict[str, Any] = {"id": n}
        for c, k in zip(self.columns[1:], self.kinds, strict=False):
            row[c] = k.py(n, salt)
        return row


def table_def(width: int, prefix: str = "t") -> TableDef:
    tags = _FIVE if width == 5 else tuple(_CYCLE[i % len(_CYCLE)] for i in range(width - 1))
    return TableDef(f"{prefix}{width}", tuple(KINDS[t] for t in tags))


# --------------------------------------------------------------------------------- MariaDB workloads


@dataclass
class Workload:
    db: str
    table: str
    width: int
    txn_rows: int
    rows: int
    start_file: str = ""
    start_pos: int = 0
    start_gtid: str | None = None
    end_file: str = ""
    end_pos: int = 0
    gen_seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.rows:.0e} rows, {self.width} cols, {self.txn_rows}-row txns".replace("e+0", "e")

    @property
    def files(self) -> list[str]:
        from cdc_core.model.positions import binlog_basename, binlog_file_index

        base = binlog_basename(self.start_file)
        lo, hi = binlog_file_index(self.start_file), binlog_file_index(self.end_file)
        width = len(self.start_file.rpartition(".")[2])
        return [f"{base}.{i:0{width}d}" for i in range(lo, hi + 1)]

    def binlog_bytes(self) -> int | None:
        if self.start_file == self.end_file:
            return self.end_pos - self.start_pos
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "table": f"{self.db}.{self.table}",
            "columns": self.width,
            "txn_rows": self.txn_rows,
            "rows": self.rows,
            "start": f"{self.start_file}:{self.start_pos}",
            "end": f"{self.end_file}:{self.end_pos}",
            "binlog_bytes": self.binlog_bytes(),
            "gen_seconds": round(self.gen_seconds, 2),
        }


def _master_status(cur: Any) -> tuple[str, int]:
    cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    return str(row[0]), int(row[1])


def generate(conn: Any, db: str, width: int, txn_rows: int, rows: int, serial: int) -> Workload:
    """Create a fresh table and write `rows` inserts in `txn_rows`-row transactions, in a binlog file of
    their own (FLUSH BINARY LOGS before and after); returns the binlog range [start, end)."""
    td = table_def(width, prefix=f"w{serial}_t")
    wl = Workload(db=db, table=td.name, width=width, txn_rows=txn_rows, rows=rows)
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        # No Annotate_rows events (the statement text per transaction): the reader never asks for them,
        # and without them mysqlbinlog, the reference, has less to print.
        cur.execute("SET SESSION binlog_annotate_row_events = OFF")
        cur.execute(td.create_sql(db))
        cols = ", ".join(f"`{c}`" for c in td.columns)
        if txn_rows == 1:
            cur.execute(
                f"CREATE PROCEDURE `{db}`.`gen_{td.name}`(a BIGINT, b BIGINT) BEGIN DECLARE i BIGINT DEFAULT a; "
                f"WHILE i < b DO INSERT INTO `{db}`.`{td.name}` ({cols}) VALUES ({td.sql_values('i')}); "
                "SET i = i + 1; END WHILE; END"
            )
        cur.execute("FLUSH BINARY LOGS")
        wl.start_file, wl.start_pos = _master_status(cur)
        cur.execute("SELECT @@gtid_binlog_pos")
        wl.start_gtid = str(cur.fetchone()[0]) or None
        t0 = time.perf_counter()
        done = 0
        last_log = t0
        while done < rows:
            if txn_rows == 1:
                n = min(100_000, rows - done)
                cur.execute(f"CALL `{db}`.`gen_{td.name}`(%s, %s)", (done + 1, done + 1 + n))
            else:
                n = min(txn_rows, rows - done)
                cur.execute(
                    f"INSERT INTO `{db}`.`{td.name}` ({cols}) SELECT {td.sql_values('seq')} "
                    f"FROM `{db}`.seq_{done + 1}_to_{done + n}"
                )
            done += n
            if time.perf_counter() - last_log > 30:
                last_log = time.perf_counter()
                log(f"  generating {wl.label}: {done}/{rows}")
        wl.gen_seconds = time.perf_counter() - t0
        wl.end_file, wl.end_pos = _master_status(cur)
        cur.execute("FLUSH BINARY LOGS")
    return wl


def drop_workload(conn: Any, wl: Workload, purge: bool = False) -> None:
    """Drop the workload's table (and generator procedure); with `purge` (a private server only), also
    the binlog files before the current one."""
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{wl.db}`.`{wl.table}`")
        cur.execute(f"DROP PROCEDURE IF EXISTS `{wl.db}`.`gen_{wl.table}`")
        if purge:
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW MASTER STATUS")
            current = cur.fetchone()[0]
            cur.execute(f"PURGE BINARY LOGS TO '{current}'")


# -------------------------------------------------------------------------------- synthetic changes


def merge_ops(table_rows: int, window: int, seed: int = 7) -> list[tuple[str, int, int]]:
    """(op, id, salt) for a window over a table holding ids 1..table_rows: 50% updates and 20% deletes
    of distinct existing ids (uniformly random), 30% inserts of new ids; in random order."""
    rng = random.Random(seed)
    n_upd, n_del = window // 2, window // 5
    n_ins = window - n_upd - n_del
    if n_upd + n_del > table_rows:
        raise ValueError(f"a window of {window} changes needs at least {n_upd + n_del} existing rows")
    existing = rng.sample(range(1, table_rows + 1), n_upd + n_del)
    ops = [("U", i, 1) for i in existing[:n_upd]] + [("D", i, 0) for i in existing[n_upd:]]
    ops += [("I", table_rows + 1 + j, 0) for j in range(n_ins)]
    rng.shuffle(ops)
    return ops


def synthetic_changes(
    td: TableDef, db: str, ops: list[tuple[str, int, int]], binlog_file: str = "mysql-bin.000002"
) -> Iterator[Any]:
    """RowChanges (values as the binlog reader returns them), one per op, lazily."""
    from cdc_core.model.changes import RowChange
    from cdc_core.model.positions import change_version

    shape = td.table_schema(db)
    base_version = change_version(0, binlog_file, 0)
    for i, (op, n, salt) in enumerate(ops):
        yield RowChange(
            op=op,
            table=shape,
            values=td.py_row(n, salt),
            version=base_version + 1000 + i * 100,
            ordinal=i + 1,
            commit_ts=1_700_000_000.0 + i // 1000,
        )


def synthetic_plan(pipeline: str, seq: int, changes: int, binlog_file: str = "mysql-bin.000002") -> Any:
    """A WindowPlan covering the synthetic changes' versions (staging only needs a consistent plan)."""
    from cdc_core.model.positions import BinlogPosition, ServerIdentity
    from cdc_core.model.window_plan import WindowPlan

    server = ServerIdentity("mariadb", 1)
    start = BinlogPosition(binlog_file, 4, server)
    end = BinlogPosition(binlog_file, 4 + 1000 + changes * 100, server)
    return WindowPlan(
        pipeline, seq, start, end, transactions=max(1, changes // 1000), events=changes, bytes=changes * 100
    )
