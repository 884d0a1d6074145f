"""Where a tiny table's MERGE goes (issue 18): one-row MERGEs into many small Delta tables in one Spark application.

`--tables` tables of 100 rows (5 columns plus the lake's metadata columns, deletion vectors on: the lake's
default) are created once; then each round MERGEs one new row into every table with the merge job's own
statement (spark_apps.merge_window.merge_sql), as the commit (pipeline, seq), on `--threads` writer threads
(a session each). Per round: the wall time per table and, per step, the thread seconds per table (schema
read, staged read, MERGE + commit). `--conf k=v` (repeatable) adds Spark confs, so a knob is measured
against the defaults in two runs on the same machine; `--no-txn` drops the txn identity (a reference
figure: what Delta's idempotent-write check costs; not exactly-once); `--delta-rs` also times the same MERGE through
delta-rs on tables without deletion vectors (a reference figure: the lake's tables have them).

    python -m bench.tiny_merges --tables 30 --rounds 3 [--threads 4] [--conf spark.sql.adaptive.enabled=false]

Prints one JSON line per round; saved under `tiny_merges` in `--out` when given.
"""

from __future__ import annotations

import argparse
import json
import queue
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import load_avg, log

COLUMNS = ("id INT, a INT, b STRING, c DOUBLE, d TIMESTAMP, _cdc_op STRING, _cdc_version BIGINT, "
           "_cdc_commit_ts TIMESTAMP, _cdc_window_seq BIGINT")


