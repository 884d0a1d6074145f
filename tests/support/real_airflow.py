"""A real Airflow for e2e tests where the scheduler is the point (not `airflow dags test`): the API server,
the scheduler and the DAG processor as separate processes, as scripts/ui.sh runs them, with
scripts/airflow_env.sh's environment on a fresh AIRFLOW_HOME under .local/ and a free port. Every
process leads its own process group and is stopped by its PID (which takes its children along).

Used by test_scheduler.py (one Airflow for the module: a backfill triggered like the form starts, a real ack
triggers downstream DAGs) and test_production_airflow.py (PostgreSQL, LocalExecutor, a triggerer).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.e2e import ROOT, VENV_BIN, airflow_env
from tests.support.ports import free_port

# Task instance states that mean "the executor took it" (not queued or scheduled forever).
STARTED = {"running", "success", "failed", "up_for_retry", "skipped", "upstream_failed", "up_for_reschedule"}


def call(url: str, token: str | None = None, body: Any = None, method: str | None = None) -> tuple[int, Any]:
    """One REST call: (HTTP status, decoded JSON or text); status 0 when the server is not reachable."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method or ("POST" if data else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
            return resp.status, json.loads(text) if text.strip() else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


@dataclass
class RealAirflow:
    base: str
    procs: dict[str, subprocess.Popen[bytes]]
    logs: Path
    token: str = ""
    _started: float = field(default_factory=time.monotonic)

    def wait(self, what: str, check: Callable[[], Any], timeout: float) -> Any:
        """Poll `check` until it returns something truthy; fail with every process's log tail on a timeout
        or when one of the processes died. Prints when each wait ended and how long it took (shown with
        `pytest -s` or on a failure): where a real-Airflow test spends its time."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            got = check()
            if got:
                print(f"[{time.monotonic() - self._started:7.1f} s] {what}: {time.monotonic() - started:.1f} s")
                return got
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            if dead or time.monotonic() > deadline:
                tails = "\n".join(
                    f"--- {f.name} ---\n" + f.read_text(errors="replace")[-3000:]
                    for f in sorted(self.logs.glob("*.log"))
                )
                pytest.fail(f"{what}: {'exited ' + str(dead) if dead else 'timed out'}\n{tails}")
            time.sleep(0.5)

    def api(self, path: str, body: Any = None, method: str | None = None) -> tuple[int, Any]:
        """One REST call. A read or a PATCH that met the metadata database busy (HTTP 500 "Database error": the
        scheduler, DAG processor and API server share one SQLite file) is tried again, as a client would: its
        transaction was rolled back."""
        retry = (method or ("POST" if body is not None else "GET")) in ("GET", "PATCH")
        for attempt in range(5):
            status, answer = call(f"{self.base}/api/v2/{path}", self.token, body, method)
            if not (status == 500 and retry and "Database error" in str(answer)) or attempt == 4:
                return status, answer
            time.sleep(1 + attempt)
        raise AssertionError("unreachable")

    def login(self, timeout: float = 180) -> None:
        self.wait("API server health", lambda: call(f"{self.base}/api/v2/monitor/health")[0] == 200, timeout)
        status, body = call(f"{self.base}/auth/token", body={"username": "admin", "password": "admin"})
        assert status in (200, 201), body
        self.token = body["access_token"]

    def wait_for_dags(self, dag_ids: list[str], timeout: float = 180) -> None:
        self.wait(f"the DAG processor parsed {dag_ids}",
                  lambda: all(self.api(f"dags/{d}")[0] == 200 for d in dag_ids), timeout)

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        status, body = self.api(f"dags/{dag_id}/dagRuns?order_by=logical_date")
        return list(body["dag_runs"]) if status == 200 else []


@contextmanager
def real_airflow(extra_env: dict[str, str], *, triggerer: bool = False) -> Iterator[RealAirflow]:
    """API server + scheduler + DAG processor (+ triggerer) on a fresh AIRFLOW_HOME under .local/; stopped by
    PID. `extra_env` goes last: it may replace the metadata DB (AIRFLOW__DATABASE__SQL_ALCHEMY_CONN) and the
    executor."""
    home = ROOT / ".local" / f"airflow-real-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = airflow_env(home, {"CDC_AIRFLOW_PORT": str(port)})
    env.update(extra_env)
    logs = home / "logs-test"
    logs.mkdir(parents=True)
    migrate = subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=600, check=False)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, args in (
            ("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]),
            ("scheduler", ["scheduler"]),
            ("dag-processor", ["dag-processor"]),
            *([("triggerer", ["triggerer"])] if triggerer else []),
        ):
            with (logs / f"{name}.log").open("wb") as out:
                procs[name] = subprocess.Popen(
                    [str(VENV_BIN / "airflow"), *args], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        yield RealAirflow(f"http://127.0.0.1:{port}", procs, logs)
    finally:
        for p in procs.values():  # each leads its own group: SIGTERM to the group stops its children too
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
