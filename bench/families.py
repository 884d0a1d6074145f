"""Capture per type family (issue 19): a table of 20 columns of one family, and mixed wide tables.

For each family of docs/type-map.md a table `id BIGINT PRIMARY KEY` + 20 columns of that family (edge
values cycled in: NULLs, empty strings and sets, zero dates, negative TIME beyond 24 h, BIT(64) all
ones, DECIMAL(65,30) extremes, ...), and mixed tables of 10, 20 and 60 columns cycling over every family
(a rich real-world schema); each written as inserts and as updates (every column changed), in 1-row and
1000-row transactions. Every workload is measured like the `capture` section (bench/capture.py: our
stage step vs the stock python-mysql-replication loop vs `mysqlbinlog -v`, interleaved in the same
rounds), so each row of the results table carries both ratios measured in one run.

    python -m bench --only families --family-rows 100000            # the issue's size (long)
    python -m bench --only families --family-rows 5000 --repeats 1  # a quick pass

The section merges into the existing results file (other sections' figures are kept).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench.capture import measure
from bench.common import SourceInfo, log, now_iso, short_error
from bench.workloads import Workload, _master_status

# family -> (DDL type, MariaDB expression of the row number {n}, 0 <= {j} < 20 the column's index).
# Values cycle through each family's edge values; about one row in 13 is NULL where the DDL allows it.
FAMILIES: dict[str, tuple[str, str]] = {
    "tinyint": ("TINYINT", "CAST({n} % 256 AS SIGNED) - 128"),
    "smallint_u": ("SMALLINT UNSIGNED", "{n} % 65536"),
    "mediumint": ("MEDIUMINT", "CAST({n} * 7919 % 16777216 AS SIGNED) - 8388608"),
    "int": ("INT", "CAST({n} * 2654435761 % 4294967296 AS SIGNED) - 2147483648"),
    "int_u": ("INT UNSIGNED", "{n} * 2654435761 % 4294967296"),
    "bigint": ("BIGINT", "IF({n} % 97 = 0, -9223372036854775808, CAST({n} AS SIGNED) * 9223372036854 * "
               "IF({n} % 2, -1, 1))"),
    "bigint_u": ("BIGINT UNSIGNED", "18446744073709551615 - {n}"),
    "decimal18": ("DECIMAL(18,4)", "({n} * 7919 % 100000000000000) / 10000 * IF({n} % 2, -1, 1)"),
    "decimal38": ("DECIMAL(38,10)",
                  "CAST({n} AS DECIMAL(38,10)) * 1234567890123.4567890123 * IF({n} % 2, -1, 1)"),
    "decimal65": ("DECIMAL(65,30)",
                  "IF({n} % 7 = 0, 99999999999999999999999999999999999.999999999999999999999999999999, "
                  "CAST({n} AS DECIMAL(65,30)) / 7 * IF({n} % 2, -1, 1))"),
    "float": ("FLOAT", "{n} / 8 * IF({n} % 2, -1, 1)"),
    "double": ("DOUBLE", "{n} / 3 * IF({n} % 2, -1, 1)"),
    "date": ("DATE", "IF({n} % 17 = 0, '0000-00-00', '1000-01-01' + INTERVAL ({n} * 37 % 3000000) DAY)"),
    "datetime0": ("DATETIME", "'1000-01-01' + INTERVAL ({n} * 7919 % 200000000000) SECOND"),
    "datetime6": ("DATETIME(6)", "'2024-01-01' + INTERVAL ({n} * 1000003) MICROSECOND"),
    "timestamp3": ("TIMESTAMP(3) NULL", "FROM_UNIXTIME(1 + {n} * 7919 % 2147000000 + ({n} % 1000) / 1000)"),
    "time6": ("TIME(6)", "SEC_TO_TIME(CAST({n} * 7919 % 6039000 AS SIGNED) - 3019500 + ({n} % 1000000) / 1000000)"),
    "year": ("YEAR", "IF({n} % 50 = 0, 0, 1901 + {n} % 255)"),
    "enum": ("ENUM('new','paid','shipped','cancelled','ünïcödé')", "{n} % 6"),
    "set": ("SET('zeta','alpha','mid','ñu')", "{n} % 16"),
    "bit": ("BIT(10)", "{n} % 1024"),
    "bit64": ("BIT(64)", "IF({n} % 9 = 0, 18446744073709551615, {n} * 2654435761)"),
    "char": ("CHAR(12)", "IF({n} % 11 = 0, '', CONCAT('c', {n} % 1000, ' '))"),
    "varchar": ("VARCHAR(64)", "IF({n} % 11 = 0, '', CONCAT('välue 🎉 ', {n}, ' '))"),
    "text": ("TEXT", "REPEAT(CONCAT('tëxt ', {n}), 1 + {n} % 8)"),
    "latin1": ("VARCHAR(32) CHARACTER SET latin1", "CONCAT('café € ', {n})"),
    "binary": ("BINARY(16)", "UNHEX(RPAD(HEX({n}), 16, '0'))"),
    "varbinary": ("VARBINARY(32)", "UNHEX(CONCAT(HEX({n}), '00FF'))"),
    "blob": ("BLOB", "REPEAT(UNHEX('00FF7F'), 1 + {n} % 40)"),
    "json": ("JSON", "JSON_OBJECT('id', {n}, 'tags', JSON_ARRAY('a', {n} % 7), 'ok', {n} % 2 = 0)"),
}
MIXED_WIDTHS = (10, 20, 60)
COLUMNS_PER_FAMILY = 20


def _value(expr: str, n: str, j: int, nullable: bool) -> str:
    v = expr.format(n=f"({n} + {j * 7})")
    return f"IF(({n} + {j}) % 13 = 0, NULL, {v})" if nullable else v


def table_columns(kind: str) -> list[tuple[str, str, str]]:
    """(column, DDL type, expression template) of the table `kind` (a family or 'mixedN')."""
    if kind.startswith("mixed"):
        width = int(kind[5:])
        fams = list(FAMILIES)
        return [
            (f"c{j:02d}_{fams[j % len(fams)]}", *FAMILIES[fams[j % len(fams)]]) for j in range(width - 1)
        ]
    ddl, expr = FAMILIES[kind]
    return [(f"c{j:02d}", ddl, expr) for j in range(COLUMNS_PER_FAMILY)]


def generate(conn: Any, db: str, kind: str, txn_rows: int, rows: int, op: str, serial: int) -> Workload:
    """A fresh table of `kind`, `rows` rows; the measured binlog range holds their inserts (op 'insert')
    or an update of every column of every row (op 'update'), in `txn_rows`-row transactions."""
    cols = table_columns(kind)
    table = f"f{serial}_{kind}_{op}_{txn_rows}"
    wl = Workload(db=db, table=table, width=len(cols) + 1, txn_rows=txn_rows, rows=rows)
    names = ", ".join(f"`{c}`" for c, _, _ in cols)

    def values(n: str, salt: int) -> str:
        return ", ".join(_value(e, f"({n} + {salt})", j, True) for j, (_, _, e) in enumerate(cols))

    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'")  # zero dates, ENUM index 0
        cur.execute("SET SESSION binlog_annotate_row_events = OFF")
        ddl = ", ".join(f"`{c}` {t}" for c, t, _ in cols)
        cur.execute(f"CREATE TABLE `{db}`.`{table}` (`id` BIGINT NOT NULL PRIMARY KEY, {ddl}) DEFAULT CHARSET=utf8mb4")
        sets = ", ".join(f"`{c}` = {_value(e, '(id + 1)', j, True)}" for j, (c, _, e) in enumerate(cols))
        if op == "update":  # the rows exist before the range
            for lo in range(1, rows + 1, 1000):
                hi = min(rows, lo + 999)
                cur.execute(f"INSERT INTO `{db}`.`{table}` (id, {names}) SELECT seq, {values('seq', 0)} "
                            f"FROM `{db}`.seq_{lo}_to_{hi}")
        if txn_rows == 1:
            body = (
                f"INSERT INTO `{db}`.`{table}` (id, {names}) VALUES (i, {values('i', 0)})" if op == "insert"
                else f"UPDATE `{db}`.`{table}` SET {sets} WHERE id = i"
            )
            cur.execute(
                f"CREATE PROCEDURE `{db}`.`gen_{table}`(a BIGINT, b BIGINT) BEGIN DECLARE i BIGINT DEFAULT a; "
                f"WHILE i < b DO {body}; SET i = i + 1; END WHILE; END"
            )
        cur.execute("FLUSH BINARY LOGS")
        wl.start_file, wl.start_pos = _master_status(cur)
        cur.execute("SELECT @@gtid_binlog_pos")
        wl.start_gtid = str(cur.fetchone()[0]) or None
        t0 = time.perf_counter()
        done = 0
        while done < rows:
            if txn_rows == 1:
                n = min(100_000, rows - done)
                cur.execute(f"CALL `{db}`.`gen_{table}`(%s, %s)", (done + 1, done + 1 + n))
            else:
                n = min(txn_rows, rows - done)
                lo, hi = done + 1, done + n
                if op == "insert":
                    cur.execute(f"INSERT INTO `{db}`.`{table}` (id, {names}) SELECT seq, {values('seq', 0)} "
                                f"FROM `{db}`.seq_{lo}_to_{hi}")
                else:
                    cur.execute(f"UPDATE `{db}`.`{table}` SET {sets} WHERE id BETWEEN {lo} AND {hi}")
            done += n
        wl.gen_seconds = time.perf_counter() - t0
        wl.end_file, wl.end_pos = _master_status(cur)
        cur.execute("FLUSH BINARY LOGS")
    return wl


def run(
    si: SourceInfo, db: str, kinds: list[str], rows: int, txn_sizes: list[int], ops: list[str], repeats: int,
    long_run: float, workdir: Path, stock_max_rows: int, purge: bool = False,
) -> dict[str, Any]:
    from bench.workloads import drop_workload

    conn = si.root_connect()
    results = []
    errors: list[str] = []
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        serial = 0
        for kind in kinds:
            for op in ops:
                for t in txn_sizes:
                    serial += 1
                    log(f"families: {kind}, {rows} {op}s in {t}-row txns")
                    try:
                        wl = generate(conn, db, kind, t, rows, op, serial)
                    except Exception as e:
                        errors.append(f"{kind} {op} {t}: generating failed: {short_error(e)}")
                        log(f"  {errors[-1]}")
                        continue
                    m = measure(si, wl, repeats, long_run, workdir, stock_max_rows, extras_max_rows=0,
                                before_images=op == "update")
                    m.update({"family": kind, "op": op, "load_avg": os.getloadavg()[0], "measured_at": now_iso()})
                    results.append(m)
                    log(f"  {kind} {op} {t}: x{m.get('ratio_ours_to_stock')} stock, "
                        f"{m.get('ratio_ours_to_mysqlbinlog')} of mysqlbinlog")
                    drop_workload(conn, wl, purge=purge)
    finally:
        conn.close()
    return {"workloads": results, "rows": rows, "errors": errors}


def default_kinds() -> list[str]:
    return [*FAMILIES, *(f"mixed{w}" for w in MIXED_WIDTHS)]
