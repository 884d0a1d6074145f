"""Maintenance of many small tables: one table at a time vs the job's writer threads.

    python -m bench.maintenance_tables [--tables 8] [--commits 40] [--parallelism 1 4] [--rounds 1]

`--tables` small Delta tables, each of `--commits` one-row appends by delta-rs (the layout the small-table
writer leaves: one small file and one JSON commit per window that touched the table, no log checkpoint),
are built once; each run maintains a fresh copy of them with spark_apps/maintain_tables.py's `Maintenance`
(ALTER properties, OPTIMIZE, VACUUM, log checkpoint, for every table) in one local[2] Spark session, at each
`--parallelism` in turn (rounds alternate the order). Prints and returns the seconds per run.

Never part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import load_avg, log, now_iso


def build_tables(root: Path, tables: int, commits: int) -> list[dict[str, Any]]:
    import pyarrow as pa
    from deltalake import write_deltalake

    out = []
    for t in range(tables):
        uri = root / f"t{t:03d}"
        for c in range(commits):
            write_deltalake(str(uri), pa.table({"id": [c], "v": [f"row {c}"]}), mode="append")
        out.append({"name": f"bench.t{t:03d}", "uri": str(uri), "kind": "table", "zorder_by": []})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.maintenance_tables", description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--commits", type=int, default=40)
    p.add_argument("--parallelism", type=int, nargs="+", default=[1, 4])
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args(argv)
    from bench.merge import spark_session
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
            order = args.parallelism if r % 2 == 0 else list(reversed(args.parallelism))
            for par in order:
                copy = work / f"run-{r}-{par}"
                shutil.copytree(pristine, copy)
                tables = [{**s, "uri": s["uri"].replace(str(pristine), str(copy))} for s in specs]
                job = Maintenance(spark, "bench", 1, vacuum_hours=1, log_hours=1, txn_hours=1, min_hours=1,
                                  parallelism=par)
                t0 = time.perf_counter()
                report = job.run(tables)
                secs = time.perf_counter() - t0
                run = {"round": r + 1, "parallelism": par, "seconds": round(secs, 1), "load": load_avg()[0],
                       "errors": report["errors"], "files": report["totals"]}
                out["runs"].append(run)
                log(f"maintenance of {args.tables} tables at parallelism {par}: {secs:.1f} s ({report['errors']})")
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
