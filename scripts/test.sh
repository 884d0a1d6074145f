#!/usr/bin/env bash
# The test command: install what is missing (scripts/setup.sh), then run every test of every marker
# (unit, integration, e2e). The pytest fixtures start MariaDB and ZooKeeper (scripts/services.sh);
# whatever this script's run started is stopped at the end, whatever was already running stays.
#
#   scripts/test.sh                      # the whole suite (what CI runs)
#   scripts/test.sh tests/unit -x        # extra arguments go to pytest
#
# Env: CDC_SKIP_SETUP=1 skips setup.sh; CDC_KEEP_SERVICES=1 leaves started services running;
# CDC_TEST_WORKERS=N runs the tests on N pytest-xdist workers (default 2; 0 = one process). A test module
# stays on one worker (one Spark session per module); each worker has its own private services.
# The tests' Spark JVMs are lean (tests/support/jvm_archive.py): a class-data archive built once into .cache/jvm,
# the client JIT only, the serial collector and Spark's interpreted expressions; the cluster tier keeps Spark's
# defaults. CDC_TEST_JVM_DEFAULTS=1 runs every test with Spark's defaults.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ "${CDC_SKIP_SETUP:-0}" != "1" ]; then
  "$ROOT/scripts/setup.sh"
fi

export PATH="$ROOT/.venv/bin:$PATH"
export SPARK_LOCAL_IP=127.0.0.1
export PYTHONUNBUFFERED=1

# Services running before the suite are someone else's; the ones the suite starts are ours to stop.
services_before="$("$ROOT/scripts/services.sh" status 2>/dev/null || true)"
cleanup() {
  [ "${CDC_KEEP_SERVICES:-0}" = "1" ] && return 0
  local after
  after="$("$ROOT/scripts/services.sh" status 2>/dev/null || true)"
  for svc in mariadb zookeeper; do
    if ! grep -q "^$svc: running" <<<"$services_before" && grep -q "^$svc: running" <<<"$after"; then
      "$ROOT/scripts/services.sh" stop "$svc" || true
    fi
  done
}
trap cleanup EXIT
trap 'exit 143' TERM  # so that a killed run still stops what it started (EXIT runs the cleanup)
trap 'exit 130' INT

set +e
workers="${CDC_TEST_WORKERS:-2}"
parallel=()
if [ "$workers" != "0" ]; then
  # Most of the suite waits on JVM start-ups and DAG runs: two workers overlap that waiting.
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
mkdir -p "$ROOT/.local"
junit="$ROOT/.local/test-results.xml"
rm -f "$junit"
python -m pytest -m "unit or integration or e2e" --durations=15 --junitxml="$junit" "${parallel[@]}" "$@"  # the slowest tests, to keep CI short
rc=$?
# Time per tier (tests/unit, integration, e2e, faults): what the README's figures come from. Informational only.
python "$ROOT/scripts/tier_times.py" "$junit" || true
set -e

if [ $rc -eq 5 ]; then
  # pytest's "no tests collected": with a real suite this means the selection matched nothing.
  echo "test.sh: pytest collected no tests (exit 5) for: ${*:-the whole suite}" >&2
  if [ $# -eq 0 ]; then
    echo "test.sh: the whole suite collected nothing: failing (every test needs a unit/integration/e2e mark)" >&2
    exit 1
  fi
  echo "test.sh: nothing to run for this selection; exiting 0" >&2
  exit 0
fi
exit $rc
