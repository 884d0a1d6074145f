"""Private MariaDB + ZooKeeper for tests that restart, kill or purge them.

The shared services (scripts/services.sh defaults) serve everybody's tests at once: nothing here ever
touches them. `PrivateServices` runs the same script with its own data directory and ports
(`CDC_SERVICES_DIR`, `CDC_MARIADB_PORT`, `CDC_ZK_PORT`), so a test may restart the server, expire
sessions or `PURGE BINARY LOGS` freely. Start/stop go through the script (its `stop` signals the PID in
the private pid file, never a name); `stop_all()` stops only what `start()` started.

Used by the `private_services` fixture (tests/conftest.py) and by the soak (tests/faults/soak.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts" / "services.sh"
PRIVATE_DIR = ROOT / ".local" / "private-faults"
# Overridable (CDC_PRIVATE_MARIADB_PORT / CDC_PRIVATE_ZK_PORT) for machines where another checkout's
# private services already use these ports; `start()` refuses a port some other process listens on.
MARIADB_PORT = int(os.environ.get("CDC_PRIVATE_MARIADB_PORT", "33317"))
ZK_PORT = int(os.environ.get("CDC_PRIVATE_ZK_PORT", "22193"))


@dataclass
class PrivateServices:
    """Same interface as tests/conftest.py's `Services` (root_connect, cdc_connect, source_params, zk_hosts),
    plus restarts."""

    directory: Path = PRIVATE_DIR
    mariadb_port: int = MARIADB_PORT
    zk_port: int = ZK_PORT
    mysql_host: str = "127.0.0.1"
    mysql_user: str = "cdc"
    mysql_password: str = "cdc-local-only"
    root_password: str = "root-local-only"
    started: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------------------ the script

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "CDC_SERVICES_DIR": str(self.directory),
            "CDC_MARIADB_PORT": str(self.mariadb_port),
            "CDC_ZK_PORT": str(self.zk_port),
        }

    def _script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(SERVICES), *args], env=self.env, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"services.sh {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc

    def running(self) -> dict[str, bool]:
        out = self._script("status", check=False).stdout
        return {svc: bool(re.search(rf"^{svc}: running", out, re.M)) for svc in ("mariadb", "zookeeper")}

    def start(self) -> PrivateServices:
        was = self.running()
        self._script("start")
        self.started |= {svc for svc, up in was.items() if not up}
        self.check_ownership()
        return self

    def check_ownership(self) -> None:
        """The processes answering on our ports must be the ones in our pid files: services.sh's readiness
        check would happily accept another checkout's server on the same port (and that server's owner
        restarts it whenever they like)."""
        for svc, port in (("mariadb", self.mariadb_port), ("zookeeper", self.zk_port)):
            listener = _listener_pid(port)
            if listener is not None and listener != self.pid(svc):
                raise RuntimeError(
                    f"port {port} is served by pid {listener}, not by this checkout's private {svc} "
                    f"(pid file {self.directory / svc}): another checkout uses it. Pick free ports with "
                    "CDC_PRIVATE_MARIADB_PORT / CDC_PRIVATE_ZK_PORT"
                )

    def stop_all(self) -> None:
        """Stop what `start()` started (by the PIDs in the private pid files)."""
        for svc in ("mariadb", "zookeeper"):
            if svc in self.started:
                self._script("stop", svc, check=False)
        self.started.clear()

    def pid(self, svc: str) -> int | None:
        f = self.directory / svc / f"{svc}.pid"
        try:
            return int(f.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def restart_mariadb(self) -> None:
        self._script("stop", "mariadb")
        self._script("start", "mariadb")
        self.started.add("mariadb")
        self.check_ownership()

    def stop_mariadb(self) -> None:
        self._script("stop", "mariadb")

    def start_mariadb(self) -> None:
        self._script("start", "mariadb")
        self.started.add("mariadb")

    def restart_zookeeper(self) -> None:
        self._script("stop", "zookeeper")
        self._script("start", "zookeeper")
        self.started.add("zookeeper")
        self.check_ownership()

    # ----------------------------------------------------------------------- Services interface

    @property
    def mysql_port(self) -> int:
        return self.mariadb_port

    @property
    def zk_hosts(self) -> str:
        return f"127.0.0.1:{self.zk_port}"

    def root_connect(self, database: str | None = None, **kw: Any) -> Any:
        import pymysql

        return pymysql.connect(
            host=self.mysql_host, port=self.mariadb_port, user="root", password=self.root_password,
            database=database, autocommit=True, charset="utf8mb4", **kw,
        )

    def cdc_connect(self, database: str | None = None, **kw: Any) -> Any:
        import pymysql

        return pymysql.connect(
            host=self.mysql_host, port=self.mariadb_port, user=self.mysql_user, password=self.mysql_password,
            database=database, autocommit=True, charset="utf8mb4", **kw,
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
    def source_params(self) -> dict[str, object]:
        return {"host": self.mysql_host, "port": self.mariadb_port, "user": self.mysql_user,
                "password": self.mysql_password}

    def wait_mariadb(self, timeout: float = 60) -> None:
        """Until a real query answers (after a restart)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = self.root_connect()
                conn.close()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _listener_pid(port: int) -> int | None:
    """The pid listening on 127.0.0.1:`port` (from `ss`), None when nobody listens."""
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None
