"""Schema-change figures (issue 34, "Benchmarks"): the cost of a window that holds a DDL statement, against the
same window without it, merged by the product's merge job (`spark_apps.merge_window.merge_window`).

A Delta table of `rows` rows (the merge section's 20-column mix, built by bench.merge.build_table with the
pipeline's writer record) takes one window of `window` changes (bench.workloads.merge_ops: 50% updates, 20%
deletes, 30% inserts) twice per case: without DDL, and with the statement in the middle of the window. The
statement is parsed by the product's parser (`cdc_core.capture.ddl_events.typed_statement`, as the binlog reader
does) and staged with the window's rows by `cdc_core.lake.staging.stage_window`, at its place among them: the rows
after it carry the new shape (renamed column, added column with the source's value, BIGINT), as the binlog would.

Cases (each against its table's window without DDL):

- `truncate`, `truncate_soft`: TRUNCATE TABLE (hard deletes; soft deletes on a table built in soft mode);
- `rename_cm`: RENAME COLUMN with `schema_changes.column_mapping: true` (the default: metadata only);
- `rename_rewrite`: the same with `column_mapping: false` (the table rewritten);
- `add_default`: ADD COLUMN d INT NOT NULL DEFAULT 7 (every older row filled);
- `modify_widen`: MODIFY an INT column to BIGINT (the column rewritten);
- `wide_add_default`: ADD COLUMN ... DEFAULT 7 on a 60-column table over every type family of the type map
  (a shape users have), built through the product's own staging and first merge.

References: `empty_commit` (a window whose manifest names the table without rows or schema changes: the merge
only records the window's txn), `rename_only` (a window holding only the RENAME), and plain Spark statements on
the same table without the product: `ALTER TABLE ADD COLUMNS` + `UPDATE SET d = 7` (`plain_fill`,
`wide_plain_fill`) and `DELETE FROM t` without a condition (`plain_delete`).

Every run merges into a fresh copy of a pristine table (copied outside the timing), so all runs start from
the same table version; rounds go over every case in turn (load from other users hits them alike). Per run:
seconds, the merge report's per-table `steps`, the job's log lines (`merge.plan`, `merge.schema_change`,
`merge.table_rewritten`, ...) with their time from the start, and the table's Delta commits (operation, files
added and removed, rows) with their time: where the time goes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import hashlib
import logging
import re
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import Stat, load_avg, log, now_iso, short_error
from bench.workloads import TableDef, merge_ops, synthetic_plan, table_def

SCHEMA = "bench"
PIPELINE = "bench"
SEQ = 2  # the windows' seq (the wide table's base is window 1 of the same pipeline)
TOKEN = 0x5C
BASE_FILE = "mysql-bin.000001"  # versions of the wide table's base rows
WINDOW_FILE = "mysql-bin.000002"  # versions of every window's changes (newer than any base row)

# -------------------------------------------------------------------------------- the 60-column table

_D = decimal.Decimal
_ENUM = ("new", "paid", "shipped", "cancelled", "ünïcödé")
_SET = ("x", "y", "z", "ñu")


def _set_value(n: int) -> set[str]:
    return {label for i, label in enumerate(_SET) if (n >> i) & 1}


# (MySQL type as the type map names it, charset, python value of row n with salt s, as the binlog reader gives it)
WIDE_TYPES: tuple[tuple[str, str | None, Callable[[int, int], Any]], ...] = (
    ("tinyint", None, lambda n, s: (n * 7 + s) % 256 - 128),
    ("tinyint unsigned", None, lambda n, s: (n + s) % 256),
    ("smallint", None, lambda n, s: (n * 31 + s) % 65536 - 32768),
    ("smallint unsigned", None, lambda n, s: (n + s) % 65536),
    ("mediumint", None, lambda n, s: (n * 7919 + s) % 16777216 - 8388608),
    ("mediumint unsigned", None, lambda n, s: (n + s) % 16777216),
    ("int", None, lambda n, s: (n * 2654435761 + s) % 4294967296 - 2147483648),
    ("int unsigned", None, lambda n, s: (n * 2654435761 + s) % 4294967296),
    ("bigint", None, lambda n, s: (n * 9223372036854 + s) % (2**63) * (-1 if n % 2 else 1)),
    ("bigint unsigned", None, lambda n, s: 18446744073709551615 - n - s),
    ("decimal(10,2)", None, lambda n, s: _D(n * 7 + s).scaleb(-2)),
    ("decimal(38,10)", None, lambda n, s: _D(n * 1234567891 + s).scaleb(-10)),
    ("decimal(65,30)", None, lambda n, s: _D(f"{n + s}.{(n * 7919) % 10**30:030d}")),
    ("float", None, lambda n, s: (n + s) / 8),
    ("double", None, lambda n, s: (n + s) / 3),
    ("date", None, lambda n, s: dt.date(2000, 1, 1) + dt.timedelta(days=(n + s) % 10000)),
    ("datetime", None, lambda n, s: dt.datetime(2000, 1, 1) + dt.timedelta(seconds=n * 7919 + s)),
    ("datetime(6)", None, lambda n, s: dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=n * 1000003 + s)),
    ("timestamp", None, lambda n, s: dt.datetime(2023, 11, 14) + dt.timedelta(seconds=n + s)),
    ("timestamp(6)", None, lambda n, s: dt.datetime(2023, 11, 14) + dt.timedelta(microseconds=n * 999983 + s)),
    ("time", None, lambda n, s: dt.timedelta(seconds=(n * 7919 + s) % 6039000 - 3019500)),
    ("time(6)", None, lambda n, s: dt.timedelta(microseconds=((n * 7919 + s) % 6039000 - 3019500) * 1000003)),
    ("year", None, lambda n, s: 1901 + (n + s) % 255),
    ("char(10)", "utf8mb4", lambda n, s: f"c{(n + s) % 100000}"),
    ("varchar(255)", "utf8mb4", lambda n, s: f"välue 🎉 {n + s}"),
    ("text", "utf8mb4", lambda n, s: f"tëxt {n + s} " * (1 + n % 8)),
    ("varchar(32)", "latin1", lambda n, s: f"café {n + s}"),
    ("binary(4)", "binary", lambda n, s: ((n + s) % 4294967296).to_bytes(4, "big")),
    ("varbinary(20)", "binary", lambda n, s: (n + s).to_bytes(8, "big")),
    ("blob", "binary", lambda n, s: hashlib.sha256(str(n + s).encode()).digest()),
    ("json", None, lambda n, s: f'{{"id": {n + s}, "tags": ["a", {n % 7}], "ok": {str(n % 2 == 0).lower()}}}'),
    ("enum('new','paid','shipped','cancelled','ünïcödé')", "utf8mb4", lambda n, s: _ENUM[(n + s) % 5]),
    ("set('x','y','z','ñu')", "utf8mb4", lambda n, s: _set_value(n + s)),
    ("bit(1)", None, lambda n, s: str((n + s) % 2)),
    ("bit(64)", None, lambda n, s: format((n * 2654435761 + s) % 2**64, "064b")),
)


@dataclasses.dataclass(frozen=True)
class WideDef:
    """`id BIGINT` + `width - 1` columns cycling over WIDE_TYPES; about one value in 13 is NULL."""

    name: str
    width: int

    @property
    def columns(self) -> tuple[tuple[str, str, str | None, Callable[[int, int], Any]], ...]:
        out = []
        for i in range(1, self.width):
            mysql_type, charset, fn = WIDE_TYPES[(i - 1) % len(WIDE_TYPES)]
            tag = re.sub(r"[^a-z0-9]+", "_", mysql_type.split("(")[0])
            out.append((f"c{i:02d}_{tag}", mysql_type, charset, fn))
        return tuple(out)

    def table_schema(self, db: str) -> Any:
        from cdc_core.capture.source import column_attrs
        from cdc_core.model.changes import SourceColumn, TableSchema

        cols = [SourceColumn("id", "bigint", False, ())]
        cols += [SourceColumn(c, t, True, column_attrs(t, cs)) for c, t, cs, _ in self.columns]
        return TableSchema(schema=db, table=self.name, columns=tuple(cols), key=("id",))

    def py_row(self, n: int, salt: int = 0) -> dict[str, Any]:
        row: dict[str, Any] = {"id": n}
        for j, (c, _, _, fn) in enumerate(self.columns):
            row[c] = None if (n + j) % 13 == 0 else fn(n, salt)
        return row


# ------------------------------------------------------------------------------------------ windows


def _statement(query: str, version: int, ordinal: int, commit_ts: float) -> Any:
    """The statement as the binlog reader stages it: parsed by the product's parser, placed at `version`."""
    from cdc_core.capture.binlog.schema_events import SchemaChangeEvent
    from cdc_core.capture.ddl_events import typed_statement
    from cdc_core.model.schema_policy import SchemaPolicy

    st = typed_statement(
        query, SCHEMA, version=version, commit_ts=commit_ts, position=f"{WINDOW_FILE}:{version & 0xFFFFFFFF}",
        captured=lambda s, t: True, schema_captured=lambda s: True, policy=SchemaPolicy(), pipeline=PIPELINE,
    )
    if st is None or not st.changes:
        raise RuntimeError(f"the parser gives no schema change for {query!r}")
    return SchemaChangeEvent.of(ordinal, st)


