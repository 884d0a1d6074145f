"""Cheaper Spark JVMs for the test suite (`SPARK_SUBMIT_OPTS`, which every spark-submit and pyspark session of
the tests inherits): a class-data-sharing archive of Spark's and Delta's classes, the client JIT only, and
Spark's interpreted expression evaluation instead of generated code.

The suite is CPU-bound on 2 cores and starts a hundred-odd Spark JVMs (a spark-submit per window, a pyspark
session per worker, merge servers, cluster drivers) on tiny tables. Where such a JVM spends its CPU (JFR and
per-thread CPU of the fault suite's merge server, 2026-11-28): about half in the JIT compilers (C2 ~60 s of
~163), and of the rest a third in generating and compiling Java code for each query's projections (Janino),
code that then runs a few hundred rows. So, for the tests only:
- the archive: a JVM's classes are mapped, not parsed and verified (a cold create+MERGE+read: 48-56 CPU-s by
  default, 36-37 with it; bench/cold_jvm.py);
- `-XX:TieredStopAtLevel=1`: no C2; `-XX:+UseSerialGC`: no concurrent collector threads;
- `spark.sql.codegen.wholeStage=false` and `spark.sql.codegen.factoryMode=NO_CODEGEN` (as Java system
  properties, which SparkConf reads): Spark's interpreted projections and predicates, which Spark's own test
  suites run against the generated ones. What a query returns does not change; what it costs here does.
Measured one module at a time on a quiet machine (machine CPU-s over the module, bench/suite_cpu.py,
bench/RESULTS.md): the fault suite's crash scenario 170 -> 137, the hostile-names module (a spark-submit per
window) 59 -> 33, the schema-change merges (in-process session) 208 -> 147; the whole suite from a fresh clone
45.4 -> 37.5 min. The client JIT alone did not make the suite faster
(2026-11-28: merge servers doing real work ran slower with C2's code gone and Janino's still generated).

The product keeps Spark's defaults, and so do the tests that take the `spark_defaults` fixture (the Spark
cluster tier): their spark-submits run Spark's generated code as production does. The production cycle (a
real Airflow on a cluster, through cross-process faults) runs lean, its executors too (`lean_executor_confs`):
its subject is the faults, and the cluster tier already lands windows with Spark's own execution on a cluster.
`CDC_TEST_JVM_DEFAULTS=1` runs the whole suite with Spark's defaults.

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
# The client JIT and Spark's interpreted expressions: tiny tables, many queries (see above).
C1_ONLY = "-XX:TieredStopAtLevel=1"
# With the client JIT only, the JVM reserves a 48 MB code cache (a client VM's), which a long-lived test JVM (the
# worker's Spark session, a merge server) fills: the sweeper then flushes compiled methods and C1 compiles them
# again, all run long. 256 MB holds them (~56 MB used). The output-modes model test's session, 2026-12-02: JVM
# CPU 169 -> 154 s (C1 25 -> 14 s, the sweeper 6-9 -> ~0 s); flushing off instead fills the 48 MB and stops
# compiling (180 s).
CODE_CACHE = "-XX:ReservedCodeCacheSize=256m"
# The serial collector: no concurrent GC threads competing with the suite for 2 cores (a heap of at most 1 GB).
# bench/suite_cpu.py, 2026-12-01: the schema-change merges 132 -> 118 machine CPU-s, the small-table writer
# module 243 -> 231, the hostile-names module (a spark-submit per window) 38 -> 38.
SERIAL_GC = "-XX:+UseSerialGC"
JVM_LEAN = f"{C1_ONLY} {CODE_CACHE} {SERIAL_GC}"
LEAN = f"{JVM_LEAN} -Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"

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


def options(archive: Path | None, *, lean: bool = True) -> str:
    """The JVM options of the suite's Spark JVMs: the archive (when there is one), then the lean options."""
    parts = [f"-XX:SharedArchiveFile={archive} {QUIET}" if archive is not None else "", LEAN if lean else ""]
    return " ".join(p for p in parts if p)


def configure() -> None:
    """Set SPARK_SUBMIT_OPTS for this process and its children (pytest's controller, before workers start)."""
    if os.environ.get(DISABLE_ENV) == "1" or ENV in os.environ:
        return
    os.environ[ENV] = options(build())


def lean_executor_confs() -> dict[str, str]:
    """Spark confs that make a cluster's executors lean too (SPARK_SUBMIT_OPTS reaches the driver only): the
    client JIT and the serial collector. The interpreted expressions need nothing more: the driver's SQL confs
    travel with its tasks. Spark refuses `-Dspark.*` in extraJavaOptions, hence the JVM flags alone. Empty under
    CDC_TEST_JVM_DEFAULTS=1."""
    if os.environ.get(DISABLE_ENV) == "1":
        return {}
    return {"spark.executor.extraJavaOptions": f"-Duser.timezone=UTC {JVM_LEAN}"}


def spark_defaults_opts(opts: str) -> str:
    """`opts` without the client JIT and the interpreted expressions: Spark's own execution, as in production
    (the archive stays: it changes nothing a job does)."""
    return " ".join(opts.replace(LEAN, " ").split())
