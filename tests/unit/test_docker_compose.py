"""docker-compose.yaml, checked statically (there is no Docker engine here): every service can be
built or pulled, every long-running one has a healthcheck, MySQL is a usable CDC source, and the
Airflow services carry what the product needs (its configuration and the connections it names)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc_core.model.config import load_config
from cdc_core.model.connections import resolve_connection

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"
AIRFLOW_SERVICES = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with no variables set, and $$ -> $."""
    return _VAR.sub(lambda m: m.group(2) or "", value).replace("$$", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: interpolate(str(v)) for k, v in env.items()}


def command_of(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else [str(c) for c in cmd]


def long_running(service: dict[str, Any]) -> bool:
    return str(service.get("restart", "")) != "no"


def to_repo(container_path: str) -> Path:
    assert container_path.startswith("/opt/cdc/"), container_path
    return ROOT / container_path.removeprefix("/opt/cdc/")


def test_every_service_has_an_image_or_a_build(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        assert svc.get("image") or svc.get("build"), name
        image = interpolate(str(svc.get("image", "")))
        assert not image.endswith(":latest") and (":" in image or svc.get("build")), f"{name}: pin the image tag"


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    one_shot = {n for n, s in services.items() if not long_running(s)}
    assert one_shot == {"airflow-init", "data-init"}
    for name, svc in services.items():
        if name in one_shot:
            continue
        check = svc.get("healthcheck") or {}
        assert check.get("test"), f"{name} has no healthcheck"
        assert not check.get("disable"), name


def test_depends_on_names_existing_services_with_conditions(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        for dep, spec in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            condition = spec["condition"]
            if long_running(services[dep]):
                assert condition == "service_healthy", (name, dep)
                assert services[dep].get("healthcheck"), (name, dep)
            else:
                assert condition == "service_completed_successfully", (name, dep)


def test_mysql_is_a_cdc_source(services: dict[str, dict[str, Any]]) -> None:
    mysql = services["mysql"]
    assert interpolate(mysql["image"]) == "mysql:8.4"
    flags = dict(f.removeprefix("--").split("=", 1) for f in command_of(mysql))
    for key, value in {
        "gtid-mode": "ON",
        "enforce-gtid-consistency": "ON",
        "binlog-format": "ROW",
        "binlog-row-image": "FULL",
        "binlog-row-metadata": "FULL",
    }.items():
        assert flags.get(key) == value, key
    assert int(flags["server-id"]) > 0
    assert flags.get("log-bin")
    # The replication user comes from an init script, its password from the environment.
    init_mounts = [v for v in mysql["volumes"] if v.split(":")[1] == "/docker-entrypoint-initdb.d"]
    assert init_mounts
    init_dir = ROOT / init_mounts[0].split(":")[0]
    script = "\n".join(p.read_text() for p in sorted(init_dir.iterdir()))
    assert "REPLICATION SLAVE" in script and "REPLICATION CLIENT" in script and "${CDC_MYSQL_PASSWORD}" in script
    assert "SELECT @@gtid_mode" in " ".join(mysql["healthcheck"]["test"])


def test_zookeeper_and_spark(services: dict[str, dict[str, Any]]) -> None:
    assert interpolate(services["zookeeper"]["image"]).startswith("zookeeper:3.9")
    for name in ("spark-master", "spark-worker"):
        assert interpolate(services[name]["image"]).startswith("apache/spark:")
    assert "org.apache.spark.deploy.master.Master" in command_of(services["spark-master"])
    worker = command_of(services["spark-worker"])
    assert "org.apache.spark.deploy.worker.Worker" in worker and "spark://spark-master:7077" in worker
    # The worker writes the lake the Airflow side stages into: same volume, same uid.
    assert "cdc-data:/data" in services["spark-worker"]["volumes"]
    assert services["spark-worker"]["user"] == services["airflow-scheduler"]["user"]


def test_airflow_services_and_init(services: dict[str, dict[str, Any]]) -> None:
    for name in AIRFLOW_SERVICES:
        assert name in services
        assert command_of(services[name]) == [name.removeprefix("airflow-")]
    assert command_of(services["airflow-init"])[-2:] == ["db", "migrate"]
    for name in AIRFLOW_SERVICES:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_airflow_services_have_the_env_the_product_needs(services: dict[str, dict[str, Any]]) -> None:
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        env = env_of(services[name])
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        assert "@postgres/" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
        assert to_repo(env["AIRFLOW__CORE__DAGS_FOLDER"]).is_dir()
        assert to_repo(env["AIRFLOW__CORE__PLUGINS_FOLDER"]).is_dir()
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"]  # shared by scheduler and API server
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://airflow-api-server:8080/")
        assert "cdc-data:/data" in services[name]["volumes"]

        # The configuration file exists and is valid, and every connection it names is defined.
        cfg = load_config(to_repo(env["CDC_CONFIG"]))
        for p in cfg.pipelines:
            src = resolve_connection(p.source.conn_id, env)
            assert src.host in services, f"{name}: source host {src.host} is not a compose service"
            spark = json.loads(env[f"AIRFLOW_CONN_{p.spark.conn_id.upper()}"])
            assert spark["conn_type"] == "spark"
            assert spark["host"] == "spark://spark-master" and spark["port"] == 7077
            for host in p.zookeeper.hosts.split(","):
                assert host.split(":")[0] in services
            assert p.staging_root.startswith("s3://cdc/") and p.lake_root.startswith("s3://cdc/")
            store = resolve_connection(str(p.object_store.conn_id), env)
            assert store.conn_type == "aws" and store.extra["endpoint_url"].split("//")[1].split(":")[0] in services


def test_referenced_dockerfile_exists_and_installs_the_project(services: dict[str, dict[str, Any]]) -> None:
    builds = {json.dumps(s["build"], sort_keys=True) for s in services.values() if s.get("build")}
    assert builds
    for b in builds:
        build = json.loads(b)
        context = ROOT / build["context"]
        dockerfile = context / build["dockerfile"]
        assert dockerfile.is_file(), dockerfile
        text = dockerfile.read_text()
        assert re.search(r"apache/airflow:3\.3\.\d+-python3\.11", text)
        assert "pip install" in text and "/opt/cdc" in text
        assert "fetch_jars.sh" in text  # Delta jars baked in: runs never download
        assert "jre" in text  # spark-submit's driver needs Java
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".cache", ".local", ".git"} <= set(ignore)


def test_volumes_are_declared_and_ports_are_local(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, svc in compose["services"].items():
        for v in svc.get("volumes") or []:
            src = v.split(":")[0]
            if not src.startswith((".", "/")):
                assert src in declared, f"{name}: volume {src} is not declared"
            else:
                assert (ROOT / src).exists(), f"{name}: {src} does not exist"
        for port in svc.get("ports") or []:
            assert str(port).startswith("127.0.0.1:"), f"{name}: publish {port} on loopback only"


def _script_default(name: str) -> str:
    text = (ROOT / "scripts" / "spark_cluster.sh").read_text()
    m = re.search(r'"\$\{' + name + r':-([^}]*)\}"', text)
    assert m, f"scripts/spark_cluster.sh has no default for {name}"
    return m.group(1)


def test_spark_cluster_of_the_test_tier_matches_compose(services: dict[str, dict[str, Any]]) -> None:
    """scripts/spark_cluster.sh (the cluster tier, tests/cluster/) and docker-compose.yaml run the same cluster:
    a standalone master and as many workers of as many cores and as much memory, reached through a `spark`
    connection whose host is the master's spark:// URL."""
    master, worker = services["spark-master"], services["spark-worker"]
    assert "org.apache.spark.deploy.master.Master" in master["command"]
    cmd = worker["command"]
    assert "org.apache.spark.deploy.worker.Worker" in cmd and "spark://spark-master:7077" in cmd
    assert cmd[cmd.index("--cores") + 1] == _script_default("CDC_SPARK_WORKER_CORES")
    assert cmd[cmd.index("--memory") + 1] == _script_default("CDC_SPARK_WORKER_MEMORY")
    assert str(worker["deploy"]["replicas"]) == _script_default("CDC_SPARK_WORKERS")
    # The compose Airflow reaches it with the connection form the tier's tests use.
    m = re.search(r"AIRFLOW_CONN_SPARK_CLUSTER: '([^']*)'", COMPOSE.read_text())
    assert m, "docker-compose.yaml defines no AIRFLOW_CONN_SPARK_CLUSTER"
    conn = json.loads(m.group(1))
    assert conn["conn_type"] == "spark" and conn["host"].startswith("spark://") and conn["port"] == 7077
    tier = (ROOT / "tests" / "support" / "spark_cluster.py").read_text()
    assert '{"conn_type": "spark", "host": "spark://127.0.0.1", "port": self.port}' in tier


def _default_in(script: str, name: str) -> str:
    text = (ROOT / "scripts" / script).read_text()
    m = re.search(r'"\$\{' + name + r':-([^}]*)\}"', text)
    assert m, f"scripts/{script} has no default for {name}"
    return m.group(1)


def test_object_store_of_the_test_tier_matches_compose(services: dict[str, dict[str, Any]]) -> None:
    """scripts/object_store.sh (tests/integration/test_object_store.py, the production-shape test) and
    docker-compose.yaml run the same store: S3Proxy of one version over its filesystem backend with AWS
    signatures, bucket "cdc", reached through an aws-type connection with an endpoint_url, which the docker
    pipelines name for s3:// staging and lake."""
    svc = services["object-store"]
    env = svc["environment"]
    assert svc["image"].endswith(":s3proxy-" + _default_in("object_store.sh", "CDC_S3PROXY_VERSION") + "}")
    script = (ROOT / "scripts" / "object_store.sh").read_text()
    assert env["JCLOUDS_PROVIDER"] == "filesystem" and "jclouds.provider=filesystem" in script
    assert env["S3PROXY_AUTHORIZATION"] == "aws-v2-or-v4" and "s3proxy.authorization=aws-v2-or-v4" in script
    bucket = _default_in("object_store.sh", "CDC_OBJECT_STORE_BUCKETS")
    assert f"/object-store/{bucket}" in services["data-init"]["command"][0]
    m = re.search(r"AIRFLOW_CONN_CDC_S3: '([^']*)'", COMPOSE.read_text())
    assert m, "docker-compose.yaml defines no AIRFLOW_CONN_CDC_S3"
    conn = json.loads(m.group(1).replace("${CDC_S3_ACCESS_KEY:-cdc-local-only}", "k")
                      .replace("${CDC_S3_SECRET_KEY:-cdc-local-only-secret}", "s"))
    assert conn["conn_type"] == "aws" and conn["extra"]["endpoint_url"] == "http://object-store:80"
    assert '"conn_type": "aws"' in script and '"endpoint_url": "http://%s:%s"' in script  # the tier's form
    assert env["S3PROXY_IDENTITY"] == "${CDC_S3_ACCESS_KEY:-cdc-local-only}"
    docker = yaml.safe_load((ROOT / "config" / "pipelines.docker.yaml").read_text())["defaults"]
    assert docker["staging_root"].startswith(f"s3://{bucket}/") and docker["lake_root"].startswith(f"s3://{bucket}/")
    assert docker["object_store"]["conn_id"] == "cdc_s3"


def test_metadata_database_of_the_test_tier_matches_compose(services: dict[str, dict[str, Any]]) -> None:
    """The production-shape test's Airflow (scripts/postgres.sh: Debian 12's PostgreSQL 15, LocalExecutor,
    psycopg2 URL) is the compose file's: same major version, executor and URL scheme."""
    assert services["postgres"]["image"] == "postgres:15"
    assert "postgresql" in (ROOT / "scripts" / "setup.sh").read_text()  # Debian 12's package: PostgreSQL 15
    url = (ROOT / "scripts" / "postgres.sh").read_text()
    assert "postgresql+psycopg2://" in url
    env = services["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    tier = (ROOT / "tests" / "e2e" / "test_production_airflow.py").read_text()
    assert '"AIRFLOW__CORE__EXECUTOR": "LocalExecutor"' in tier and "scripts\" / \"postgres.sh" in tier


def test_the_warm_merge_server_is_a_service_the_pipeline_points_at(services: dict[str, dict[str, Any]]) -> None:
    """Issue 37 §3: the warm merge server runs like a service (restart policy, a health check the operator and
    Docker see, time to finish the merge in flight on stop), and the docker configuration sends the pipeline's
    windows to it."""
    import yaml

    from cdc_core.model.config import load_config

    server = services["merge-server"]
    assert server.get("entrypoint") == ["cdc"]
    args = command_of(server)
    assert args[:2] == ["merge-server", "demo"] and args[args.index("--listen") + 1] == "0.0.0.0:7199"
    assert server["healthcheck"]["test"] == ["CMD", "cdc", "merge-server", "demo", "--ping"]
    assert server.get("restart") == "unless-stopped" and "m" in str(server.get("stop_grace_period"))
    assert {"zookeeper", "spark-master", "object-store"} <= set(server.get("depends_on") or {})
    config_path = to_repo(env_of(server)["CDC_CONFIG"])
    assert yaml.safe_load(config_path.read_text())  # readable
    pipeline = load_config(config_path).pipeline("demo")
    assert pipeline.spark.merge_server is not None and pipeline.spark.merge_server.address == "merge-server:7199"
