#!/usr/bin/env bash
# Resolve the Delta Lake jars (and their dependencies) from Maven Central once, into a project-local
# Ivy cache (.cache/ivy, git-ignored). Later Spark sessions and spark-submit use the jars from there
# with `spark.jars`, so runs and tests never touch the network.
#
# Then the same for Hadoop's S3A connector (org.apache.hadoop:hadoop-aws at the Hadoop version pyspark
# bundles, with the AWS SDK bundle it depends on: ~690 MB), into .cache/ivy-s3a: only pipelines whose
# staging or lake is on s3:// put it on their classpath. CDC_S3A_JARS=0 skips it.
#
# DELTA_JARS_VERSION defaults to 4.4.0: the Maven Central mirror reachable here serves io.delta jars up
# to 4.4.0, while PyPI has the delta-spark 4.4.1 Python package (a thin wrapper; same Spark 4.2 build
# line). Set DELTA_JARS_VERSION=4.4.1 where Central has it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IVY="${CDC_IVY_DIR:-$ROOT/.cache/ivy}"
VERSION="${DELTA_JARS_VERSION:-4.4.0}"
ARTIFACT="io.delta:delta-spark_4.2_2.13:$VERSION"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
export PATH="$(dirname "$PY"):$PATH"  # spark-submit finds SPARK_HOME through this python

# resolve <what> <ivy dir> <maven coordinates> [excludes]
resolve() {
  local what="$1" ivy="$2" artifact="$3" stamp="$2/jars/.resolved-${3//:/_}"
  if [ -f "$stamp" ]; then echo "$what: cached in $ivy/jars ($artifact)"; return 0; fi
  mkdir -p "$ivy"
  local noop; noop="$(mktemp --suffix=.py)"; echo "pass" > "$noop"
  echo "$what: resolving $artifact from Maven Central into $ivy"
  SPARK_LOCAL_IP=127.0.0.1 spark-submit --master 'local[1]' --conf "spark.jars.ivy=$ivy" --packages "$artifact" "$noop" \
    >"$ivy/resolve.log" 2>&1 || { tail -40 "$ivy/resolve.log"; echo "$what: resolution failed (log: $ivy/resolve.log)" >&2; exit 1; }
  rm -f "$noop"
  ls "$ivy/jars/"*.jar >/dev/null
  touch "$stamp"
  echo "$what: $(ls "$ivy/jars/"*.jar | wc -l) jars in $ivy/jars"
}

resolve "delta jars" "$IVY" "$ARTIFACT"
if [ "${CDC_S3A_JARS:-1}" != "0" ]; then
  # hadoop-aws must match the Hadoop client pyspark ships (pyspark/jars/hadoop-client-api-<version>.jar).
  HADOOP_VERSION="$("$PY" - <<'PYEOF'
import glob, os, re, pyspark
jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
print(re.search(r"hadoop-client-api-(.+)\.jar$", jars[0]).group(1))
PYEOF
)"
  resolve "s3a jars" "${CDC_S3A_IVY_DIR:-$ROOT/.cache/ivy-s3a}" "org.apache.hadoop:hadoop-aws:$HADOOP_VERSION"
fi
