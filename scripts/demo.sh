#!/usr/bin/env bash
# One command, fresh machine to a running pipeline: installs everything (scripts/setup.sh), starts the
# local MariaDB and ZooKeeper, creates a demo schema with rows, runs the Airflow DAG `cdc_demo` end to end
# (lease -> plan -> stage -> Spark MERGE into Delta -> ack) until the initial snapshot has loaded the
# existing rows, makes more changes, runs it again, and checks that every Delta table equals its source
# table. Leaves the services running; stop them with
#   scripts/services.sh stop
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
t0=$SECONDS
step() { echo; echo "== $* (t+$((SECONDS - t0))s)"; }

step "install (apt packages, Python venv, Delta jars)"
bash scripts/setup.sh

step "start MariaDB and ZooKeeper"
scripts/services.sh start
# shellcheck disable=SC1091
source scripts/airflow_env.sh
export PATH="$ROOT/.venv/bin:$PATH"

step "Airflow metadata DB (SQLite in $AIRFLOW_HOME)"
airflow db migrate >"$ROOT/.local/airflow-migrate.log" 2>&1 || { tail -20 "$ROOT/.local/airflow-migrate.log"; exit 1; }

step "demo schema (a re-run starts the demo pipeline over)"
python scripts/demo_workload.py reset
python scripts/demo_workload.py init

step "validate the configuration"
cdc validate

step "DAG runs: cdc_demo until the initial snapshot is done (the stream starts at the binlog's current end; rows that existed before arrive chunk by chunk, one window per run)"
snapshot_active() { cdc status demo 2>/dev/null | python -c 'import json,sys; s=json.load(sys.stdin).get("snapshot") or {}; sys.exit(0 if s.get("active") else 1)'; }
for run in 1 2 3 4 5 6; do
  airflow dags test cdc_demo >"$ROOT/.local/demo-run1.$run.log" 2>&1 || { tail -40 "$ROOT/.local/demo-run1.$run.log"; exit 1; }
  grep -E "snapshot\.(chunk_planned|progress|table_done)|window\.(planned|acked)" "$ROOT/.local/demo-run1.$run.log" | sed 's/^.*\(snapshot\.\|window\.\)/\1/' | head -8 || true
  snapshot_active || break
done
cdc verify demo

step "changes: inserts, updates, deletes, a primary-key change, a large transaction, a rollback"
python scripts/demo_workload.py changes

step "DAG run 2"
airflow dags test cdc_demo >"$ROOT/.local/demo-run2.log" 2>&1 || { tail -40 "$ROOT/.local/demo-run2.log"; exit 1; }
grep -E "window\.(planned|staged|acked)" "$ROOT/.local/demo-run2.log" | sed 's/^.*window\./window./' | head -20 || true

step "verify: every Delta table equals its source table"
cdc verify demo

step "status (the monitoring page's data)"
cdc status demo | head -40

echo
echo "Done in $((SECONDS - t0))s. Delta tables: $ROOT/.local/lake/demo/"
echo "Open the Airflow UI:  scripts/ui.sh   (http://127.0.0.1:${CDC_AIRFLOW_PORT}, user admin / password admin;"
echo "  the monitoring page is 'CDC pipelines' in the sidebar, or http://127.0.0.1:${CDC_AIRFLOW_PORT}/cdc-monitor/)"
echo "Stop the services:    scripts/services.sh stop"
