"""Merge figures: `spark_apps.merge_window.merge_window` into Delta tables of growing size, against a
plain Delta append of the same staged rows (the lower bound of landing them), in one Spark session.

- fixed window: a window of `window` changes (50% updates and 20% deletes of distinct, uniformly
  random existing keys, 30% inserts of new keys) merged into tables of each size; shows how merge time
  grows with the table at a fixed window size;
- big window: a window of `big_window` changes into a table of `big_table` rows, merge vs append.

Tables use the 20-column mix of bench.workloads, are written by Spark (files of at most 1e6 rows) with
the schema merge_window itself would create, and are restored (RESTORE TABLE ... TO VERSION AS OF) after
every timed run; each run merges as its own pipeline id, so Delta's idempotency never skips one.
Windows are staged with cdc_core.staging.stage_window from synthetic row changes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench.common import log, rate, ratio, repeat, short_error
from bench.workloads import TableDef, merge_ops, synthetic_changes, synthetic_plan, table_def

SCHEMA = "bench"
ROWS_PER_FILE = 1_000_000
BASE_VERSION = 1000  # _cdc_version of the base rows (older than any window change)


def spark_session(driver_memory: str) -> Any:
    """The tests' session recipe (tests/conftest.make_spark_session): local[2], 2 shuffle partitions."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from cdc_core.spark_conf import spark_confs

    builder = SparkSession.builder.master("local[2]").appName("cdc-bench")
    for k, v in spark_confs(extra={"spark.driver.memory": driver_memory}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _delta_columns(td: TableDef) -> list[tuple[str, str, str]]:
    """(name, delta type, Spark expression of id) per source column."""
    from cdc_core.types import table_codec

    codec = table_codec(td.table_schema(SCHEMA))
    exprs = {"id": "id", **{c: k.spark for c, k in zip(td.columns[1:], td.kinds)}}
    return [(c.name, c.delta_type, exprs[c.name]) for c in codec.columns]


def build_table(spark: Any, td: TableDef, uri: str, rows: int) -> tuple[int, int]:
    """Create the Delta table as merge_window would, fill it with ids 1..rows; returns (version, files)."""
    from delta.tables import DeltaTable

    from cdc_core.naming import quote_spark
    from spark_apps.merge_window import metadata_columns

    cols = _delta_columns(td)
    meta = [(n, t.simpleString()) for n, t in metadata_columns("hard")]
    ddl = ", ".join(f"{quote_spark(n)} {t}" for n, t, _ in cols) + ", " + ", ".join(
        f"{quote_spark(n)} {t}" for n, t in meta
    )
    spark.sql(f"CREATE TABLE delta.{quote_spark(uri)} ({ddl}) USING DELTA")
    select = [f"CAST({e} AS {t}) AS {quote_spark(n)}" for n, t, e in cols]
    select += [
        "'I' AS _cdc_op",
        f"CAST({BASE_VERSION} AS BIGINT) AS _cdc_version",
        "timestamp_seconds(1690000000) AS _cdc_commit_ts",
        "CAST(0 AS BIGINT) AS _cdc_window_seq",
    ]
    parts = max(2, math.ceil(rows / ROWS_PER_FILE))
    spark.range(1, rows + 1, numPartitions=parts).selectExpr(*select).write.format("delta").mode("append").save(uri)
    version = int(DeltaTable.forPath(spark, uri).history(1).collect()[0]["version"])
    files = int(spark.sql(f"DESCRIBE DETAIL delta.{quote_spark(uri)}").collect()[0]["numFiles"])
    return version, files


def stage(td: TableDef, staging_root: str, pipeline: str, table_rows: int, window: int) -> tuple[Any, str, float]:
    """Stage a window over the table; returns (manifest, window dir, staging seconds)."""
    from cdc_core.staging import stage_window, window_dir

    ops = merge_ops(table_rows, window)
    plan = synthetic_plan(pipeline, 1, len(ops))
    t0 = time.perf_counter()
    manifest = stage_window(plan, synthetic_changes(td, SCHEMA, ops), staging_root)
    return manifest, window_dir(staging_root, pipeline, 1), time.perf_counter() - t0


def _as_pipeline(manifest: Any, pipeline: str) -> Any:
    return dataclasses.replace(manifest, plan=dataclasses.replace(manifest.plan, pipeline=pipeline))


class Target:
    """One base table and the operations timed against it."""

    def __init__(self, spark: Any, td: TableDef, lake_root: str, rows: int) -> None:
        from spark_apps.merge_window import table_uri, tombstone_uri

        self.spark = spark
        self.td = td
        self.lake_root = lake_root
        self.rows = rows
        self.uri = table_uri(lake_root, SCHEMA, td.name)
        self.tomb = tombstone_uri(lake_root, SCHEMA, td.name)
        t0 = time.perf_counter()
        self.version, self.files = build_table(spark, td, self.uri, rows)
        self.build_seconds = time.perf_counter() - t0
        self.runs = 0

    def restore(self) -> None:
        from cdc_core.naming import quote_spark

        self.spark.sql(f"RESTORE TABLE delta.{quote_spark(self.uri)} TO VERSION AS OF {self.version}")
        shutil.rmtree(self.tomb, ignore_errors=True)

    def merge(self, manifest: Any, wdir: str) -> dict[str, Any]:
        from spark_apps.merge_window import merge_window

        self.runs += 1
        pipeline = f"bench_run{self.runs}"
        report = merge_window(self.spark, _as_pipeline(manifest, pipeline), wdir, self.lake_root, pipeline, 1, 1)
        return dict(next(iter(report["tables"].values())))

    def append(self, manifest: Any, wdir: str) -> int:
        """The same staged rows appended as they are (source columns + metadata), no MERGE."""
        from pyspark.sql import functions as F

        from cdc_core.manifest import COL_COMMIT_TS, COL_OP, COL_VERSION, COL_WINDOW_SEQ
        from cdc_core.naming import quote_spark

        st = manifest.tables[0]
        paths = [f"{wdir}/{f.path}" for f in st.files]
        df = self.spark.read.parquet(*paths)
        cols = [F.col(quote_spark(c.name)).cast(c.delta_type).alias(c.name) for c in st.columns]
        cols += [F.col(COL_OP), F.col(COL_VERSION), F.col(COL_COMMIT_TS), F.lit(1).cast("bigint").alias(COL_WINDOW_SEQ)]
        df.select(*cols).write.format("delta").mode("append").save(self.uri)
        return st.rows


def _fixed_window_entry(t: Target, manifest: Any, wdir: str, window: int, repeats: int, long_run: float) -> dict[str, Any]:
    log(f"merge: {window} changes into {t.rows} rows (merge_window)")
    secs, reports = repeat(lambda i: t.merge(manifest, wdir), repeats, long_run, after=lambda i: t.restore())
    log(f"merge: {window} changes into {t.rows} rows (plain append)")
    asecs, _ = repeat(lambda i: t.append(manifest, wdir), repeats, long_run, after=lambda i: t.restore())
    first = reports[0] if reports else {}
    expected = {"inserted": window - window // 2 - window // 5, "updated": window // 2, "deleted": window // 5}
    got = {k: first.get(k) for k in expected}
    return {
        "table_rows": t.rows,
        "table_files": t.files,
        "build_seconds": round(t.build_seconds, 2),
        "window_changes": window,
        "merge_seconds": secs.to_dict(),
        "merge_changes_per_s": rate(window, secs, "changes/s").to_dict(),
        "append_seconds": asecs.to_dict(),
        "append_rows_per_s": rate(window, asecs, "rows/s").to_dict(),
        "merge_to_append": ratio(secs.median, asecs.median),
        "merge_report": first,
        "errors": [] if got == expected else [f"merge counted {got}, expected {expected}"],
    }


def run(
    workdir: Path, sizes: list[int], window: int, big_window: int, big_table: int, repeats: int, long_run: float,
    driver_memory: str, budget_seconds: float,
) -> dict[str, Any]:
    from cdc_core.errors import CdcError  # noqa: F401 - fail early when cdc_core is broken

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
    try:
        sizes = sorted(sizes)
        warmed = False
        for n in sizes:
            if out["fixed_window"] and n > sizes[0]:
                prev = out["fixed_window"][-1]
                est = (prev["build_seconds"] + (prev["merge_seconds"].get("median") or 0) * 2 * repeats) * n / prev["table_rows"]
                spent = time.perf_counter() - t0
                if spent + est > budget_seconds:
                    note = (f"table of {n} rows skipped: estimated {est:.0f}s more would pass the merge budget of "
                            f"{budget_seconds:.0f}s (--merge-budget)")
                    log("merge: " + note)
                    out["errors"].append(note)
                    continue
            lake = str(workdir / f"lake_{n}")
            log(f"merge: building a Delta table of {n} rows")
            try:
                target = Target(spark, td, lake, n)
                manifest, wdir, stage_secs = stage(td, str(workdir / f"staging_{n}"), "bench", n, window)
                if not warmed:  # the session's first MERGE pays for class loading and codegen
                    target.merge(manifest, wdir)
                    target.restore()
                    warmed = True
                entry = _fixed_window_entry(target, manifest, wdir, window, repeats, long_run)
                entry["staging_seconds"] = round(stage_secs, 2)
                out["fixed_window"].append(entry)
            except Exception as e:  # noqa: BLE001
                out["errors"].append(f"table of {n} rows: {short_error(e)}")
                log(f"  failed: {short_error(e)}")
            finally:
                shutil.rmtree(lake, ignore_errors=True)
                shutil.rmtree(workdir / f"staging_{n}", ignore_errors=True)
        fw = [e for e in out["fixed_window"] if e["merge_seconds"].get("runs")]
        if len(fw) >= 2:
            lo, hi = fw[0], fw[-1]
            out["growth"] = {
                "smallest_rows": lo["table_rows"],
                "largest_rows": hi["table_rows"],
                "rows_ratio": hi["table_rows"] / lo["table_rows"],
                "merge_time_ratio": ratio(hi["merge_seconds"]["median"], lo["merge_seconds"]["median"]),
            }

        # The big window: merge vs append of many changes.
        lake = str(workdir / "lake_big")
        try:
            log(f"merge: big window, building a Delta table of {big_table} rows")
            target = Target(spark, td, lake, big_table)
            log(f"merge: staging a window of {big_window} changes")
            manifest, wdir, stage_secs = stage(td, str(workdir / "staging_big"), "bench", big_table, big_window)
            entry = _fixed_window_entry(target, manifest, wdir, big_window, repeats, long_run)
            entry["staging_seconds"] = round(stage_secs, 2)
            entry["staging_rows_per_s"] = round(big_window / stage_secs, 1) if stage_secs else None
            out["big_window"] = entry
        except Exception as e:  # noqa: BLE001
            out["errors"].append(f"big window: {short_error(e)}")
            log(f"  failed: {short_error(e)}")
        finally:
            shutil.rmtree(lake, ignore_errors=True)
            shutil.rmtree(workdir / "staging_big", ignore_errors=True)
    finally:
        spark.stop()
    return out

