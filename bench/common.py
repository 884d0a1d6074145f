"""Shared pieces of the benchmark harness: timing statistics, machine facts, versions, the source.

Every figure is measured `repeats` times and reported as median / min / max (`Stat`). A run that
takes longer than `long_run_seconds` is not repeated (the figure then says runs=1), so the full
sizes stay within an afternoon on a 2-core machine.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
SERVICES = ROOT / "scripts" / "services.sh"
BINLOG_DIR = ROOT / ".local" / "services" / "mariadb" / "binlog"


def log(msg: str) -> None:
    """Progress on stderr (results go to files)."""
    print(f"[bench {time.strftime('%H:%M:%S')} load={os.getloadavg()[0]:.2f}] {msg}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------------------------------------------------------------ statistics


@dataclass
class Stat:
    """Several measurements of one quantity (seconds, rows/s, MB ...)."""

    values: list[float] = field(default_factory=list)
    unit: str = "s"

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def to_dict(self) -> dict[str, Any]:
        if not self.values:
            return {"runs": 0, "unit": self.unit}
        return {
            "median": round(self.median or 0.0, 4),
            "min": round(min(self.values), 4),
            "max": round(max(self.values), 4),
            "runs": len(self.values),
            "unit": self.unit,
            "values": [round(v, 4) for v in self.values],
        }


def repeat(
    fn: Callable[[int], Any],
    repeats: int,
    long_run_seconds: float,
    before: Callable[[int], Any] | None = None,
    after: Callable[[int], Any] | None = None,
) -> tuple[Stat, list[Any]]:
    """Run `fn(i)` up to `repeats` times, timing only `fn` (not `before`/`after`).

    Returns the seconds (a Stat) and fn's results. Stops repeating after a run longer than
    `long_run_seconds`.
    """
    secs = Stat(unit="s")
    results = []
    for i in range(repeats):
        if before is not None:
            before(i)
        t0 = time.perf_counter()
        results.append(fn(i))
        took = time.perf_counter() - t0
        secs.values.append(took)
        if after is not None:
            after(i)
        if took > long_run_seconds and i + 1 < repeats:
            log(f"  a run took {took:.0f}s > {long_run_seconds:.0f}s: not repeating this figure")
            break
    return secs, results


def rate(count: float, secs: Stat, unit: str = "rows/s") -> Stat:
    """count / seconds for each run (the median rate is the rate of the median run)."""
    return Stat([count / s if s > 0 else float("inf") for s in secs.values], unit)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 4)


# ---------------------------------------------------------------------------------------- machine


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    os_name = platform.platform()
    try:
        rel = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        os_name = f"{rel.get('PRETTY_NAME', '').strip(chr(34))} (kernel {platform.release()})"
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "cpu_model": cpu,
        "os": os_name,
        "hostname": platform.node(),
    }


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cmd_first_line(cmd: list[str]) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = (p.stdout or p.stderr).strip().splitlines()
    return out[0] if out else None


def versions(mariadb_version: str | None) -> dict[str, Any]:
    jars = sorted(p.name for p in (ROOT / ".cache" / "ivy" / "jars").glob("io.delta_delta-spark*.jar"))
    return {
        "python": platform.python_version(),
        "mysql-replication": _pkg_version("mysql-replication"),
        "pymysql": _pkg_version("pymysql"),
        "pyspark": _pkg_version("pyspark"),
        "delta-spark": _pkg_version("delta-spark"),
        "delta_jars": jars,
        "pyarrow": _pkg_version("pyarrow"),
        "deltalake": _pkg_version("deltalake"),
        "apache-airflow": _pkg_version("apache-airflow"),
        "mariadb": mariadb_version,
        "mysqlbinlog": _cmd_first_line(["mysqlbinlog", "--version"]),
        "java": _cmd_first_line(["java", "-version"]),
    }


# ----------------------------------------------------------------------------------------- source


@dataclass(frozen=True)
class SourceInfo:
    host: str
    port: int
    user: str  # the least-privilege replication user (what the pipeline uses)
    password: str
    root_password: str
    zk_hosts: str
    binlog_dir: Path = BINLOG_DIR

    def root_connect(self, database: str | None = None, **kw: Any) -> Any:
        import pymysql

        return pymysql.connect(
            host=self.host,
            port=self.port,
            user="root",
            password=self.root_password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
            **kw,
        )

    def params(self) -> Any:
        from cdc_core.capture.source import SourceParams

        return SourceParams(host=self.host, port=self.port, user=self.user, password=self.password)


def _services_env(overrides: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, **(overrides or {})}


def source_info(overrides: dict[str, str] | None = None) -> SourceInfo:
    """The services of scripts/services.sh (with CDC_SERVICES_DIR/CDC_MARIADB_PORT/CDC_ZK_PORT
    `overrides`); they must be running."""
    env = _services_env(overrides)
    status = subprocess.run([str(SERVICES), "status"], capture_output=True, text=True, check=False, env=env)
    if status.returncode != 0:
        raise SystemExit(f"services are not running ({status.stdout.strip()}): run scripts/services.sh start first")
    out = subprocess.run([str(SERVICES), "env"], check=True, capture_output=True, text=True, env=env).stdout
    values = dict(re.findall(r"export (\w+)=(.*)", out))
    return SourceInfo(
        host=values["CDC_MARIADB_HOST"],
        port=int(values["CDC_MARIADB_PORT"]),
        user=values["CDC_MARIADB_USER"],
        password=values["CDC_MARIADB_PASSWORD"],
        root_password=values["CDC_MARIADB_ROOT_PASSWORD"],
        zk_hosts=values["CDC_ZK_HOSTS"],
        binlog_dir=Path(values["CDC_MARIADB_SOCKET"]).parent / "binlog",
    )


class PrivateServices:
    """A MariaDB + ZooKeeper of the harness's own (scripts/services.sh with its own directory and ports),
    so the big workloads' binlogs never land on the shared server; stopped (by their PIDs, through
    services.sh stop) and deleted at the end unless kept."""

    def __init__(self, directory: Path, mariadb_port: int, zk_port: int, keep: bool = False) -> None:
        self.overrides = {
            "CDC_SERVICES_DIR": str(directory),
            "CDC_MARIADB_PORT": str(mariadb_port),
            "CDC_ZK_PORT": str(zk_port),
        }
        self.directory = directory
        self.keep = keep

    def start(self) -> SourceInfo:
        env = _services_env(self.overrides)
        log(f"starting private services in {self.directory} (MariaDB :{self.overrides['CDC_MARIADB_PORT']})")
        subprocess.run([str(SERVICES), "start"], check=True, env=env, capture_output=True, text=True)
        si = source_info(self.overrides)
        conn = si.root_connect()
        try:
            with conn.cursor() as cur:
                # Workload generation only: commits need not reach the disk before the next one.
                cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 0")
                cur.execute("SET GLOBAL sync_binlog = 0")
        finally:
            conn.close()
        return si

    def stop(self) -> None:
        if self.keep:
            log(f"leaving the private services running ({self.directory})")
            return
        env = _services_env(self.overrides)
        subprocess.run([str(SERVICES), "stop"], check=False, env=env, capture_output=True, text=True)
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def short_error(e: BaseException, limit: int = 400) -> str:
    text = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
    return text[:limit]
