"""One way to run a pipeline's Spark job (the merge or the maintenance job), whoever runs it, and the
environment every such job of a pipeline gets (master, jars, confs, credentials).

The CLI, the Airflow operators and the warm merge server differ only in the `JobRunner` they hand over
(cdc_core.lake.job_runner); the rest is this one function: the lease renewed before a Spark start and kept
alive while the job runs, the job's report read, and what the job came to decoded by the one codec
(cdc_core.lake.job_outcome), so a failure is the same `CdcError` on every path.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import AbstractContextManager
from typing import Any, Protocol

from cdc_core.coordination import LeaseGrant, LeaseKeeper
from cdc_core.lake import object_store
from cdc_core.lake.job_outcome import JobOutcome, JobRef, decode
from cdc_core.lake.job_runner import JobRunner, read_report
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.lake.spark_conf import (
    SparkJob,
    delta_jars,
    jar_list,
    job_confs,
    resolve_spark_master,
    s3a_jars,
    spark_env,
)
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import Fenced


class LeaseHolder(Protocol):
    """What `run_job` needs of a pipeline (`Pipeline`)."""

    def renew(self, grant: LeaseGrant) -> Any: ...
    def keep_lease(self, grant: LeaseGrant) -> AbstractContextManager[LeaseKeeper]: ...


def run_job(
    p: LeaseHolder, grant: LeaseGrant, job: SparkJob, ref: JobRef, runner: JobRunner, *, report: str | None = None,
    storage: Storage = AMBIENT,
) -> JobOutcome:
    """Run `job` with `runner` under `grant`: renew the lease first (fail now, not after a Spark start), keep
    it alive while the job runs (a window of many tables may outlast it), read the job's report (`report`:
    where its spec says it writes it, read with the pipeline's `storage`), and return what it came to. A
    lease lost while the job ran is the outcome (`Fenced`) even when the job finished, unless the job's own
    fence check already said so."""
    p.renew(grant)
    with p.keep_lease(grant) as keeper:
        ended = runner(job)
    found = read_report(report, storage=storage) if report else None
    outcome = decode(ref, ended, found)
    if keeper.lost is not None and not isinstance(outcome.error, Fenced):
        return dataclasses.replace(outcome, error=keeper.lost)
    return outcome


# ------------------------------------------------------------------------------ the job environment


class JobEnv(Protocol):
    """What a pipeline's Spark job environment is built from (`Pipeline`)."""

    config: PipelineConfig
    store: object_store.S3Credentials | None

    @property
    def name(self) -> str: ...

    @property
    def staging_root(self) -> str: ...

    @property
    def lake_root(self) -> str: ...

    def zk_auth(self) -> str | None: ...

    def spark_master(self) -> str: ...

    def spark_jars(self) -> str: ...

    def spark_conf(self) -> dict[str, str]: ...


def merge_secret_env(p: JobEnv) -> dict[str, str]:
    """Credentials the Spark jobs need, for their environment (never their command line): the ZooKeeper
    digest identity as CDC_ZK_AUTH, which the job's fence check reads (the lease node is ACL'd)."""
    value = p.zk_auth()
    return {"CDC_ZK_AUTH": f"digest:{value}"} if value else {}


def spark_job_env(p: JobEnv) -> dict[str, str]:
    """The environment of the pipeline's Spark jobs (merge and maintenance): one function, credentials
    included when configured (cdc_core.lake.spark_conf.spark_env)."""
    return {**os.environ, **spark_env(p.zk_auth(), store=p.store)}


def uses_object_store(p: JobEnv) -> bool:
    return object_store.is_s3(p.staging_root) or object_store.is_s3(p.lake_root)


def spark_master(p: JobEnv) -> str:
    """The --master of the pipeline's Spark connection (`spark.conn_id`), as the DAG's operator uses."""
    return resolve_spark_master(p.config.spark.conn_id, pipeline=p.name)


def spark_conf(p: JobEnv) -> dict[str, str]:
    store = object_store.spark_confs(p.store) if uses_object_store(p) else None
    return job_confs(p.config.spark, store)


def spark_jars(p: JobEnv) -> str:
    return jar_list(delta_jars() + (s3a_jars() if uses_object_store(p) else []), p.spark_master())


def spark_job(p: JobEnv, application: object, args: list[str], name: str) -> SparkJob:
    """One of the pipeline's Spark jobs: its jars, confs and environment (cdc_core.lake.spark_conf.SparkJob)."""
    return SparkJob(application=str(application), args=[str(a) for a in args], name=name,
                    jars=p.spark_jars(), conf=p.spark_conf(), env=spark_env(p.zk_auth(), store=p.store))


__all__ = [
    "JobEnv", "LeaseHolder", "merge_secret_env", "run_job", "spark_conf", "spark_jars", "spark_job", "spark_job_env",
    "spark_master", "uses_object_store",
]
