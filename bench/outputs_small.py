"""History and change log on many small tables (issue 36 §3, on the shape most pipelines have): a window touching
N tables of a few hundred rows each, each table given W changes (updates of existing keys and a few inserts and
deletes), merged by `merge_window` as the merge job does (small tables land with delta-rs, spark_apps/merge/small.py),
once with `outputs: [state]`, once with `[state, changelog]`, once with `[state, history]`. Seconds per window, the
first window (tables created, JVM warm-up) left out.

    python -m bench.outputs_small [--tables 20] [--rows 200] [--changes 10] [--windows 5]

Targets (issue 36): history <= 2x state, change log <= 1x state. Results: bench/results-outputs-small.json,
bench/RESULTS.md ("History and change log on many small tables").
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import load_avg, log, machine_info, now_iso, versions
from bench.merge import spark_session

MODES = {"state": ["state"], "changelog": ["state", "changelog"], "history": ["state", "history"]}


def run_mode(spark: Any, workdir: Path, mode: str, tables: int, rows: int, changes: int,
             windows: int) -> tuple[list[float], list[dict[str, float]]]:
    """Seconds per window after the first, for one output mode; and per window, each output's own seconds summed
    over the tables (the merge report times each output's landing on its own, as bench/outputs.py reads it)."""
    import pyarrow as pa

    from spark_apps.merge import merge_window
    from tests.support.staged_builder import Col, VersionClock, WindowBuilder

    root = workdir / mode
    shutil.rmtree(root, ignore_errors=True)
    cols = [Col("id", pa.int32(), "INT"), Col("tier", pa.string(), "STRING"), Col("visits", pa.int64(), "BIGINT")]
    options = {f"shop.t{n}": {"outputs": MODES[mode]} for n in range(tables)}
    clock, rng = VersionClock(), random.Random(36)
    live = {n: set(range(rows)) for n in range(tables)}
    out, own = [], []
    for seq in range(1, windows + 2):
        w = WindowBuilder(root / "staging", "shop", seq)
        for n in range(tables):
            if seq == 1:
                batch = [("I", {"id": i, "tier": "t0", "visits": 0}, clock()) for i in sorted(live[n])]
            else:
                batch = []
                for _ in range(changes):
                    pick = rng.random()
                    if pick < 0.1 and live[n]:
                        i = rng.choice(sorted(live[n]))
                        live[n].discard(i)
                        batch.append(("D", {"id": i, "tier": None, "visits": None}, clock()))
                    elif pick < 0.3:
                        i = max(live[n] | {rows}) + 1
                        live[n].add(i)
                        batch.append(("I", {"id": i, "tier": "new", "visits": 0}, clock()))
                    elif live[n]:
                        i = rng.choice(sorted(live[n]))
                        batch.append(("U", {"id": i, "tier": f"t{seq}", "visits": seq}, clock()))
            w.file("shop", f"t{n}", ("id",), cols, batch)
        manifest, wdir = w.build()
        t0 = time.perf_counter()
        report = merge_window(spark, manifest, wdir, str(root / "lake"), "shop", seq, 0x36, table_options=options)
        secs = time.perf_counter() - t0
        bad = {k: v.get("status") for k, v in report["tables"].items() if v.get("status") != "committed"}
        if bad:
            raise RuntimeError(f"{mode} window {seq}: {bad}")
        log(f"outputs_small: {mode} window {seq}: {secs:.2f} s")
        if seq > 1:
            out.append(round(secs, 3))
            own.append({o: round(sum(float((t if o == "state" else t.get(o) or {}).get("seconds") or 0.0)
                                     for t in report["tables"].values()), 3) for o in MODES[mode]})
    return out, own


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", type=int, default=20)
    p.add_argument("--rows", type=int, default=200, help="rows per table before the first window")
    p.add_argument("--changes", type=int, default=10, help="changes per table per window")
    p.add_argument("--windows", type=int, default=5, help="windows timed (after the first)")
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results-outputs-small.json"))
    args = p.parse_args(argv)
    started = now_iso()
    spark = spark_session(args.driver_memory)
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="cdc-bench-outputs-small-") as tmp:
            for mode in MODES:
                secs, own = run_mode(spark, Path(tmp), mode, args.tables, args.rows, args.changes, args.windows)
                results[mode] = {"per_window": secs, "median": sorted(secs)[len(secs) // 2], "own_seconds": own}
                if mode != "state":  # the output's own landing against the state's, in the same windows
                    ratios = sorted(w[mode] / w["state"] for w in own if w["state"])
                    results[mode]["own_to_state"] = round(ratios[len(ratios) // 2], 2) if ratios else None
    finally:
        spark.stop()
    state = results["state"]["median"]
    for mode in ("changelog", "history"):
        results[mode]["to_state"] = round(results[mode]["median"] / state, 1) if state else None
    doc = {"command": " ".join(["python -m bench.outputs_small", *(argv if argv is not None else sys.argv[1:])]),
           "started_at": started, "finished_at": now_iso(), "load_avg_end": load_avg(), "machine": machine_info(),
           "versions": versions(None), "tables": args.tables, "rows": args.rows, "changes": args.changes,
           "results": results}
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True, default=str))
    for mode, r in results.items():
        print(f"{args.tables} tables x {args.rows} rows, {args.changes} changes each: {mode} {r['median']} s per window"
              + (f" ({r['to_state']}x state; its own landing {r['own_to_state']}x the state's)"
                 if "to_state" in r else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
