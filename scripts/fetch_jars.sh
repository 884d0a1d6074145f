#!/usr/bin/env bash
# Resolve the Delta Lake jars (and their dependencies) from Maven Central once, into a project-local
# Ivy cache (.cache/ivy, git-ignored). Later Spark sessions and spark-submit use the jars from there
# with `spark.jars`, so runs and tests never touch the network.
#
# DELTA_JARS_VERSION defaults to 4.4.0: the Maven Central mirror reachable here serves io.delta jars up
# to 4.4.0, while PyPI has the delta-spark 4.4.1 Python package (a thin wrapper; same Spark 4.2 build
# line). Set DELTA_JARS_VERSION=4.4.1 where Central has it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IVY="${CDC_IVY_DIR:-$ROOT/.cache/ivy}"
VERSION="${DELTA_JARS_VERSION:-4.4.0}"
ARTIFACT="io.delta:delta-spark_4.2_2.13:$VERSION"
STAMP="$IVY/jars/.resolved-$VERSION"
if [ -f "$STAMP" ]; then echo "delta jars: cached in $IVY/jars ($ARTIFACT)"; exit 0; fi
PY="${PYTHON:-$ROOT/.venv/bin/python}"
export PATH="$(dirname "$PY"):$PATH"  # spark-submit finds SPARK_HOME through this python
SPARK_SUBMIT=spark-submit
mkdir -p "$IVY"
noop="$(mktemp --suffix=.py)"; echo "pass" > "$noop"
echo "delta jars: resolving $ARTIFACT from Maven Central into $IVY"
SPARK_LOCAL_IP=127.0.0.1 "$SPARK_SUBMIT" --master 'local[1]' --conf "spark.jars.ivy=$IVY" --packages "$ARTIFACT" "$noop" \
  >"$IVY/resolve.log" 2>&1 || { tail -40 "$IVY/resolve.log"; echo "delta jars: resolution failed (log: $IVY/resolve.log)" >&2; exit 1; }
rm -f "$noop"
ls "$IVY/jars/"*.jar >/dev/null
touch "$STAMP"
echo "delta jars: $(ls "$IVY/jars/"*.jar | wc -l) jars in $IVY/jars"
