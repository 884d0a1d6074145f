"""`CdcMergeOperator`: spark-submit of spark_apps/merge_window.py for the run's staged window.

What to submit is only known once the run has planned and staged its window: the operator gets the
window (with the lease grant it was planned under) as a TaskFlow result (its templated `window` field,
rendered by Airflow from plan_window's XCom), asks the pipeline for the job's arguments, Spark confs and
Delta jars (`build_job_submit`, pure), and hands them to a `SparkSubmitHook` built for this one
submission (`spark_submit_hook`); the operator's own fields never change at execute time. An empty
window (no captured table has changes) never starts Spark: the task is skipped, and the ack step still
runs.

Credentials never reach the command line: the job's arguments carry paths, names and the fencing
token only (`build_job_submit` refuses any argument or conf that contains a known secret). ZooKeeper
credentials, when configured (`zookeeper.conn_id` or `zookeeper.auth_env`), reach the job in its
environment as CDC_ZK_AUTH=digest:user:password, the variable the job reads, and are registered with
Airflow's log masker (`CdcPipelineHook`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowSkipException

from cdc_core.lake.spark_conf import spark_env
from cdc_core.model.config import ZK_AUTH_ENV  # noqa: F401 - ZK_AUTH_ENV re-exported
from cdc_core.model.errors import CdcError, ConfigError

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


class _MergeSource(Protocol):
    """What `build_merge_submit` needs from a Pipeline (a stub in unit tests)."""

    @property
    def name(self) -> str: ...

    def merge_application_args(self, grant: Any, seq: int) -> list[str]: ...
    def spark_conf(self) -> dict[str, str]: ...
    def spark_jars(self) -> str: ...


@dataclass(frozen=True)
class JobSubmit:
    """Everything one spark-submit needs (the merge's or the maintenance job's), as plain values."""

    application: str
    application_args: list[str]
    jars: str
    conf: dict[str, str]
    env_vars: dict[str, str] = field(repr=False)
    name: str


MergeSubmit = JobSubmit  # the merge's submission (the name the tests and docs used first)


def spark_submit_env(
    python: str,
    path: str,
    zk_auth: str | None = None,
    environ: Mapping[str, str] | None = None,
    store: Any = None,
) -> dict[str, str]:
    """Pure given `environ`: the Spark job's environment, the same function as the CLI's
    (cdc_core.lake.spark_conf.spark_env): the venv's interpreter for PySpark and its bin/ first on PATH,
    CDC_ZK_AUTH when configured, SPARK_LOCAL_IP only when the worker's environment sets it, the object
    store's credentials (AWS_* variables) when the pipeline has them.

    The hook runs plain `spark-submit` from PATH (it merges these into a copy of the worker's
    environment), so the venv that has pyspark must come first.
    """
    return spark_env(zk_auth, python=python, path=path, environ=environ, store=store)


def build_job_submit(
    *,
    pipeline: str,
    job: str,
    name: str,
    application: str,
    args: Sequence[Any],
    conf: Mapping[str, Any],
    jars: str,
    python: str,
    path: str,
    secrets: Sequence[str] = (),
    zk_auth: str | None = None,
    environ: Mapping[str, str] | None = None,
    store: Any = None,
) -> JobSubmit:
    """Pure: one spark-submit's pieces, refusing to put a secret on the command line (a ConfigError:
    fails the task without retries)."""
    str_args = [str(a) for a in args]
    str_conf = {str(k): str(v) for k, v in conf.items()}
    leaked = [s for s in secrets if s and any(s in a for a in (*str_args, *str_conf.values()))]
    if leaked:
        raise ConfigError(
            f"pipeline {pipeline!r}: the {job}'s arguments or Spark confs contain a credential; "
            "credentials must come from connections or environment variables, never the command line"
        )
    return JobSubmit(
        application=application,
        application_args=str_args,
        jars=jars,
        conf=str_conf,
        env_vars=spark_submit_env(python, path, zk_auth, environ, store=store),
        name=name,
    )


def build_merge_submit(
    p: _MergeSource,
    grant: Any,
    seq: int,
    *,
    application: str,
    python: str,
    path: str,
    secrets: Sequence[str] = (),
    zk_auth: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> JobSubmit:
    """Pure: the spark-submit pieces for window `seq`, refusing to put a secret on the command line."""
    return build_job_submit(
        pipeline=p.name,
        job="merge job",
        name=f"cdc-merge-{p.name}-{seq}",
        application=application,
        args=p.merge_application_args(grant, seq),
        conf=p.spark_conf(),
        jars=p.spark_jars(),
        python=python,
        path=path,
        secrets=secrets,
        zk_auth=zk_auth,
        environ=environ,
        store=getattr(p, "store", None),
    )


def spark_submit_hook_kwargs(conn_id: str, submit: JobSubmit) -> dict[str, Any]:
    """Pure: the `SparkSubmitHook` arguments for one submission (then `hook.submit(submit.application)`)."""
    return {
        "conn_id": conn_id,
        "conf": dict(submit.conf),
        "jars": submit.jars,
        "name": submit.name,
        "application_args": list(submit.application_args),
        "env_vars": dict(submit.env_vars),
    }


def spark_submit_hook(conn_id: str, submit: JobSubmit) -> SparkSubmitHook:
    """A `SparkSubmitHook` for one submission: the Spark provider's supported way to run spark-submit
    (connection, logs, kill) with arguments computed at execute time."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    return SparkSubmitHook(**spark_submit_hook_kwargs(conn_id, submit))


