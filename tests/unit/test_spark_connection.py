"""The Spark jobs' master and environment, the same for the CLI and the DAG (issue 20).

`cdc run` / `cdc maintain` submit to the pipeline's Spark connection (`spark.conn_id`, read like the
source's connection from AIRFLOW_CONN_<ID>) with the master URL Airflow's Spark provider would build;
local[2] only when that connection is not defined. The jobs' environment comes from one function:
CDC_ZK_AUTH when `zookeeper.auth_env` is configured, SPARK_LOCAL_IP only when the caller sets it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cdc_core.capture.source import SourceParams
from cdc_core.coordination import LeaseGrant
from cdc_core.lake.spark_conf import jar_list, resolve_spark_master, spark_env, spark_master
from cdc_core.model.config import load_config
from cdc_core.model.connections import parse_connection
from cdc_core.model.errors import ConfigError
from cdc_core.run import housekeeping, merge_step, stage
from cdc_core.run.pipeline import Pipeline
from tests.support.fake_manifest import fake_manifest

pytestmark = pytest.mark.unit

GRANT = LeaseGrant("orders", "cli/run", 0x1A2B, 2e9, 1e9)
ZK_PW = "zk-pw-5e1d"


@pytest.mark.parametrize(
    ("value", "master"),
    [
        ('{"conn_type":"spark","host":"local[2]"}', "local[2]"),  # scripts/airflow_env.sh's form
        ("spark://local%5B2%5D", "local[2]"),
        ("spark://m1:7077", "spark://m1:7077"),  # URI form: the type is the scheme
        ('{"conn_type":"spark","host":"spark://m1","port":7077}', "spark://m1:7077"),  # UI form
        ('{"conn_type":"spark","host":"spark://m1:7077"}', "spark://m1:7077"),
        ('{"conn_type":"spark","host":"yarn","extra":{"queue":"etl"}}', "yarn"),
        ('{"conn_type":"spark","host":"k8s://https://api.k8s:6443"}', "k8s://https://api.k8s:6443"),
        ("spark://yarn", "yarn"),
    ],
)
def test_master_url_is_the_spark_providers(value: str, master: str) -> None:
    assert spark_master(parse_connection("spark_x", value)) == master


def test_master_url_matches_the_installed_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same connections through Airflow's own SparkSubmitHook (skipped without the provider)."""
    hook_mod = pytest.importorskip("airflow.providers.apache.spark.hooks.spark_submit")
    for i, value in enumerate([
        '{"conn_type":"spark","host":"local[2]"}', "spark://local%5B2%5D", "spark://m1:7077",
        '{"conn_type":"spark","host":"spark://m1","port":7077}', '{"conn_type":"spark","host":"yarn"}',
    ]):
        conn_id = f"cdc_master_probe_{i}"
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value)
        try:
            theirs = hook_mod.SparkSubmitHook(conn_id=conn_id)._connection["master"]
        except Exception as e:  # Airflow outside a task may refuse connection lookups
            pytest.skip(f"the provider cannot resolve connections here ({type(e).__name__})")
        assert spark_master(parse_connection(conn_id, value)) == theirs, value


def test_bracketed_uri_host_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"local%5B2%5D"):
        parse_connection("spark_local", "spark://local[2]")


def test_undefined_connection_falls_back_to_local_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="cdc.spark"):
        assert resolve_spark_master("spark_prod", env={}, pipeline="orders") == "local[2]"
    line = " ".join(r.getMessage() for r in caplog.records)
    assert "spark.master_default" in line and "conn_id=spark_prod" in line and "AIRFLOW_CONN_SPARK_PROD" in line


def test_defined_connection_is_used_and_cluster_mode_is_refused() -> None:
    env = {"AIRFLOW_CONN_SPARK_PROD": "spark://m1:7077"}
    assert resolve_spark_master("spark_prod", env=env) == "spark://m1:7077"
    bad = {"AIRFLOW_CONN_SPARK_PROD": '{"conn_type":"spark","host":"yarn","extra":{"deploy-mode":"cluster"}}'}
    with pytest.raises(ConfigError, match="deploy-mode"):
        resolve_spark_master("spark_prod", env=bad)
    with pytest.raises(ConfigError, match="not valid JSON"):  # malformed is an error, never the fallback
        resolve_spark_master("spark_prod", env={"AIRFLOW_CONN_SPARK_PROD": "{nope"})


