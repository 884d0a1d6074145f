"""Secrets and the merge job's command line, as pure functions: the spark-submit command (CLI) and the
SparkSubmitOperator pieces (DAG) built for a real pipeline configuration carry no credential; the ZooKeeper
credential reaches the job through its environment only; a credential smuggled into a Spark conf is refused
without being echoed. (The end-to-end searches: tests/integration/test_hostile_names.py, tests/e2e/test_secrets.py.)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="cdc-unit-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from cdc_airflow.hooks import CdcPipelineHook  # noqa: E402
from cdc_airflow.operators import ZK_AUTH_ENV, build_merge_submit  # noqa: E402

from cdc_core.capture.source import SourceParams  # noqa: E402
from cdc_core.coordination import LeaseGrant  # noqa: E402
from cdc_core.model.config import load_config  # noqa: E402
from cdc_core.model.errors import ConfigError  # noqa: E402
from cdc_core.run.pipeline import Pipeline  # noqa: E402

SOURCE_PW = "src-pw-4f1c9e"
ZK_PW = "zk-pw-77ab02"
GRANT = LeaseGrant("orders", "dag/run", 0x1A2B, 2e9, 1e9)


def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark_conf: dict[str, str] | None = None) -> Pipeline:
    monkeypatch.setenv("CDC_TEST_ZK", f"cdc:{ZK_PW}")
    cfg = tmp_path / "pipelines.yaml"
    cfg.write_text(json.dumps({"pipelines": [{
        "name": "orders", "source": {"conn_id": "src"}, "tables": {"include": ["shop.*"]},
        "zookeeper": {"hosts": "127.0.0.1:1", "root": "/cdc", "auth_env": "CDC_TEST_ZK"},
        "spark": {"conf": spark_conf or {}}, "table_options": {"shop.orders": {"change_data_feed": True}},
    }]}))
    pc = load_config(cfg).pipeline("orders")
    return Pipeline(config=pc, source=SourceParams("db1", 3306, "cdc", SOURCE_PW), coordinator=None)  # type: ignore[arg-type]


def test_the_cli_spark_submit_command_has_no_secret_and_the_job_gets_zk_auth_by_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = pipeline(tmp_path, monkeypatch)
    cmd = " ".join(p.spark_submit_command(GRANT, 7))
    assert '"zk_hosts": "' in cmd and '"token": ' in cmd  # the merge job's spec
    assert SOURCE_PW not in cmd and ZK_PW not in cmd and "cdc:" not in cmd
    assert p.merge_secret_env() == {"CDC_ZK_AUTH": f"digest:cdc:{ZK_PW}"}  # the job's environment, not its argv
    assert SOURCE_PW not in repr(p) and SOURCE_PW not in repr(p.source)


def test_the_dags_merge_submit_has_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = pipeline(tmp_path, monkeypatch)
    secrets = CdcPipelineHook.secrets(p)
    assert set(secrets) == {SOURCE_PW, ZK_PW}
    submit = build_merge_submit(p, GRANT, 7, application="/app.py", python=sys.executable, path="/usr/bin",
                                secrets=secrets, zk_auth=f"cdc:{ZK_PW}")
    visible = json.dumps([submit.application, submit.application_args, submit.conf, submit.jars, submit.name])
    assert SOURCE_PW not in visible and ZK_PW not in visible
    assert submit.env_vars[ZK_AUTH_ENV] == f"digest:cdc:{ZK_PW}"
    assert ZK_PW not in repr(submit)  # env_vars stay out of repr (and so out of logs)


def test_a_credential_in_a_spark_conf_is_refused_without_echo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = pipeline(tmp_path, monkeypatch, spark_conf={"spark.hadoop.fs.s3a.access.token": SOURCE_PW})
    with pytest.raises(ConfigError) as e:
        build_merge_submit(p, GRANT, 7, application="/app.py", python=sys.executable, path="/usr/bin",
                           secrets=CdcPipelineHook.secrets(p))
    assert "contain a credential" in str(e.value) and SOURCE_PW not in str(e.value)
