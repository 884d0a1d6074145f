"""Spark settings shared by spark-submit (the DAG), in-process sessions (tests, bench) and the CLI.

Pure data: no pyspark import. One list of local Delta jars (resolved once by scripts/fetch_jars.sh
into the project's Ivy cache) and one set of confs, so every way of starting Spark sees the same.
"""

from __future__ import annotations

import os
from pathlib import Path

from cdc_core.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def ivy_dir() -> Path:
    return Path(os.environ.get("CDC_IVY_DIR", PROJECT_ROOT / ".cache" / "ivy"))


def delta_jars() -> list[str]:
    """Absolute paths of the locally cached Delta jars; a clear error when they were never fetched."""
    jars = sorted(str(p) for p in (ivy_dir() / "jars").glob("*.jar"))
    if not any("delta-spark" in Path(j).name for j in jars):
        raise ConfigError(
            f"Delta jars not found in {ivy_dir() / 'jars'}: run scripts/fetch_jars.sh once "
            "(it resolves io.delta:delta-spark from Maven Central into that cache)"
        )
    return jars


def spark_confs(shuffle_partitions: int = 2, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Confs for a Delta-enabled session that is kind to a small machine."""
    confs = {
        "spark.jars": ",".join(delta_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(max(2, shuffle_partitions)),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        # Schema evolution is enabled per MERGE (WITH SCHEMA EVOLUTION), never session-wide.
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # Delta replays a table's log with 50 tasks by default: seconds of overhead per table on 2 cores.
        "spark.databricks.delta.snapshotPartitions": str(max(1, shuffle_partitions)),
        # VACUUM lists a table's directories with this many tasks (Spark's default: 10,000), which cost
        # ~45 s per table on 2 cores even for a tiny table; a few tasks list it in ~3 s.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(2, shuffle_partitions)),
    }
    confs.update(extra or {})
    return confs


def spark_env() -> dict[str, str]:
    """Environment every Spark process needs here: loopback driver, venv's python on PATH."""
    venv_bin = str(Path(os.sys.executable).parent)  # type: ignore[attr-defined]
    path = os.environ.get("PATH", "")
    if venv_bin not in path.split(os.pathsep):
        path = venv_bin + os.pathsep + path
    return {"SPARK_LOCAL_IP": "127.0.0.1", "PATH": path, "PYSPARK_PYTHON": os.sys.executable}  # type: ignore[attr-defined]
