"""Merge figures: `spark_apps.merge_window.merge_window` into Delta tables of growing size, against a
plain Delta append of the same staged rows (the lower bound of landing them), in one Spark session.

- fixed window: a window of `window` changes (50% updates and 20% deletes of distinct, uniformly
  random existing keys, 30% inserts of new keys) merged into tables of each size: how merge time grows
  with the table at a fixed window size, and changes/s;
- big window: a window of `big_window` changes into a table of `big_table` rows, merge vs append;
- without deletion vectors: the smallest and largest tables again, created without them (what the
  table layout buys).

Tables use the 20-column mix of bench.workloads, are created with the merge job's own CREATE TABLE
(`create_table_sql`, so the product's table properties apply) and filled by Spark directly (files of at
most ROWS_PER_FILE rows, keys in order), and are restored (RESTORE TABLE ... TO VERSION AS OF) after
every timed run; each run merges as its own pipeline id, so Delta's idempotency never skips one.
Rounds go over every table in turn, so load from other users of the machine hits every size alike.
Windows are staged with cdc_core.lake.staging.stage_window from synthetic row changes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench.common import Stat, log, rate, ratio, short_error
from bench.workloads import TableDef, merge_ops, synthetic_changes, synthetic_plan, table_def

SCHEMA = "bench"
ROWS_PER_FILE = 1_000_000
BASE_VERSION = 1000  # _cdc_version of the base rows (older than any window change)


def spark_session(driver_memory: str) -> Any:
    """The tests' session recipe (tests/conftest.make_spark_session): local[2], the project's confs."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from cdc_core.lake.spark_conf import spark_confs

    builder = SparkSession.builder.master("local[2]").appName("cdc-bench")
    for k, v in spark_confs(extra={"spark.driver.memory": driver_memory}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _delta_columns(td: TableDef) -> list[tuple[str, str, str]]:
    """(name, delta type, Spark expression of id) per source column."""
    from cdc_core.model.types import table_codec

    codec = table_codec(td.table_schema(SCHEMA))
    exprs = {"id": "id", **{c: k.spark for c, k in zip(td.columns[1:], td.kinds, strict=True)}}
    return [(c.name, c.delta_type, exprs[c.name]) for c in codec.columns]


def build_table(
    spark: Any,
    td: TableDef,
    uri: str,
    rows: int,
    properties: dict[str, str] | None = None,
    *,
    delete_mode: str = "hard",
    writer: str | None = None,
) -> tuple[int, int]:
    """Create the Delta table as merge_window would, fill it with ids 1..rows; returns (version, files).
    `delete_mode`: the lake's metadata columns of that mode; `writer`: the `cdc.writer` record (the pipeline
    that will merge into it, so its merges need not claim the table first)."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import DataType

    from cdc_core.model.naming import quote_spark
    from spark_apps.merge import TableOptions, create_table_sql, metadata_columns

    cols = _delta_columns(td)
    columns = [(n, DataType.fromDDL(t)) for n, t, _ in cols] + metadata_columns(delete_mode)
    options = TableOptions(properties=tuple(sorted((properties or {}).items())))
    spark.sql(create_table_sql(uri, td.name, columns, options, writer=writer))
    select = [f"CAST({e} AS {t}) AS {quote_spark(n)}" for n, t, e in cols]
    select += [
        "'I' AS _cdc_op",
        f"CAST({BASE_VERSION} AS BIGINT) AS _cdc_version",
        "timestamp_seconds(1690000000) AS _cdc_commit_ts",
        "CAST(0 AS BIGINT) AS _cdc_window_seq",
    ]
    if delete_mode == "soft":
        select += ["false AS _cdc_deleted", "CAST(NULL AS TIMESTAMP) AS _cdc_deleted_at"]
    parts = max(2, math.ceil(rows / ROWS_PER_FILE))
    spark.range(1, rows + 1, numPartitions=parts).selectExpr(*select).write.format("delta").mode("append").save(uri)
    version = int(DeltaTable.forPath(spark, uri).history(1).collect()[0]["version"])
    files = int(spark.sql(f"DESCRIBE DETAIL delta.{quote_spark(uri)}").collect()[0]["numFiles"])
    return version, files


def stage(td: TableDef, staging_root: str, pipeline: str, table_rows: int, window: int) -> tuple[Any, str, float]:
    """Stage a window over the table; returns (manifest, window dir, staging seconds)."""
    from cdc_core.lake.staging import stage_window
    from cdc_core.model.layout import window_dir

    ops = merge_ops(table_rows, window)
    plan = synthetic_plan(pipeline, 1, len(ops))
    t0 = time.perf_counter()
    manifest = stage_window(plan, synthetic_changes(td, SCHEMA, ops), staging_root)
    return manifest, window_dir(staging_root, pipeline, 1), time.perf_counter() - t0


def _as_pipeline(manifest: Any, pipeline: str) -> Any:
    return dataclasses.replace(manifest, plan=dataclasses.replace(manifest.plan, pipeline=pipeline))


class Target:
    """One base table, its staged window, and the operations timed against it."""

    def __init__(
        self,
        spark: Any,
        td: TableDef,
        workdir: Path,
        rows: int,
        window: int,
        properties: dict[str, str] | None = None,
        name: str = "",
    ) -> None:
        from spark_apps.merge import table_uri, tombstone_uri

        self.spark = spark
        self.td = td
        self.rows = rows
        self.window = window
        self.lake_root = str(workdir / f"lake_{name or rows}")
        self.uri = table_uri(self.lake_root, SCHEMA, td.name)
        self.tomb = tombstone_uri(self.lake_root, SCHEMA, td.name)
        t0 = time.perf_counter()
        self.version, self.files = build_table(spark, td, self.uri, rows, properties)
        self.build_seconds = time.perf_counter() - t0
        self.manifest, self.wdir, self.stage_seconds = stage(
            td, str(workdir / f"staging_{name or rows}"), "bench", rows, window
        )
        self.runs = 0
        self.merge_secs = Stat(unit="s")
        self.append_secs = Stat(unit="s")
        self.reports: list[dict[str, Any]] = []

    def restore(self) -> None:
        from cdc_core.model.naming import quote_spark

        self.spark.sql(f"RESTORE TABLE delta.{quote_spark(self.uri)} TO VERSION AS OF {self.version}")
        shutil.rmtree(self.tomb, ignore_errors=True)

    def merge(self) -> float:
        from spark_apps.merge import merge_window

        self.runs += 1
        pipeline = f"bench_run{self.runs}"
        t0 = time.perf_counter()
        report = merge_window(
            self.spark, _as_pipeline(self.manifest, pipeline), self.wdir, self.lake_root, pipeline, 1, 1
        )
        took = time.perf_counter() - t0
        self.reports.append(dict(next(iter(report["tables"].values()))))
        self.restore()
        return took

    def append(self) -> float:
        """The same staged rows appended as they are (source columns + metadata), no MERGE."""
        from pyspark.sql import functions as F

        from cdc_core.model.manifest import COL_COMMIT_TS, COL_OP, COL_VERSION, COL_WINDOW_SEQ
        from cdc_core.model.naming import quote_spark

        st = self.manifest.tables[0]
        t0 = time.perf_counter()
        df = self.spark.read.parquet(*[f"{self.wdir}/{f.path}" for f in st.files])
        cols = [F.col(quote_spark(c.name)).cast(c.delta_type).alias(c.name) for c in st.columns]
        cols += [F.col(COL_OP), F.col(COL_VERSION), F.col(COL_COMMIT_TS), F.lit(1).cast("bigint").alias(COL_WINDOW_SEQ)]
        df.select(*cols).write.format("delta").mode("append").save(self.uri)
        took = time.perf_counter() - t0
        self.restore()
        return took

    def entry(self) -> dict[str, Any]:
        w = self.window
        expected = {"inserted": w - w // 2 - w // 5, "updated": w // 2, "deleted": w // 5}
        first = self.reports[0] if self.reports else {}
        got = {k: first.get(k) for k in expected}
        return {
            "table_rows": self.rows,
            "table_files": self.files,
            "build_seconds": round(self.build_seconds, 1),
            "staging_seconds": round(self.stage_seconds, 2),
            "window_changes": w,
            "merge_seconds": self.merge_secs.to_dict(),
            "merge_changes_per_s": rate(w, self.merge_secs, "changes/s").to_dict(),
            "append_seconds": self.append_secs.to_dict(),
            "append_rows_per_s": rate(w, self.append_secs, "rows/s").to_dict(),
            "merge_to_append": ratio(self.merge_secs.median, self.append_secs.median),
            "merge_report": first,
            "errors": [] if got == expected else [f"merge counted {got}, expected {expected}"],
        }

    def drop(self) -> None:
        shutil.rmtree(self.lake_root, ignore_errors=True)
        shutil.rmtree(Path(self.wdir).parent.parent, ignore_errors=True)


def run(
    workdir: Path,
    sizes: list[int],
    window: int,
    big_window: int,
    big_table: int,
    repeats: int,
    long_run: float,
    driver_memory: str,
) -> dict[str, Any]:
    td = table_def(20, prefix="m")
    out: dict[str, Any] = {
        "table_columns": td.width,
        "rows_per_file_max": ROWS_PER_FILE,
        "window_changes": window,
        "fixed_window": [],
        "errors": [],
    }
    t0 = time.perf_counter()
    spark = spark_session(driver_memory)
    out["spark_session_seconds"] = round(time.perf_counter() - t0, 2)
    sizes = sorted(sizes)
    targets: list[Target] = []
    try:
        for n in sizes:
            log(f"merge: building a Delta table of {n} rows and staging a window of {window} changes")
            targets.append(Target(spark, td, workdir, n, window))
        log("merge: warm-up merge (class loading, code generation)")
        targets[0].merge()
        targets[0].reports.clear()
        no_dv = []
        for n in {sizes[0], sizes[-1]}:
            log(f"merge: building a table of {n} rows without deletion vectors")
            no_dv.append(
                Target(spark, td, workdir, n, window, {"delta.enableDeletionVectors": "false"}, name=f"nodv_{n}")
            )
        for r in range(repeats):
            longest = 0.0
            for t in [*targets, *no_dv]:
                log(
                    f"merge: round {r + 1}/{repeats}: {window} changes into {t.rows} rows "
                    f"({'no DV' if t in no_dv else 'product'})"
                )
                try:
                    took = t.merge()
                    t.merge_secs.values.append(took)
                    longest = max(longest, took)
                    if t not in no_dv:
                        t.append_secs.values.append(t.append())
                except Exception as e:
                    out["errors"].append(f"{t.rows} rows: {short_error(e)}")
            if longest > long_run and r + 1 < repeats:
                log(f"  a merge took {longest:.0f}s > {long_run:.0f}s: no more rounds")
                break
        out["fixed_window"] = [t.entry() for t in targets]
        by_rows = {t.rows: t for t in no_dv}
        for e in out["fixed_window"]:
            if e["table_rows"] in by_rows:
                e["merge_seconds_no_dv"] = by_rows[e["table_rows"]].merge_secs.to_dict()
        lo, hi = targets[0], targets[-1]
        out["growth"] = {
            "smallest_rows": lo.rows,
            "largest_rows": hi.rows,
            "rows_ratio": hi.rows / lo.rows,
            "merge_time_ratio": ratio(hi.merge_secs.median, lo.merge_secs.median),
        }
        if len(by_rows) == 2:
            a, b = by_rows[lo.rows], by_rows[hi.rows]
            out["growth_no_dv"] = {"merge_time_ratio": ratio(b.merge_secs.median, a.merge_secs.median)}
        for t in [*targets, *no_dv]:
            t.drop()
        targets, no_dv = [], []

        log(f"merge: big window, a table of {big_table} rows and a window of {big_window} changes")
        big = Target(spark, td, workdir, big_table, big_window, name="big")
        targets = [big]
        for r in range(repeats):
            log(f"merge: big window round {r + 1}/{repeats}")
            took = big.merge()
            big.merge_secs.values.append(took)
            big.append_secs.values.append(big.append())
            if took > long_run and r + 1 < repeats:
                break
        out["big_window"] = big.entry()
        out["big_window"]["staging_rows_per_s"] = (
            round(big_window / big.stage_seconds, 1) if big.stage_seconds else None
        )
    except Exception as e:
        out["errors"].append(short_error(e))
        log(f"  merge failed: {short_error(e)}")
    finally:
        for t in targets:
            t.drop()
        spark.stop()
    return out
