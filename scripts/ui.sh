#!/usr/bin/env bash
# The Airflow UI for the local set-up: `airflow standalone` (API server + UI, scheduler, DAG processor,
# triggerer) with the environment of scripts/airflow_env.sh, on http://127.0.0.1:${CDC_AIRFLOW_PORT:-28080}
# (user admin, password admin). The DAGs cdc_<pipeline>, cdc_<pipeline>_backfill, ... and the monitoring
# page ("CDC pipelines" in the sidebar, or /cdc-monitor/) are there. Ctrl-C stops it.
# Starts the local MariaDB and ZooKeeper first if they are not running (scripts/services.sh).
# Once the DAGs are parsed it prints which are paused (scripts/dag_states.py): the manual DAGs
# (backfill, snapshot) are ready to be triggered; cdc_<pipeline> is created paused (Airflow's default)
# and runs on its schedule once you unpause it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -x "$ROOT/.venv/bin/airflow" ] || { echo "ui: run scripts/setup.sh (or scripts/demo.sh) first" >&2; exit 1; }
scripts/services.sh start
# shellcheck disable=SC1091
source scripts/airflow_env.sh
echo "ui: Airflow on http://127.0.0.1:$CDC_AIRFLOW_PORT (admin / admin); monitoring page: http://127.0.0.1:$CDC_AIRFLOW_PORT/cdc-monitor/"
# In the background, bounded: prints the DAGs' pause states once parsed, and gives up when `airflow
# standalone` (this very PID after exec) is gone. Standalone stays in the foreground so that Ctrl-C
# reaches it and its components, as before.
python scripts/dag_states.py --wait 180 --parent $$ &
exec airflow standalone
