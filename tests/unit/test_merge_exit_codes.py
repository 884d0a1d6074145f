"""How the merge step (`Pipeline.merge_locally`, the CLI's and the DAG's) reports the merge job's failures.

The job exits with `Fenced.exit_code` when its own lease check finds that the run lost its lease (a
zombie); the CLI used to report that as a LakeError (exit 8, "retry the merge"), which sends an
operator to retry something that can never succeed. Now it is `Fenced` (exit 5), like every other
step of a zombie run. Every exit code is read by the one codec (cdc_core.lake.job_outcome, table-tested in
test_job_outcome.py): a configuration error is a `ConfigError` (exit 2), a schema conflict a
`SchemaConflict` (exit 7), and what no CdcError stands for (1, killed) a retryable LakeError.
"""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from cdc_core.capture.source import SourceParams
from cdc_core.coordination import LeaseGrant
from cdc_core.lake.job_outcome import JobExit
from cdc_core.lake.spark_conf import SparkJob
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import ConfigError, Fenced, LakeError, SchemaConflict
from cdc_core.run import stage
from cdc_core.run.pipeline import Pipeline
from tests.support.fake_manifest import fake_manifest

pytestmark = pytest.mark.unit

GRANT = LeaseGrant(pipeline="p", holder="cli/run/x/1", token=0x42, expires_at=0.0, acquired_at=0.0)


def _pipeline(monkeypatch: pytest.MonkeyPatch, rc: int, stderr: str) -> Pipeline:
    cfg = PipelineConfig(name="p", source={"conn_id": "x"}, tables={"include": ["db.*"]},
                         staging_root="/nonexistent/staging", lake_root="/nonexistent/lake")
    coordinator: Any = SimpleNamespace(renew=lambda grant, ttl: grant)
    p = Pipeline(config=cfg, source=SourceParams(host="h", port=1, user="u", password="pw"), coordinator=coordinator)
    monkeypatch.setattr(stage, "manifest", lambda p, seq: fake_manifest("t"))
    monkeypatch.setattr(p, "spark_jars", lambda: "a.jar")
    monkeypatch.setattr(
        "cdc_core.lake.job_runner.subprocess.run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, rc, "", stderr),
    )
    return p


def test_a_fenced_merge_job_is_a_fenced_run(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _pipeline(monkeypatch, Fenced.exit_code, "merge_window: Fenced: fenced: pipeline 'p' lease ... is now held")
    with pytest.raises(Fenced, match="no longer holds the lease") as e:
        p.merge_locally(GRANT, 7)
    assert e.value.exit_code == 5 and "window 7" in str(e.value)
    assert (e.value.holder, e.value.token) == (GRANT.holder, GRANT.token)


@pytest.mark.parametrize(
    ("rc", "line", "cls"),
    [
        (2, "merge_window: ConfigError: spec parallelism must be >= 1, got 0", ConfigError),
        (7, "merge_window: SchemaConflict: table shop.t column 'a' is int in Delta", SchemaConflict),
    ],
)
def test_errors_no_retry_can_fix_keep_their_class(
    monkeypatch: pytest.MonkeyPatch, rc: int, line: str, cls: type[Exception]
) -> None:
    p = _pipeline(monkeypatch, rc, line)
    with pytest.raises(cls, match="retrying cannot help") as e:
        p.merge_locally(GRANT, 7)
    assert type(e.value) is cls and "merge of window 7 failed" in str(e.value)


def test_other_merge_failures_stay_lake_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _pipeline(monkeypatch, 1, "merge_window: unexpected Boom: no")
    with pytest.raises(LakeError, match="safe to retry"):
        p.merge_locally(GRANT, 7)


def test_the_step_takes_the_callers_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DAG's operator hands its own way to run spark-submit (a SparkSubmitHook); the step decodes it alike."""
    p = _pipeline(monkeypatch, 0, "")
    monkeypatch.setattr("cdc_core.lake.job_runner.subprocess.run", lambda *a, **k: pytest.fail("subprocess"))
    jobs: list[SparkJob] = []

    def runner(job: SparkJob) -> JobExit:
        jobs.append(job)
        return JobExit(0 if len(jobs) == 1 else 2, "merge_window: ConfigError: no", "")

    assert p.merge_locally(GRANT, 7, submit=runner).merged is True
    assert jobs[0].name == "cdc-merge-p-7" and jobs[0].application.endswith("spark_apps/merge_window.py")
    with pytest.raises(ConfigError, match="merge of window 7 failed \\(exit 2\\): ConfigError: no"):
        p.merge_locally(GRANT, 7, submit=runner)


def test_a_lease_lost_while_the_job_ran_fences_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease keeper found the lease gone while the job ran: the step is fenced even when the job ended
    well (its commits are this same window's, idempotently; the lease holder lands it)."""
    import contextlib

    p = _pipeline(monkeypatch, 0, "")
    lost = Fenced("lease moved on", holder=GRANT.holder, token=GRANT.token)

    @contextlib.contextmanager
    def keep(grant: Any) -> Any:
        yield SimpleNamespace(lost=lost)

    monkeypatch.setattr(p, "keep_lease", keep)
    with pytest.raises(Fenced, match="lease moved on"):
        p.merge_locally(GRANT, 7)
