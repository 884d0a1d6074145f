# ruff: noqa: E501 - markdown rows and figure notes read best on one line each
"""bench/RESULTS.md from bench/results.json: the figures side by side with their references, the
targets of the issue as ratios measured in the same run, and what was tried and did not help."""

from __future__ import annotations

import statistics
from typing import Any

from bench import common

# Tried during development and dropped (or kept off by default), with the figure that decided it.
# Live counterparts of some of them are measured in every run (the *_inline / *_workers and the
# merge "without deletion vectors" columns).
TRIED: list[dict[str, str]] = [
    {
        "what": "Staging the library's values row by row (the previous path: RowChange dicts, a converter per "
        "value, pa.array of Python objects)",
        "figure": "1e5 rows x 20 cols, 1000-row txns: 8,082 rows/s (stock loop 12,871 rows/s, same load)",
        "verdict": "replaced by the columnar decoder; kept as `read_changes`: the reference the identity tests compare with, and the `decoder: library` setting",
    },
    {
        "what": "Scanner recording every column's offset per row (one list append per column)",
        "figure": "decode of 1e5 rows x 20 cols: 0.66 CPU-s, vs 0.41 recording only row starts and recomputing "
        "offsets in numpy",
        "verdict": "dropped",
    },
    {
        "what": "Gathering long string values with bytes/memoryview joins instead of an int32 index gather",
        "figure": "TEXT of ~80 bytes, 16k rows: join of memoryview slices 0.66 µs/row, bytes slices 0.17, index gather 0.12",
        "verdict": "index gather kept (joins only past 2 GiB buffers)",
    },
    {
        "what": "Dictionary encoding of every staged column (pyarrow's default)",
        "figure": "1e5 staged rows x 24 cols: 0.20 CPU-s and 9.3 MB with dictionaries, 0.10 CPU-s and 6.1 MB without",
        "verdict": "dictionaries only for _cdc_op and ENUM/SET columns",
    },
    {
        "what": "concurrent.futures.ProcessPoolExecutor (forkserver) for decode workers",
        "figure": "each worker re-imports the parent's __main__ (Airflow's CLI in a task process); with pandas "
        "imported by pyarrow's shim a worker took ~6 s to answer its first job under load",
        "verdict": "plain `python -m cdc_core.capture.decode_worker` subprocesses over pipes, pandas import blocked",
    },
    {
        "what": "Decode worker processes for small windows",
        "figure": "1e5 rows x 20 cols (20 MB): 2 workers 13,684 rows/s vs in-process 37,577 rows/s (worker start "
        "dominates); 1e6 rows: 37,617 vs 38,385 rows/s under load 17",
        "verdict": "workers only from 32 MB of binlog (`binlog.decode_workers`); the live figure is in the capture table",
    },
    {
        "what": "pymysql's _read_packet + a library event object per binlog event",
        "figure": "1e5 one-row transactions: 5.56 CPU-s (GTID-state parsing per transaction included) vs 2.59 with "
        "native framing and handling of GTID/Xid/table-map/rows events and no GTID tracking in readers",
        "verdict": "replaced for the hot events; the library still connects, registers, and builds every other event",
    },
    {
        "what": "The row walk (row starts, update key checks, column offsets) as generated Python vs compiled C "
        "(cdc_core/capture/_rowscan.c), issue 19",
        "figure": "decoding 1e5 JSON rows x 20 cols (89 MB, quiet, one process): the walk 0.68 s of 1.25 s in Python, "
        "~0.05 s in C; string values copied by C 0.34 -> ~0.1 s; the window's read 1.14 -> 0.30 s",
        "verdict": "compiled walk by default (setup.sh, pip install), generated Python as the tested fallback",
    },
    {
        "what": "DECIMAL(65,30) as text: Arrow string kernels (cast, lpad, join per 9-digit group) vs C",
        "figure": "2e6 values: 3.2 s with Arrow's kernels, 2.9 s with snprintf in C, ~0.3 s with a digit loop in C",
        "verdict": "C digit loop (`_rowscan.decimal_text`); the Arrow-kernel version stays as the fallback",
    },
    {
        "what": "Decode worker processes once the walk is compiled",
        "figure": "1e5 rows, 1000-row txns, quiet: JSON 0.85 s inline vs 1.52 s with 2 workers, TEXT update 1.36 vs 2.07, "
        "BLOB update 1.31 vs 2.15, DECIMAL(65,30) update 1.32 vs 1.73 (pickling each slice both ways dominates)",
        "verdict": "no workers with the compiled walk; workers (from 32 MB) only for the Python fallback",
    },
    {
        "what": "The reader's per-event bookkeeping in 1-row transactions (position tuples per event, a "
        "TxnBoundary + BinlogPosition per transaction, two read_bytes calls per packet)",
        "figure": "1e5 one-row INT transactions, stage step: 3.1-3.4 s before, 2.0-2.3 s after (mysqlbinlog 1.2-1.6 s)",
        "verdict": "readers get the closing event instead of a TxnBoundary; file index per file; framing inlined",
    },
    {
        "what": "Delta's default log replay parallelism (spark.databricks.delta.snapshotPartitions=50)",
        "figure": "a 1-row MERGE into a 1,000-row table: 45-51 s vs 12-15 s with 2 partitions (load ~20)",
        "verdict": "set to the shuffle partitions (2) in cdc_core.lake.spark_conf",
    },
    {
        "what": "Spark's default file-listing parallelism for VACUUM (spark.sql.sources.parallelPartitionDiscovery"
        ".parallelism=10000)",
        "figure": "VACUUM of a 4-file table: 48.1 s vs 3.1 s with 4 listing tasks (quiet machine)",
        "verdict": "set to the shuffle partitions (at least 2) in cdc_core.lake.spark_conf",
    },
    {
        "what": "Letting Delta copy (materialize) the MERGE source, and persisting it for the tombstone MERGE",
        "figure": "a cached source makes Delta refuse materializeSource=none (DELTA_MERGE_SOURCE_CACHED_DURING_EXECUTION)",
        "verdict": "no persist; materializeSource=none per MERGE when the source is only the immutable staged files",
    },
    {
        "what": "delta-rs (deltalake 1.6.6) for the MERGE of tiny tables, no Spark job (bench/tiny_merges.py "
        "--delta-rs; issue 18)",
        "figure": "one-row MERGE into a 100-row table: 0.057 s vs 1.1-1.5 s through Spark (2026-11-27, load ~1); "
        "its conflict check refuses a MERGE racing a concurrent append (checked), but it does not support the "
        "deletionVectors table feature (its reader refuses such tables, and its MERGE rewrote a DV table without "
        "refusing), and the lake's tables enable deletion vectors on creation",
        "verdict": "not as is: writing a table with a writer that does not support one of its features is unsafe. "
        "Built later for what it does support (cdc_core/lake/small_writer.py, `spark.small_table_rows`): tables "
        "start without deletion vectors, delta-rs lands them while small (checked and committed at one table "
        "version), Spark turns deletion vectors on once one outgrows the limit; \"Many tables\" above",
    },
    {
        "what": "JVM and Spark knobs for tiny MERGEs (bench/tiny_merges.py --conf, 30 tables, sequential, load ~1)",
        "figure": "s per table, rounds 2-4: defaults 1.43-1.66; C1 only (-XX:TieredStopAtLevel=1) 2.33-2.51; AQE off "
        "1.24-1.62; whole-stage codegen off 1.37-1.66; stats collection off 1.27-1.68; codegen factory NO_CODEGEN "
        "1.34-1.46, plus whole-stage off 1.20-1.62; Delta allFilesInCrc 1.24-1.60 (defaults in that run 1.18-1.50)",
        "verdict": "none kept: within the noise of one round, except C1 only, which is slower",
    },
    {
        "what": "A cold Spark JVM, the test suite's (a spark-submit per window): a fresh session creates a 100-row "
        "Delta table, MERGEs 100 rows, reads it back (bench/cold_jvm.py, 2 runs each, 2026-11-28, quiet)",
        "figure": "JVM CPU s / wall s: defaults 48.5-55.6 / 27-32; C1 only 27.6-28.4 / 23; a class-data-sharing "
        "archive of the session's classes 36.4-37.0 / 21-22; both 18.3-19.9 / 15. The e2e probe (test_secrets + "
        "test_pipeline_dags, 2 workers, CPU-bound): 229 s wall by default, 220 with the archive, 164 with both",
        "verdict": "the suite's Spark JVMs get the archive (tests/support/jvm_archive.py, SPARK_SUBMIT_OPTS). C1 "
        "only on every spark-submit as well: a fresh-clone suite run took as long as before (46.3 min), merge jobs "
        "and servers doing real work ran slower; not kept. The product keeps Spark's defaults",
    },
    {
        "what": "The test suite's Spark JVMs lean: the archive plus the client JIT and Spark's interpreted expressions "
        "(-XX:TieredStopAtLevel=1, spark.sql.codegen.wholeStage=false, spark.sql.codegen.factoryMode=NO_CODEGEN as "
        "system properties), test modules one at a time (bench/suite_cpu.py, 2026-11-28, quiet)",
        "figure": "machine CPU s / wall s, archive only -> lean: the fault suite's crash scenario (its merges on the "
        "in-process merge server) 170 / 102 -> 137 / 98; the hostile-names module (a spark-submit per window) "
        "59 / 39 -> 33 / 27; test_cli_run 16 / 17 -> 14 / 16. With a per-process CPU sampler beside it (a prototype "
        "of the bench): the crash scenario 204 -> 157 (C1 alone 176, interpreted alone 168), the schema-change merges "
        "(in-process session) 208 -> 147. Why: JFR and per-thread CPU of the fault suite's JVM, "
        "C2 61 and C1 17 of 163 CPU-s, and of the Java samples 29% in Spark's code generation (Janino), for queries "
        "over a few hundred rows. Whole suite, fresh clone: 45.4 min -> 37.5 min of pytest",
        "verdict": "kept for the tests (tests/support/jvm_archive.py); the cluster tier and the production cycle keep "
        "Spark's defaults (spark_defaults fixture), and so does the product: for the product's tiny MERGEs these "
        "knobs were noise (the row above)",
    },
    {
        "what": "4 writer threads instead of 1 for tiny MERGEs on local[2] (bench/tiny_merges.py --threads 4)",
        "figure": "1.14-1.29 s per table vs 1.43-1.66 sequential: the JVM is CPU-bound (JFR: ~97% user CPU of both "
        "cores; after 150 MERGEs C2 still compiles ~20 CPU-s per 30 s; 40% of Java samples generate Delta's "
        "log-action projection code in the state-reconstruction tasks)",
        "verdict": "4 kept (the default); the per-table floor on 2 cores is the Spark MERGE itself",
    },
    {
        "what": "An idempotent append instead of the MERGE when no staged key can match (bench/tiny_merges.py "
        "--append)",
        "figure": "1.2-1.9 s per table vs 1.4-1.6 s for the MERGE (load ~5): both load the table's snapshot (3 Spark "
        "jobs of state reconstruction) and commit through Spark",
        "verdict": "not done: no gain",
    },
    {
        "what": "CREATE TABLE AS SELECT for a table a window creates (one commit instead of create + append)",
        "figure": "0.8 s vs 1.8-2.3 s per new table (load ~6), txn identity in the first commit; but a crash between "
        "its data files and its commit leaves a non-Delta directory where Delta refuses CREATE TABLE "
        "(DELTA_TABLE_NOT_FOUND, checked), and removing those files is unsafe against a zombie about to commit",
        "verdict": "not used: crash recovery must never wedge a table",
    },
    {
        "what": "Log replay on one partition (spark.databricks.delta.snapshotPartitions=1 instead of 2) for tiny "
        "MERGEs (bench/tiny_merges.py --threads 4, 20 tables, 2026-11-27, load 4-6)",
        "figure": "s per table, rounds 3-5: 0.86-0.98 vs 0.92-1.00 with 2 in the same session",
        "verdict": "not kept: noise; the 3 state-reconstruction jobs per table cost their scheduling, not their tasks",
    },
    {
        "what": "Java 25 (Temurin, on this machine) instead of Java 17 for the Spark JVM (bench/tiny_merges.py "
        "--threads 4, 20 tables, 2026-11-27, load ~4.5)",
        "figure": "s per table, rounds 3-5: 0.86-1.19 vs 0.92-1.00 on Java 17; Spark 4.2 and Delta 4.4 ran unchanged",
        "verdict": "not kept: no gain, and Java 17 is what the project installs",
    },
    {
        "what": "Where a new table's first load goes: CREATE TABLE vs the idempotent append (ad-hoc, 20 tables of the "
        "lake's shape, sequential, warm JVM, 2026-11-27, load ~2)",
        "figure": "CREATE TABLE 0.18 s, schema read 0.01 s, first append as (pipeline, seq) 0.69-0.71 s per table",
        "verdict": "creating tables without Spark would save at most ~0.2 s of ~1.1 s per snapshot-loaded table; the "
        "first append through Spark is the cost",
    },
    {
        "what": "Jars copied into each job through Spark's file server (spark-submit --jars /path) vs loaded in place "
        "(--jars local:/path) with a local master (a trivial spark-submit, local[2], 2026-11-27, quiet)",
        "figure": "Delta jars (86 MB): 11.7-13.0 s copied vs 12.3-13.1 s in place; plus the S3A jars (744 MB): "
        "16.1-17.7 s copied vs 11.2-14.5 s in place",
        "verdict": "kept for local masters (cdc_core.lake.spark_conf.jar_list); a cluster's executors still get copies",
    },
    {
        "what": "What Delta's idempotent-write check costs: the same tiny MERGEs without the txn identity "
        "(bench/tiny_merges.py --threads 4 --tables 20 [--no-txn], two runs back to back, 2026-11-27 13:33-13:40, "
        "load 3-4.5)",
        "figure": "s per table, rounds 2-4: 1.75, 1.43, 1.24 with it; 1.66, 1.16, 1.11 without it (0.1-0.3 s less)",
        "verdict": "the txn check is not the per-table cost: without it the MERGE still costs ~1.1 s (its own snapshot "
        "and jobs), so a Delta release that reads set transactions from the .crc would not meet the 100/1 ratio "
        "either; only a writer without Spark for small tables would (built since: cdc_core/lake/small_writer.py)",
    },
]


