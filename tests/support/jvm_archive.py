"""Cheaper Spark JVMs for the test suite: a class-data-sharing archive of Spark's and Delta's classes, and
the client JIT only for short-lived ones (`SPARK_SUBMIT_OPTS`, which every spark-submit of the tests inherits).

The suite is CPU-bound on 2 cores and starts a hundred-odd short Spark JVMs (a spark-submit per window, a
pyspark session per worker, merge servers, cluster drivers). A cold JVM that creates a Delta table, MERGEs
into it and reads it back spends 48-56 CPU-s by default, 28 with `-XX:TieredStopAtLevel=1` (C2 compiles
code that such a short JVM never runs long enough to use) and 18-20 with the archive as well (classes
mapped, not parsed and verified). bench/RESULTS.md has the figures. Neither flag changes what a job
does; a production merge of a big window keeps the default JIT.

The archive is built once per Java, Spark and Delta version (a throwaway session that does what the probe
above does, dumped at exit) into .cache/jvm/. A JVM whose class path does not match it ignores it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
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
    (the suite then runs with Spark's JVM defaults plus the client JIT)."""
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


C1_ONLY = "-XX:TieredStopAtLevel=1"


def long_lived(env: dict[str, str]) -> dict[str, str]:
    """`env` for a JVM that lives through many tests (the session's pyspark, the shared merge server): the
    archive, but the full JIT, whose compiled code such a JVM does get to run."""
    opts = env.get(ENV, "").replace(C1_ONLY, "").strip()
    return {**{k: v for k, v in env.items() if k != ENV}, **({ENV: opts} if opts else {})}


@contextmanager
def long_lived_launch() -> Iterator[None]:
    """Within: a JVM launched from this process (pyspark's session) is a `long_lived` one."""
    saved = os.environ.get(ENV)
    if saved is None:
        yield
        return
    os.environ.pop(ENV)
    os.environ.update(long_lived({ENV: saved}))
    try:
        yield
    finally:
        os.environ[ENV] = saved


def configure() -> None:
    """Set SPARK_SUBMIT_OPTS for this process and its children (pytest's controller, before workers start)."""
    if os.environ.get(DISABLE_ENV) == "1" or ENV in os.environ:
        return
    archive = build()
    share = f"-XX:SharedArchiveFile={archive} {QUIET}" if archive else ""
    os.environ[ENV] = f"{C1_ONLY} {share}".strip()