def _changes(
    shape: Any,
    py_row: Callable[[int, int], dict[str, Any]],
    ops: list[tuple[str, int, int]],
    binlog_file: str,
    ddl: str | None = None,
    after: Callable[[Any, dict[str, Any]], tuple[Any, dict[str, Any]]] | None = None,
) -> Iterator[Any]:
    """RowChanges of `ops` (values as the binlog reader returns them); with `ddl`, the statement in the middle,
    and `after(shape, values)` giving each later row's shape and values."""
    from cdc_core.model.changes import RowChange
    from cdc_core.model.positions import change_version

    base = change_version(0, binlog_file, 0) + 1000
    half = len(ops) // 2
    ordinal = 0
    shape_now = shape
    for i, (op, n, salt) in enumerate(ops):
        version = base + i * 100
        if ddl is not None and i == half:
            ordinal += 1
            yield _statement(ddl, version - 50, ordinal, 1_700_000_000.0 + i // 1000)
        values = py_row(n, salt)
        if ddl is not None and after is not None and i >= half:
            shape_now, values = after(shape, values)
        ordinal += 1
        yield RowChange(op=op, table=shape_now, values=values, version=version, ordinal=ordinal,
                        commit_ts=1_700_000_000.0 + i // 1000)


def _stage(staging_root: Path, changes: Iterator[Any], count: int) -> tuple[Any, str, float]:
    from cdc_core.lake.staging import stage_window
    from cdc_core.model.layout import window_dir

    plan = synthetic_plan(PIPELINE, SEQ, count)
    t0 = time.perf_counter()
    manifest = stage_window(plan, changes, str(staging_root))
    return manifest, window_dir(str(staging_root), PIPELINE, SEQ), time.perf_counter() - t0


def _rename_column(old: str, new: str) -> Callable[[Any, dict[str, Any]], tuple[Any, dict[str, Any]]]:
    cache: dict[int, Any] = {}

    def after(shape: Any, values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        if id(shape) not in cache:
            cols = tuple(dataclasses.replace(c, name=new) if c.name == old else c for c in shape.columns)
            cache[id(shape)] = dataclasses.replace(shape, columns=cols)
        return cache[id(shape)], {(new if k == old else k): v for k, v in values.items()}

    return after


def _add_column(name: str, value: int) -> Callable[[Any, dict[str, Any]], tuple[Any, dict[str, Any]]]:
    from cdc_core.model.changes import SourceColumn

    cache: dict[int, Any] = {}

    def after(shape: Any, values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        if id(shape) not in cache:
            cache[id(shape)] = dataclasses.replace(shape, columns=(*shape.columns, SourceColumn(name, "int", False)))
        return cache[id(shape)], {**values, name: value}

    return after


def _modify_type(column: str, mysql_type: str) -> Callable[[Any, dict[str, Any]], tuple[Any, dict[str, Any]]]:
    cache: dict[int, Any] = {}

    def after(shape: Any, values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        if id(shape) not in cache:
            cols = tuple(dataclasses.replace(c, mysql_type=mysql_type) if c.name == column else c
                         for c in shape.columns)
            cache[id(shape)] = dataclasses.replace(shape, columns=cols)
        return cache[id(shape)], values

    return after


# ------------------------------------------------------------------------------------------ tables


class Lake:
    """A pristine Delta table every run starts from (copied per run, outside the timing)."""

    def __init__(self, spark: Any, workdir: Path, key: str, name: str, shape: Any,
                 py_row: Callable[[int, int], dict[str, Any]], rows: int, delete_mode: str) -> None:
        self.spark = spark
        self.key = key
        self.name = name
        self.shape = shape
        self.py_row = py_row
        self.rows = rows
        self.delete_mode = delete_mode
        self.workdir = workdir
        self.root = workdir / f"pristine_{key}"
        self.version = 0
        self.files = 0
        self.bytes = 0
        self.build_seconds = 0.0

    def uri(self, root: Path | str | None = None) -> str:
        from spark_apps.merge import table_uri

        return table_uri(str(root or self.root), SCHEMA, self.name)

    def build_spark(self, td: TableDef) -> None:
        """The merge section's table (bench.merge.build_table), recording this pipeline as its writer."""
        from bench.merge import build_table
        from cdc_core.model.lake_writers import writer_value

        t0 = time.perf_counter()
        self.version, self.files = build_table(
            self.spark, td, self.uri(), self.rows, delete_mode=self.delete_mode, writer=writer_value(PIPELINE)
        )
        self.build_seconds = time.perf_counter() - t0
        self._size()

    def build_staged(self) -> None:
        """Rows staged like the binlog reader's (every type through the product's type map), landed by the
        product's merge as the pipeline's window 1 (the table created by it)."""
        from cdc_core.lake.staging import stage_window
        from cdc_core.model.changes import RowChange
        from cdc_core.model.positions import change_version
        from spark_apps.merge import merge_window

        t0 = time.perf_counter()
        base = change_version(0, BASE_FILE, 0) + 1000

        def rows() -> Iterator[Any]:
            for n in range(1, self.rows + 1):
                yield RowChange("I", self.shape, self.py_row(n, 0), base + n * 10, n,
                                1_690_000_000.0 + n // 1000)

        plan = synthetic_plan(PIPELINE, 1, self.rows, BASE_FILE)
        staging = self.workdir / f"staging_base_{self.key}"
        manifest = stage_window(plan, rows(), str(staging))
        from cdc_core.model.layout import window_dir

        merge_window(self.spark, manifest, window_dir(str(staging), PIPELINE, 1), str(self.root), PIPELINE, 1,
                     TOKEN, delete_mode=self.delete_mode, small_table_rows=0)
        shutil.rmtree(staging, ignore_errors=True)
        from delta.tables import DeltaTable

        self.version = int(DeltaTable.forPath(self.spark, self.uri()).history(1).collect()[0]["version"])
        self.files = int(self.spark.sql(f"DESCRIBE DETAIL delta.`{self.uri()}`").collect()[0]["numFiles"])
        self.build_seconds = time.perf_counter() - t0
        self._size()

    def _size(self) -> None:
        self.bytes = sum(p.stat().st_size for p in Path(self.uri()).rglob("*") if p.is_file())

    def copy(self, dest: Path) -> None:
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(self.root, dest)

    def to_dict(self) -> dict[str, Any]:
        return {"table": f"{SCHEMA}.{self.name}", "rows": self.rows, "columns": len(self.shape.columns),
                "delete_mode": self.delete_mode, "files": self.files, "mb": round(self.bytes / 1e6, 1),
                "delta_version": self.version, "build_seconds": round(self.build_seconds, 1)}


# ------------------------------------------------------------------------------------------ cases


@dataclasses.dataclass
class Case:
    name: str
    label: str
    lake: str  # Lake.key
    kind: str  # window | ddl_only | empty | plain_fill | plain_delete
    ddl: str | None = None
    compare: str | None = None  # the case it is compared with (the same window without DDL)
    column_mapping: bool = True
    after: Callable[[Any, dict[str, Any]], tuple[Any, dict[str, Any]]] | None = None
    expectation: str | None = None
    manifest: Any = None
    wdir: str = ""
    stage_seconds: float = 0.0
    secs: Stat = dataclasses.field(default_factory=lambda: Stat(unit="s"))
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    pairs: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # (without, with) seconds
    stopped: bool = False


def default_cases(td: TableDef, wide: WideDef) -> list[Case]:
    t, w = td.name, wide.name
    int_col, vc_col = td.columns[1], td.columns[4]  # c01_int (INT NOT NULL), c04_vc (VARCHAR(64))
    return [
        Case("base", "no DDL (20 columns, hard deletes)", "m", "window"),
        Case("truncate", "TRUNCATE TABLE (hard deletes)", "m", "window", f"TRUNCATE TABLE {t}", "base"),
        Case("rename_cm", "RENAME COLUMN, column_mapping: true", "m", "window",
             f"ALTER TABLE {t} RENAME COLUMN {vc_col} TO {vc_col}_renamed", "base",
             after=_rename_column(vc_col, f"{vc_col}_renamed"),
             expectation="metadata only, about the cost of an empty commit"),
        Case("rename_rewrite", "RENAME COLUMN, column_mapping: false", "m", "window",
             f"ALTER TABLE {t} RENAME COLUMN {vc_col} TO {vc_col}_renamed", "base", column_mapping=False,
             after=_rename_column(vc_col, f"{vc_col}_renamed")),
        Case("add_default", "ADD COLUMN d INT NOT NULL DEFAULT 7", "m", "window",
             f"ALTER TABLE {t} ADD COLUMN d INT NOT NULL DEFAULT 7", "base", after=_add_column("d", 7)),
        Case("modify_widen", f"MODIFY {int_col} INT -> BIGINT", "m", "window",
             f"ALTER TABLE {t} MODIFY {int_col} BIGINT NOT NULL", "base", after=_modify_type(int_col, "bigint")),
        Case("empty_commit", "empty commit: the table named without rows or schema changes (txn only)", "m",
             "empty"),
        Case("rename_only", "RENAME COLUMN alone (a window of only the statement), column_mapping: true", "m",
             "ddl_only", f"ALTER TABLE {t} RENAME COLUMN {vc_col} TO {vc_col}_renamed", "empty_commit"),
        Case("plain_fill", "plain Spark: ALTER TABLE ADD COLUMNS (d INT) + UPDATE SET d = 7", "m", "plain_fill"),
        Case("plain_delete", "plain Spark: DELETE FROM t (no condition)", "m", "plain_delete"),
        Case("base_soft", "no DDL (20 columns, soft deletes)", "s", "window"),
        Case("truncate_soft", "TRUNCATE TABLE (soft deletes: tombstones)", "s", "window", f"TRUNCATE TABLE {t}",
             "base_soft"),
        Case("wide_base", "no DDL (60 columns)", "w", "window"),
        Case("wide_add_default", "ADD COLUMN d INT NOT NULL DEFAULT 7 (60 columns)", "w", "window",
             f"ALTER TABLE {w} ADD COLUMN d INT NOT NULL DEFAULT 7", "wide_base", after=_add_column("d", 7)),
        Case("wide_plain_fill", "plain Spark: ALTER TABLE ADD COLUMNS + UPDATE SET d = 7 (60 columns)", "w",
             "plain_fill"),
    ]


def _stage_case(case: Case, lake: Lake, workdir: Path, window: int) -> None:
    from cdc_core.capture.binlog.schema_events import SchemaChangeEvent
    from cdc_core.model.positions import change_version

    staging = workdir / f"staging_{case.name}"
    if case.kind == "window":
        ops = merge_ops(lake.rows, window)
        changes = _changes(lake.shape, lake.py_row, ops, WINDOW_FILE, case.ddl, case.after)
        case.manifest, case.wdir, case.stage_seconds = _stage(staging, changes, len(ops))
    elif case.kind == "ddl_only":
        assert case.ddl is not None
        version = change_version(0, WINDOW_FILE, 0) + 1000
        case.manifest, case.wdir, case.stage_seconds = _stage(
            staging, iter([_statement(case.ddl, version, 1, 1_700_000_000.0)]), 1
        )
    elif case.kind == "empty":
        # What staging writes for a table a window names only by DDL, without the DDL: the merge records the
        # window's txn in the table and nothing else (merge_window: a table without key or rows).
        version = change_version(0, WINDOW_FILE, 0) + 1000
        event = SchemaChangeEvent(1, SCHEMA, "-- (no statement)", version, 1_700_000_000.0, (),
                                  ((SCHEMA, lake.name),))
        case.manifest, case.wdir, case.stage_seconds = _stage(staging, iter([event]), 1)


# ------------------------------------------------------------------------------------------ runs


class _Events(logging.Handler):
    """The merge job's log lines (logger `cdc.merge`), with their time."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.perf_counter(), record.getMessage()))


_KEEP = ("table", "change", "structure", "properties", "status", "note", "secs", "inserted", "updated", "deleted")
_METRICS = (
    "numAddedFiles", "numRemovedFiles", "numDeletionVectorsAdded", "numAddedBytes", "numOutputRows",
    "numUpdatedRows", "numDeletedRows", "numCopiedRows", "numTargetRowsInserted", "numTargetRowsUpdated",
    "numTargetRowsDeleted", "numTargetRowsCopied", "executionTimeMs", "scanTimeMs", "rewriteTimeMs",
)


def _fields(message: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip('"') for m in re.finditer(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', message)}


def _commits(spark: Any, uri: str, after_version: int, wall0: float) -> list[dict[str, Any]]:
    from delta.tables import DeltaTable

    rows = (
        DeltaTable.forPath(spark, uri).history().where(f"version > {after_version}")
        .select("version", "timestamp", "operation", "operationMetrics").orderBy("version").collect()
    )
    out = []
    for r in rows:
        metrics = {k: int(v) for k, v in (r["operationMetrics"] or {}).items() if k in _METRICS and v not in (None, "")}
        out.append({"version": int(r["version"]), "at": round(r["timestamp"].timestamp() - wall0, 2),
                    "operation": r["operation"], **{k: v for k, v in metrics.items() if v}})
    return out


def _writes_data(c: dict[str, Any]) -> bool:
    return bool(c.get("numAddedFiles") or c.get("numRemovedFiles") or c.get("numDeletionVectorsAdded"))


def run_case(spark: Any, case: Case, lake: Lake, workdir: Path, events: _Events, check: bool) -> dict[str, Any]:
    """One timed run on a fresh copy of the case's table; returns what it saw."""
    from cdc_core.model.manifest import COL_DELETED
    from cdc_core.model.schema_policy import SchemaPolicy
    from spark_apps.merge import merge_window

    root = workdir / f"run_{case.name}"
    lake.copy(root)
    uri = lake.uri(root)
    events.lines.clear()
    load = load_avg()
    wall0 = time.time()
    t0 = time.perf_counter()
    report: dict[str, Any] | None = None
    if case.kind in ("window", "ddl_only", "empty"):
        report = merge_window(
            spark, case.manifest, case.wdir, str(root), PIPELINE, SEQ, TOKEN, delete_mode=lake.delete_mode,
            small_table_rows=0, schema_policy=SchemaPolicy(column_mapping=case.column_mapping),
        )
    elif case.kind == "plain_fill":
        spark.sql(f"ALTER TABLE delta.`{uri}` ADD COLUMNS (d INT)")
        spark.sql(f"UPDATE delta.`{uri}` SET d = 7").collect()
    elif case.kind == "plain_delete":
        spark.sql(f"DELETE FROM delta.`{uri}`").collect()
    took = time.perf_counter() - t0
    run: dict[str, Any] = {"seconds": round(took, 3), "load": load}
    lines = []
    for at, message in events.lines:
        f = _fields(message)
        name = f.get("event", message.partition(" ")[0])
        lines.append({"at": round(at - t0, 2), "event": name, **{k: f[k][:80] for k in _KEEP if k in f}})
    run["log"] = lines
    commits = _commits(spark, uri, lake.version, wall0)
    run["commits"] = commits
    if report is not None:
        table = report["tables"].get(f"{SCHEMA}.{lake.name}") or {}
        run["table"] = {k: v for k, v in table.items() if k != "base"}
        run["job_seconds"] = report.get("seconds")
        plan_at = next((x["at"] for x in lines if x["event"] == "merge.plan"), 0.0)
        schema_end = max((x["at"] for x in lines if x["event"] == "merge.schema_change"), default=plan_at)
        run["phases"] = {
            "before_plan": plan_at,  # txn and writer reads, the window's schema changes resolved
            "schema_phase": round(schema_end - plan_at, 2),  # every DDL step, before any row lands
            "table": table.get("seconds"),  # the rows (per-table `steps`)
        }
        # The DDL's commits: every commit but the window's own (its MERGE / txn commit, the last one).
        run["ddl_commits"] = [c["operation"] for c in commits[:-1]]
        run["ddl_writes_data"] = any(_writes_data(c) for c in commits[:-1])
    if check:  # what the table holds afterwards (first round only, outside the timing)
        df = spark.read.format("delta").load(uri)
        live = df.where(f"NOT {COL_DELETED}") if COL_DELETED in df.columns else df
        run["after"] = {"rows": live.count(), "columns": len(df.columns),
                        "new_columns": sorted(set(df.columns) - {c.name for c in lake.shape.columns}
                                              - {c for c in df.columns if c.startswith("_cdc_")}),
                        "types": {f.name: f.dataType.simpleString() for f in df.schema.fields
                                  if f.name in ("d", "c01_int")}}
    shutil.rmtree(root, ignore_errors=True)
    return run


def _timed(spark: Any, case: Case, lake: Lake, workdir: Path, events: _Events, errors: list[str],
           label: str) -> dict[str, Any] | None:
    """One run of `case`, recorded in it (its first run also checks what the table holds afterwards)."""
    log(f"schema: {label}: {case.name} ({case.label})")
    try:
        got = run_case(spark, case, lake, workdir, events, check=not case.runs)
    except Exception as e:
        errors.append(f"{case.name}: {short_error(e)}")
        log(f"  {case.name} failed: {short_error(e)}")
        return None
    case.runs.append(got)
    case.secs.values.append(got["seconds"])
    log(f"  {got['seconds']:.1f}s (phases {got.get('phases')}, commits {[c['operation'] for c in got['commits']]})")
    return got


def _case_entry(case: Case, by_name: dict[str, Case], lakes: dict[str, Lake], started: str) -> dict[str, Any]:
    e: dict[str, Any] = {
        "name": case.name, "label": case.label, "kind": case.kind, "table": lakes[case.lake].to_dict()["table"],
        "delete_mode": lakes[case.lake].delete_mode, "ddl": case.ddl, "column_mapping": case.column_mapping,
        "staging_seconds": round(case.stage_seconds, 2), "seconds": case.secs.to_dict(), "runs": case.runs,
        "measured_at": started,
    }
    if case.expectation:
        e["expectation"] = case.expectation
    ref = by_name.get(case.compare or "")
    if ref is not None:
        # Each run of the case came right after a run of the window without the statement (same load): the
        # ratio and the extra time are the medians of those pairs.
        e["compare"] = ref.name
        e["without_seconds"] = Stat([a for a, _ in case.pairs], "s").to_dict()
        if case.pairs:
            e["ratio"] = round(statistics.median(b / a for a, b in case.pairs), 4)
            e["extra_seconds"] = round(statistics.median(b - a for a, b in case.pairs), 2)
            e["pairs"] = [[round(a, 3), round(b, 3)] for a, b in case.pairs]
    if case.runs and case.runs[0].get("ddl_commits") is not None:
        e["ddl_writes_data"] = any(r.get("ddl_writes_data") for r in case.runs)
    return e


def run(
    workdir: Path,
    rows: int,
    wide_rows: int,
    window: int,
    repeats: int,
    long_run: float,
    driver_memory: str,
    only: list[str] | None = None,
) -> dict[str, Any]:
    from bench.merge import spark_session

    workdir.mkdir(parents=True, exist_ok=True)
    td = table_def(20, prefix="m")
    wide = WideDef("w60", 60)
    out: dict[str, Any] = {
        "started": now_iso(), "load_start": load_avg(), "table_rows": rows, "wide_rows": wide_rows,
        "window_changes": window, "repeats": repeats, "long_run": long_run, "errors": [],
    }
    cases = default_cases(td, wide)
    if only:
        wanted = set(only)
        for c in list(cases):  # a case's comparison is measured with it
            if c.name in wanted and c.compare:
                wanted.add(c.compare)
        cases = [c for c in cases if c.name in wanted]
    events = _Events()
    merge_log = logging.getLogger("cdc.merge")
    merge_log.setLevel(logging.INFO)
    merge_log.addHandler(events)
    t0 = time.perf_counter()
    spark = spark_session(driver_memory)
    out["spark_session_seconds"] = round(time.perf_counter() - t0, 2)
    lakes: dict[str, Lake] = {}
    try:
        needed = {c.lake for c in cases}
        if "m" in needed:
            lakes["m"] = Lake(spark, workdir, "m", td.name, td.table_schema(SCHEMA), td.py_row, rows, "hard")
        if "s" in needed:
            lakes["s"] = Lake(spark, workdir, "s", td.name, td.table_schema(SCHEMA), td.py_row, rows, "soft")
        if "w" in needed:
            lakes["w"] = Lake(spark, workdir, "w", wide.name, wide.table_schema(SCHEMA), wide.py_row, wide_rows,
                              "hard")
        for lake in lakes.values():
            log(f"schema: building {lake.name} ({lake.delete_mode} deletes): {lake.rows} rows, "
                f"{len(lake.shape.columns)} columns")
            if lake.key == "w":
                lake.build_staged()
            else:
                lake.build_spark(td)
            log(f"  built in {lake.build_seconds:.0f}s: {lake.files} files, {lake.bytes / 1e6:.0f} MB")
        for case in cases:
            log(f"schema: staging the window of {case.name}")
            _stage_case(case, lakes[case.lake], workdir, window)
        out["tables"] = {k: v.to_dict() for k, v in lakes.items()}
        warm = next(c for c in cases if c.kind == "window")
        log(f"schema: warm-up run ({warm.name}: class loading, code generation)")
        run_case(spark, warm, lakes[warm.lake], workdir, events, check=False)
        by_name = {c.name: c for c in cases}
        paired = {c.compare for c in cases if c.compare}  # run right before each case compared with them
        for r in range(repeats):
            for case in cases:
                if case.stopped or case.name in paired:
                    continue
                ref = by_name.get(case.compare or "")
                got = [_timed(spark, x, lakes[x.lake], workdir, events, out["errors"], f"round {r + 1}/{repeats}")
                       for x in ([ref, case] if ref is not None else [case])]
                if ref is not None and got[0] is not None and got[1] is not None:
                    case.pairs.append((got[0]["seconds"], got[1]["seconds"]))
                if got[-1] is None or (got[-1]["seconds"] > long_run and r + 1 < repeats):
                    if got[-1] is not None:
                        log(f"  {case.name} took {got[-1]['seconds']:.0f}s > {long_run:.0f}s: no more rounds of it")
                    case.stopped = True
    except Exception as e:
        out["errors"].append(short_error(e))
        log(f"  schema failed: {short_error(e)}")
    finally:
        merge_log.removeHandler(events)
        spark.stop()
        for lake in lakes.values():
            shutil.rmtree(lake.root, ignore_errors=True)
        for case in cases:
            if case.wdir:
                shutil.rmtree(workdir / f"staging_{case.name}", ignore_errors=True)
    by_name = {c.name: c for c in cases}
    out["cases"] = [_case_entry(c, by_name, lakes, out["started"]) for c in cases]
    out["finished"] = now_iso()
    out["load_end"] = load_avg()
    return out


def merge_runs(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A re-run of some cases (`--schema-cases`) into the section: its cases (each measured with the case it is
    compared with) replace their earlier figures, the others stay; `runs` lists every run. A run of other sizes
    replaces the whole section."""
    same = all(old.get(k) == new.get(k) for k in ("table_rows", "wide_rows", "window_changes"))
    run_keys = ("command", "started", "finished", "load_start", "load_end")
    this = {k: new.get(k) for k in run_keys} | {"cases": [c["name"] for c in new.get("cases", [])]}
    if not same or not old.get("cases"):
        return {**new, "runs": [this]}
    earlier = old.get("runs") or [{k: old.get(k) for k in run_keys} | {"cases": [c["name"] for c in old["cases"]]}]
    fresh = {c["name"] for c in new.get("cases", [])}
    cases = [c for c in old["cases"] if c["name"] not in fresh]
    order = [c["name"] for c in old["cases"]] + [c["name"] for c in new["cases"] if c["name"] not in fresh]
    by_name = {c["name"]: c for c in [*cases, *new.get("cases", [])]}
    merged = {**old, "cases": [by_name[n] for n in dict.fromkeys(order) if n in by_name], "runs": [*earlier, this]}
    merged["errors"] = old.get("errors", []) + new.get("errors", [])
    merged["load_end"], merged["finished"] = new.get("load_end"), new.get("finished")
    return merged