def _med(stat: Any) -> float | None:
    return stat.get("median") if isinstance(stat, dict) else None


def _f(v: Any, unit: str = "", digits: int = 1) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if abs(v) >= 10_000:
            return f"{v:,.0f}{unit}"
        return f"{v:.{digits}f}{unit}"
    return f"{v}{unit}"


def _ok(cond: bool | None) -> str:
    return "—" if cond is None else ("PASS" if cond else "FAIL")


def render(r: dict[str, Any]) -> str:
    m = r.get("machine", {})
    v = r.get("versions", {})
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `{r.get('command', 'python -m bench')}` from {r.get('started')} to {r.get('finished', '(running)')}; "
        f"services: {r.get('services')}. Every figure is the median of the rounds shown (runs).",
        "",
        f"Machine: {m.get('cores')} cores ({m.get('cpu_model')}), {m.get('memory_gb')} GB, {m.get('os')}; load average "
        f"at start {r.get('load_avg_start')}, at end {r.get('load_avg_end')} (other users share the machine).",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val and k != "delta_jars"),
        "",
    ]
    targets: list[tuple[str, str, str, str]] = []
    lines += _capture(r.get("capture"), targets)
    lines += _merge(r.get("merge"), targets)
    lines += _fixed(r.get("fixed"), targets)
    lines += _memory(r.get("memory"), targets)
    runs = r.get("families_runs") or ([r["families_run"]] if r.get("families_run") else [])
    lines += _families(r.get("families"), runs, targets)
    lines += _tables(r.get("tables"), targets)
    lines += _warm(r.get("warm"), targets)
    lines += _warm_soak(r.get("warm_soak"), targets)
    lines += _schema(r.get("schema"), targets)
    lines += _object_store_tables(r.get("tables_object_store"), targets)
    lines += _freshness([r[k] for k in ("freshness_warm", "freshness_spark_submit") if r.get(k)], targets)
    head = [
        "## Targets (ratios measured in the same run)",
        "",
        "| target | figure | goal | verdict |",
        "|---|---|---|---|",
    ]
    head += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in targets]
    tried = ["## Tried and did not help", "", "| what | figure | verdict |", "|---|---|---|"]
    tried += [f"| {t['what']} | {t['figure']} | {t['verdict']} |" for t in TRIED + r.get("tried", [])]
    errors = [
        f"- {sec}: {e}"
        for sec in ("capture", "merge", "fixed", "memory", "tables", "warm", "warm_soak", "schema", "tables_object_store",
                    "freshness_warm", "freshness_spark_submit")
        for e in _section_errors(r.get(sec))
    ]
    errors += [
        f"- capture {w['workload']['label']}: {e}"
        for w in (r.get("capture") or {}).get("workloads", [])
        for e in w.get("errors", [])
    ]
    out = lines[:8] + head + [""] + lines[8:] + tried + [""]
    if errors:
        out += ["## Errors and notes", "", *errors, ""]
    return "\n".join(out)


