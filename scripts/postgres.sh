#!/usr/bin/env bash
# PostgreSQL from Debian's packages, on loopback, data inside the checkout: the metadata database of a real
# Airflow deployment (scheduler with LocalExecutor; SQLite is only good for `airflow dags test`).
# Runs as the `postgres` system user (PostgreSQL refuses root); stopped by its own PID (pg_ctl stop).
#
#   scripts/postgres.sh start|stop|status|url
#
# Env (defaults): CDC_POSTGRES_DIR (.local/postgres), CDC_POSTGRES_PORT (25432), CDC_POSTGRES_DB (airflow).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${CDC_POSTGRES_DIR:-$ROOT/.local/postgres}"
PORT="${CDC_POSTGRES_PORT:-25432}"
DB="${CDC_POSTGRES_DB:-airflow}"
BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"

log() { echo "postgres: $*" >&2; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

start() {
  [ -n "$BIN" ] || { log "PostgreSQL not found: run scripts/setup.sh (apt-get install postgresql)"; return 1; }
  mkdir -p "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres: "$DIR"
  if [ ! -f "$DIR/data/PG_VERSION" ]; then
    as_pg "$BIN/initdb" -D "$DIR/data" -U postgres -A trust --no-sync >"$DIR/initdb.log" 2>&1 \
      || { cat "$DIR/initdb.log" >&2; return 1; }
  fi
  if as_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
    log "already running (port $PORT)"
  else
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -t 60 \
      -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null \
      || { tail -20 "$DIR/postgres.log" >&2; return 1; }
  fi
  as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" \
    | grep -q 1 || as_pg "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
  log "ready on 127.0.0.1:$PORT (pid $(head -1 "$DIR/data/postmaster.pid"), database $DB)"
}

stop() {
  [ -f "$DIR/data/postmaster.pid" ] || { log "not running"; return 0; }
  local pid; pid="$(head -1 "$DIR/data/postmaster.pid")"
  as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null || kill -TERM "$pid" 2>/dev/null || true
  log "stopped (pid $pid)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) as_pg "$BIN/pg_ctl" -D "$DIR/data" status ;;
  url) echo "postgresql+psycopg2://postgres@127.0.0.1:$PORT/$DB" ;;
  *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
