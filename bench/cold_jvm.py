"""What a short-lived Spark JVM costs (the test suite's: a spark-submit per window): a fresh pyspark session that
creates a 100-row Delta table, MERGEs 100 rows into it and reads it back, then stops, under JVM option sets.

Per run: the session's start, the work, the wall time of the whole process and the JVM's own CPU seconds (all
its threads: the JIT compilers run beside the job on the second core). `--opts` (repeatable, "name=options")
adds a variant; the built-in ones are Spark's defaults, the client JIT only, and the class-data archive of
tests/support/jvm_archive.py with and without it (built first when missing).

    python -m bench.cold_jvm --runs 2

Prints one JSON line per run. Never part of the test suite; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

from bench.common import ROOT, load_avg, log

_PROBE = textwrap.dedent(
    """
    import json, os, shutil, sys, tempfile, time
    sys.path.insert(0, sys.argv[1])
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from delta.tables import DeltaTable
    from cdc_core.lake.spark_conf import spark_confs
    t0 = time.time()
    builder = SparkSession.builder.master("local[2]").appName("cold-jvm")
    confs = spark_confs()
    confs["spark.driver.extraJavaOptions"] += " " + sys.argv[2]
    for k, v in confs.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    t1 = time.time()
    path = tempfile.mkdtemp(prefix="cold-jvm-") + "/t"
    spark.range(100).selectExpr("id", "cast(id as string) v").write.format("delta").save(path)
    src = spark.range(50, 150).selectExpr("id", "cast(id * 2 as string) v")
    (DeltaTable.forPath(spark, path).alias("t").merge(src.alias("s"), "t.id = s.id")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    rows = spark.read.format("delta").load(path).count()
    t2 = time.time()
    pid = SparkContext._gateway.proc.pid
    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    spark.stop()
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    print(json.dumps({"start_s": round(t1 - t0, 1), "work_s": round(t2 - t1, 1), "jvm_cpu_s": round(cpu, 1),
                      "rows": rows}))
    """
)


def variants(extra: list[str]) -> dict[str, str]:
    from tests.support.jvm_archive import C1_ONLY, build, options

    archive = build()
    out = {"defaults": "", "client JIT only": C1_ONLY}
    if archive is not None:
        out["class-data archive"] = options(archive, lean=False)
        out["archive + client JIT"] = f"{C1_ONLY} {options(archive, lean=False)}"
    for item in extra:
        name, _, opts = item.partition("=")
        out[name] = opts
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cold_jvm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=2, help="runs per variant")
    p.add_argument("--opts", action="append", default=[], help="another variant, name=JVM options")
    args = p.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    for name, opts in variants(args.opts).items():
        for i in range(args.runs):
            done = subprocess.run([sys.executable, "-c", _PROBE, str(ROOT), opts], env=env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=900, check=False)
            if done.returncode != 0:
                log(f"cold_jvm: {name} failed: {done.stderr[-1000:]}")
                return 1
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            print(json.dumps({"variant": name, "run": i + 1, **figures, "load": load_avg()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
