"""The merge step: window `seq`'s Spark MERGE job (spark_apps/merge_window.py) built and run under the lease.

The job's one argument is its spec (`merge_spec`); it runs through spark-submit in a subprocess (the CLI's
default), the DAG operator's SparkSubmitHook, or the pipeline's warm merge server, and what it came to is
decoded by the one outcome codec (cdc_core.run.spark_jobs.run_job), so a failure raises the same error on
every path.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from cdc_core.coordination import LeaseGrant
from cdc_core.lake import delta_state, merge_client
from cdc_core.lake.job_outcome import JobRef
from cdc_core.lake.job_runner import JobRunner, MergeServerRunner, SparkSubmitRunner
from cdc_core.lake.job_specs import MergeJobSpec
from cdc_core.lake.spark_conf import SparkJob
from cdc_core.model import faults, lake_registry, layout, retention
from cdc_core.model.layout import PROJECT_ROOT
from cdc_core.model.manifest import Manifest
from cdc_core.model.schema_changes import DROP_DATABASE
from cdc_core.run import spark_jobs, stage
from cdc_core.run.context import PipelineContext

MERGE_JOB = PROJECT_ROOT / "spark_apps" / "merge_window.py"
MERGE_SERVER_APP = PROJECT_ROOT / "spark_apps" / "merge_server.py"

SKIPPED_EMPTY = "empty"
SKIPPED_DDL_ONLY = "ddl_only"


@dataclass(frozen=True)
class MergeResult:
    """What the merge step did for window `seq`: merged in `secs`, or skipped (why: `SKIPPED_*`)."""

    seq: int
    skipped: str | None = None
    secs: float | None = None

    @property
    def merged(self) -> bool:
        return self.skipped is None

    def to_dict(self) -> dict[str, Any]:
        if self.skipped is not None:
            return {"seq": self.seq, "skipped": self.skipped}
        return {"seq": self.seq, "merged": True, "secs": self.secs}


def report_uri(p: PipelineContext, seq: int, token: int) -> str:
    """Where the merge job of window `seq` under fencing token `token` writes its report."""
    return layout.merge_report_uri(p.staging_root, p.name, seq, token)


def merge_spec(p: PipelineContext, grant: LeaseGrant, seq: int) -> MergeJobSpec:
    """What spark_apps/merge_window.py does for this window (its one `--spec` argument). No secrets:
    ZooKeeper auth and object-store credentials go by env."""
    m = p.config.maintenance
    return MergeJobSpec(
        window_dir=layout.window_dir(p.staging_root, p.name, seq),
        lake_root=p.lake_root,
        pipeline=p.pipeline_name,
        source=p.source_id,
        routes=[r.to_dict() for r in p.config.route_list()],
        group_sources=[str(s) for s in p.config.source_ids() if s is not None],
        seq=seq,
        token=grant.token,
        report=report_uri(p, seq, grant.token),
        delete_mode=p.config.delete_mode,
        zk_hosts=p.config.zookeeper.hosts,
        zk_root=p.config.zookeeper.root,
        table_options=dict(p.config.table_options or {}),
        # Tables start with the managed retention properties (cdc_core.model.retention; maintenance aligns
        # old ones).
        table_properties=retention.managed_table_properties(
            m.vacuum_retention_hours, m.log_retention_hours, m.txn_retention_hours
        ),
        parallelism=p.config.spark.merge_parallelism,
        small_table_rows=p.config.spark.small_table_rows,
        conditional_puts=p.config.object_store.conditional_puts,
        schema_changes=p.config.schema_changes.policy().to_dict(),
        zero_dates=p.config.zero_dates,
    )


def merge_application_args(p: PipelineContext, grant: LeaseGrant, seq: int) -> list[str]:
    """The merge job's application arguments for this window: `--spec <json>`."""
    return merge_spec(p, grant, seq).args()


def merge_job(p: PipelineContext, grant: LeaseGrant, seq: int) -> SparkJob:
    return p.spark_job(MERGE_JOB, merge_application_args(p, grant, seq), f"cdc-merge-{p.name}-{seq}")


def spark_submit_command(p: PipelineContext, grant: LeaseGrant, seq: int, master: str | None = None) -> list[str]:
    """The same command SparkSubmitOperator builds, for the CLI (a test can assert it); the master is the
    pipeline's Spark connection unless given."""
    return merge_job(p, grant, seq).command(master or p.spark_master())


