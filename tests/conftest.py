"""Shared fixtures: real services started once per test session, and per-test isolation.

Services come from scripts/services.sh (MariaDB with binlog, ZooKeeper), the same script the README
uses. Each test gets its own database, ZooKeeper root and lake/staging directories, so tests never
see each other's rows, nodes or files (the binlog is shared; table filters keep tests apart).
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "scripts" / "services.sh"


def pytest_configure(config: pytest.Config) -> None:
    """Cheaper Spark JVMs for every test that starts one (tests/support/jvm_archive.py), set up once by
    xdist's controller (or the only process) before any worker starts; a unit-only run needs none."""
    if hasattr(config, "workerinput"):
        return
    paths = [a for a in config.args if not a.startswith("-")]
    if paths and all(Path(a.split("::")[0]).resolve().is_relative_to(ROOT / "tests" / "unit") for a in paths):
        return
    from tests.support.jvm_archive import configure

    configure()


def pytest_unconfigure(config: pytest.Config) -> None:
    """py4j closes its gateway connections from `__del__` at interpreter exit and logs that at INFO, through
    handlers whose streams (pytest's captures) are closed by then: two "--- Logging error ---" tracebacks at the
    end of every run with Spark. Nothing is lost by not logging it."""
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Services:
    mysql_host: str
    mysql_port: int
    mysql_user: str  # least-privilege replication user
    mysql_password: str
    root_password: str
    zk_hosts: str

    def root_connect(self, database: str | None = None, **kw):  # type: ignore[no-untyped-def]
        import pymysql

        return pymysql.connect(
            host=self.mysql_host,
            port=self.mysql_port,
            user="root",
            password=self.root_password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
            **kw,
        )

    def cdc_connect(self, database: str | None = None, **kw):  # type: ignore[no-untyped-def]
        import pymysql

        return pymysql.connect(
            host=self.mysql_host,
            port=self.mysql_port,
            user=self.mysql_user,
            password=self.mysql_password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
            **kw,
        )

    def binlog_end(self) -> dict[str, object]:
        """The source's current end of binlog as a pipeline `start:` block (kind file)."""
        conn = self.root_connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW MASTER STATUS")
                file, pos = cur.fetchone()[:2]
        finally:
            conn.close()
        return {"kind": "file", "file": file, "offset": int(pos)}

    @property
    def airflow_connection(self) -> dict[str, object]:
        """The replication user as an Airflow connection (the `AIRFLOW_CONN_<ID>` environment variable's JSON)."""
        return {"conn_type": "mysql", "host": self.mysql_host, "port": self.mysql_port, "login": self.mysql_user,
                "password": self.mysql_password}

    @property
    def source_params(self) -> dict[str, object]:
        """Connection parameters of the replication user, as cdc_core takes them."""
        return {
            "host": self.mysql_host,
            "port": self.mysql_port,
            "user": self.mysql_user,
            "password": self.mysql_password,
        }


def _service_env() -> dict[str, str]:
    out = subprocess.run([str(SERVICES), "env"], check=True, capture_output=True, text=True).stdout
    return dict(re.findall(r"export (\w+)=(.*)", out))


# Under pytest-xdist (scripts/test.sh runs the suite on two workers, a test module per worker at a time)
# every worker is a test session of its own: "gw0", "gw1", ...
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    """Start MariaDB and ZooKeeper once; stop them at the end only if this session started them. A worker
    of a parallel run never stops them (the other may still use them): scripts/test.sh stops what its run
    started once every worker is done; a bare `pytest -n` leaves them running."""
    import fcntl

    lock_path = ROOT / ".local" / "services-start.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:  # workers starting at once would race in services.sh
        fcntl.flock(lock, fcntl.LOCK_EX)
        was_running = subprocess.run([str(SERVICES), "status"], capture_output=True, check=False).returncode == 0
        subprocess.run([str(SERVICES), "start"], check=True)
    env = _service_env()
    yield Services(
        mysql_host=env["CDC_MARIADB_HOST"],
        mysql_port=int(env["CDC_MARIADB_PORT"]),
        mysql_user=env["CDC_MARIADB_USER"],
        mysql_password=env["CDC_MARIADB_PASSWORD"],
        root_password=env["CDC_MARIADB_ROOT_PASSWORD"],
        zk_hosts=env["CDC_ZK_HOSTS"],
    )
    if not was_running and not XDIST_WORKER and not os.environ.get("CDC_KEEP_SERVICES"):
        subprocess.run([str(SERVICES), "stop"], check=False)


@pytest.fixture(scope="session")
def private_services():  # type: ignore[no-untyped-def]
    """A MariaDB + ZooKeeper of this session's own (tests/faults/services.py), for tests that restart,
    kill or purge them: never the shared ones. Ports 13317 / 22193 (CDC_PRIVATE_MARIADB_PORT,
    CDC_PRIVATE_ZK_PORT), data under .local/private-faults (fresh when not already running); started on
    first use, stopped (by PID) at the end. Worker N of a parallel run has its own pair (ports + 10 N,
    data under .local/private-faults-gwN): one worker's restarts must not hit the other's tests."""
    import shutil

    from tests.faults.services import MARIADB_PORT, PRIVATE_DIR, ZK_PORT, PrivateServices

    n = int(XDIST_WORKER.removeprefix("gw")) if XDIST_WORKER else 0
    if n:
        ps = PrivateServices(directory=PRIVATE_DIR.with_name(f"{PRIVATE_DIR.name}-gw{n}"),
                             mariadb_port=MARIADB_PORT + 10 * n, zk_port=ZK_PORT + 10 * n)
    else:
        ps = PrivateServices()
    if not any(ps.running().values()):
        shutil.rmtree(ps.directory, ignore_errors=True)
    ps.start()
    yield ps
    ps.stop_all()


