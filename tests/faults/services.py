"""Private MariaDB + ZooKeeper for tests that restart, kill or purge them.

The shared services (scripts/services.sh defaults) serve everybody's tests at once: nothing here ever
touches them. `PrivateServices` runs the same script with its own data directory and ports
(`CDC_SERVICES_DIR`, `CDC_MARIADB_PORT`, `CDC_ZK_PORT`), so a test may restart the server, expire
sessions or `PURGE BINARY LOGS` freely. Start/stop go through the script (its `stop` signals the PID in
the private pid file, never a name); `stop_all()` stops only what `start()` started.

Used by the `private_services` fixture (tests/conftest.py), by the soak (tests/faults/soak.py) and, MariaDB only
with an identity of its own per server, by the shards of `shard_servers` (tests/support/shards.py).
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
MARIADB_PORT = int(os.environ.get("CDC_PRIVATE_MARIADB_PORT", "13317"))
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
    # A server's identity (services.sh's CDC_MARIADB_SERVER_ID / CDC_MARIADB_GTID_DOMAIN_ID); None keeps the
    # script's default (1 / 0). Servers meant as distinct sources side by side need their own.
    server_id: int | None = None
    gtid_domain_id: int | None = None
    with_zookeeper: bool = True  # False: MariaDB only (zk_port unused, zk_hosts an error)
    basedir: Path | None = None  # another MariaDB release (scripts/mariadb_release.sh); None: Debian's
    # What to change when check_ownership finds another process on our port.
    ports_env: str = "CDC_PRIVATE_MARIADB_PORT / CDC_PRIVATE_ZK_PORT"
    started: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------------------ the script

    @property
    def services(self) -> tuple[str, ...]:
        return ("mariadb", "zookeeper") if self.with_zookeeper else ("mariadb",)

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "CDC_SERVICES_DIR": str(self.directory),
            "CDC_MARIADB_PORT": str(self.mariadb_port),
        }
        if self.with_zookeeper:
            env["CDC_ZK_PORT"] = str(self.zk_port)
        env.pop("CDC_MARIADB_BASEDIR", None)
        if self.basedir is not None:
            env["CDC_MARIADB_BASEDIR"] = str(self.basedir)
        # The identity comes from here only (else the script's defaults): a restart must not take one from
        # whatever the caller's environment happens to hold.
        identity = {"CDC_MARIADB_SERVER_ID": self.server_id, "CDC_MARIADB_GTID_DOMAIN_ID": self.gtid_domain_id}
        for name, value in identity.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = str(value)
        return env

    def _script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(SERVICES), *args], env=self.env, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"services.sh {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc

    def running(self) -> dict[str, bool]:
        out = self._script("status", check=False).stdout
        return {svc: bool(re.search(rf"^{svc}: running", out, re.M)) for svc in self.services}

    def start(self) -> PrivateServices:
        was = self.running()
        self._script("start", "all" if self.with_zookeeper else "mariadb")
        self.started |= {svc for svc, up in was.items() if not up}
        self.check_ownership()
        return self

    def check_ownership(self) -> None:
        """The processes answering on our ports must be the ones in our pid files: services.sh's readiness
        check would happily accept another checkout's server on the same port (and that server's owner
        restarts it whenever they like)."""
        ports = {"mariadb": self.mariadb_port, "zookeeper": self.zk_port}
        for svc in self.services:
            listener = _listener_pid(ports[svc])
            if listener is not None and listener != self.pid(svc):
                raise RuntimeError(
                    f"port {ports[svc]} is served by pid {listener}, not by this checkout's private {svc} "
                    f"(pid file {self.directory / svc}): another checkout uses it. Pick free ports with "
                    f"{self.ports_env}"
                )

    def stop_all(self) -> None:
        """Stop what `start()` started (by the PIDs in the private pid files)."""
        for svc in self.services:
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
        self._require_zookeeper()
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
        self._require_zookeeper()
        return f"127.0.0.1:{self.zk_port}"

    def _require_zookeeper(self) -> None:
        if not self.with_zookeeper:
            raise RuntimeError(
                f"the MariaDB-only services in {self.directory} have no ZooKeeper: coordinate through the "
                "`services` or `private_services` fixture's zk_hosts"
            )

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
