"""`python -m bench.object_store`: the same windows landed with staging and lake on local disk and on an
S3-compatible object store (S3Proxy, scripts/object_store.sh), side by side.

Each round writes one workload (inserts, then updates and deletes of a part of them, in a few large
transactions) and lands it with `cdc run` (local[2]) twice: once by a pipeline on local disk, once by a
pipeline on the store, both starting at the same binlog position. Reported per target: the wall time of
`cdc run`, and the stage and merge seconds the pipeline itself logs (`window.staged`, `window.merged`).

Uses the shared services (scripts/services.sh start) and a private S3Proxy (own directory and port,
stopped by PID and deleted at the end). Writes bench/results-object-store.json and
bench/RESULTS-object-store.md. Never part of the test suite.

    python -m bench.object_store [--rows 100000] [--rounds 2] [--out F.json] [--md F.md]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import ROOT, load_avg, log, machine_info, now_iso, source_info
from tests.support.ports import free_port

SCRIPT = ROOT / "scripts" / "object_store.sh"


def _binlog_end(si: Any) -> dict[str, object]:
    from cdc_core.capture.source import inspect_source

    conn = si.root_connect()
    try:
        end = inspect_source(conn).end
    finally:
        conn.close()
    return {"kind": "file", "file": end.file, "offset": end.offset}


def _workload(si: Any, db: str, rows: int) -> int:
    conn = si.root_connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")  # the seq_1_to_N tables of the SEQUENCE engine live in every database
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(40), n BIGINT, d DECIMAL(12,2), "
                    "ts DATETIME(6))")
        cur.execute(f"INSERT INTO {db}.t SELECT seq, CONCAT('value-', seq), seq * 7, seq / 3, "
                    f"'2026-01-01' + INTERVAL seq SECOND FROM seq_1_to_{rows}")
        cur.execute(f"UPDATE {db}.t SET v = 'updated', n = n + 1 WHERE id % 4 = 0")
        cur.execute(f"DELETE FROM {db}.t WHERE id % 10 = 0")
    conn.close()
    return rows + rows // 4 + rows // 10


def _land(config: Path, name: str, env: dict[str, str]) -> dict[str, float]:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "cdc_core.cli", "--config", str(config), "run", name],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit(f"cdc run {name} failed:\n{out.stderr[-3000:]}")
    staged = sum(float(x) for x in re.findall(r"window\.staged pipeline=\S+ token=\S+ .*?secs=([\d.]+)", out.stderr))
    merged = sum(float(x) for x in re.findall(r"window\.merged .*?secs=([\d.]+)", out.stderr))
    return {"wall_s": round(wall, 2), "stage_s": round(staged, 2), "merge_s": round(merged, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.object_store", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "bench" / "results-object-store.json"))
    p.add_argument("--md", default=str(ROOT / "bench" / "RESULTS-object-store.md"), help="the markdown summary")
    args = p.parse_args(argv)

    si = source_info()
    work = Path(tempfile.mkdtemp(prefix="bench-object-store-"))
    store_env = {**os.environ, "CDC_OBJECT_STORE_DIR": str(work / "store"),
                 "CDC_OBJECT_STORE_PORT": str(free_port()), "CDC_OBJECT_STORE_BUCKETS": "cdc"}
    t0 = time.monotonic()
    subprocess.run([str(SCRIPT), "start"], env=store_env, check=True, capture_output=True, text=True)
    store_start = time.monotonic() - t0
    conn = subprocess.run([str(SCRIPT), "conn"], env=store_env, check=True, capture_output=True, text=True).stdout
    results: dict[str, list[dict[str, float]]] = {"local": [], "s3": []}
    try:
        for r in range(args.rounds):
            db = f"bench_os_{uuid.uuid4().hex[:6]}"
            start = _binlog_end(si)
            changes = _workload(si, db, args.rows)
            env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "AIRFLOW_CONN_CDC_S3": conn,
                   "AIRFLOW_CONN_BENCH_SRC": json.dumps({"conn_type": "mysql", "host": si.host, "port": si.port,
                                                         "login": si.user, "password": si.password})}
            pipelines = []
            for target in ("local", "s3"):
                name = f"os_{target}_{uuid.uuid4().hex[:6]}"
                roots = ({"staging_root": str(work / name / "staging"), "lake_root": str(work / name / "lake")}
                         if target == "local" else
                         {"staging_root": f"s3://cdc/{name}/staging", "lake_root": f"s3://cdc/{name}/lake",
                          "object_store": {"conn_id": "cdc_s3"}})
                pipelines.append({"name": name, "source": {"conn_id": "bench_src"},
                                  "tables": {"include": [f"{db}.*"]}, "start": start,
                                  "snapshot": {"on_start": False}, "schedule": None,
                                  "zookeeper": {"hosts": si.zk_hosts, "root": "/bench-object-store"},
                                  "caps": {"max_events": 10_000_000, "max_bytes": 2**31, "max_transactions": 1000},
                                  **roots})
            config = work / f"pipelines-{r}.yaml"
            config.write_text(json.dumps({"pipelines": pipelines}))
            for target, pc in zip(("local", "s3"), pipelines, strict=True):
                got = _land(config, pc["name"], env)
                got["changes"] = changes
                log(f"round {r + 1}: {target}: {got}")
                results[target].append(got)
            drop = si.root_connect()
            with drop.cursor() as cur:
                cur.execute(f"DROP DATABASE {db}")
            drop.close()
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=store_env, check=False, capture_output=True, text=True)
        shutil.rmtree(work, ignore_errors=True)

    def med(target: str, key: str) -> float:
        return round(statistics.median(x[key] for x in results[target]), 2)

    summary = {t: {k: med(t, k) for k in ("wall_s", "stage_s", "merge_s")} for t in results}
    doc = {"when": now_iso(), "machine": machine_info(), "load_avg_end": load_avg(), "rows": args.rows,
           "rounds": args.rounds, "store_start_s": round(store_start, 2), "runs": results, "median": summary}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    lines = [
        "# Object store vs local disk (bench/object_store.py)", "",
        f"Measured {doc['when']} on the 2-core machine; {args.rounds} rounds of a workload of {args.rows:,} inserts, "
        f"then updates of a quarter and deletes of a tenth ({results['local'][0]['changes']:,} row changes in 3 "
        "transactions), landed by `cdc run` (local[2]) with staging and lake on local disk and on S3Proxy "
        f"(scripts/object_store.sh, started in {store_start:.1f} s). Medians; stage and merge seconds are the "
        "pipeline's own `window.staged` / `window.merged` figures. Load average at the end: "
        f"{', '.join(f'{x:.1f}' for x in doc['load_avg_end'])}.", "",
        "| target | cdc run wall (s) | stage (s) | merge (s) |", "|---|---|---|---|",
        *(f"| {t} | {summary[t]['wall_s']} | {summary[t]['stage_s']} | {summary[t]['merge_s']} |" for t in summary),
        "", "Every round: " + "; ".join(
            f"{t} " + ", ".join(f"{x['wall_s']} s" for x in results[t]) for t in results) + ".", "",
    ]
    Path(args.md).write_text("\n".join(lines))
    log(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
