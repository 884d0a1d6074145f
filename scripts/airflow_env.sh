# shellcheck shell=bash
# Environment for a local Airflow 3 against the local services: `source scripts/airflow_env.sh`.
# Used by scripts/demo.sh and the e2e tests. Sets, for this shell only:
#   AIRFLOW_HOME=<repo>/.local/airflow (git-ignored; CDC_AIRFLOW_HOME overrides), a SQLite metadata DB,
#   the repo's dags/ and plugins/, no examples, fixed local credentials admin/admin, an API server on
#   127.0.0.1:${CDC_AIRFLOW_PORT:-28080}, the connections spark_local and cdc_source_local (JSON form:
#   the URI spark://local[2] silently becomes --master yarn), CDC_CONFIG=config/pipelines.local.yaml (a copy
#   with the port in .local/ when CDC_ZK_PORT moves ZooKeeper),
#   the venv's bin/ on PATH and SPARK_LOCAL_IP=127.0.0.1.
# Sourced, so: no `set -e`, no exit, and helper names are unset at the end.

_cdc_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

export AIRFLOW_HOME="${CDC_AIRFLOW_HOME:-$_cdc_root/.local/airflow}"
mkdir -p "$AIRFLOW_HOME"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
export AIRFLOW__CORE__DAGS_FOLDER="$_cdc_root/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$_cdc_root/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False

# Fixed credentials for local use and tests (SimpleAuthManager): admin / admin.
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$AIRFLOW_HOME/simple_auth_manager_passwords.json"
[ -f "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" ] \
  || printf '{"admin": "admin"}\n' >"$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"

# Scheduler and API server must share the JWT secret; one random per checkout, kept in AIRFLOW_HOME.
if [ ! -s "$AIRFLOW_HOME/jwt_secret" ]; then
  (umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$AIRFLOW_HOME/jwt_secret")
fi
AIRFLOW__API_AUTH__JWT_SECRET="$(cat "$AIRFLOW_HOME/jwt_secret")"
export AIRFLOW__API_AUTH__JWT_SECRET

export CDC_AIRFLOW_PORT="${CDC_AIRFLOW_PORT:-28080}"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$CDC_AIRFLOW_PORT"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$CDC_AIRFLOW_PORT"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$CDC_AIRFLOW_PORT/execution/"

# Connections (Airflow reads AIRFLOW_CONN_<ID>; so does the cdc CLI, see cdc_core/model/connections.py).
export AIRFLOW_CONN_SPARK_LOCAL='{"conn_type":"spark","host":"local[2]"}'
_cdc_json_str() { local s="${1//\\/\\\\}"; printf '"%s"' "${s//\"/\\\"}"; }
eval "$("$_cdc_root/scripts/services.sh" env)"
AIRFLOW_CONN_CDC_SOURCE_LOCAL="$(printf '{"conn_type":"mysql","host":%s,"port":%s,"login":%s,"password":%s}' \
  "$(_cdc_json_str "$CDC_MARIADB_HOST")" "$CDC_MARIADB_PORT" \
  "$(_cdc_json_str "$CDC_MARIADB_USER")" "$(_cdc_json_str "$CDC_MARIADB_PASSWORD")")"
export AIRFLOW_CONN_CDC_SOURCE_LOCAL

export CDC_CONFIG="$_cdc_root/config/pipelines.local.yaml"
# ZooKeeper on another port (CDC_ZK_PORT, as services.sh honours it): the same file with that port, in .local/
# (relative paths in it resolve against its directory: ../.local/... names the same places from there).
if [ "$CDC_ZK_HOSTS" != "127.0.0.1:22181" ]; then
  mkdir -p "$_cdc_root/.local"
  sed "s|\"127.0.0.1:22181\"|\"$CDC_ZK_HOSTS\"|" "$CDC_CONFIG" >"$_cdc_root/.local/pipelines.local.yaml"
  export CDC_CONFIG="$_cdc_root/.local/pipelines.local.yaml"
fi

case ":$PATH:" in *":$_cdc_root/.venv/bin:"*) ;; *) export PATH="$_cdc_root/.venv/bin:$PATH" ;; esac
export SPARK_LOCAL_IP=127.0.0.1

unset -f _cdc_json_str
unset _cdc_root
