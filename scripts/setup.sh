#!/usr/bin/env bash
# Install everything the product and its tests need on a fresh Debian 12 machine (root), idempotently:
#   1. Debian packages: MariaDB (the local CDC source), ZooKeeper (+ slf4j for its logs), Chromium and
#      ChromeDriver (browser tests). Skipped when all are installed, or with CDC_SKIP_APT=1.
#   2. .venv (Python 3.11) with `pip install -e '.[dev]'`. Skipped while a stamp matching the hash of
#      pyproject.toml exists and the venv's package points at this checkout. Then (2b) the compiled row
#      walk of the binlog decoder (setup.py: cdc_core/capture/_rowscan.c; needs gcc and Python's headers).
#   3. The Delta Lake jars into .cache/ivy and Hadoop's S3A connector into .cache/ivy-s3a
#      (scripts/fetch_jars.sh), S3Proxy into .cache/jars (scripts/object_store.sh fetch), and MariaDB 11.4 for
#      the tests of a newer source (scripts/mariadb_release.sh fetch, into .cache/mariadb); all from Maven
#      Central, cached after the first run.
# Works from a fresh `git clone`. Each step prints how long it took.
#
#   scripts/setup.sh            PYTHON=/path/to/python3.11 scripts/setup.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
LOGS="$ROOT/.local/setup"
mkdir -p "$LOGS"

APT_PACKAGES=(mariadb-server mariadb-client zookeeper libslf4j-java chromium chromium-driver postgresql)

log() { echo "setup: $*"; }
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

fail_with_log() {  # fail_with_log LOGFILE MESSAGE
  tail -40 "$1" >&2 || true
  log "FAILED: $2 (full log: $1)" >&2
  exit 1
}

# ------------------------------------------------------------------------------------ 1. Debian
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

pick_python() {  # the interpreter for the venv: $PYTHON, python3.11, or a python3 that is 3.11/3.12
  local c
  for c in "${PYTHON:-}" python3.11 python3; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 13) else 1)' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

t=$(now)
if [ "${CDC_SKIP_APT:-0}" = "1" ]; then
  log "apt: skipped (CDC_SKIP_APT=1)"
else
  missing=()
  for p in "${APT_PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
  command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)  # ZooKeeper and Spark (Java 17)
  # Debian's own python3 (3.11 on bookworm) needs python3-venv for `-m venv`.
  if ! pick_python >/dev/null || ! "$(pick_python)" -c 'import ensurepip' 2>/dev/null; then
    missing+=(python3 python3-venv)
  fi
  # The compiled row walk of the binlog decoder (step 2b) needs a C compiler and Python's headers.
  command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
  if ! pick_python >/dev/null || ! "$(pick_python)" -c 'import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' 2>/dev/null; then
    missing+=(python3-dev)
  fi
  if [ ${#missing[@]} -eq 0 ]; then
    log "apt: all packages already installed ($(took "$t"))"
  else
    command -v apt-get >/dev/null || { log "apt-get not found: install ${missing[*]} by hand, or set CDC_SKIP_APT=1"; exit 1; }
    [ "$(id -u)" = 0 ] || { log "installing ${missing[*]} needs root (or set CDC_SKIP_APT=1 if they are installed)"; exit 1; }
    log "apt: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update >"$LOGS/apt.log" 2>&1 || fail_with_log "$LOGS/apt.log" "apt-get update"
    # Package scripts do not start the services here; scripts/services.sh runs private instances.
    apt-get -o DPkg::Lock::Timeout=300 install -y "${missing[@]}" >>"$LOGS/apt.log" 2>&1 \
      || fail_with_log "$LOGS/apt.log" "apt-get install ${missing[*]}"
    log "apt: done ($(took "$t"))"
  fi
fi

# --------------------------------------------------------------------------------------- 2. venv
t=$(now)
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  log "venv: $VENV is broken (its interpreter does not start); recreating"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  PY="$(pick_python)" || { log "no Python 3.11 or 3.12 found: install python3.11 (Debian 12: apt-get install python3 python3-venv) or set PYTHON"; exit 1; }
  log "venv: creating $VENV with $PY ($("$PY" --version 2>&1))"
  "$PY" -m venv "$VENV" >"$LOGS/venv.log" 2>&1 || fail_with_log "$LOGS/venv.log" "python -m venv"
fi
log "venv: ready ($(took "$t"))"

t=$(now)
HASH="$(sha256sum pyproject.toml | cut -c1-16)"
STAMP="$VENV/.cdc-installed-$HASH"
points_here() {  # the editable install must point at this checkout (a moved checkout keeps a stale one)
  (cd / && "$VENV/bin/python" - "$ROOT" <<'PY' >/dev/null 2>&1
import pathlib, sys
import cdc_core as m
sys.exit(0 if pathlib.Path(m.__file__).resolve().parent.parent == pathlib.Path(sys.argv[1]).resolve() else 1)
PY
  )
}
if [ -f "$STAMP" ] && points_here; then
  log "pip: up to date (stamp for pyproject.toml $HASH) ($(took "$t"))"
else
  log "pip: installing -e '.[dev]' (a fresh venv takes ~2-3 min: pyspark is built from its sdist)"
  export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
  "$VENV/bin/python" -m pip install -e '.[dev]' >"$LOGS/pip.log" 2>&1 || fail_with_log "$LOGS/pip.log" "pip install -e '.[dev]'"
  "$VENV/bin/python" -m pip check >>"$LOGS/pip.log" 2>&1 || log "pip: warning: 'pip check' reports conflicts (see $LOGS/pip.log)"
  rm -f "$VENV"/.cdc-installed-*
  touch "$STAMP"
  log "pip: done ($(took "$t"))"
fi

# ------------------------------------------------------------------- 2b. the compiled row walk
# cdc_core/capture/_rowscan.c (setup.py): rebuilt when its source is newer than the built module. Without
# it capture still works, on the same walk generated as Python (several times slower on wide tables). The
# transforms' HMAC kernel (cdc_core/model/_hmac.c) is built with it; without it hashing uses hashlib.
t=$(now)
if "$VENV/bin/python" "$ROOT/setup.py" -q build_ext --inplace >"$LOGS/native.log" 2>&1 \
  && (cd / && "$VENV/bin/python" -c 'import cdc_core.capture._rowscan, cdc_core.model._hmac') >>"$LOGS/native.log" 2>&1; then
  log "native: compiled row walk ready ($(took "$t"))"
else
  tail -20 "$LOGS/native.log" >&2 || true
  log "native: WARNING: the compiled row walk did not build (see $LOGS/native.log); capture runs the Python walk"
fi

# ------------------------------------------------------------------------------- 3. Delta jars
t=$(now)
PYTHON="$VENV/bin/python" "$ROOT/scripts/fetch_jars.sh"
"$ROOT/scripts/object_store.sh" fetch
"$ROOT/scripts/mariadb_release.sh" fetch
log "jars: ready ($(took "$t"))"
log "done. Use: export PATH=$VENV/bin:\$PATH SPARK_LOCAL_IP=127.0.0.1"