class SparkJobOperator(BaseOperator):
    """Base of the CDC Spark operators: runs one `JobSubmit` through a `SparkSubmitHook`, and kills it
    with the task (`on_kill`)."""

    def __init__(self, *, pipeline: str, conn_id: str = "spark_local", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.conn_id = conn_id
        self._running: SparkSubmitHook | None = None  # the submission in flight, for on_kill only

    def run_job(self, submit: JobSubmit) -> None:
        hook = spark_submit_hook(self.conn_id, submit)
        self._running = hook
        try:
            hook.submit(submit.application)
        finally:
            self._running = None

    def on_kill(self) -> None:
        if self._running is not None:
            self._running.on_kill()


class CdcMergeOperator(SparkJobOperator):
    """MERGE the run's staged window into Delta with spark_apps/merge_window.py: through spark-submit (the
    Spark connection), or, with the warm option (`spark.merge_server.address`, or CDC_MERGE_SERVER in the
    worker's environment), on the pipeline's long-running merge server (`cdc merge-server`), exactly as
    `cdc run` does: the same job, fence and idempotent writes; a server that is down fails the task with a
    retryable error, never a skip and no silent fallback to spark-submit.

    :param pipeline: the pipeline's name in the configuration file.
    :param window: the planned window (`plan_window`'s result; templated: pass the TaskFlow result). The
        lease grant is the run's current one (`acquire_lease`'s result, read at execute time).
    :param conn_id: the Spark connection (the configuration's `spark.conn_id`).
    """

    template_fields: Sequence[str] = ("window",)
    ui_color = "#f4a460"

    def __init__(self, *, window: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.window = window

    def execute(self, context: Any) -> None:
        from cdc_airflow.hooks import CdcPipelineHook
        from cdc_airflow.states import raise_for
        from cdc_airflow.tasks import window_lease
        from cdc_core.run.pipeline import MERGE_JOB

        grant, seq = window_lease(self.window, self.task_id, context["ti"])
        hook = CdcPipelineHook(self.pipeline)
        try:
            with hook.pipeline() as p:
                manifest = p.manifest(seq)  # the staged window, verified against its stored plan
                if not manifest.tables:
                    raise AirflowSkipException(
                        f"pipeline {self.pipeline!r}: window {seq} has no changes for the captured tables; "
                        "nothing to merge (the ack step records the empty window)"
                    )
                server = p.merge_server_address()
                if server:  # the warm option: the pipeline's merge server runs the same job
                    self.log.info("window.merge pipeline=%s seq=%s merge_server=%s", self.pipeline, seq, server)
                    result = p.merge_locally(grant, seq)
                    self.log.info("window.merged pipeline=%s seq=%s secs=%s", self.pipeline, seq, result.get("secs"))
                    return
                p.renew(grant)  # fail now, not after a Spark start, if the lease was lost
                submit = build_merge_submit(
                    p,
                    grant,
                    seq,
                    application=str(MERGE_JOB),
                    python=sys.executable,
                    path=os.environ.get("PATH", ""),
                    secrets=hook.secrets(p),
                    zk_auth=p.zk_auth(),  # the same lookup as the CLI's (Pipeline.spark_job_env)
                )
                self.log.info(
                    "window.merge pipeline=%s seq=%s tables=%s changes=%s",
                    self.pipeline,
                    seq,
                    len(manifest.tables),
                    manifest.changes,
                )
                with p.keep_lease(grant):  # a window of many tables may merge for longer than the lease
                    self.run_job(submit)
        except CdcError as e:
            raise_for(e, self.pipeline)
