"""How the CLI's merge step (`Pipeline.merge_locally`) reports the merge job's failures.

The job exits with `Fenced.exit_code` when its own lease check finds that the run lost its lease (a
zombie); the CLI used to report that as a LakeError (exit 8, "retry the merge"), which sends an
operator to retry something that can never succeed. Now it is `Fenced` (exit 5), like every other
step of a zombie run. The job's other failures stay LakeErrors.
"""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from cdc_core.capture.source import SourceParams
from cdc_core.coordination import LeaseGrant
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import Fenced, LakeError
from cdc_core.run.pipeline import Pipeline

pytestmark = pytest.mark.unit

GRANT = LeaseGrant(pipeline="p", holder="cli/run/x/1", token=0x42, expires_at=0.0, acquired_at=0.0)


def _pipeline(monkeypatch: pytest.MonkeyPatch, rc: int, stderr: str) -> Pipeline:
    cfg = PipelineConfig(name="p", source={"conn_id": "x"}, tables={"include": ["db.*"]},
                         staging_root="/nonexistent/staging", lake_root="/nonexistent/lake")
    coordinator: Any = SimpleNamespace(renew=lambda grant, ttl: grant)
    p = Pipeline(config=cfg, source=SourceParams(host="h", port=1, user="u", password="pw"), coordinator=coordinator)
    monkeypatch.setattr(p, "manifest", lambda seq: SimpleNamespace(tables=("t",), changes=1))
    monkeypatch.setattr(p, "spark_jars", lambda: "a.jar")
    monkeypatch.setattr(
        "cdc_core.run.pipeline.subprocess.run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, rc, "", stderr),
    )
    return p


def test_a_fenced_merge_job_is_a_fenced_run(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _pipeline(monkeypatch, Fenced.exit_code, "merge_window: Fenced: fenced: pipeline 'p' lease ... is now held")
    with pytest.raises(Fenced, match="no longer holds the lease") as e:
        p.merge_locally(GRANT, 7)
    assert e.value.exit_code == 5 and "window 7" in str(e.value)


def test_other_merge_failures_stay_lake_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _pipeline(monkeypatch, 1, "merge_window: unexpected Boom: no")
    with pytest.raises(LakeError, match="safe to retry"):
        p.merge_locally(GRANT, 7)
