#!/usr/bin/env bash
# A Spark standalone cluster on loopback from pyspark's own jars (no Spark distribution needed): one
# master and CDC_SPARK_WORKERS workers (default 2), each a separate JVM started with pyspark's
# bin/spark-class, each with its own work dir and log under the checkout, stopped by its own PID.
#
#   scripts/spark_cluster.sh start|stop|status|url
#
# Env (defaults): CDC_SPARK_CLUSTER_DIR (.local/spark-cluster), CDC_SPARK_MASTER_PORT (17077),
# CDC_SPARK_MASTER_UI_PORT (18077), CDC_SPARK_WORKER_UI_PORT (18078: worker i uses it + i - 1),
# CDC_SPARK_WORKERS (2), CDC_SPARK_WORKER_CORES (1), CDC_SPARK_WORKER_MEMORY (1g).
# The pipeline reaches it through its Spark connection: spark://127.0.0.1:$CDC_SPARK_MASTER_PORT.
# docker-compose.yaml's spark-master / spark-worker services carry the same settings (a unit test checks).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${CDC_SPARK_CLUSTER_DIR:-$ROOT/.local/spark-cluster}"
MASTER_PORT="${CDC_SPARK_MASTER_PORT:-17077}"
MASTER_UI_PORT="${CDC_SPARK_MASTER_UI_PORT:-18077}"
WORKER_UI_PORT="${CDC_SPARK_WORKER_UI_PORT:-18078}"
WORKERS="${CDC_SPARK_WORKERS:-2}"
WORKER_CORES="${CDC_SPARK_WORKER_CORES:-1}"
WORKER_MEMORY="${CDC_SPARK_WORKER_MEMORY:-1g}"
HOST=127.0.0.1
PY="$ROOT/.venv/bin/python"

log() { echo "spark_cluster: $*" >&2; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

spark_home() { "$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }

wait_for_log() {  # wait_for_log SECONDS FILE PATTERN PIDFILE
  local deadline=$((SECONDS + $1))
  until grep -q "$3" "$2" 2>/dev/null; do
    alive "$4" || { log "process of $2 exited:"; tail -20 "$2" >&2; return 1; }
    [ $SECONDS -lt $deadline ] || { log "timed out waiting for '$3' in $2"; tail -20 "$2" >&2; return 1; }
    sleep 0.3
  done
}

launch() {  # launch NAME PIDFILE LOG CLASS ARGS...
  local name=$1 pidfile=$2 logfile=$3; shift 3
  local home; home="$(spark_home)"
  # SPARK_LOCAL_IP: the daemons bind and advertise loopback (this script's cluster is local by design).
  SPARK_HOME="$home" SPARK_LOCAL_IP=$HOST SPARK_NO_DAEMONIZE=1 PYSPARK_PYTHON="$PY" \
    setsid "$home/bin/spark-class" "$@" >"$logfile" 2>&1 </dev/null &
  echo $! >"$pidfile"
  log "$name started (pid $(cat "$pidfile"))"
}

start() {
  mkdir -p "$DIR/master"
  if alive "$DIR/master/pid"; then
    log "master already running (pid $(cat "$DIR/master/pid"), spark://$HOST:$MASTER_PORT)"
  else
    launch master "$DIR/master/pid" "$DIR/master/master.log" org.apache.spark.deploy.master.Master \
      --host $HOST --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
    wait_for_log 120 "$DIR/master/master.log" "I have been elected leader" "$DIR/master/pid"
  fi
  local i
  for i in $(seq 1 "$WORKERS"); do
    local w="$DIR/worker-$i"
    mkdir -p "$w/work"
    if alive "$w/pid"; then log "worker $i already running (pid $(cat "$w/pid"))"; continue; fi
    launch "worker $i" "$w/pid" "$w/worker.log" org.apache.spark.deploy.worker.Worker "spark://$HOST:$MASTER_PORT" \
      --host $HOST --cores "$WORKER_CORES" --memory "$WORKER_MEMORY" --work-dir "$w/work" \
      --webui-port $((WORKER_UI_PORT + i - 1))
  done
  for i in $(seq 1 "$WORKERS"); do
    wait_for_log 120 "$DIR/worker-$i/worker.log" "Successfully registered with master" "$DIR/worker-$i/pid"
  done
  log "ready: spark://$HOST:$MASTER_PORT ($WORKERS workers x $WORKER_CORES core, $WORKER_MEMORY; UI http://$HOST:$MASTER_UI_PORT)"
}

stop_one() {  # stop_one NAME PIDFILE
  local pid
  alive "$2" || { rm -f "$2"; return 0; }
  pid="$(cat "$2")"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; break; }
    sleep 0.2
  done
  rm -f "$2"
  log "$1 stopped (pid $pid)"
}

stop() {
  local w
  for w in "$DIR"/worker-*; do
    [ -d "$w" ] && stop_one "$(basename "$w")" "$w/pid"
  done
  stop_one master "$DIR/master/pid"
}

status() {
  local w
  if alive "$DIR/master/pid"; then echo "master: running (pid $(cat "$DIR/master/pid"), spark://$HOST:$MASTER_PORT)"
  else echo "master: stopped"; fi
  for w in "$DIR"/worker-*; do
    [ -d "$w" ] || continue
    if alive "$w/pid"; then echo "$(basename "$w"): running (pid $(cat "$w/pid"))"; else echo "$(basename "$w"): stopped"; fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) echo "spark://$HOST:$MASTER_PORT" ;;
  *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
