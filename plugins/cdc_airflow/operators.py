"""`CdcMergeOperator`: SparkSubmitOperator for one staged window, configured at execute time.

What to submit is only known once the run has planned and staged its window, so the operator reads
the lease grant and the window's sequence number from XCom, asks the pipeline for the job's
arguments, Spark confs and Delta jars, and then lets SparkSubmitOperator do the rest (connection,
`spark-submit`, logs, kill on timeout). An empty window (no captured table has changes) never starts
Spark: the task is skipped, and the ack step still runs.

Credentials never reach the command line: the job's arguments carry paths, names and the fencing
token only (`build_merge_submit` refuses any argument or conf that contains a known secret). ZooKeeper
credentials, when configured (`zookeeper.auth_env` names a variable holding user:password), reach the
job in its environment as CDC_ZK_AUTH=digest:user:password, the variable the job reads, and are
registered with Airflow's log masker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from cdc_core.lake.spark_conf import spark_env
from cdc_core.model.config import ZK_AUTH_ENV  # noqa: F401 - ZK_AUTH_ENV re-exported
from cdc_core.model.errors import ConfigError

LEASE_TASK = "acquire_lease"
PLAN_TASK = "plan_window"


class _MergeSource(Protocol):
    """What `build_merge_submit` needs from a Pipeline (a stub in unit tests)."""

    @property
    def name(self) -> str: ...

    def merge_application_args(self, grant: Any, seq: int) -> list[str]: ...
    def spark_conf(self) -> dict[str, str]: ...
    def spark_jars(self) -> str: ...


@dataclass(frozen=True)
class MergeSubmit:
    """Everything SparkSubmitOperator needs for one window, as plain values."""

    application: str
    application_args: list[str]
    jars: str
    conf: dict[str, str]
    env_vars: dict[str, str] = field(repr=False)
    name: str


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

    SparkSubmitOperator runs plain `spark-submit` from PATH (the hook merges these into a copy of the
    worker's environment), so the venv that has pyspark must come first.
    """
    return spark_env(zk_auth, python=python, path=path, environ=environ, store=store)


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
) -> MergeSubmit:
    """Pure: the spark-submit pieces for window `seq`, refusing to put a secret on the command line."""
    args = [str(a) for a in p.merge_application_args(grant, seq)]
    conf = {str(k): str(v) for k, v in p.spark_conf().items()}
    leaked = [s for s in secrets if s and any(s in a for a in (*args, *conf.values()))]
    if leaked:
        raise ConfigError(
            f"pipeline {p.name!r}: the merge job's arguments or Spark confs contain a credential; "
            "credentials must come from connections or environment variables, never the command line"
        )
    return MergeSubmit(
        application=application,
        application_args=args,
        jars=p.spark_jars(),
        conf=conf,
        env_vars=spark_submit_env(python, path, zk_auth, environ, store=getattr(p, "store", None)),
        name=f"cdc-merge-{p.name}-{seq}",
    )


def pull_grant_and_seq(ti: Any, lease_task: str = LEASE_TASK, plan_task: str = PLAN_TASK) -> tuple[dict[str, Any], int]:
    """The run's lease grant and window seq from XCom; a clear error when a step did not run."""
    grant = ti.xcom_pull(task_ids=lease_task)
    step = ti.xcom_pull(task_ids=plan_task)
    if not isinstance(grant, Mapping) or not isinstance(step, Mapping) or "seq" not in step:
        # Not retryable: only clearing the run from the lease step brings the XComs back.
        raise AirflowFailException(
            f"task {ti.task_id!r}: no lease grant from {lease_task!r} or no window from {plan_task!r} in XCom; "
            f"clear the run from the {lease_task!r} task"
        )
    return dict(grant), int(step["seq"])


class CdcMergeOperator(SparkSubmitOperator):
    """MERGE the run's staged window into Delta with spark_apps/merge_window.py.

    :param pipeline: the pipeline's name in the configuration file.
    :param conn_id: the Spark connection (the configuration's `spark.conn_id`).
    """

    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        pipeline: str,
        conn_id: str = "spark_local",
        lease_task: str = LEASE_TASK,
        plan_task: str = PLAN_TASK,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", f"cdc-merge-{pipeline}")
        # A retried merge must submit again (it is idempotent in Delta); never "resume" an old job.
        kwargs.setdefault("durable", False)
        super().__init__(conn_id=conn_id, **kwargs)
        self.pipeline = pipeline
        self.lease_task = lease_task
        self.plan_task = plan_task

    def execute(self, context: Any) -> None:
        import sys

        from airflow.sdk.log import mask_secret

        from cdc_airflow.hooks import open_pipeline, secrets_of
        from cdc_core.coordination import LeaseGrant
        from cdc_core.run.pipeline import MERGE_JOB

        grant_dict, seq = pull_grant_and_seq(context["ti"], self.lease_task, self.plan_task)
        grant = LeaseGrant.from_dict(grant_dict)
        with open_pipeline(self.pipeline) as p:
            manifest = p.manifest(seq)  # the staged window, verified against its stored plan
            if not manifest.tables:
                raise AirflowSkipException(
                    f"pipeline {self.pipeline!r}: window {seq} has no changes for the captured tables; "
                    "nothing to merge (the ack step records the empty window)"
                )
            p.renew(grant)  # fail now, not after a Spark start, if the lease was lost
            zk_auth = p.zk_auth()  # the same lookup as the CLI's (Pipeline.spark_job_env)
            if zk_auth:
                mask_secret(zk_auth)
            submit = build_merge_submit(
                p,
                grant,
                seq,
                application=str(MERGE_JOB),
                python=sys.executable,
                path=os.environ.get("PATH", ""),
                secrets=secrets_of(p.config, p.source, p.store),
                zk_auth=zk_auth,
            )
        self.log.info(
            "window.merge pipeline=%s seq=%s tables=%s changes=%s",
            self.pipeline,
            seq,
            len(manifest.tables),
            manifest.changes,
        )
        self.application = submit.application
        self.application_args = submit.application_args
        self.jars = submit.jars
        self.conf = submit.conf
        self.env_vars = submit.env_vars
        self.name = submit.name
        self._hook = None  # built from the values above
        try:
            super().execute(context)
        except Exception as e:
            from cdc_airflow.tasks import holder_for

            with open_pipeline(self.pipeline) as p:
                p.note_failure(self.task_id, e, seq=seq, holder=holder_for(context["ti"].dag_id, context["run_id"]))
            raise
