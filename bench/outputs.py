"""History and change-log merge cost (issue 36 §3, docs/output-modes.md): a window of W changes (bench.merge's mix:
50% updates and 20% deletes of random existing keys, 30% inserts) merged by `merge_window` into a table of N rows
that keeps `outputs: [state, history, changelog]`, its history holding one current version per row and its
change log one row per row. The merge report times each output's commit on its own (`seconds` of the state,
`history.seconds`, `changelog.seconds`), so one run gives the three figures of the same window.

    python -m bench.outputs --rows 1e6,1e7 --windows 1e4,1e6 [--repeats 2] [--widths 5,20,60]

`--widths`: the table's columns (bench.workloads.table_def: 5 is a key and four common types, 20 and 60 cycle
through every type family); the default, 20, is the figures' table.

Targets: history <= 2x state, change log <= 1x state. Results: bench/results-outputs.json, bench/RESULTS.md
("History and change log").
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

from bench.common import Stat, load_avg, log, machine_info, now_iso, ratio, short_error, versions
from bench.merge import BASE_VERSION, SCHEMA, Target, spark_session
from bench.workloads import table_def

OUTPUTS = {"outputs": ["state", "history", "changelog"]}


def build_outputs(spark: Any, target: Target) -> int:
    """The history and change log of the base table as the merge job would have built them from a load: one
    version (one change) per row, op I. Returns the seconds it took."""
    from pyspark.sql import functions as F

    from cdc_core.model.layout import changelog_uri, history_uri
    from cdc_core.model.output_modes import CHANGELOG_COLUMNS, HISTORY_COLUMNS
    from spark_apps.merge import TableOptions, create_table_sql
    from spark_apps.merge.staged import spark_type

    t0 = time.perf_counter()
    base = spark.read.format("delta").load(target.uri)
    values = [c for c in base.columns if not c.startswith("_cdc_")]
    ts = F.col("_cdc_commit_ts")
    extra = {
        "history": {
            "_cdc_op": F.lit("I"), "_cdc_valid_from": ts, "_cdc_valid_from_version": F.lit(BASE_VERSION),
            "_cdc_valid_to": F.lit(None), "_cdc_valid_to_version": F.lit(None), "_cdc_is_current": F.lit(True),
            "_cdc_last_version": F.lit(BASE_VERSION), "_cdc_window_seq": F.lit(0),
        },
        "changelog": {
            "_cdc_op": F.lit("I"), "_cdc_version": F.lit(BASE_VERSION), "_cdc_ordinal": F.col("id"),
            "_cdc_commit_ts": ts, "_cdc_txn": F.col("id"), "_cdc_window_seq": F.lit(0),
        },
    }
    for kind, uri, meta in (("history", history_uri(target.lake_root, SCHEMA, target.td.name), HISTORY_COLUMNS),
                            ("changelog", changelog_uri(target.lake_root, SCHEMA, target.td.name), CHANGELOG_COLUMNS)):
        columns = [(f.name, f.dataType) for f in base.schema.fields if f.name in values]
        columns += [(n, spark_type(t)) for n, t in meta]
        spark.sql(create_table_sql(uri, f"{kind} of {target.td.name}", columns, TableOptions(), writer=None))
        rows = base.select(*values, *[extra[kind][n].cast(spark_type(t)).alias(n) for n, t in meta])
        rows.write.format("delta").mode("append").save(uri)
    return round(time.perf_counter() - t0, 1)


class OutputsTarget(Target):
    """bench.merge's target with a history and a change log beside it, restored with it after every run."""

    def __init__(self, spark: Any, workdir: Path, rows: int, window: int, width: int = 20) -> None:
        super().__init__(spark, table_def(width, prefix="m"), workdir, rows, window, name=f"{rows}_{window}")
        self.width = width
        from delta.tables import DeltaTable

        from cdc_core.model.layout import changelog_uri, history_uri

        self.outputs_build_seconds = build_outputs(spark, self)
        self.companions = [history_uri(self.lake_root, SCHEMA, self.td.name),
                           changelog_uri(self.lake_root, SCHEMA, self.td.name)]
        self.companion_versions = [int(DeltaTable.forPath(spark, u).history(1).collect()[0]["version"])
                                   for u in self.companions]
        self.secs = {"state": Stat(unit="s"), "history": Stat(unit="s"), "changelog": Stat(unit="s"),
                     "window": Stat(unit="s")}

    def restore(self) -> None:
        from cdc_core.model.naming import quote_spark

        super().restore()
        for uri, version in zip(getattr(self, "companions", []), getattr(self, "companion_versions", []),
                                strict=True):
            self.spark.sql(f"RESTORE TABLE delta.{quote_spark(uri)} TO VERSION AS OF {version}")

    def merge_outputs(self) -> None:
        from bench.merge import _as_pipeline
        from spark_apps.merge import merge_window

        self.runs += 1
        pipeline = f"bench_run{self.runs}"
        t0 = time.perf_counter()
        report = merge_window(self.spark, _as_pipeline(self.manifest, pipeline), self.wdir, self.lake_root, pipeline,
                              1, 1, table_options={f"{SCHEMA}.{self.td.name}": OUTPUTS})
        took = time.perf_counter() - t0
        table = next(iter(report["tables"].values()))
        self.reports.append(table)
        state = table["seconds"]  # the state's own landing (the outputs report their own seconds)
        self.secs["window"].values.append(round(took, 3))
        self.secs["state"].values.append(round(state, 3))
        self.secs["history"].values.append(table["history"]["seconds"])
        self.secs["changelog"].values.append(table["changelog"]["seconds"])
        self.restore()

    def entry(self) -> dict[str, Any]:
        med = {k: s.median for k, s in self.secs.items()}
        first = self.reports[0] if self.reports else {}
        return {
            "table_rows": self.rows,
            "columns": self.width,
            "window_changes": self.window,
            "build_seconds": round(self.build_seconds + self.outputs_build_seconds, 1),
            "seconds": {k: s.to_dict() for k, s in self.secs.items()},
            "history_to_state": ratio(med["history"], med["state"]),
            "changelog_to_state": ratio(med["changelog"], med["state"]),
            "report": {k: first.get(k) for k in ("status", "inserted", "updated", "deleted", "writer", "history",
                                                  "changelog")},
        }

    def drop(self) -> None:
        shutil.rmtree(self.lake_root, ignore_errors=True)
        shutil.rmtree(Path(self.wdir).parent.parent, ignore_errors=True)


