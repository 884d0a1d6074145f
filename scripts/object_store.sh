#!/usr/bin/env bash
# An S3-compatible object store on loopback for staging and the lake: S3Proxy (a real S3 server, Apache
# licensed, one self-contained jar from Maven Central, runs on the machine's Java 17) over its filesystem
# backend, so the objects sit in a directory of the checkout. Started and stopped by its own PID.
#
#   scripts/object_store.sh start|stop|status|url|conn|fetch
#
#   conn  prints the Airflow connection (type aws) the pipeline names in object_store.conn_id:
#         export AIRFLOW_CONN_CDC_S3="$(scripts/object_store.sh conn)"
#
# Env (defaults): CDC_OBJECT_STORE_DIR (.local/object-store), CDC_OBJECT_STORE_PORT (19300),
# CDC_OBJECT_STORE_BUCKETS ("cdc": created at start, one directory each), CDC_S3PROXY_VERSION (4.1.0).
# The access key and secret are generated at the first start and kept in $DIR/credentials (mode 600).
# docker-compose.yaml's object-store service carries the same settings (a unit test checks).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${CDC_OBJECT_STORE_DIR:-$ROOT/.local/object-store}"
PORT="${CDC_OBJECT_STORE_PORT:-19300}"
BUCKETS="${CDC_OBJECT_STORE_BUCKETS:-cdc}"
VERSION="${CDC_S3PROXY_VERSION:-4.1.0}"
JAR_DIR="${CDC_JAR_CACHE:-$ROOT/.cache/jars}"
JAR="$JAR_DIR/s3proxy-$VERSION-jar-with-dependencies.jar"
URL="https://repo1.maven.org/maven2/org/gaul/s3proxy/$VERSION/s3proxy-$VERSION-jar-with-dependencies.jar"
HOST=127.0.0.1
PIDFILE="$DIR/pid"
LOG="$DIR/s3proxy.log"

log() { echo "object_store: $*" >&2; }
# shellcheck source=scripts/maven_download.sh
. "$ROOT/scripts/maven_download.sh"
alive() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

fetch_jar() {
  [ -s "$JAR" ] && return 0
  log "downloading S3Proxy $VERSION from Maven Central"
  maven_download "$URL" "$JAR" || exit 1
}

credentials() {  # creates them once; prints "key secret"
  if [ ! -s "$DIR/credentials" ]; then
    mkdir -p "$DIR"
    (umask 077; printf '%s %s\n' "cdc$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
      "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$DIR/credentials")
  fi
  cat "$DIR/credentials"
}

start() {
  if alive; then log "already running (pid $(cat "$PIDFILE"), http://$HOST:$PORT)"; return 0; fi
  fetch_jar
  mkdir -p "$DIR/data"
  local key secret b
  read -r key secret < <(credentials)
  for b in $BUCKETS; do mkdir -p "$DIR/data/$b"; done  # a bucket of the filesystem backend is a directory
  (umask 077; cat >"$DIR/s3proxy.conf" <<EOF
s3proxy.endpoint=http://$HOST:$PORT
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$key
s3proxy.credential=$secret
jclouds.provider=filesystem
jclouds.filesystem.basedir=$DIR/data
EOF
)
  setsid java -Xmx256m -jar "$JAR" --properties "$DIR/s3proxy.conf" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local deadline=$((SECONDS + 60))
  until grep -q "Started ogsoejs.Server" "$LOG" 2>/dev/null; do
    alive || { log "S3Proxy exited:"; tail -20 "$LOG" >&2; exit 1; }
    [ $SECONDS -lt $deadline ] || { log "timed out waiting for S3Proxy"; tail -20 "$LOG" >&2; exit 1; }
    sleep 0.2
  done
  log "ready: http://$HOST:$PORT (pid $(cat "$PIDFILE"); buckets: $BUCKETS; objects under $DIR/data)"
}

stop() {
  alive || { rm -f "$PIDFILE"; return 0; }
  local pid; pid="$(cat "$PIDFILE")"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; break; }
    sleep 0.2
  done
  rm -f "$PIDFILE"
  log "stopped (pid $pid)"
}

conn() {
  local key secret
  read -r key secret < <(credentials)
  printf '{"conn_type": "aws", "login": "%s", "password": "%s", "extra": {"endpoint_url": "http://%s:%s", "region_name": "us-east-1"}}\n' \
    "$key" "$secret" "$HOST" "$PORT"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if alive; then echo "object store: running (pid $(cat "$PIDFILE"), http://$HOST:$PORT)"; else echo "object store: stopped"; fi ;;
  url) echo "http://$HOST:$PORT" ;;
  conn) conn ;;
  fetch) fetch_jar; log "S3Proxy $VERSION: $JAR" ;;
  *) echo "usage: $0 start|stop|status|url|conn|fetch" >&2; exit 2 ;;
esac
