#!/usr/bin/env bash
# Local MariaDB (binlog on, a real CDC source) and ZooKeeper, from Debian packages, on loopback,
# with data inside the checkout. Idempotent start, readiness by a real query, stop by our own PID.
#
#   scripts/services.sh start|stop|status|env [mariadb|zookeeper]
#   scripts/services.sh shards N start|stop|restart|status|env   # N MariaDB-only servers, the shards of a group pipeline
#
# Ports and paths can be overridden: CDC_SERVICES_DIR, CDC_MARIADB_PORT, CDC_ZK_PORT. A server's identity too
# (for several servers side by side, each a distinct source): CDC_MARIADB_SERVER_ID (default 1),
# CDC_MARIADB_GTID_DOMAIN_ID (default 0). Shard i (1..N) lives in $CDC_SERVICES_DIR/shard-<i> on port
# ${CDC_SHARD_BASE_PORT:-13440}+i with server_id 100+i and GTID domain i, so no shard shares the identity (13440: never the test fixture's shard ports, 13340 + 10 N + i)
# of the default server (server_id 1, domain 0) or of another shard. CDC_MARIADB_BASEDIR: run another MariaDB
# release than Debian's, unpacked there by scripts/mariadb_release.sh (its bin/mariadbd, scripts/, share/).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${CDC_SERVICES_DIR:-$ROOT/.local/services}"
MARIADB_PORT="${CDC_MARIADB_PORT:-13306}"
ZK_PORT="${CDC_ZK_PORT:-22181}"
SERVER_ID="${CDC_MARIADB_SERVER_ID:-1}"
GTID_DOMAIN_ID="${CDC_MARIADB_GTID_DOMAIN_ID:-0}"
SHARD_BASE_PORT="${CDC_SHARD_BASE_PORT:-13440}"
CDC_USER="${CDC_MARIADB_USER:-cdc}"
CDC_PASSWORD="${CDC_MARIADB_PASSWORD:-cdc-local-only}"
ROOT_PASSWORD="${CDC_MARIADB_ROOT_PASSWORD:-root-local-only}"
BASEDIR="${CDC_MARIADB_BASEDIR:-}"
MARIADBD="${BASEDIR:+$BASEDIR/bin/}mariadbd"

M="$DIR/mariadb"
Z="$DIR/zookeeper"

log() { echo "services: $*" >&2; }