def test_job_env_passes_spark_local_ip_only_when_the_caller_sets_it() -> None:
    env = spark_env(python="/venv/bin/python", path="/usr/bin", environ={})
    assert env == {"PATH": "/venv/bin:/usr/bin", "PYSPARK_PYTHON": "/venv/bin/python"}
    env = spark_env(python="/venv/bin/python", path="/usr/bin", environ={"SPARK_LOCAL_IP": "10.1.2.3"})
    assert env["SPARK_LOCAL_IP"] == "10.1.2.3"
    env = spark_env("cdc:pw", python="/venv/bin/python", path="", environ={})
    assert env["CDC_ZK_AUTH"] == "digest:cdc:pw" and "SPARK_LOCAL_IP" not in env


def test_operator_env_is_the_same_function() -> None:
    operators = pytest.importorskip("cdc_airflow.operators")
    args = ("/venv/bin/python", "/usr/bin", "cdc:pw")
    assert operators.spark_submit_env(*args, environ={}) == spark_env(
        "cdc:pw", python="/venv/bin/python", path="/usr/bin", environ={})
    assert "SPARK_LOCAL_IP" not in operators.spark_submit_env(*args, environ={})


# ---------------------------------------------------------------------------- the CLI's commands


def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark_conn: str | None) -> Pipeline:
    monkeypatch.setenv("CDC_TEST_ZK_AUTH", f"cdc:{ZK_PW}")
    if spark_conn is None:
        monkeypatch.delenv("AIRFLOW_CONN_SPARK_PROD", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_PROD", spark_conn)
    cfg = tmp_path / "pipelines.yaml"
    cfg.write_text(json.dumps({"pipelines": [{
        "name": "orders", "source": {"conn_id": "src"}, "tables": {"include": ["shop.*"]},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"),
        "zookeeper": {"hosts": "127.0.0.1:1", "root": "/cdc", "auth_env": "CDC_TEST_ZK_AUTH"},
        "spark": {"conn_id": "spark_prod"},
    }]}))
    pc = load_config(cfg).pipeline("orders")
    monkeypatch.setattr("cdc_core.run.spark_jobs.delta_jars", lambda: ["/jars/delta.jar"])
    return Pipeline(config=pc, source=SourceParams("db1", 3306, "cdc", "pw"), coordinator=None)  # type: ignore[arg-type]


def _master(cmd: list[str]) -> tuple[str, str]:
    return cmd[cmd.index("--master") + 1], cmd[cmd.index("--deploy-mode") + 1]


def test_cdc_run_submits_to_the_pipelines_spark_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = pipeline(tmp_path, monkeypatch, "spark://m1:7077")
    seen: dict[str, Any] = {}

    def run(cmd: list[str], env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.update(cmd=cmd, env=env)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(stage, "manifest", lambda p, seq: fake_manifest("shop.orders", changes=3))
    monkeypatch.setattr(p, "renew", lambda grant: None)
    monkeypatch.setattr("cdc_core.lake.job_runner.subprocess.run", run)
    monkeypatch.setattr(merge_step, "merge_application_args", lambda p, grant, seq: ["--seq", str(seq)])
    assert p.merge_locally(GRANT, 7).merged is True
    assert _master(seen["cmd"]) == ("spark://m1:7077", "client")
    assert seen["cmd"][seen["cmd"].index("--jars") + 1] == "/jars/delta.jar"  # a cluster's executors get copies
    assert seen["env"]["CDC_ZK_AUTH"] == f"digest:cdc:{ZK_PW}" and ZK_PW not in " ".join(seen["cmd"])


def test_cli_falls_back_to_local_only_without_the_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = pipeline(tmp_path, monkeypatch, None)
    monkeypatch.setattr(merge_step, "merge_application_args", lambda p, grant, seq: ["--seq", str(seq)])
    cmd = p.spark_submit_command(GRANT, 7)
    assert _master(cmd) == ("local[2]", "client")
    assert cmd[cmd.index("--jars") + 1] == "local:/jars/delta.jar"  # loaded in place, never copied per job


def test_jars_are_loaded_in_place_only_by_a_local_master() -> None:
    jars = ["/c/delta.jar", "/c/aws bundle.jar", "local:/c/x.jar", "s3a://b/y.jar"]
    assert jar_list(jars, "local[2]") == "local:/c/delta.jar,local:/c/aws bundle.jar,local:/c/x.jar,s3a://b/y.jar"
    assert jar_list(jars, "local-cluster[2,1,1024]").startswith("local:/c/delta.jar,")
    for master in ("spark://m1:7077", "yarn", "k8s://https://api:6443"):
        assert jar_list(jars, master) == ",".join(jars)


def test_cdc_maintain_uses_the_connection_and_gives_the_job_the_zk_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = pipeline(tmp_path, monkeypatch, '{"conn_type":"spark","host":"spark://m1","port":7077}')
    table = housekeeping.LakeTable("shop.orders", "shop", "orders", str(tmp_path / "lake/shop/orders"), "table", ())
    monkeypatch.setattr(housekeeping, "discover_tables", lambda *a, **k: [table])

    @contextlib.contextmanager
    def keep(grant: Any) -> Iterator[Any]:
        yield SimpleNamespace(lost=None)

    monkeypatch.setattr(p, "keep_lease", keep)
    monkeypatch.setattr(p, "renew", lambda grant: grant)
    recorded: list[dict[str, Any]] = []
    monkeypatch.setattr(p, "coordinator", SimpleNamespace(record_maintenance=lambda grant, r: recorded.append(r)))
    seen: dict[str, Any] = {}

    def run(cmd: list[str], env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.update(cmd=cmd, env=env)
        spec = json.loads(cmd[cmd.index("--spec") + 1])
        Path(spec["report"]).parent.mkdir(parents=True, exist_ok=True)
        Path(spec["report"]).write_text('{"tables": [], "totals": {}, "errors": []}')
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr("cdc_core.lake.job_runner.subprocess.run", run)  # the CLI's runner: spark-submit
    record, error = housekeeping.maintain(p, GRANT, started_at=1_800_000_000.0, cleaned=None)
    assert error is None and record["status"] == "ok" and recorded == [record]
    assert _master(seen["cmd"]) == ("spark://m1:7077", "client")
    assert seen["cmd"][seen["cmd"].index("--jars") + 1] == "/jars/delta.jar"  # a cluster's executors get copies
    assert seen["env"]["CDC_ZK_AUTH"] == f"digest:cdc:{ZK_PW}"  # the fence check can authenticate
    assert ZK_PW not in " ".join(seen["cmd"])
    assert seen["env"]["PYSPARK_PYTHON"] == sys.executable


def test_job_confs_layer_defaults_then_the_object_store_then_the_pipelines_own() -> None:
    from cdc_core.lake.spark_conf import job_confs
    from cdc_core.model.config.sections import SparkConfig

    spark = SparkConfig(shuffle_partitions=4, driver_memory="2g",
                        conf={"spark.hadoop.fs.s3a.path.style.access": "false", "spark.ui.enabled": "true"})
    confs = job_confs(spark, {"spark.hadoop.fs.s3a.path.style.access": "true", "spark.hadoop.fs.s3a.endpoint": "e"})
    assert confs["spark.sql.shuffle.partitions"] == "4" and confs["spark.driver.memory"] == "2g"
    assert confs["spark.hadoop.fs.s3a.endpoint"] == "e"  # the store's
    assert confs["spark.hadoop.fs.s3a.path.style.access"] == "false" and confs["spark.ui.enabled"] == "true"  # user's
    assert "spark.jars" not in confs  # --jars, separately
    assert job_confs(SparkConfig())["spark.driver.memory"] == "1g"
