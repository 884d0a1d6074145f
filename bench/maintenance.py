"""Maintenance figure: merge time of one window into a table after 500 windows, before and after the
maintenance job (spark_apps/maintain_tables.py: OPTIMIZE, VACUUM, checkpoint + log cleanup).

    python -m bench.maintenance [--windows 500] [--base-rows 100000] [--rows-per-window 200] \
        [--window 1000] [--repeats 3] [--out bench/results-maintenance.json]

The table is created exactly as the merge job creates it (bench.merge.build_table: the 20-column mix,
merge_window's metadata columns) with `base-rows` rows, then receives `windows` windows of
`rows-per-window` new rows each, one commit per window carrying the idempotent-write identity
(txnAppId/txnVersion) like a merge commit (`append_windows`): the layout a pipeline leaves behind (one
small commit with a small file per window), without paying for 500 pipeline cycles. The table is then copied; one
copy is maintained. The timed window (50% updates and 20% deletes of existing keys spread over the
whole table, 30% inserts) is staged once with cdc_core.lake.staging and merged with
spark_apps.merge_window.merge_window into each copy `repeats` times (RESTORE between runs, each run
under its own pipeline id so Delta's idempotency never skips one). Also timed: the ack's txn check
(cdc_core.lake.delta_state.last_txn_version, delta-rs, no Spark) and the monitor's table summary.

Never part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import load_avg, log, machine_info, now_iso, repeat, versions
from bench.merge import BASE_VERSION, SCHEMA, _as_pipeline, _delta_columns, build_table, spark_session
from bench.workloads import merge_ops, synthetic_changes, synthetic_plan, table_def


def append_windows(spark: Any, td: Any, uri: str, first_id: int, windows: int, rows: int, scratch: Path) -> float:
    """`windows` commits of `rows` new ids each, as merge commits would land them; returns seconds.

    The rows are generated once by Spark (the merge job's column expressions) into one Parquet file per
    window, then committed one window at a time with delta-rs, each commit carrying the idempotent-write
    identity (txnAppId "bench", txnVersion = window). 500 Spark appends cost 1-40 s each on a shared
    2-core machine; a delta-rs commit costs milliseconds and leaves the same log and file layout (one
    small file and one commit per window; a checkpoint every 10 commits, as Spark writes them).
    """
    import pyarrow.parquet as pq
    from deltalake import CommitProperties, Transaction, write_deltalake

    from cdc_core.model.naming import quote_spark

    cols = _delta_columns(td)
    select = [f"CAST({e} AS {t}) AS {quote_spark(n)}" for n, t, e in cols]
    select += [
        "'I' AS _cdc_op",
        f"CAST({BASE_VERSION} + id AS BIGINT) AS _cdc_version",
        "timestamp_seconds(1690000000) AS _cdc_commit_ts",
        f"CAST(floor((id - {first_id}) / {rows}) + 1 AS BIGINT) AS _cdc_window_seq",
    ]
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    spark.range(first_id, first_id + windows * rows).selectExpr(*select).repartition(
        windows, "_cdc_window_seq"
    ).write.partitionBy("_cdc_window_seq").parquet(str(scratch))
    spark.sql(f"ALTER TABLE delta.{quote_spark(uri)} SET TBLPROPERTIES ('delta.checkpointInterval' = '10')")
    t0 = time.perf_counter()
    for seq in range(1, windows + 1):
        part = pq.read_table(scratch / f"_cdc_window_seq={seq}")
        part = part.append_column("_cdc_window_seq", pa.array([seq] * part.num_rows, pa.int64()))
        # lastUpdated as Spark writes it: an identifier without one counts as expired once the table has
        # a delta.setTransactionRetentionDuration (delta-rs), which maintenance sets.
        txn = Transaction("bench", seq, last_updated=int(time.time() * 1000))
        write_deltalake(uri, part, mode="append", commit_properties=CommitProperties(app_transactions=[txn]))
        if seq % 100 == 0:
            log(f"maintenance: {seq}/{windows} windows committed ({time.perf_counter() - t0:.0f}s)")
    return time.perf_counter() - t0


def table_facts(uri: str) -> dict[str, Any]:
    from cdc_core.lake import delta_state

    t0 = time.perf_counter()
    txn = delta_state.last_txn_version(uri, "bench")
    txn_secs = time.perf_counter() - t0
    t0 = time.perf_counter()
    summary = delta_state.table_summary(uri)
    summary_secs = time.perf_counter() - t0
    log_dir = Path(uri) / "_delta_log"
    return {
        "files": summary["files"],
        "size_bytes": summary["size_bytes"],
        "version": summary["version"],
        "log_entries": sum(1 for p in log_dir.iterdir() if p.name[:20].isdigit()),
        "txn_version": txn,
        "txn_read_seconds": round(txn_secs, 4),
        "summary_seconds": round(summary_secs, 4),
    }


class Copy:
    """One copy of the table and the merges timed against it."""

    def __init__(self, spark: Any, lake: Path, table: str) -> None:
        from spark_apps.merge import table_uri, tombstone_uri

        self.spark = spark
        self.lake = lake
        self.uri = table_uri(str(lake), SCHEMA, table)
        self.tomb = tombstone_uri(str(lake), SCHEMA, table)
        self.runs = 0
        self.version = 0

    def mark(self) -> None:
        from delta.tables import DeltaTable

        self.version = int(DeltaTable.forPath(self.spark, self.uri).history(1).collect()[0]["version"])

    def restore(self) -> None:
        from cdc_core.model.naming import quote_spark

        self.spark.sql(f"RESTORE TABLE delta.{quote_spark(self.uri)} TO VERSION AS OF {self.version}")
        shutil.rmtree(self.tomb, ignore_errors=True)

    def merge(self, manifest: Any, wdir: str) -> dict[str, Any]:
        from spark_apps.merge import merge_window

        self.runs += 1
        pipeline = f"bench_run{self.runs}"
        report = merge_window(self.spark, _as_pipeline(manifest, pipeline), wdir, str(self.lake), pipeline, 1, 1)
        return dict(next(iter(report["tables"].values())))


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from cdc_core.lake.staging import stage_window
    from cdc_core.model import retention
    from cdc_core.model.layout import window_dir
    from spark_apps.maintain_tables import Maintenance

    td = table_def(20, prefix="m")
    spark = spark_session(args.driver_memory)
    out: dict[str, Any] = {"params": {k: v for k, v in vars(args).items() if k != "out"}}
    try:
        before = Copy(spark, work / "lake_before", td.name)
        log(f"maintenance: building the base table ({args.base_rows} rows)")
        build_table(spark, td, before.uri, args.base_rows)
        log(f"maintenance: {args.windows} windows of {args.rows_per_window} rows")
        out["append_seconds"] = round(
            append_windows(spark, td, before.uri, args.base_rows + 1, args.windows, args.rows_per_window,
                           work / "scratch"), 1
        )
        total_rows = args.base_rows + args.windows * args.rows_per_window
        after = Copy(spark, work / "lake_after", td.name)
        shutil.copytree(work / "lake_before", work / "lake_after")  # Delta paths are relative: a valid copy
        out["before_maintenance"] = table_facts(before.uri)

        h = retention.replay_horizon_hours(72, 600)
        job = Maintenance(spark, "bench", 1, vacuum_hours=168, log_hours=720, txn_hours=720, min_hours=h)
        t0 = time.perf_counter()
        report = job.run([{"name": f"{SCHEMA}.{td.name}", "uri": after.uri, "kind": "table", "zorder_by": []}])
        out["maintenance_seconds"] = round(time.perf_counter() - t0, 2)
        out["maintenance_report"] = report["tables"][0]
        out["after_maintenance"] = table_facts(after.uri)
        log(f"maintenance: {out['before_maintenance']['files']} -> {out['after_maintenance']['files']} files in "
            f"{out['maintenance_seconds']}s")

        ops = merge_ops(total_rows, args.window)
        plan = synthetic_plan("bench", 1, len(ops))
        staging = str(work / "staging")
        manifest = stage_window(plan, synthetic_changes(td, SCHEMA, ops), staging)
        wdir = window_dir(staging, "bench", 1)
        for copy in (before, after):
            copy.mark()
        # Warm-up: the session's first MERGE pays for class loading and codegen.
        before.merge(manifest, wdir)
        before.restore()
        for label, copy in (("before", before), ("after", after)):
            log(f"maintenance: merging {args.window} changes into the table {label} maintenance")
            secs, reports = repeat(lambda i, c=copy: c.merge(manifest, wdir), args.repeats, 3600,
                                   after=lambda i, c=copy: c.restore())
            out[f"merge_{label}_maintenance"] = {"seconds": secs.to_dict(), "report": reports[0] if reports else None}
        b = out["merge_before_maintenance"]["seconds"]["median"]
        a = out["merge_after_maintenance"]["seconds"]["median"]
        out["speedup"] = round(b / a, 2) if a else None
    finally:
        spark.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--windows", type=int, default=500)
    p.add_argument("--base-rows", type=int, default=100_000)
    p.add_argument("--rows-per-window", type=int, default=200)
    p.add_argument("--window", type=int, default=1000, help="changes in the timed window")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results-maintenance.json"))
    args = p.parse_args(argv)
    started = now_iso()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-maint-") as tmp:
        results = run(args, Path(tmp))
    doc = {
        "started_at": started,
        "finished_at": now_iso(),
        "load_avg_end": load_avg(),
        "machine": machine_info(),
        "versions": versions(None),
        "results": results,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True, default=str))
    log(f"maintenance: results in {args.out}")
    print(json.dumps({k: results.get(k) for k in ("before_maintenance", "after_maintenance", "maintenance_seconds",
                                                   "speedup")}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
