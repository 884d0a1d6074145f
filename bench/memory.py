"""Memory: peak RSS of staging a window, for windows of growing size (it must stay flat).

Each window is staged by a fresh process (`python -m bench.memory <workload json>`: plan, read with
`read_change_batches`, `stage_window`), which reports its own peak RSS (`ru_maxrss`) and the largest
peak of its decode workers (`RUSAGE_CHILDREN`), so nothing the harness itself holds is counted. The
baseline is the same process doing everything but reading the window (imports, connections).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, SourceInfo, log, ratio, short_error


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: stage the window (or only connect, for the baseline); report peaks in MB."""
    from bench.capture import Ours
    from bench.workloads import Workload
    from cdc_core.lake.staging import stage_window

    si = SourceInfo(**{k: spec["source"][k] for k in ("host", "port", "user", "password", "root_password", "zk_hosts")})
    wl = Workload(**spec["workload"])
    ours = Ours(si, wl)
    ours.make_plan()
    t0 = time.perf_counter()
    changes = 0
    if not spec.get("baseline"):
        with tempfile.TemporaryDirectory(dir=spec["workdir"]) as root:
            changes = stage_window(ours.plan, ours.batches(spec.get("workers")), root).changes
    return {
        "changes": changes,
        "seconds": round(time.perf_counter() - t0, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "workers_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
    }


def _run_probe(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.memory", json.dumps(spec)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"probe failed: {proc.stderr.strip()[-800:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def run(si: SourceInfo, workdir: Path, sizes: list[int], width: int = 20, purge: bool = False) -> dict[str, Any]:
    from bench.workloads import drop_workload, generate

    out: dict[str, Any] = {"width": width, "txn_rows": 1000, "windows": [], "errors": []}
    conn = si.root_connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS bench_memory")
    source = {k: getattr(si, k) for k in ("host", "port", "user", "password", "root_password", "zk_hosts")}
    try:
        for serial, n in enumerate(sizes, 1):
            log(f"memory: generating a window of {n} changes ({width} columns)")
            wl = generate(conn, "bench_memory", width, 1000, n, 100 + serial)
            spec = {"source": source, "workload": wl.__dict__, "workdir": str(workdir)}
            try:
                base = _run_probe({**spec, "baseline": True})
                entry: dict[str, Any] = {"changes": n, "baseline_rss_mb": base["peak_rss_mb"]}
                for label, workers in (("default", None), ("inline", 0)):
                    log(f"memory: staging {n} changes ({label} decode workers)")
                    got = _run_probe({**spec, "workers": workers})
                    entry[label] = got
                    if got["changes"] != n:
                        out["errors"].append(f"{n}: staged {got['changes']} changes")
                out["windows"].append(entry)
            except Exception as e:
                out["errors"].append(f"{n}: {short_error(e)}")
            finally:
                drop_workload(conn, wl, purge=purge)
    finally:
        conn.close()
    w = out["windows"]
    if len(w) >= 2:
        lo, hi = w[0], w[-1]
        out["growth"] = {
            "changes_ratio": hi["changes"] / lo["changes"],
            "peak_rss_ratio_default": ratio(hi["default"]["peak_rss_mb"], lo["default"]["peak_rss_mb"]),
            "peak_rss_ratio_inline": ratio(hi["inline"]["peak_rss_mb"], lo["inline"]["peak_rss_mb"]),
            "workers_peak_rss_ratio": ratio(hi["default"]["workers_peak_rss_mb"], lo["default"]["workers_peak_rss_mb"]),
        }
    return out


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
