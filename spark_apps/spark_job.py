"""What the product's Spark jobs share (the merge job, spark_apps/merge/, and the maintenance job,
spark_apps/maintain_tables.py): their session, their storage (the object store's credentials from the job's
environment, passed down), their report, the idempotent-write confs, commit-conflict detection, SQL string literals.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import delta.exceptions as delta_exceptions
from pyspark.sql import SparkSession

from cdc_core.lake.object_store import AMBIENT, Storage, from_env
from cdc_core.model.errors import (
    ConfigError,
)

log = logging.getLogger("cdc.merge")


TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"


TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"


USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


MATERIALIZE_SOURCE_CONF = "spark.databricks.delta.merge.materializeSource"


_CONFLICTS = tuple(
    getattr(delta_exceptions, n)
    for n in (
        "DeltaConcurrentModificationException",
        "ConcurrentWriteException",
        "MetadataChangedException",
        "ProtocolChangedException",
        "ConcurrentAppendException",
        "ConcurrentDeleteReadException",
        "ConcurrentDeleteDeleteException",
        "ConcurrentTransactionException",
    )
)


_CONFLICT_MARKERS = (
    "io.delta.exceptions.Concurrent",
    "ConcurrentAppendException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "DELTA_CONCURRENT_",
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
)


def is_table_not_found(e: BaseException) -> bool:
    """Spark could not resolve a Delta table path (e.g. [DELTA_TABLE_NOT_FOUND] "... doesn't exist")."""
    text = str(e)
    return any(m in text for m in ("DELTA_TABLE_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE", "doesn't exist"))


def is_commit_conflict(e: BaseException) -> bool:
    if isinstance(e, _CONFLICTS):
        return True
    text = f"{type(e).__name__} {e}"
    return any(m in text for m in _CONFLICT_MARKERS)


def sql_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def build_session(app_name: str) -> SparkSession:
    """The spark-submit session, with the project's defaults for any conf the submitter did not set."""
    from pyspark import SparkConf

    from cdc_core.lake import object_store
    from cdc_core.lake.spark_conf import spark_confs

    submitted = SparkConf()
    try:
        defaults = spark_confs()
    except ConfigError:  # jars supplied another way (e.g. --packages on a cluster)
        defaults = {}
    # The object store's credentials arrive in the environment (never the command line): the session's s3a
    # confs carry them to executors on other hosts (the driver's own reads take `job_storage()`).
    defaults.update(object_store.session_confs_from_env(os.environ))
    builder = SparkSession.builder.appName(app_name)
    for k, v in defaults.items():
        if k != "spark.jars" and not submitted.contains(k):
            builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if "DeltaSparkSessionExtension" not in (spark.conf.get("spark.sql.extensions", "") or ""):
        raise ConfigError(
            "the Spark session has no Delta extension: submit with the Delta jars and cdc_core.lake.spark_conf confs"
        )
    return spark


def job_storage() -> Storage:
    """The job's way to its pipeline's staging and lake from the driver (fsspec and delta-rs reads, the report):
    the object store's credentials its submitter put in its environment (`object_store.job_env`, never the
    command line). Built once per job and passed down; nothing is set process-wide."""
    return Storage(from_env(os.environ))


def write_report(target: str, report: dict[str, Any], *, storage: Storage = AMBIENT) -> None:
    fs, path = storage.fs(target)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "w") as f:
        f.write(json.dumps(report, sort_keys=True, indent=1))