def _session(confs: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    from cdc_core.lake.spark_conf import spark_confs

    b = SparkSession.builder.master("local[2]").appName("bench-tiny-merges")
    for k, v in {**spark_confs(), **confs}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _round(
    spark: Any, root: Path, tables: int, threads: int, seq: int, append: bool = False, txn: bool = True
) -> dict[str, Any]:
    from delta.tables import DeltaTable

    from spark_apps.merge import TXN_APP_ID_CONF, TXN_VERSION_CONF, merge_sql

    src = root / f"src-{seq}.parquet"
    spark.sql(
        f"SELECT {100_000 + seq} id, 1 a, 'y' b, 2.0D c, current_timestamp() d, 'i' _cdc_op, {seq}L _cdc_version, "
        f"current_timestamp() _cdc_commit_ts, {seq}L _cdc_window_seq"
    ).write.mode("overwrite").parquet(str(src))
    steps: dict[str, float] = {}
    lock = threading.Lock()

    def one(sp: Any, i: int) -> None:
        uri = str(root / f"t{i}")
        t0 = time.monotonic()
        DeltaTable.isDeltaTable(sp, uri)
        sp.read.format("delta").load(uri).schema  # noqa: B018 (the merge job's ensure_table reads it)
        t1 = time.monotonic()
        view = f"src_{i}_{seq}"
        sp.read.parquet(str(src)).createOrReplaceTempView(view)
        t2 = time.monotonic()
        if txn:
            sp.conf.set(TXN_APP_ID_CONF, "bench")
            sp.conf.set(TXN_VERSION_CONF, str(seq))
        sp.conf.set("spark.databricks.delta.merge.materializeSource", "none")
        if append:  # what the MERGE amounts to when no staged key can match (bench: the alternative's cost)
            sp.table(view).write.format("delta").mode("append").option("txnAppId", "bench").option(
                "txnVersion", str(seq)).option("mergeSchema", "true").save(uri)
        else:
            sp.sql(merge_sql(uri, view, ["id"], "hard")).collect()
        sp.catalog.dropTempView(view)
        t3 = time.monotonic()
        with lock:
            for k, v in (("schema", t1 - t0), ("read", t2 - t1), ("merge_commit", t3 - t2)):
                steps[k] = steps.get(k, 0.0) + v

    work: queue.Queue[int] = queue.Queue()
    for i in range(tables):
        work.put(i)

    errors: list[BaseException] = []

    def worker() -> None:
        sp = spark.newSession()
        while not errors:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            try:
                one(sp, i)
            except BaseException as e:  # reported by the round
                errors.append(e)

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    if errors:
        raise errors[0]
    return {"round": seq, "wall_per_table": round(wall / tables, 3),
            "thread_seconds_per_table": {k: round(v / tables, 3) for k, v in steps.items()}, "load": load_avg()[0]}


def _delta_rs_round(root: Path, tables: int, seq: int) -> float:
    import datetime as dt

    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction

    now = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    for i in range(tables):
        src = pa.table({
            "id": pa.array([100_000 + seq], pa.int32()), "a": pa.array([1], pa.int32()), "b": ["y"], "c": [2.0],
            "d": pa.array([now], pa.timestamp("us", tz="UTC")), "_cdc_op": ["i"],
            "_cdc_version": pa.array([seq], pa.int64()),
            "_cdc_commit_ts": pa.array([now], pa.timestamp("us", tz="UTC")),
            "_cdc_window_seq": pa.array([seq], pa.int64()),
        })
        newer = "t._cdc_version IS NULL OR s._cdc_version >= t._cdc_version"
        (
            DeltaTable(str(root / f"rs{i}"))
            .merge(src, predicate='t."id" IS NOT DISTINCT FROM s."id"', source_alias="s", target_alias="t",
                   commit_properties=CommitProperties(app_transactions=[Transaction("bench", seq)]))
            .when_matched_delete(predicate=f"s._cdc_op = 'd' AND ({newer})")
            .when_matched_update_all(predicate=newer)
            .when_not_matched_insert_all(predicate="s._cdc_op <> 'd'")
            .execute()
        )
    return round((time.monotonic() - t0) / tables, 4)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tiny_merges", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--conf", action="append", default=[], help="k=v: a Spark conf added to the defaults")
    p.add_argument("--append", action="store_true", help="time an idempotent append of the row instead of the MERGE")
    p.add_argument("--no-txn", action="store_true",
                   help="reference only: the MERGE without its txn identity (not exactly-once): the txn check's price")
    p.add_argument("--delta-rs", action="store_true", help="also time delta-rs on tables without deletion vectors")
    p.add_argument("--out", default=None, help="merge the section into this results file (key tiny_merges)")
    args = p.parse_args(argv)
    confs = dict(c.split("=", 1) for c in args.conf)
    root = Path(tempfile.mkdtemp(prefix="cdc-bench-tiny-"))
    section: dict[str, Any] = {"tables": args.tables, "threads": args.threads, "confs": confs, "rounds": [],
                               "statement": "append" if args.append else "merge", "txn": not args.no_txn,
                               "load_start": load_avg()}
    spark = _session(confs)
    try:
        t0 = time.monotonic()
        for i in range(args.tables):
            for name, props in ((f"t{i}", "'delta.enableDeletionVectors'='true'"),
                                *(((f"rs{i}", "'delta.enableDeletionVectors'='false'"),) if args.delta_rs else ())):
                uri = root / name
                spark.sql(f"CREATE TABLE delta.`{uri}` ({COLUMNS}) USING delta TBLPROPERTIES ({props})")
                spark.sql(f"INSERT INTO delta.`{uri}` SELECT id, id, 'x', 1.0, current_timestamp(), 'i', 0, "
                          "current_timestamp(), 1 FROM range(100)")
        log(f"tiny_merges: {args.tables} tables created in {time.monotonic() - t0:.1f} s")
        for r in range(args.rounds):
            one = _round(spark, root, args.tables, args.threads, seq=r + 2, append=args.append, txn=not args.no_txn)
            if args.delta_rs:
                one["delta_rs_per_table"] = _delta_rs_round(root, args.tables, seq=r + 2)
            section["rounds"].append(one)
            print(json.dumps(one), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    section["load_end"] = load_avg()
    if args.out:
        from bench.__main__ import save_section

        save_section(args.out, "tiny_merges", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