def merge_server_address(p: PipelineContext) -> str | None:
    """The warm option's merge server (env CDC_MERGE_SERVER, else `spark.merge_server.address`), or None:
    spark-submit per window."""
    server = p.config.spark.merge_server
    return os.environ.get(merge_client.ADDRESS_ENV) or (server.address if server else None)


def merge_server_launch(p: PipelineContext, listen: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of the pipeline's merge server (`cdc merge-server`): the Python
    driver `spark_apps/merge_server.py`, whose Spark application gets the merge job's master, jars, confs
    and environment (credentials included) through PYSPARK_SUBMIT_ARGS, as spark-submit would give them."""
    merge_client.parse_address(listen)
    job = p.spark_job(MERGE_SERVER_APP, ["--listen", listen, "--pipeline", p.pipeline_name],
                      f"cdc-merge-server-{p.pipeline_name}")
    argv, job_env = job.python_driver(p.spark_master())
    env = {**spark_jobs.spark_job_env(p), **job_env}
    env.pop(merge_client.ADDRESS_ENV, None)
    return argv, env


def merge_runner(p: PipelineContext, seq: int, submit: JobRunner | None = None) -> JobRunner:
    """Who runs window `seq`'s merge job: the pipeline's merge server when one is configured (the warm
    option, `merge_server_address`), else `submit` (default: spark-submit in a subprocess, the CLI's; the
    DAG's operator passes its SparkSubmitHook's)."""
    address = merge_server_address(p)
    if address:
        server = p.config.spark.merge_server
        return MergeServerRunner(address, server.timeout_seconds if server else None,
                                 f"pipeline {p.name!r}: merge of window {seq}")
    return submit or SparkSubmitRunner(p.spark_master())


def merge_needed(p: PipelineContext, manifest: Manifest) -> bool:
    """Whether the window gives the merge job anything to do: staged rows, schema changes of a table the
    lake has, or a table the pipeline landed windows into before (a backfill rebuilding a deleted table
    with no rows must still create it: the lake registry expects it). A CREATE TABLE of a new table, or any
    DDL of a table the lake never had, waits for its first rows (the ack counts such a table as landed).
    Saves a Spark job per window of DDL on new tables."""
    if any(t.files for t in manifest.tables):
        return True
    if any(c.kind == DROP_DATABASE for c in manifest.schema_changes):
        return True  # its lake tables are found by the merge job
    if any(delta_state.table_exists(p.table_uri(t.schema, t.table), storage=p.storage) for t in manifest.tables):
        return True
    recorded = lake_registry.LakeRegistry.from_dict(p.coordinator.read_lake()).tables
    return any(t.name in recorded for t in manifest.tables)


def merge(p: PipelineContext, grant: LeaseGrant, seq: int, submit: JobRunner | None = None) -> MergeResult:
    """The merge step (CLI and DAG alike): run window `seq`'s merge job (`merge_runner`: the merge server
    when one is configured, else `submit`, default spark-submit in a subprocess) under the run's lease, and
    raise what a failed job came to (cdc_core.lake.job_outcome: `Fenced` for a job that found the lease
    lost, `ConfigError` / `SchemaConflict` that no retry can fix, else a retryable error)."""
    manifest = stage.manifest(p, seq)
    if not manifest.tables:
        p.log_event("window.merge_skipped", grant, seq=seq, reason=SKIPPED_EMPTY)
        return MergeResult(seq, skipped=SKIPPED_EMPTY)
    if not merge_needed(p, manifest):
        p.log_event("window.merge_skipped", grant, seq=seq, reason=SKIPPED_DDL_ONLY, tables=len(manifest.tables))
        return MergeResult(seq, skipped=SKIPPED_DDL_ONLY)
    server = merge_server_address(p)
    runner = merge_runner(p, seq, submit)
    p.log_event("window.merging", grant, seq=seq, tables=len(manifest.tables), changes=manifest.changes,
                **({"merge_server": server} if server else {}))
    t0 = time.time()
    if server:  # started with the pipeline's jars, confs and credentials: a request carries the arguments
        job = SparkJob(application=str(MERGE_JOB), args=merge_application_args(p, grant, seq),
                       name=f"cdc-merge-{p.name}-{seq}", jars="", conf={}, env={})
    else:
        job = merge_job(p, grant, seq)
    ref = JobRef.merge(p.name, seq, grant.holder, grant.token)
    spark_jobs.run_job(p, grant, job, ref, runner).raise_error()
    p.log_event("window.merged", grant, seq=seq, secs=f"{time.time() - t0:.1f}")
    faults.point("after_merge")
    return MergeResult(seq, secs=round(time.time() - t0, 2))