def _capture(c: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    if not c or not c.get("workloads"):
        return []
    out = [
        "## Capture (rows of the table per second, read + decode + stage to Parquet)",
        "",
        "| workload | binlog MB | stock loop | mysqlbinlog -v | ours | ours/stock | ours/mysqlbinlog | decode only | other worker setting | runs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst_stock, worst_mb = None, None
    for w in c["workloads"]:
        wl = w["workload"]
        other = "ours_inline" if w.get("default_decode_workers") else "ours_workers"
        mb = (w.get("plan") or {}).get("bytes")
        rs, rm = w.get("ratio_ours_to_stock"), w.get("ratio_ours_to_mysqlbinlog")
        if rs is not None:
            worst_stock = rs if worst_stock is None else min(worst_stock, rs)
        if rm is not None:
            worst_mb = rm if worst_mb is None else min(worst_mb, rm)
        other_label = f"{'inline' if other == 'ours_inline' else '2 workers'}: {_f(_med(w.get(f'{other}_rows_per_s')))}"
        out.append(
            f"| {wl['label']} | {_f(mb / 1e6 if mb else None)} | {_f(_med(w.get('stock_rows_per_s')))} | "
            f"{_f(_med(w.get('mysqlbinlog_rows_per_s')))} | **{_f(_med(w.get('ours_rows_per_s')))}** | {_f(rs, 'x')} | "
            f"{_f(rm, '', 2)} | {_f(_med(w.get('ours_read_rows_per_s')))} | {other_label} | "
            f"{(w.get('ours_seconds') or {}).get('runs')} |"
        )
    out += [
        "",
        f"The stock loop reads at most {c['workloads'][0].get('stock_rows_measured')} rows of each range per run (its "
        "rate does not depend on the range's length). Decode workers: the product's default for the window's size "
        "(`binlog.decode_workers`).",
        "",
    ]
    targets.append(
        (
            "capture vs stock python-mysql-replication (worst workload)",
            _f(worst_stock, "x", 2),
            ">= 5x",
            _ok(None if worst_stock is None else worst_stock >= 5),
        )
    )
    targets.append(
        (
            "capture vs mysqlbinlog rows/s (worst workload)",
            _f(worst_mb, "", 2),
            ">= 0.40",
            _ok(None if worst_mb is None else worst_mb >= 0.4),
        )
    )
    return out


def _merge(mg: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    if not mg or not mg.get("fixed_window"):
        return []
    out = [
        f"## Merge (window of {mg.get('window_changes')} changes: 50% updates, 20% deletes, 30% inserts; "
        f"{mg.get('table_columns')} columns)",
        "",
        "| table rows | files | merge s | changes/s | plain append s | merge/append | without deletion vectors s | runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in mg["fixed_window"]:
        out.append(
            f"| {e['table_rows']:,} | {e.get('table_files')} | {_f(_med(e.get('merge_seconds')), '', 2)} | "
            f"{_f(_med(e.get('merge_changes_per_s')))} | {_f(_med(e.get('append_seconds')), '', 2)} | "
            f"{_f(e.get('merge_to_append'), '', 2)} | {_f(_med(e.get('merge_seconds_no_dv')), '', 2)} | "
            f"{(e.get('merge_seconds') or {}).get('runs')} |"
        )
    g = mg.get("growth") or {}
    out += [
        "",
        f"Merge time vs table size at a fixed window: {g.get('largest_rows', 0):,} rows / {g.get('smallest_rows', 0):,} rows = "
        f"{_f(g.get('merge_time_ratio'), 'x', 2)} the time for {_f(g.get('rows_ratio'), 'x', 0)} the rows.",
        "",
    ]
    targets.append(
        (
            f"merge {mg.get('window_changes'):,} changes into {g.get('largest_rows', 0):,} vs {g.get('smallest_rows', 0):,} rows",
            _f(g.get("merge_time_ratio"), "x", 2),
            "<= 3x",
            _ok(None if g.get("merge_time_ratio") is None else g["merge_time_ratio"] <= 3),
        )
    )
    b = mg.get("big_window")
    if b:
        out += [
            f"Big window: {b['window_changes']:,} changes into {b['table_rows']:,} rows: merge {_f(_med(b.get('merge_seconds')), ' s', 1)} "
            f"({_f(_med(b.get('merge_changes_per_s')))} changes/s) vs plain append of the same rows {_f(_med(b.get('append_seconds')), ' s', 1)}: "
            f"{_f(b.get('merge_to_append'), 'x', 2)}.",
            "",
        ]
        targets.append(
            (
                f"merge of a {b['window_changes']:,}-change window vs a plain append",
                _f(b.get("merge_to_append"), "x", 2),
                "<= 3x",
                _ok(None if b.get("merge_to_append") is None else b["merge_to_append"] <= 3),
            )
        )
    return out


def _fixed(fx: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    if not fx:
        return []
    out = [
        "## Fixed cost of a window (end to end, seconds)",
        "",
        "| run | empty window | 1-change window | reference |",
        "|---|---|---|---|",
        f"| CLI `cdc run` | {_f(_med(fx.get('cli_empty_window_seconds')), '', 2)} | {_f(_med(fx.get('cli_one_change_window_seconds')), '', 2)} | — |",
        f"| DAG `airflow dags test` | {_f(_med(fx.get('dag_empty_window_seconds')), '', 2)} | {_f(_med(fx.get('dag_one_change_window_seconds')), '', 2)} | "
        f"empty DAG (1 task) {_f(_med(fx.get('dag_reference_empty_dag_seconds')), '', 2)}; same shape, tasks do nothing "
        f"{_f(_med(fx.get('dag_reference_same_shape_seconds')), '', 2)} |",
        "",
        f"Empty window merge task states: {fx.get('empty_window_merge_task_states')} (Spark never starts).",
        "",
    ]
    if "spark" in fx:
        s = fx["spark"]
        out += [
            f"Context: a trivial spark-submit takes {_f(_med(s.get('trivial_spark_submit_seconds')), ' s', 1)}, "
            f"a Delta session start {_f(_med(s.get('spark_session_start_seconds')), ' s', 1)}.",
            "",
        ]
    over = fx.get("dag_empty_over_empty_dag_seconds")
    targets.append(
        (
            "empty window starts Spark",
            str(fx.get("empty_window_started_spark")),
            "never",
            _ok(None if "empty_window_started_spark" not in fx else not fx["empty_window_started_spark"]),
        )
    )
    targets.append(
        (
            "empty window DAG run over an empty DAG run",
            _f(over, " s", 1),
            "<= 5 s",
            _ok(None if over is None else over <= 5),
        )
    )
    return out


def _memory(mem: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    if not mem or not mem.get("windows"):
        return []
    out = [
        f"## Memory: peak RSS staging a window ({mem.get('width')} columns, {mem.get('txn_rows')}-row transactions)",
        "",
        "| changes | process baseline MB | peak MB (default) | decode workers' peak MB | peak MB (inline) | staging s |",
        "|---|---|---|---|---|---|",
    ]
    for w in mem["windows"]:
        d, i = w.get("default", {}), w.get("inline", {})
        out.append(
            f"| {w['changes']:,} | {w.get('baseline_rss_mb')} | {d.get('peak_rss_mb')} | {d.get('workers_peak_rss_mb')} | "
            f"{i.get('peak_rss_mb')} | {d.get('seconds')} |"
        )
    g = mem.get("growth") or {}
    out += [
        "",
        f"{_f(g.get('changes_ratio'), 'x', 0)} the changes: peak RSS x{_f(g.get('peak_rss_ratio_default'), '', 2)} (default), "
        f"x{_f(g.get('peak_rss_ratio_inline'), '', 2)} (inline).",
        "",
    ]
    worst = max(
        (
            x
            for x in (g.get("peak_rss_ratio_default"), g.get("peak_rss_ratio_inline"), g.get("workers_peak_rss_ratio"))
            if x
        ),
        default=None,
    )
    targets.append(
        (
            "staging peak RSS, largest vs smallest window",
            _f(worst, "x", 2),
            "flat (<= 1.25x)",
            _ok(None if worst is None else worst <= 1.25),
        )
    )
    return out


def _families(f: dict[str, Any] | None, runs: list[dict[str, Any]], targets: list[Any]) -> list[str]:
    """Issue 19's per-family table: every family and the mixed tables, slowest first."""
    if not f or not f.get("workloads"):
        return []
    ws = f["workloads"]
    when = ""
    for i, run in enumerate(runs):
        when += (f" {'Measured' if i == 0 else 'Then re-measured (replacing those workloads)'} by "
                 f"`{run.get('command')}` from {run.get('started')} to {run.get('finished')}, load average "
                 f"{run.get('load_avg_start')} at start, {run.get('load_avg_end')} at end.")
    lines = [
        "## Capture per type family (issue 19)",
        "",
        f"A table of 20 columns of one family (or a mixed table of 10/20/60 columns over every family), "
        f"{f.get('rows')} rows (per workload: see results.json) written as inserts or as updates of every column, "
        "staged by our reader vs the "
        "stock python-mysql-replication loop and `mysqlbinlog -v` over the same range, in the same rounds "
        f"(bench/families.py). Slowest ratio to mysqlbinlog first.{when}",
        "",
        "| family | op | rows | rows/txn | load | ours rows/s | stock rows/s | mysqlbinlog rows/s | x stock | "
        "x mysqlbinlog | targets (≥5x, ≥0.4x) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def med(w: dict[str, Any], name: str) -> Any:
        return (w.get(f"{name}_rows_per_s") or {}).get("median")

    def key(w: dict[str, Any]) -> float:
        v = w.get("ratio_ours_to_mysqlbinlog")
        return v if v is not None else -1.0

    misses = 0
    for w in sorted(ws, key=key):
        rs, rm = w.get("ratio_ours_to_stock"), w.get("ratio_ours_to_mysqlbinlog")
        goal_m = 0.5 if w.get("family") == "mixed20" else 0.4
        ok = None if rs is None or rm is None else (rs >= 5 and rm >= goal_m)
        misses += ok is False
        lines.append(
            f"| {w.get('family')} | {w.get('op')} | {w['workload']['rows']} | {w['workload']['txn_rows']} | "
            f"{_r(w.get('load_avg'))} | {_n(med(w, 'ours'))} | "
            f"{_n(med(w, 'stock'))} | {_n(med(w, 'mysqlbinlog'))} | {_r(rs)} | {_r(rm)} | {_ok(ok)} |"
        )
    worst = min(ws, key=key)
    targets.append((
        "capture per family vs stock / mysqlbinlog (slowest workload)",
        f"{worst.get('family')} {worst.get('op')}: {_r(worst.get('ratio_ours_to_stock'))}x, "
        f"{_r(worst.get('ratio_ours_to_mysqlbinlog'))}x",
        "≥ 5x and ≥ 0.4x (mixed20 ≥ 0.5x)",
        f"{_ok(misses == 0)} ({misses} of {len(ws)} workloads miss)",
    ))
    return [*lines, ""]


def _n(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}"


def _r(v: Any) -> str:
    return "—" if v is None else f"{v:.2f}"


def _section_errors(sec: Any) -> list[str]:
    if not isinstance(sec, dict):
        return []
    out = list(sec.get("errors", []))
    for sub in ("windows", "rerun", "baseline"):
        if isinstance(sec.get(sub), dict):
            out += list(sec[sub].get("errors", []))
    snaps = sec.get("snapshot")
    for load in (snaps.values() if isinstance(snaps, dict) else []):
        if isinstance(load, dict):
            out += list(load.get("errors", []))
    return out


def _tables(tb: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    """bench/tables.py: windows touching many tables, initial loads of many small tables (`cdc run`)."""
    if not tb:
        return []
    lines = [
        "## Many tables (bench/tables.py, `cdc run` end to end)",
        "",
        f"`{tb.get('command', 'python -m bench.tables')}`; load average {tb.get('load_start')} at start, "
        f"{tb.get('load_end')} at end; {tb.get('note', '')}",
        "",
    ]
    for label, key in (
        ("", "windows"),
        (f" (before the small-table writer: every table through a Spark MERGE; {tb.get('windows_spark_only_note', '')})"
         .replace("; )", ")"), "windows_spark_only"),
        (" and its previous new row deleted (hard deletes: the tombstone table too), delta-rs (2026-11-28)",
         "windows_deletes"),
        (" and its previous new row deleted, every table through Spark (`small_table_rows: 0`: how such windows "
         "landed before 2026-11-28)", "windows_deletes_spark"),
        (" (an earlier run on a machine shared with other engineers' suites)", "windows_loaded"),
        (" (an earlier second run, one round, load 5-6)", "rerun"),
        (" (baseline: `spark.merge_parallelism: 1`, before the change)", "baseline"),
    ):
        sub = tb.get(key) or {}
        if sub.get("command"):
            lines += [f"`{sub['command']}`, load {sub.get('load')}", ""]
        lines += _tables_windows(sub, targets if key == "windows" else [], label)
    return lines + _tables_snapshot(tb, targets)


def _tables_windows(win: dict[str, Any], targets: list[Any], label: str) -> list[str]:
    lines: list[str] = []
    secs = win.get("window_seconds") or {}
    if secs:
        lines += [f"Windows with one changed row in each of k tables{label}:", ""]
        lines += ["| tables touched (1 row each) | window, median s | runs | phases of the last run (s) |", "|---|---|---|---|"]
        for k, st in secs.items():
            runs = (win.get("runs") or {}).get(k) or [{}]
            ph = ", ".join(f"{n} {v}" for n, v in (runs[-1].get("phases") or {}).items())
            lines.append(f"| {k} | {_f(st.get('median'))} | {st.get('runs')} | {ph} |")
        lines.append("")
        keys = sorted(int(k) for k in secs)
        if len(keys) >= 2:
            lo, hi = keys[0], keys[-1]
            ratio = win.get(f"ratio_{hi}_to_{lo}")
            targets.append((
                f"window touching {hi} tables / touching {lo}", _f(ratio), "<= 3", _ok(ratio is not None and ratio <= 3)
            ))
    return lines


def _tables_snapshot_runs(tb: dict[str, Any], targets: list[Any], key: str = "snapshot_runs") -> list[str]:
    """Repeated initial-load runs (each: 1 table, then N tables, on the same services): one row per run; the
    targets take the median run's ratio (as every figure of this file: the median of its rounds, with the
    range shown) and the slowest N-table load."""
    runs = tb.get(key) or []
    if not runs:
        return []
    keys = sorted({int(k) for r in runs for k, v in r.items() if isinstance(v, dict)})
    lo, hi = str(keys[0]), str(keys[-1])
    lines = [
        f"Initial loads, {len(runs)} runs ({tb.get(f'{key}_note', '')}):".replace(" ()", ""),
        "",
        f"| run | started | {lo} table(s), s | {hi} tables, s | windows | `cdc run` calls | ratio | load at end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        big = r.get(hi) or {}
        lines.append(
            f"| {i} | {r.get('started', '')} | {_f((r.get(lo) or {}).get('seconds'))} | {_f(big.get('seconds'))} | "
            f"{big.get('windows')} | {big.get('cli_runs')} | {_f(r.get(f'ratio_{hi}_to_{lo}'), digits=2)} | "
            f"{big.get('load')} |"
        )
    lines.append("")
    ratios = [r.get(f"ratio_{hi}_to_{lo}") for r in runs]
    known = sorted(x for x in ratios if x is not None)
    med = statistics.median(known) if known and len(known) == len(ratios) else None
    figure = f"{_f(med, digits=2)} median ({_f(known[0], digits=2)}-{_f(known[-1], digits=2)}, {len(runs)} runs)" if (
        med is not None) else "—"
    targets.append((
        f"initial load of {hi} tables / of {lo}", figure, "<= 10", _ok(med is not None and med <= 10),
    ))
    slowest = max(((r.get(hi) or {}).get("seconds") or 0.0 for r in runs), default=None)
    targets.append((
        f"initial load of {hi} tables x {(runs[0].get(hi) or {}).get('rows')} rows (slowest run)", f"{_f(slowest)} s",
        "<= 900 s", _ok(slowest is not None and 0 < slowest <= 900),
    ))
    return lines


def _tables_snapshot(tb: dict[str, Any], targets: list[Any]) -> list[str]:
    lines: list[str] = _tables_snapshot_runs(tb, targets)
    lines += _tables_snapshot_runs(tb, [], "snapshot_runs_spark_only")
    snaps = tb.get("snapshot") or {}
    loads = {k: v for k, v in snaps.items() if isinstance(v, dict)}
    if loads and lines:  # the runs above carry the targets; this is the earlier figure
        lines += [f"Earlier ({tb.get('snapshot_note', 'before')}):", ""]
        targets = []
    if loads:
        lines += ["| initial load | seconds | windows | `cdc run` calls | lake tables | load |", "|---|---|---|---|---|---|"]
        for k, v in loads.items():
            lines.append(
                f"| {k} tables x {v.get('rows')} rows | {_f(v.get('seconds'))} | {v.get('windows')} | "
                f"{v.get('cli_runs')} | {v.get('lake_tables')} | {v.get('load')} |"
            )
        lines.append("")
        keys = sorted(int(k) for k in loads)
        if len(keys) >= 2:
            lo, hi = str(keys[0]), str(keys[-1])
            ratio = snaps.get(f"ratio_{hi}_to_{lo}")
            targets.append((
                f"initial load of {hi} tables / of {lo}", _f(ratio), "<= 10", _ok(ratio is not None and ratio <= 10)
            ))
            big = loads[hi].get("seconds")
            targets.append((
                f"initial load of {hi} tables x {loads[hi].get('rows')} rows", f"{_f(big)} s", "<= 900 s",
                _ok(big is not None and big <= 900),
            ))
    dags = {k: v for k, v in (tb.get("snapshot_dags") or {}).items() if isinstance(v, dict)}
    if dags:
        lines += [
            f"Through DAG runs (`{tb.get('snapshot_dags_command', 'python -m bench.tables --snapshot-dag-tables N')}`, "
            f"{tb.get('snapshot_dags_started', '')}): successive `airflow dags test cdc_<pipeline>` runs (SQLite "
            "Airflow, one window and one spark-submit per run) until the snapshot is done, timed from the first run.",
            "",
            "| initial load through DAG runs | seconds | DAG runs | windows | lake tables | merge_window task s per run | "
            "load |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, v in dags.items():
            merges = ", ".join(_f((r.get("seconds") or {}).get("merge_window")) for r in v.get("dag_runs") or [])
            lines.append(
                f"| {k} tables x {v.get('rows')} rows | {_f(v.get('seconds'))} | {v.get('dag_runs_count')} | "
                f"{v.get('windows')} | {v.get('lake_tables')} | {merges} | {v.get('load')} |"
            )
        lines.append("")
    return lines


def _warm(w: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    """bench/warm.py: a one-row window through `cdc run`, spark-submit per window vs the merge server."""
    if not w or not w.get("window_seconds"):
        return []
    secs = w["window_seconds"]
    lines = [
        "## Warm merge option (bench/warm.py, a one-row window, `cdc run` end to end)",
        "",
        f"`{w.get('command', 'python -m bench.warm')}`, {w.get('started')} to {w.get('finished')}; load average "
        f"{w.get('load_start')} at start, {w.get('load_end')} at end. Default: the merge is a spark-submit per "
        "window; warm: the same job sent to `cdc merge-server` (started once: ready after "
        f"{_f(w.get('server_ready_seconds'))} s; its first window {_f((w.get('first_warm_window') or {}).get('seconds'))} s, "
        f"not counted). Alternating rounds, one run each per round. {w.get('note', '')}".rstrip(),
        "",
        "| merge path | window p50, s | min | max | runs | phases of the last run (s) | load of each run (1 min) |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in ("default", "warm"):
        st = secs.get(mode) or {}
        runs = (w.get("runs") or {}).get(mode) or [{}]
        ph = ", ".join(f"{n} {v}" for n, v in (runs[-1].get("phases") or {}).items())
        loads = ", ".join(str((r.get("load") or [None])[0]) for r in runs if r)
        lines.append(f"| {mode} | {_f(st.get('median'))} | {_f(st.get('min'))} | {_f(st.get('max'))} | "
                     f"{st.get('runs')} | {ph} | {loads} |")
    lines.append("")
    ratio = w.get("ratio_warm_to_default")
    targets.append((
        "one-row window p50, warm / default", _f(ratio, digits=2), f"<= {w.get('target_ratio', 0.25)}",
        _ok(ratio is not None and ratio <= float(w.get("target_ratio", 0.25))),
    ))
    return lines


def _object_store_tables(tb: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    """bench/tables.py --object-store: the many-tables figures with staging and lake on S3Proxy (issue 37 §5)."""
    if not tb:
        return []
    lines = [
        "## Many tables on an object store (bench/tables.py --object-store, issue 37 §5)",
        "",
        "Staging and lake on S3Proxy 4.1 (filesystem backend, on the same 2 cores: every request's server work is "
        "in the figures), `cdc run` end to end with a spark-submit per window (the S3A jars on its classpath: "
        "a JVM and session start of ~16 s against ~6 s on local disk). The merge job probes the store, finds "
        "conditional writes and lands every table with delta-rs (docs/object-store.md \"Delta commits on S3\"). "
        f"{tb.get('note', '')}".rstrip(),
        "",
    ]
    win = tb.get("windows") or {}
    if win.get("command"):
        lines += [f"`{win['command']}`, {win.get('started', '')}", ""]
    lines += _tables_windows(win, [], " (object store)")
    ratio = win.get("ratio_100_to_1")
    if ratio is not None:
        targets.append(("object store: window touching 100 tables / touching 1", _f(ratio), "<= 3", _ok(ratio <= 3)))
    snap = tb.get("snapshot") or {}
    loads = {k: v for k, v in snap.items() if isinstance(v, dict)}
    if loads:
        if snap.get("command"):
            lines += [f"`{snap['command']}`, {snap.get('started', '')}", ""]
        lines += ["| initial load (object store) | seconds | windows | lake tables | phases (s) | load |",
                  "|---|---|---|---|---|---|"]
        for k, v in loads.items():
            ph = ", ".join(f"{n} {val}" for n, val in (v.get("phases_last_run") or {}).items())
            lines.append(f"| {k} tables x {v.get('rows')} rows | {_f(v.get('seconds'))} | {v.get('windows')} | "
                         f"{v.get('lake_tables')} | {ph} | {v.get('load')} |")
        lines.append("")
        keys = sorted(int(k) for k in loads)
        if len(keys) >= 2:
            lo, hi = str(keys[0]), str(keys[-1])
            ratio = snap.get(f"ratio_{hi}_to_{lo}")
            big = loads[hi].get("seconds")
            targets.append((f"object store: initial load of {hi} tables / of {lo}", _f(ratio), "<= 10",
                            _ok(ratio is not None and ratio <= 10)))
            targets.append((f"object store: initial load of {hi} tables", f"{_f(big)} s", "<= 120 s",
                            _ok(big is not None and big <= 120)))
    big_window = tb.get("million") or {}
    if big_window:
        lines += [f"A window of {big_window.get('changes')} changes on the store: {big_window.get('text', '')}", ""]
    return lines


def _freshness(runs: list[dict[str, Any]], targets: list[Any]) -> list[str]:
    """bench/freshness.py: commit-to-visible latency under the real scheduler (issue 37 §4)."""
    if not runs:
        return []
    lines = [
        "## Freshness under the real scheduler (bench/freshness.py, issue 37 §4)",
        "",
        "Airflow's scheduler with LocalExecutor on PostgreSQL, the pipeline DAG on a one-minute schedule with "
        "`continue_while_behind`, staging and lake on S3Proxy, every service on the same 2 cores. A steady insert "
        "workload over many tables; each transaction's commit time is taken when its COMMIT returns, and a reader "
        "polling every table's Delta log (delta-rs, the files' statistics) finds when its rows became visible. "
        "Latencies are per row (each commit weighted by its rows); the poll interval bounds their error.",
        "",
        "| merge path | workload | p50 s | p95 s | p99 s | max s | DAG runs (p50 s, max s) | CPU seconds by component | "
        "merge server RSS | load at end |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        par, lat, wl, dr = r.get("params") or {}, r.get("latency_seconds") or {}, r.get("workload") or {}, (
            r.get("dag_runs") or {})
        cpu = ", ".join(f"{k} {v}" for k, v in (r.get("cpu_seconds") or {}).items())
        lines.append(
            f"| {par.get('merge')} | {wl.get('rows_per_second')} rows/s over {par.get('tables')} tables, "
            f"{_f(wl.get('seconds'))} s; poll {r.get('poll_seconds')} s | {lat.get('p50')} | {lat.get('p95')} | "
            f"{lat.get('p99')} | {lat.get('max')} | {dr.get('count')} ({dr.get('seconds_p50')}, {dr.get('seconds_max')}) | "
            f"{cpu} | {r.get('merge_server_rss_mb') or '-'} MB | {r.get('load_end')} |")
        if par.get("merge") == "warm" and par.get("tables", 0) >= 50 and float(par.get("rate") or 0) >= 1000:
            targets.append(("commit-to-visible p50, 1,000 rows/s over 50 tables, object store, warm server",
                            f"{lat.get('p50')} s", "<= 60 s", _ok(lat.get("p50") is not None and lat["p50"] <= 60)))
            targets.append(("commit-to-visible p95, same run", f"{lat.get('p95')} s", "<= 120 s",
                            _ok(lat.get("p95") is not None and lat["p95"] <= 120)))
    lines.append("")
    notes = [str(r["note"]) for r in runs if r.get("note")]
    return lines + ([*notes, ""] if notes else [])


SOAK_FLAT = 1.25  # the warm server's memory is flat when its last sample is within 25% of the warmed-up one


def _warm_soak(w: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    """bench/warm.py --soak-windows: one merge server through many successive windows, its memory sampled."""
    if not w or not w.get("samples"):
        return []
    samples = w["samples"]
    lines = [
        "## Warm merge server over many windows (bench/warm.py --soak-windows)",
        "",
        f"`{w.get('command', 'python -m bench.warm --soak-windows N')}`, {w.get('started')} to {w.get('finished')}; "
        f"load average {w.get('load_start')} at start, {w.get('load_end')} at end. One `cdc merge-server`, "
        f"{w.get('windows')} successive windows through `cdc run`, each touching {w.get('touch')} of "
        f"{w.get('tables')} tables in rotation (one new row each); window p50 "
        f"{_f(_med(w.get('window_seconds')))} s. Live heap: the JVM's heap in use right after a full GC. "
        f"{w.get('note', '')}".rstrip(),
        "",
        "| after window | merges served | server Python RSS, MB | JVM RSS, MB | JVM live heap, MB | that window, s |",
        "|---|---|---|---|---|---|",
    ]
    for x in samples:
        lines.append(f"| {x.get('window')} | {x.get('merges')} | {_f(x.get('python_rss_mb'))} | "
                     f"{_f(x.get('jvm_rss_mb'))} | {_f(x.get('jvm_live_heap_mb'))} | {_f(x.get('window_seconds'))} |")
    lines.append("")
    warmed = next((x for x in samples if int(x.get("window") or 0) >= 50), samples[min(1, len(samples) - 1)])
    last = samples[-1]
    growth = common.ratio(last.get("jvm_live_heap_mb"), warmed.get("jvm_live_heap_mb"))
    targets.append((
        f"warm server live heap, window {last.get('window')} / window {warmed.get('window')}",
        _f(growth, digits=2), f"flat (<= {SOAK_FLAT})", _ok(growth is not None and growth <= SOAK_FLAT),
    ))
    return lines


# ------------------------------------------------------------------------------------------ schema changes

RENAME_EMPTY_FACTOR = 2.0  # "about the cost of an empty commit": the rename's extra time within 2x of one


def _signed(v: float | None) -> str:
    return "—" if v is None else f"{v:+.1f}"


def _median_run(case: dict[str, Any]) -> dict[str, Any]:
    runs = sorted(case.get("runs") or [], key=lambda x: x.get("seconds") or 0.0)
    return runs[(len(runs) - 1) // 2] if runs else {}


def _commit_text(c: dict[str, Any]) -> str:
    files = []
    if c.get("numAddedFiles") or c.get("numRemovedFiles"):
        files.append(f"+{c.get('numAddedFiles', 0)}/-{c.get('numRemovedFiles', 0)} files")
    if c.get("numDeletionVectorsAdded"):
        files.append(f"{c['numDeletionVectorsAdded']} DVs")
    rows = c.get("numUpdatedRows") or c.get("numDeletedRows") or c.get("numOutputRows")
    if rows:
        files.append(f"{rows:,} rows")
    return f"{c.get('operation')} at {_f(c.get('at'))}" + (f" ({', '.join(files)})" if files else "")


def _schema(sc: dict[str, Any] | None, targets: list[Any]) -> list[str]:
    """bench/schema.py (issue 34): windows holding a DDL statement vs the same window without it."""
    if not sc or not sc.get("cases"):
        return []
    cases = {c["name"]: c for c in sc["cases"]}
    tables = sc.get("tables") or {}
    m, w = tables.get("m") or {}, tables.get("w") or {}
    window = sc.get("window_changes")
    runs = sc.get("runs") or [sc]
    when = "; then re-measured (replacing those cases) by ".join(
        f"`{x.get('command', 'python -m bench --only schema')}`"
        f"{' (' + ', '.join(x['cases']) + ')' if i and x.get('cases') else ''}, {x.get('started')} to "
        f"{x.get('finished')}, load average {x.get('load_start')} at start, {x.get('load_end')} at end"
        for i, x in enumerate(runs)
    )
    lines = [
        "## Schema changes (issue 34, bench/schema.py)",
        "",
        f"Measured by {when} (each run's 1-minute load is in the tables). One window of "
        f"{window:,} changes (50% updates, 20% deletes, 30% inserts) merged by the product's merge job "
        f"(`merge_window`) into a Delta table of {m.get('rows', 0):,} rows x {m.get('columns')} columns (the merge "
        f"section's mix, {m.get('files')} files, {m.get('mb')} MB), with the statement in the middle of the window "
        "(parsed by the product's DDL parser and staged among the rows by `stage_window`: the rows after it have the "
        "new shape) and without it. Every run starts from a fresh copy of the same table (copied outside the timing); "
        "rounds go over every case in turn, and each run with the statement comes right after a run of the same "
        "window without it (the same load hits both): `with / without` and `extra` are the medians over those pairs, "
        "the seconds the medians of the runs. Schema phase: from the job's plan to its last "
        "`merge.schema_change` line (every DDL step, before any row lands); rows: the table's MERGE as the merge "
        "report's `steps` time it.",
        "",
        "| case | with DDL, s | without, s | with / without | extra, s | schema phase, s | rows, s | "
        "the DDL's Delta commits | data files written by the DDL | runs | load (1 min) per run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sc["cases"]:
        if c.get("kind") != "window" or not c.get("ddl"):
            continue
        mr = _median_run(c)
        ph = mr.get("phases") or {}
        lines.append(
            f"| {c['label']} | "
            f"**{_f(_med(c.get('seconds')))}** | {_f(_med(c.get('without_seconds')))} | "
            f"**{_f(c.get('ratio'), 'x', 2)}** | {_signed(c.get('extra_seconds'))} | {_f(ph.get('schema_phase'))} | "
            f"{_f(ph.get('table'))} | {', '.join(mr.get('ddl_commits') or []) or '—'} | "
            f"{'yes' if c.get('ddl_writes_data') else 'none'} | {(c.get('seconds') or {}).get('runs')} | "
            f"{', '.join(str((r.get('load') or [None])[0]) for r in c.get('runs') or [])} |"
        )
    lines += [
        "",
        "References (same table, same rounds):",
        "",
        "| reference | seconds | runs | Delta commits (time into the run, s) | load (1 min) per run |",
        "|---|---|---|---|---|",
    ]
    for c in sc["cases"]:
        if c.get("kind") == "window" and c.get("ddl"):
            continue
        mr = _median_run(c)
        lines.append(
            f"| {c['label']} | {_f(_med(c.get('seconds')))} | {(c.get('seconds') or {}).get('runs')} | "
            f"{'; '.join(_commit_text(x) for x in mr.get('commits') or [])} | "
            f"{', '.join(str((r.get('load') or [None])[0]) for r in c.get('runs') or [])} |"
        )
    lines += [
        "",
        "Where the time goes (the median run of each case: its Delta commits with their time into the run, then the "
        "rows' steps from the merge report; `schema_changes` is reading the window through the table's schema record):",
        "",
        "| case | commits (time into the run, s) | rows: merge report steps, s | log lines |",
        "|---|---|---|---|",
    ]
    for c in sc["cases"]:
        if c.get("kind") not in ("window", "ddl_only", "empty"):
            continue
        mr = _median_run(c)
        steps = ", ".join(f"{k} {v}" for k, v in ((mr.get("table") or {}).get("steps") or {}).items())
        logs = ", ".join(
            f"{x['event']}{' ' + x['change'] if x.get('change') else ''}"
            f"{' ' + x['structure'] if x.get('structure') else ''} at {_f(x.get('at'))}"
            for x in mr.get("log") or []
            if x.get("event") in ("merge.schema_change", "merge.table_rewritten", "merge.table_properties")
        )
        lines.append(f"| {c['name']} | {'; '.join(_commit_text(x) for x in mr.get('commits') or [])} | {steps} | "
                     f"{logs or '—'} |")
    lines.append("")
    if w:
        lines += [
            f"The 60-column table ({w.get('rows', 0):,} rows, {w.get('files')} files, {w.get('mb')} MB: `id` and 59 "
            "columns cycling over every type family of the type map, about one value in 13 NULL) was built through the "
            "product's own staging and first merge (window 1), so every type went through the type map.",
            "",
        ]
    notes = sc.get("notes") or []
    lines += [f"- {n}" for n in notes] + ([""] if notes else [])

    rows = f"{m.get('rows', 0):,}-row"
    for name, what in (
        ("truncate", f"TRUNCATE of a {rows} table, {window:,}-change window: with / without (hard deletes)"),
        ("truncate_soft", f"TRUNCATE of a {rows} table, {window:,}-change window: with / without (soft deletes)"),
        ("rename_rewrite", f"RENAME COLUMN on a {rows} table with column_mapping: false (rewrite): with / without"),
        ("add_default", f"ADD COLUMN ... DEFAULT 7 on a {rows} table: with / without"),
        ("modify_widen", f"MODIFY INT -> BIGINT on a {rows} table (rewrite): with / without"),
        ("wide_add_default", f"ADD COLUMN ... DEFAULT 7 on a {w.get('rows', 0):,}-row 60-column table: with / without"),
    ):
        c = cases.get(name)
        if c is None:
            continue
        targets.append((what, f"{_f(c.get('ratio'), 'x', 2)} ({_f(_med(c.get('seconds')))} s vs "
                              f"{_f(_med(c.get('without_seconds')))} s)", "measured (no target)", "—"))
    ren, empty = cases.get("rename_cm"), cases.get("empty_commit")
    if ren is not None:
        writes = ren.get("ddl_writes_data")
        targets.append((
            f"RENAME COLUMN on a {rows} table (column_mapping: true): data files its commits write",
            "none" if writes is False else ("some" if writes else "—"), "metadata only", _ok(None if writes is None else not writes),
        ))
        extra, ref = ren.get("extra_seconds"), _med((empty or {}).get("seconds"))
        ok = None if extra is None or ref is None else extra <= RENAME_EMPTY_FACTOR * ref
        alone = cases.get("rename_only") or {}
        targets.append((
            f"RENAME COLUMN on a {rows} table (column_mapping: true): extra time in the window vs an empty-commit window",
            f"{_signed(extra)} s ({_f(ren.get('ratio'), 'x', 2)}) vs {_f(ref)} s; the RENAME alone "
            f"{_signed(alone.get('extra_seconds'))} s over an empty-commit window",
            f"about an empty commit (<= {RENAME_EMPTY_FACTOR:g}x)", _ok(ok),
        ))
    return lines