def run(workdir: Path, rows: list[int], windows: list[int], repeats: int, driver_memory: str,
        widths: tuple[int, ...] = (20,)) -> dict[str, Any]:
    out: dict[str, Any] = {"cases": [], "errors": []}
    spark = spark_session(driver_memory)
    try:
        for n, w, width in ((n, w, c) for c in widths for n in sorted(rows) for w in sorted(windows)):
            if w <= n:
                log(f"outputs: a table of {n} rows, {width} columns, with its history and change log; a window of "
                    f"{w} changes")
                target = OutputsTarget(spark, workdir, n, w, width)
                try:
                    target.merge_outputs()  # warm-up (class loading, code generation); not counted
                    for k in target.secs:
                        target.secs[k].values.clear()
                    target.reports.clear()
                    for r in range(repeats):
                        target.merge_outputs()
                        e = target.secs
                        log(f"  round {r + 1}/{repeats}: state {e['state'].values[-1]:.1f}s history "
                            f"{e['history'].values[-1]:.1f}s changelog {e['changelog'].values[-1]:.1f}s")
                    out["cases"].append(target.entry())
                except Exception as exc:
                    out["errors"].append(f"{n} rows, {w} changes: {short_error(exc)}")
                    log(f"  failed: {short_error(exc)}")
                finally:
                    target.drop()
    finally:
        spark.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1e6,1e7", help="table sizes (comma-separated)")
    p.add_argument("--windows", default="1e4,1e6", help="window sizes (comma-separated)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--widths", default="20", help="table widths (comma-separated; 5, 20, 60)")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--workdir", default=None)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results-outputs.json"))
    args = p.parse_args(argv)
    ints = [int(float(x)) for x in args.rows.split(",")], [int(float(x)) for x in args.windows.split(",")]
    started = now_iso()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-outputs-", dir=args.workdir) as tmp:
        results = run(Path(tmp), ints[0], ints[1], args.repeats, args.driver_memory,
                      tuple(int(x) for x in args.widths.split(",")))
    doc = {"command": " ".join(["python -m bench.outputs", *(argv if argv is not None else sys.argv[1:])]),
           "started_at": started, "finished_at": now_iso(), "load_avg_end": load_avg(), "machine": machine_info(),
           "versions": versions(None), "results": results}
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True, default=str))
    log(f"outputs: results in {args.out}")
    for c in results["cases"]:
        secs = {k: c["seconds"][k]["median"] for k in ("state", "history", "changelog")}
        print(f"{c['table_rows']:>11,} rows x {c.get('columns', 20)} {c['window_changes']:>9,} changes: state "
              f"{secs['state']}s history "
              f"{secs['history']}s ({c['history_to_state']}x) changelog {secs['changelog']}s "
              f"({c['changelog_to_state']}x)")
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
