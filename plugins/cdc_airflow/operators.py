"""The CDC Spark operators' common part: a pipeline's Spark job run through a `SparkSubmitHook`, and
`CdcMergeOperator`, the merge step of the run's staged window (spark_apps/merge_window.py).

What to submit is only known once the run has planned and staged its window: the operator gets the
window (with the lease grant it was planned under) as a TaskFlow result (its templated `window` field,
rendered by Airflow from plan_window's XCom) and runs the pipeline's merge step (`Pipeline.merge_locally`,
the CLI's), handing it the Airflow way to run a job (`HookRunner`): a `SparkSubmitHook` built for this one
submission (`spark_submit_hook`, from `build_job_submit`, pure); the operator's own fields never change at
execute time. The step decodes what the job came to with the one codec (cdc_core.lake.job_outcome), so the
task's state follows from the job's exit code as the CLI's exit code does (`cdc_airflow.states`): a
configuration or schema error fails without retries, a fenced job fails at once, anything else is retried.
The provider's hook raises a plain AirflowException for every failed spark-submit; `hook_exit` reads the
exit code and output tail back from it. An empty window (no captured table has changes) never starts
Spark: the task is skipped, and the ack step still runs.

Credentials never reach the command line: the job's arguments carry paths, names and the fencing
token only (`build_job_submit` refuses any argument or conf that contains a known secret). ZooKeeper
credentials, when configured (`zookeeper.conn_id` or `zookeeper.auth_env`), reach the job in its
environment as CDC_ZK_AUTH=digest:user:password, the variable the job reads, and are registered with
Airflow's log masker (`CdcPipelineHook`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from cdc_airflow.lineage import ReportsWindowLineage
from cdc_core.lake.job_outcome import JobExit
from cdc_core.lake.spark_conf import SparkJob, spark_env
from cdc_core.model.config.sections import ZK_AUTH_ENV  # noqa: F401 - ZK_AUTH_ENV re-exported
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


HOOK_TAIL_MARK = "Last spark-submit output:"  # where the provider's exception text starts the job's output
_HOOK_EXIT_CODE = re.compile(r"Error code is: (-?\d+)")


def hook_exit(hook: Any, err: BaseException) -> JobExit | None:
    """What a spark-submit that `SparkSubmitHook.submit` raised `err` for came to, for the codec
    (cdc_core.lake.job_outcome): the process's exit code (the hook's Popen, `_submit_sp`, else the code its
    message states) and the output tail the provider appends to the message (masked). None when no
    spark-submit ended with a failing exit code (the hook failed before or after it: re-raise `err`)."""
    rc = getattr(getattr(hook, "_submit_sp", None), "returncode", None)
    text = str(err)
    if not isinstance(rc, int):
        stated = _HOOK_EXIT_CODE.search(text)
        rc = int(stated.group(1)) if stated else None
    if not rc:
        return None
    _, marked, tail = text.partition(HOOK_TAIL_MARK)
    return JobExit(rc, tail.strip() if marked else text)


class SparkJobOperator(BaseOperator):
    """Base of the CDC Spark operators: runs one `JobSubmit` through a `SparkSubmitHook` (`run_job`), and kills
    it with the task (`on_kill`); `runner` is that as the `JobRunner` the pipeline's steps take."""

    def __init__(self, *, pipeline: str, conn_id: str = "spark_local", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.conn_id = conn_id
        self._running: SparkSubmitHook | None = None  # the submission in flight, for on_kill only

    def run_job(self, submit: JobSubmit) -> JobExit:
        """spark-submit `submit` and say how it ended: the hook's failure is the job's exit code and output
        tail (`hook_exit`), not a plain AirflowException, so the caller decodes it as the CLI does."""
        hook = spark_submit_hook(self.conn_id, submit)
        self._running = hook
        try:
            hook.submit(submit.application)
        except AirflowException as e:
            ended = hook_exit(hook, e)
            if ended is None:
                raise
            return ended
        finally:
            self._running = None
        return JobExit(0)

    def runner(self, p: Any, secrets: Sequence[str], job: str) -> HookRunner:
        """The `JobRunner` of this task for the open pipeline `p` (`job`: "merge job", for messages)."""
        return HookRunner(self, p.name, job, tuple(secrets), p.zk_auth(), getattr(p, "store", None))

    def on_kill(self) -> None:
        if self._running is not None:
            self._running.on_kill()


@dataclass(frozen=True)
class HookRunner:
    """The Airflow way to run a pipeline's Spark job (a `cdc_core.lake.job_runner.JobRunner`): its pieces
    checked for secrets and built into a `JobSubmit` (`build_job_submit`, with the same environment as the
    CLI's), then submitted by `operator` through a `SparkSubmitHook`."""

    operator: SparkJobOperator
    pipeline: str
    job: str
    secrets: tuple[str, ...] = field(repr=False)
    zk_auth: str | None = field(repr=False)
    store: Any = field(repr=False)

    def __call__(self, job: SparkJob) -> JobExit:
        submit = build_job_submit(
            pipeline=self.pipeline,
            job=self.job,
            name=job.name,
            application=job.application,
            args=job.args,
            conf=job.conf,
            jars=job.jars,
            python=sys.executable,
            path=os.environ.get("PATH", ""),
            secrets=self.secrets,
            zk_auth=self.zk_auth,  # the same lookup as the CLI's (Pipeline.spark_job_env)
            store=self.store,
        )
        return self.operator.run_job(submit)


class CdcMergeOperator(ReportsWindowLineage, SparkJobOperator):
    """MERGE the run's staged window into Delta with spark_apps/merge_window.py, through the pipeline's merge
    step (`Pipeline.merge_locally`, the CLI's): spark-submit through a `SparkSubmitHook` (the Spark
    connection), or, with the warm option (`spark.merge_server.address`, or CDC_MERGE_SERVER in the worker's
    environment), on the pipeline's long-running merge server (`cdc merge-server`), exactly as `cdc run`
    does: the same job, fence, idempotent writes and outcome; a server that is down fails the task with a
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

        grant, seq = window_lease(self.window, self.task_id, context["ti"])
        hook = CdcPipelineHook(self.pipeline)
        try:
            with hook.pipeline() as p:
                result = p.merge_locally(grant, seq, submit=self.runner(p, hook.secrets(p), "merge job"))
                if not result.skipped:
                    self.gather_lineage(p, seq)
        except CdcError as e:
            raise_for(e, self.pipeline)
        if result.skipped:
            raise AirflowSkipException(
                f"pipeline {self.pipeline!r}: window {seq} has no changes for the captured tables; "
                "nothing to merge (the ack step records the empty window)"
            )


class CdcAckOperator(ReportsWindowLineage, BaseOperator):
    """The ack step of the run's window (`cdc_airflow.tasks.ack_window`): the cursor moves past the window
    once Delta holds it in every table; returns the ack's result with `more_work` (the XCom `more_work`
    reads). An operator rather than a TaskFlow task so that it reports the window's lineage, as the merge
    does (`ReportsWindowLineage`).

    :param pipeline: the pipeline's name in the configuration file (or `<pipeline>.<source>`).
    :param window: the planned window (`plan_window`'s result; templated: pass the TaskFlow result).
    """

    template_fields: Sequence[str] = ("window",)
    ui_color = "#8fbc8f"

    def __init__(self, *, pipeline: str, window: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.window = window

    def execute(self, context: Any) -> dict[str, Any]:
        from cdc_airflow.tasks import ack_window

        return ack_window(self.pipeline, self.window, context, self.gather_lineage)
