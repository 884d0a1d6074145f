"""The warm merge option end to end: `cdc merge-server` (a real long-running Spark application) and `cdc run`
with `spark.merge_server`, on real MariaDB, ZooKeeper and Delta; the server SIGKILLed between windows and in
the middle of a merge (after its first table committed), restarted, and the lake still equals the source
with the cursor where it belongs.

One test, one server process at a time (three Spark start-ups in all: the first, after the kill between
windows, after the kill mid-merge), three merge requests.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from cdc_core.lake import merge_client
from tests.support.cli import cli_pipeline

pytestmark = pytest.mark.integration

TABLES = ("a", "b")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rfind(")") + 2:].split()[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2:].split()[0] != "Z"


class ServerProcess:
    """`cdc merge-server <pipeline>` as an operator runs it: a foreground process of its own."""

    def __init__(self, env: dict[str, Any], workdir: Path) -> None:
        self.env, self.workdir, self.n = env, workdir, 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.jvms: list[int] = []

    @property
    def log(self) -> Path:
        return self.workdir / f"merge-server-{self.n}.log"

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        self.n += 1
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cdc_core.cli", "--config", self.env["config"], "merge-server",
                 self.env["name"]],
                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(extra_env or {})}, stdout=out, stderr=out,
            )
        deadline = time.monotonic() + 300
        while True:
            assert self.proc.poll() is None, f"the merge server exited:\n{self.log.read_text()[-3000:]}"
            try:
                status = merge_client.ping(self.env["address"], timeout=5)
                break
            except merge_client.MergeServerUnavailable:
                assert time.monotonic() < deadline, f"never ready:\n{self.log.read_text()[-3000:]}"
                time.sleep(0.5)
        assert status["pid"] == self.proc.pid and status["pipelines"] == [self.env["name"]]
        self.jvms = _children(self.proc.pid)

    def wait_gone(self) -> None:
        """The server and its JVM are gone (a killed server must not leave its Spark application behind)."""
        assert self.proc is not None
        self.proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in self.jvms) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [p for p in self.jvms if _alive(p)]
        for p in left:  # clean up before failing
            os.kill(p, signal.SIGKILL)
        assert not left, f"the server's JVM {left} outlived it"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.wait_gone()
        assert self.proc.returncode == -signal.SIGKILL

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=60)
        for p in self.jvms:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.fixture
def env(services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.delenv(merge_client.ADDRESS_ENV, raising=False)
    address = f"127.0.0.1:{_free_port()}"
    p = cli_pipeline(
        services, source_db, zk_root, tmp_path, prefix="warm",
        ddl=[f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT)" for t in TABLES],
        settings=lambda name: {
            "staging_root": str(tmp_path / "staging"),
            "lake_root": str(tmp_path / "lake"),
            # One table after the other, so the server dies with exactly the first table of the window committed.
            "spark": {"merge_server": {"address": address, "timeout_seconds": 900}, "merge_parallelism": 1},
        },
    )
    for key, value in p["env"].items():  # the CLI runs in this process: its source connection, as env
        if key.startswith("AIRFLOW_CONN_"):
            monkeypatch.setenv(key, value)
    return {**p, "address": address}


def cdc(env: dict[str, Any], capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["--config", env["config"], *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip() else None), err


def _write(services: Any, db: str, start: int, n: int) -> None:
    """One transaction touching both tables: inserts, an update and a delete of earlier rows."""
    root = services.root_connect(db)
    with root.cursor() as cur:
        for t in TABLES:
            rows = ", ".join(f"({i}, 'v{i}', {i * 7})" for i in range(start, start + n))
            cur.execute(f"INSERT INTO {t} VALUES {rows}")
            if start > 1:
                cur.execute(f"UPDATE {t} SET v = CONCAT(v, '+'), n = n + 1 WHERE id % 3 = 0 AND id < {start}")
                cur.execute(f"DELETE FROM {t} WHERE id = {start - 1}")
    root.commit()
    root.close()


def _landed(env: dict[str, Any], seq: int) -> dict[str, bool]:
    from cdc_core.lake import delta_state
    from cdc_core.model.layout import table_uri

    lake = str(Path(env["config"]).parent / "lake")
    return {t: (delta_state.last_txn_version(table_uri(lake, env["db"], t), env["name"]) or 0) >= seq for t in TABLES}


def _assert_lake_equals_source(env: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--config", env["config"], "verify", env["name"]])
    out, err = capsys.readouterr()
    assert code == 0 and out.count("equal") >= len(TABLES), f"{out}\n{err}"


def test_warm_merges_land_exactly_once_through_server_kills(
    services: Any, env: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ServerProcess(env, tmp_path)
    try:
        server.start()
        # 1. A window lands through the server, not spark-submit.
        _write(services, env["db"], 1, 30)
        code, ran, err = cdc(env, capsys, "run", env["name"])
        assert code == 0, err
        assert merge_client.ping(env["address"])["merges"] == 1
        _assert_lake_equals_source(env, capsys)
        seq = ran["windows"][-1]["seq"]

        # 2. Killed between windows: the merge step fails, retryable, nothing skipped, the cursor stays.
        server.kill()
        _write(services, env["db"], 31, 10)
        code, _, err = cdc(env, capsys, "run", env["name"])
        assert code == 8 and "cannot reach the merge server" in err and "safe to retry" in err, err
        code, status, err = cdc(env, capsys, "status", env["name"])
        assert status["cursor"]["seq"] == seq and status["lease"] is None

        # 3. Restarted, it dies (SIGKILL) in the middle of replaying that window: first table committed, second not.
        marker = tmp_path / "mid_merge.fired"
        server.start({"CDC_FAULT": "mid_merge", "CDC_FAULT_ONCE": str(marker)})
        code, _, err = cdc(env, capsys, "run", env["name"])
        assert code == 8 and "without an answer" in err, err
        server.wait_gone()
        assert server.proc is not None and server.proc.returncode == -signal.SIGKILL
        assert marker.read_text() == "mid_merge"
        assert sorted(_landed(env, seq + 1).values()) == [False, True]  # half a window in the lake
        code, status, err = cdc(env, capsys, "status", env["name"])
        assert status["cursor"]["seq"] == seq

        # 4. Restarted again: the window replays exactly once (the committed table is skipped by its txn version).
        _write(services, env["db"], 41, 10)
        server.start()
        code, ran, err = cdc(env, capsys, "run", env["name"])
        assert code == 0, err
        assert ran["windows"][0]["recovered"] == "replay" and ran["windows"][0]["seq"] == seq + 1
        assert _landed(env, ran["windows"][-1]["seq"]) == dict.fromkeys(TABLES, True)
        _assert_lake_equals_source(env, capsys)
        code, status, err = cdc(env, capsys, "status", env["name"])
        assert status["cursor"]["seq"] == ran["windows"][-1]["seq"] and status["lease"] is None

        # 5. SIGTERM: a clean stop.
        server.proc.send_signal(signal.SIGTERM)
        server.wait_gone()
        assert server.proc.returncode == 0 and "merge_server.stopped" in server.log.read_text()
    finally:
        server.close()
