"""Cheaper Spark JVM start-ups for the test suite: a class-data-sharing archive of Spark's and Delta's classes
(`SPARK_SUBMIT_OPTS`, which every spark-submit and pyspark session of the tests inherits).

The suite is CPU-bound on 2 cores and starts a hundred-odd Spark JVMs (a spark-submit per window, a pyspark
session per worker, merge servers, cluster drivers). A cold JVM that creates a Delta table, MERGEs into it and
reads it back spends 48-56 CPU-s by default and 36-37 with the archive: its classes are mapped, not parsed and
verified (bench/cold_jvm.py, bench/RESULTS.md). The client JIT only (`-XX:TieredStopAtLevel=1`) cuts that probe
to 28 (18-20 with the archive), but a fresh-clone run of the whole suite with it on every spark-submit took as
long as without it (46.3 min, 2026-11-28): merge jobs and merge servers that do real work ran slower. The
archive changes nothing a job does; a JVM whose class path does not match it ignores it.

The archive is built once per Java, Spark and Delta version (a throwaway session that does what the probe
does, dumped at exit) into .cache/jvm/.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from cdc_core.model.layout import PROJECT_ROOT

ENV = "SPARK_SUBMIT_OPTS"
DISABLE_ENV = "CDC_TEST_JVM_DEFAULTS"  # =1: leave Spark's JVMs as they are (to measure the difference)
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a missing or mismatched archive is no error: no warning either

_WORKLOAD = textwrap.dedent(
    """
    import os, shutil, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from pyspark.sql import SparkSession
    from delta.tables import DeltaTable
    from cdc_core.lake.spark_conf import spark_confs
    builder = SparkSession.builder.master("local[2]").appName("cdc-jvm-archive")
    for k, v in {**spark_confs(), "spark.driver.extraJavaOptions": sys.argv[2]}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    path = tempfile.mkdtemp(prefix="cdc-jvm-archive-")
    try:
        spark.range(100).selectExpr("id", "cast(id as string) v").write.format("delta").save(path + "/t")
        src = spark.range(50, 150).selectExpr("id", "cast(id * 2 as string) v")
        (DeltaTable.forPath(spark, path + "/t").alias("t").merge(src.alias("s"), "t.id = s.id")
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
        assert spark.read.format("delta").load(path + "/t").count() == 150
    finally:
        spark.stop()
        shutil.rmtree(path, ignore_errors=True)
    """
)


def _key() -> str:
    """Java, Spark's jars and Delta's: what the archived classes come from."""
    import pyspark

    from cdc_core.lake.spark_conf import delta_jars

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("*.jar"))
    parts = [java, *(f"{j.name}:{j.stat().st_size}" for j in jars), *delta_jars()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def build(directory: Path | None = None) -> Path | None:
    """The archive for this machine's Java, Spark and Delta, built if missing; None if it cannot be built
    (the suite then runs with Spark's JVM defaults)."""
    directory = directory or PROJECT_ROOT / ".cache" / "jvm"
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / f"spark-{_key()}.jsa"
    if archive.exists():
        return archive
    partial = directory / f"{archive.name}.{os.getpid()}.tmp"
    opts = f"-Duser.timezone=UTC -XX:ArchiveClassesAtExit={partial} {QUIET}"
    env = {k: v for k, v in os.environ.items() if k != ENV}
    done = subprocess.run([sys.executable, "-c", _WORKLOAD, str(PROJECT_ROOT), opts], env=env, cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        print(f"jvm_archive: no class-data archive ({done.stderr[-500:]})", file=sys.stderr)
        return None
    partial.replace(archive)  # atomic: a JVM never maps a half-written archive
    return archive


def configure() -> None:
    """Set SPARK_SUBMIT_OPTS for this process and its children (pytest's controller, before workers start)."""
    if os.environ.get(DISABLE_ENV) == "1" or ENV in os.environ:
        return
    archive = build()
    if archive is not None:
        os.environ[ENV] = f"-XX:SharedArchiveFile={archive} {QUIET}"
