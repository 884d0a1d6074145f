"""Print which CDC DAGs are paused in the local Airflow (scripts/ui.sh runs it once the DAGs are parsed).

Reads the SQLite metadata DB of $AIRFLOW_HOME directly (fast: no Airflow import) and the pipelines of
$CDC_CONFIG; waits until every pipeline's DAGs are there (up to --wait seconds). Manual DAGs (backfill,
snapshot) are created unpaused; `cdc_<name>` is created paused (Airflow's default) and runs on its
schedule once the operator unpauses it. Exit 0 always: this is information, not a check.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait", type=float, default=180.0)
    ap.add_argument("--parent", type=int, default=None, help="stop waiting once this process is gone")
    args = ap.parse_args()
    from cdc_core.model.config import load_config

    pipelines = load_config().pipelines
    expected = {f"cdc_{p.name}{suffix}": p for p in pipelines for suffix in ("", "_backfill", "_snapshot")}
    db = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    deadline = time.monotonic() + args.wait
    found: dict[str, bool] = {}
    while time.monotonic() < deadline:
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                found = {d: bool(p) for d, p in conn.execute("SELECT dag_id, is_paused FROM dag") if d in expected}
            finally:
                conn.close()
        except sqlite3.Error:
            found = {}
        if len(found) == len(expected):
            break
        if args.parent is not None and not _alive(args.parent):
            return 0
        time.sleep(1)
    for dag_id in sorted(expected):
        p = expected[dag_id]
        if dag_id not in found:
            print(f"ui: DAG {dag_id}: not parsed yet (see the DAG processor's log)")
        elif dag_id == f"cdc_{p.name}":
            if found[dag_id]:
                print(f"ui: DAG {dag_id}: PAUSED, schedule {p.schedule or 'none (manual)'}; to run it on its schedule "
                      f"unpause it (toggle in the UI, or `airflow dags unpause {dag_id}`); while paused, runs that "
                      "backfills and snapshots trigger to continue stay queued (the monitor page says so)")
            else:
                print(f"ui: DAG {dag_id}: active, schedule {p.schedule or 'none (manual)'}")
        elif found[dag_id]:
            print(f"ui: DAG {dag_id}: PAUSED (created by an older release?): a run triggered from its form stays "
                  f"queued; unpause it: `airflow dags unpause {dag_id}`")
        else:
            print(f"ui: DAG {dag_id}: ready (manual: runs when triggered from its form)")
    print("ui: Ctrl-C stops Airflow")
    return 0


if __name__ == "__main__":
    sys.exit(main())
