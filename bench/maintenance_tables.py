"""Maintenance of many small tables: Spark's steps against delta-rs', one table at a time vs the job's threads.

    python -m bench.maintenance_tables [--tables 8] [--commits 40] [--parallelism 1 4] [--writers spark delta-rs]
                                       [--rounds 1]

`--tables` small Delta tables, each of `--commits` one-row appends by delta-rs with the retention properties the
merge job creates its tables with (the layout the small-table writer leaves: one small file and one JSON commit
per window that touched the table), are built once; each run maintains a fresh copy of them with
spark_apps/maintain_tables.py's `Maintenance` (OPTIMIZE, VACUUM, log checkpoint, for every table) in one local[2]
Spark session, at each `--parallelism` and writer in turn (rounds alternate the order): `spark` forces Spark's
steps for every table (as before cdc_core/lake/small_maintenance.py), `delta-rs` lets the job choose (delta-rs for
these tables). Prints and returns the seconds per run.

Never part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import load_avg, log, now_iso

HOURS = 1  # every retention in the runs (the job's floor check passes with min_hours 1)


def build_tables(root: Path, tables: int, commits: int) -> list[dict[str, Any]]:
    import pyarrow as pa
    from deltalake import write_deltalake

    from cdc_core.model import retention

    props = {**retention.managed_table_properties(HOURS, HOURS, HOURS),
             retention.PROP_CHECKPOINT_INTERVAL: str(retention.CHECKPOINT_INTERVAL)}
    out = []
    for t in range(tables):
        uri = root / f"t{t:03d}"
        for c in range(commits):
            write_deltalake(str(uri), pa.table({"id": [c], "v": [f"row {c}"]}), mode="append",
                            configuration=props if c == 0 else None)
        out.append({"name": f"bench.t{t:03d}", "uri": str(uri), "kind": "table", "zorder_by": []})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.maintenance_tables", description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--commits", type=int, default=40)
    p.add_argument("--parallelism", type=int, nargs="+", default=[1, 4])
    p.add_argument("--writers", nargs="+", choices=("spark", "delta-rs"), default=["spark", "delta-rs"])
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args(argv)
    from unittest import mock

    from bench.merge import spark_session
    from cdc_core.lake import small_maintenance
    from spark_apps.maintain_tables import Maintenance

    work = Path(tempfile.mkdtemp(prefix="cdc-bench-maint-"))
    out: dict[str, Any] = {"started": now_iso(), "load_start": load_avg(), "tables": args.tables,
                           "commits": args.commits, "runs": []}
    try:
        pristine = work / "pristine"
        t0 = time.perf_counter()
        specs = build_tables(pristine, args.tables, args.commits)
        log(f"built {args.tables} tables of {args.commits} commits in {time.perf_counter() - t0:.1f} s")
        spark = spark_session("2g")
        for r in range(args.rounds):
            order = [(w, par) for w in args.writers for par in args.parallelism]
            for writer, par in order if r % 2 == 0 else list(reversed(order)):
                copy = work / f"run-{r}-{writer}-{par}"
                shutil.copytree(pristine, copy)
                tables = [{**s, "uri": s["uri"].replace(str(pristine), str(copy))} for s in specs]
                job = Maintenance(spark, "bench", 1, vacuum_hours=HOURS, log_hours=HOURS, txn_hours=HOURS,
                                  min_hours=HOURS, parallelism=par)
                forced = (mock.patch.object(small_maintenance, "eligible", return_value=(None, "bench: Spark"))
                          if writer == "spark" else contextlib.nullcontext())
                t0 = time.perf_counter()
                with forced:
                    report = job.run(tables)
                secs = time.perf_counter() - t0
                writers = sorted({t.get("writer") for t in report["tables"]})
                run = {"round": r + 1, "writer": writer, "writers_used": writers, "parallelism": par,
                       "seconds": round(secs, 1), "load": load_avg()[0], "errors": report["errors"],
                       "files": report["totals"]}
                out["runs"].append(run)
                log(f"maintenance of {args.tables} tables, {writer} (used: {writers}), parallelism {par}: "
                    f"{secs:.1f} s ({report['errors']})")
                shutil.rmtree(copy, ignore_errors=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["finished"] = now_iso()
    out["load_end"] = load_avg()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
