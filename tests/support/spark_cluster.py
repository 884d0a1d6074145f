"""A Spark standalone cluster for tests (scripts/spark_cluster.sh on free loopback ports, its own directory
under .local/, stopped by PID): used by tests/cluster (the CLI) and tests/e2e/test_production_airflow.py (the DAG
under a real scheduler)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "spark_cluster.sh"


class Cluster:
    """A master and two workers of 1 core and 1 GiB (what docker-compose.yaml runs)."""

    def __init__(self) -> None:
        self.dir = ROOT / ".local" / f"spark-cluster-test-{uuid.uuid4().hex[:8]}"
        self.port, self.ui = free_port(), free_port()
        self.env = {**os.environ, "CDC_SPARK_CLUSTER_DIR": str(self.dir), "CDC_SPARK_MASTER_PORT": str(self.port),
                    "CDC_SPARK_MASTER_UI_PORT": str(self.ui), "CDC_SPARK_WORKER_UI_PORT": str(free_port()),
                    "CDC_SPARK_WORKERS": "2", "CDC_SPARK_WORKER_CORES": "1", "CDC_SPARK_WORKER_MEMORY": "1g"}

    @property
    def connection(self) -> str:
        """The Airflow connection (AIRFLOW_CONN_<ID> JSON) a pipeline reaches the master with."""
        return json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": self.port})

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], env=self.env, capture_output=True, text=True, timeout=300,
                              check=False)

    def state(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=10) as resp:
            return dict(json.loads(resp.read()))

    def apps(self) -> list[str]:
        s = self.state()
        return [a["name"] for a in s.get("completedapps", []) + s.get("activeapps", [])]

    def worker_pid(self, i: int) -> int:
        return int((self.dir / f"worker-{i}" / "pid").read_text())


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    c = Cluster()
    started = c.script("start")
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        assert [w["state"] for w in c.state()["workers"]] == ["ALIVE", "ALIVE"]
        yield c
    finally:
        stopped = c.script("stop")
        assert stopped.returncode == 0, stopped.stderr[-3000:]
        assert "running" not in c.script("status").stdout
        # The workers' directories hold every application's copied jars (GBs with the object store's SDK):
        # keep them only when asked, for a post-mortem.
        if os.environ.get("CDC_KEEP_SPARK_CLUSTER_DIR") != "1":
            shutil.rmtree(c.dir, ignore_errors=True)