@pytest.fixture(scope="session")
def shard_servers():  # type: ignore[no-untyped-def]
    """Three MariaDB servers of this session's own, MariaDB only (tests/support/shards.py): the shards of a
    group pipeline, distinct sources (shard i: server_id 100+i, GTID domain i), each with PrivateServices'
    interface (root_connect, cdc_connect, source_params, binlog_end, stop_mariadb, start_mariadb, ...).
    Iterating gives shard 1, 2, 3. Ports 13341-13343 (CDC_SHARD_MARIADB_PORT + i), worker N's + 10 N; data
    under .local/shards[-gwN]/shard-<i>, fresh for a shard not already running; started on first use,
    stopped (by PID) at the end. A test that stops a shard starts it again before it ends."""
    from tests.support.shards import ShardServers

    n = int(XDIST_WORKER.removeprefix("gw")) if XDIST_WORKER else 0
    shards = ShardServers.for_worker(n, count=3).start()
    yield shards
    shards.stop_all()


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory, services: Services):  # type: ignore[no-untyped-def]
    """One throwaway Airflow (SQLite, the repo's dags/ and plugins/) per test session, for tests/e2e and the
    fault suite's DAG scenario (tests/support/e2e.py)."""
    from tests.support.e2e import AirflowHome, airflow_env

    home = tmp_path_factory.mktemp("airflow")
    af = AirflowHome(home=home, env=airflow_env(home))
    proc = af.airflow("db", "migrate", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return af


@pytest.fixture
def source_db(services: Services) -> Iterator[str]:
    """A fresh database on the source for this test; dropped afterwards."""
    from tests.support.source_facts import throwaway_database

    with throwaway_database(services, "t_") as name:
        yield name


@pytest.fixture(scope="session")
def zk_client(services: Services):  # type: ignore[no-untyped-def]
    from kazoo.client import KazooClient

    client = KazooClient(hosts=services.zk_hosts, timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_root(zk_client) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A ZooKeeper root path of this test's own; removed afterwards."""
    path = "/cdc-test-" + uuid.uuid4().hex[:10]
    yield path
    zk_client.delete(path, recursive=True)


@pytest.fixture
def lake_dir(tmp_path: Path) -> Path:
    p = tmp_path / "lake"
    p.mkdir()
    return p


@pytest.fixture
def staging_dir(tmp_path: Path) -> Path:
    p = tmp_path / "staging"
    p.mkdir()
    return p


def make_spark_session(app: str = "cdc-tests"):  # type: ignore[no-untyped-def]
    """A small Delta-enabled local session with jars from the project's cache (no network)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from cdc_core.lake.spark_conf import spark_confs

    builder = SparkSession.builder.master("local[2]").appName(app)
    for k, v in spark_confs().items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One Spark session per test session, i.e. per xdist worker (Spark start-up costs ~10 s; a module per
    session cost that ~10 times over). Tests keep apart by their own lake paths; a test that sets a Spark conf
    unsets it again."""
    session = make_spark_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def shared_merge_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One warm merge server per test session (per xdist worker), started on first use: `warm_merges`."""
    from tests.support.merge_server import SharedMergeServer
    from tests.support.ports import free_port

    server = SharedMergeServer(f"127.0.0.1:{free_port()}", tmp_path_factory.mktemp("shared-merge-server"))
    yield server
    server.close()


@pytest.fixture
def spark_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's Spark JVMs (spark-submits, their drivers and executors) run with Spark's and Java's defaults:
    generated code and the server JIT, as in production, not the suite's lean options (tests/support/
    jvm_archive.py). For the tests whose subject is the production shape (the Spark cluster tier, the
    production cycle); started after this fixture, a process inherits it."""
    from tests.support.jvm_archive import ENV, spark_defaults_opts

    if os.environ.get(ENV):
        monkeypatch.setenv(ENV, spark_defaults_opts(os.environ[ENV]))


@pytest.fixture
def statsd_listener() -> Iterator[Any]:
    """A real StatsD server stand-in: a UDP socket on loopback (tests/support/statsd.py `received`)."""
    from tests.support.statsd import udp_listener

    with udp_listener() as sock:
        yield sock


@pytest.fixture
def warm_merges(shared_merge_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """This test's windows merge on the session's warm merge server (CDC_MERGE_SERVER: the product's warm
    option, the merge job's own code) instead of a spark-submit each, ~25 s less per window. For tests whose
    subject is not how the job is submitted; spark-submit has tests of its own (test_cli_run,
    test_merge_window, the DAG and fault suites). Only for pipelines on local disk without a ZooKeeper
    credential or Spark confs of their own: the shared server has the defaults."""
    from cdc_core.lake.merge_client import ADDRESS_ENV

    address: str = shared_merge_server.ensure_running()
    monkeypatch.setenv(ADDRESS_ENV, address)
    return address


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """CDC_TEST_CPU_LOG=<file>: each test's CPU seconds (its process tree) to that file (tests/support/cpu_log.py)."""
    path = os.environ.get("CDC_TEST_CPU_LOG")
    if not path:
        yield
        return
    from tests.support.cpu_log import CpuLog

    yield from CpuLog(path).around(item.nodeid)


TIERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test carries a tier marker: scripts/test.sh selects by tier, so an unmarked test would be
    deselected silently, never run."""
    unmarked = [item.nodeid for item in items if not any(item.get_closest_marker(t) for t in TIERS)]
    if unmarked:
        raise pytest.UsageError(
            f"tests without a tier marker ({', '.join(TIERS)}): {', '.join(unmarked[:10])}; add "
            "`pytestmark = pytest.mark.<tier>` to the module"
        )