alive() {  # alive PIDFILE -> 0 if the process in it runs
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_for() {  # wait_for SECONDS CMD... ; polls until CMD succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

launch_mariadb() {
  # The port sits in Linux's ephemeral range (32768-60999): an outgoing connection of another program can
  # hold it for a moment, and mariadbd then aborts with "Address already in use". Wait and try again.
  local attempt pid lines
  for attempt in 1 2 3 4 5 6; do
    rm -f "$M/mariadb.sock"
    lines=$(wc -l <"$M/error.log" 2>/dev/null || echo 0)
    nohup "$MARIADBD" --defaults-file="$M/my.cnf" >>"$M/stdout.log" 2>&1 &
    pid=$!
    local deadline=$((SECONDS + 60))
    until [ -S "$M/mariadb.sock" ]; do
      if ! kill -0 "$pid" 2>/dev/null; then
        if tail -n +"$((lines + 1))" "$M/error.log" 2>/dev/null | grep -q "Address already in use"; then
          log "mariadb: port $MARIADB_PORT is busy (attempt $attempt); retrying in 3 s"
          sleep 3
          continue 2
        fi
        return 1
      fi
      [ $SECONDS -lt $deadline ] || return 0  # the readiness checks below report it
      sleep 0.2
    done
    return 0
  done
  log "mariadb: port $MARIADB_PORT stayed busy"; return 1
}

mariadb_query() {
  mariadb --no-defaults --protocol=socket -S "$M/mariadb.sock" -uroot -p"$ROOT_PASSWORD" -N -e "$1"
}

mariadb_start() {
  command -v "$MARIADBD" >/dev/null || { log "$MARIADBD not found: run scripts/setup.sh"; return 1; }
  if alive "$M/mariadb.pid"; then log "mariadb already running (pid $(cat "$M/mariadb.pid"), port $MARIADB_PORT)"; return 0; fi
  # Checked here rather than by mariadbd: a typo would otherwise land in my.cnf and surface as a failed start.
  [[ "$SERVER_ID" =~ ^[1-9][0-9]{0,9}$ ]] || { log "CDC_MARIADB_SERVER_ID must be 1-4294967295, not '$SERVER_ID'"; return 1; }
  [[ "$GTID_DOMAIN_ID" =~ ^[0-9]{1,10}$ ]] || { log "CDC_MARIADB_GTID_DOMAIN_ID must be 0-4294967295, not '$GTID_DOMAIN_ID'"; return 1; }
  # A tmpdir of its own: a starting mariadbd deletes every #sql* file in its tmpdir, so servers sharing /tmp
  # delete each other's temporary tables (mariadb-install-db side by side fails on it).
  mkdir -p "$M/data" "$M/binlog" "$M/tmp"
  local release=""
  [ -z "$BASEDIR" ] || release="basedir=$BASEDIR
lc-messages-dir=$BASEDIR/share"
  cat > "$M/my.cnf" <<CNF
[mariadbd]
$release
datadir=$M/data
socket=$M/mariadb.sock
pid-file=$M/mariadb.pid
tmpdir=$M/tmp
port=$MARIADB_PORT
bind-address=127.0.0.1
user=root
log-error=$M/error.log
server_id=$SERVER_ID
log_bin=$M/binlog/mysql-bin
binlog_format=ROW
binlog_row_image=FULL
binlog_row_metadata=FULL
gtid_domain_id=$GTID_DOMAIN_ID
gtid_strict_mode=ON
log_slave_updates=ON
expire_logs_days=7
character-set-server=utf8mb4
collation-server=utf8mb4_unicode_ci
innodb_buffer_pool_size=128M
innodb_log_file_size=64M
max_allowed_packet=256M
skip-name-resolve
CNF
  local fresh=0
  if [ ! -d "$M/data/mysql" ]; then
    fresh=1
    ${BASEDIR:+"$BASEDIR/scripts/"}mariadb-install-db --defaults-file="$M/my.cnf" ${BASEDIR:+--basedir="$BASEDIR"} --datadir="$M/data" --user=root \
      --auth-root-authentication-method=normal --skip-test-db >"$M/install.log" 2>&1
  fi
  launch_mariadb || { log "mariadb did not start; see $M/error.log"; return 1; }
  if [ $fresh = 1 ]; then
    wait_for 30 mariadb --no-defaults -S "$M/mariadb.sock" -uroot -N -e "SELECT 1" || { log "mariadb did not start; see $M/error.log"; return 1; }
    mariadb --no-defaults -S "$M/mariadb.sock" -uroot <<SQL
ALTER USER 'root'@'localhost' IDENTIFIED BY '$ROOT_PASSWORD';
CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED BY '$ROOT_PASSWORD';
DROP USER IF EXISTS 'root'@'::1';
DELETE FROM mysql.global_priv WHERE User='root' AND Host NOT IN ('localhost', '127.0.0.1');
GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE OR REPLACE USER '$CDC_USER'@'127.0.0.1' IDENTIFIED BY '$CDC_PASSWORD';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, SELECT ON *.* TO '$CDC_USER'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
  fi
  wait_for 30 mariadb_query "SELECT @@log_bin" || { log "mariadb did not become ready; see $M/error.log"; return 1; }
  log "mariadb ready on 127.0.0.1:$MARIADB_PORT (pid $(cat "$M/mariadb.pid"))"
}

zk_ruok() { [ "$( (exec 3<>/dev/tcp/127.0.0.1/$ZK_PORT; printf ruok >&3; timeout 2 cat <&3) 2>/dev/null)" = "imok" ]; }

zk_start() {
  [ -f /usr/share/java/zookeeper.jar ] || { log "zookeeper not found: run scripts/setup.sh (apt-get install zookeeper)"; return 1; }
  if alive "$Z/zookeeper.pid"; then log "zookeeper already running (pid $(cat "$Z/zookeeper.pid"), port $ZK_PORT)"; return 0; fi
  mkdir -p "$Z/data"
  cat > "$Z/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$Z/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
maxSessionTimeout=60000
CFG
  local cp=/usr/share/java/zookeeper.jar
  [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
  nohup java -Xmx256m -Dzookeeper.log.dir="$Z" -cp "$cp" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$Z/zoo.cfg" >"$Z/zookeeper.log" 2>&1 &
  echo $! > "$Z/zookeeper.pid"
  wait_for 30 zk_ruok || { log "zookeeper did not start; see $Z/zookeeper.log"; return 1; }
  log "zookeeper ready on 127.0.0.1:$ZK_PORT (pid $(cat "$Z/zookeeper.pid"))"
}

stop_pidfile() {  # stop_pidfile NAME PIDFILE
  if alive "$2"; then
    local pid; pid=$(cat "$2")
    kill -TERM "$pid" 2>/dev/null || true
    wait_for 30 bash -c "! kill -0 $pid" || { log "$1 (pid $pid) ignored SIGTERM; killing"; kill -KILL "$pid" 2>/dev/null || true; }
    log "$1 stopped (pid $pid)"
  else
    log "$1 not running"
  fi
  rm -f "$2"
}

status() {
  local rc=0
  if alive "$M/mariadb.pid" && mariadb_query "SELECT 1" >/dev/null 2>&1; then
    echo "mariadb: running pid=$(cat "$M/mariadb.pid") port=$MARIADB_PORT"
  else echo "mariadb: stopped"; rc=1; fi
  if alive "$Z/zookeeper.pid" && zk_ruok; then
    echo "zookeeper: running pid=$(cat "$Z/zookeeper.pid") port=$ZK_PORT"
  else echo "zookeeper: stopped"; rc=1; fi
  return $rc
}

env_lines() {
  cat <<ENV
export CDC_MARIADB_HOST=127.0.0.1
export CDC_MARIADB_PORT=$MARIADB_PORT
export CDC_MARIADB_USER=$CDC_USER
export CDC_MARIADB_PASSWORD=$CDC_PASSWORD
export CDC_MARIADB_ROOT_PASSWORD=$ROOT_PASSWORD
export CDC_MARIADB_SOCKET=$M/mariadb.sock
export CDC_ZK_HOSTS=127.0.0.1:$ZK_PORT
ENV
}

shard_run() {  # shard_run I ARGS... ; this script on shard I's directory, port and identity (MariaDB only)
  local i=$1; shift
  CDC_SERVICES_DIR="$DIR/shard-$i" CDC_MARIADB_PORT=$((SHARD_BASE_PORT + i)) \
    CDC_MARIADB_SERVER_ID=$((100 + i)) CDC_MARIADB_GTID_DOMAIN_ID="$i" "$0" "$@"
}

shard_status() {  # shard_status I -> one line; 0 if shard I answers. Identity as the server reports it.
  local i=$1 sm="$DIR/shard-$1/mariadb" facts port server_id domain
  if alive "$sm/mariadb.pid" && facts=$(M="$sm"; mariadb_query "SELECT @@port, @@server_id, @@gtid_domain_id" 2>/dev/null); then
    read -r port server_id domain <<<"$facts"
    echo "shard-$i: running pid=$(cat "$sm/mariadb.pid") port=$port server_id=$server_id gtid_domain_id=$domain"
  else
    echo "shard-$i: stopped"; return 1
  fi
}

shards() {  # shards N start|stop|restart|status|env
  local n="${1:-}" action="${2:-status}" i rc=0
  if ! [[ "$n" =~ ^[1-9][0-9]?$ ]] || ! [[ "$action" =~ ^(start|stop|restart|status|env)$ ]]; then
    echo "usage: $0 shards N start|stop|restart|status|env   (N: 1-99)" >&2; return 2
  fi
  if [ "$action" = env ]; then
    printf 'export CDC_SHARD_COUNT=%s\nexport CDC_SHARD_USER=%s\nexport CDC_SHARD_PASSWORD=%s\nexport CDC_SHARD_ROOT_PASSWORD=%s\n' \
      "$n" "$CDC_USER" "$CDC_PASSWORD" "$ROOT_PASSWORD"
  fi
  for ((i = 1; i <= n; i++)); do
    case "$action" in
      # Each in a process of its own: the same start/stop as a single server (stop by the PID in the shard's file).
      start|stop|restart) shard_run "$i" "$action" mariadb || rc=1 ;;
      status) shard_status "$i" || rc=1 ;;
      env)
        cat <<ENV
export CDC_SHARD_${i}_HOST=127.0.0.1
export CDC_SHARD_${i}_PORT=$((SHARD_BASE_PORT + i))
export CDC_SHARD_${i}_SOCKET=$DIR/shard-$i/mariadb/mariadb.sock
export CDC_SHARD_${i}_SERVER_ID=$((100 + i))
export CDC_SHARD_${i}_GTID_DOMAIN_ID=$i
ENV
        ;;
    esac
  done
  return $rc
}

cmd="${1:-status}"; what="${2:-all}"
case "$cmd" in
  start)
    case "$what" in mariadb) mariadb_start;; zookeeper) zk_start;; all) mariadb_start; zk_start;; esac ;;
  stop)
    case "$what" in
      mariadb) stop_pidfile mariadb "$M/mariadb.pid";;
      zookeeper) stop_pidfile zookeeper "$Z/zookeeper.pid";;
      all) stop_pidfile mariadb "$M/mariadb.pid"; stop_pidfile zookeeper "$Z/zookeeper.pid";;
    esac ;;
  restart) "$0" stop "$what"; "$0" start "$what" ;;
  status) status ;;
  env) env_lines ;;
  shards) shift; shards "$@" ;;
  *) echo "usage: $0 start|stop|restart|status|env [mariadb|zookeeper|all] | shards N start|stop|restart|status|env" >&2; exit 2 ;;
esac
