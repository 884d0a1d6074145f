"""scripts/services.sh on a private instance (its own data directory and ports): starting twice starts
nothing new, status tells the truth, stopping leaves no process behind, and MariaDB comes up as a CDC
source with a least-privilege replication user."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.ports import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts" / "services.sh"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours would still answer kill(0): read its state.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


def test_start_twice_status_and_stop(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CDC_SERVICES_DIR": str(tmp_path / "svc"),
        "CDC_MARIADB_PORT": str(free_port()),
        "CDC_ZK_PORT": str(free_port()),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SERVICES), *args], env=env, capture_output=True, text=True, timeout=180, check=False)

    def pids() -> dict[str, int]:
        return {
            name: int((tmp_path / "svc" / name / f"{name}.pid").read_text())
            for name in ("mariadb", "zookeeper")
            if (tmp_path / "svc" / name / f"{name}.pid").exists()
        }

    try:
        assert run("status").returncode != 0
        first = run("start")
        assert first.returncode == 0, first.stderr
        started = pids()
        assert set(started) == {"mariadb", "zookeeper"} and all(_alive(p) for p in started.values())

        second = run("start")
        assert second.returncode == 0, second.stderr
        assert "already running" in second.stderr
        assert pids() == started

        status = run("status")
        assert status.returncode == 0
        assert f"mariadb: running pid={started['mariadb']} port={env['CDC_MARIADB_PORT']}" in status.stdout

        # A real CDC source: binlog on, row-based with full images and metadata, a replication user
        # that is not root and holds only what the pipeline needs.
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=int(env["CDC_MARIADB_PORT"]), user="cdc",
                               password="cdc-local-only")
        with conn.cursor() as cur:
            cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata")
            assert cur.fetchone() == (1, "ROW", "FULL", "FULL")
            cur.execute("SHOW GRANTS")
            grants = " ".join(r[0] for r in cur.fetchall())
        conn.close()
        assert "REPLICATION SLAVE" in grants and "SELECT" in grants and "ALL PRIVILEGES" not in grants
    finally:
        stop = run("stop")
    assert stop.returncode == 0, stop.stderr
    assert not any(_alive(p) for p in started.values()), "a service survived `services.sh stop`"
    assert run("status").returncode != 0
    # Nothing else runs from this data directory either.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert str(tmp_path / "svc") not in ps
