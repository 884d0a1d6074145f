"""A real `cdc merge-server` process for tests (the warm merge option): started as an operator runs it,
waited for until it answers, killed or stopped, and never leaving its Spark JVM behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from cdc_core.lake import merge_client


def free_port() -> int:
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
    """`cdc merge-server <name>` as an operator runs it: a foreground process of its own, listening on
    `address` (the pipeline's spark.merge_server.address, or --listen), in `base_env` (default: this one's)."""

    def __init__(
        self, config: str, name: str, address: str, workdir: Path, base_env: dict[str, str] | None = None
    ) -> None:
        self.config, self.name, self.address, self.workdir, self.n = config, name, address, workdir, 0
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.jvms: list[int] = []

    @property
    def log(self) -> Path:
        return self.workdir / f"merge-server-{self.n}.log"

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        self.n += 1
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cdc_core.cli", "--config", self.config, "merge-server", self.name,
                 "--listen", self.address],
                env={**self.base_env, "SPARK_LOCAL_IP": "127.0.0.1", **(extra_env or {})}, stdout=out, stderr=out,
            )
        deadline = time.monotonic() + 300
        while True:
            assert self.proc.poll() is None, f"the merge server exited:\n{self.log.read_text()[-3000:]}"
            try:
                status = merge_client.ping(self.address, timeout=5)
                break
            except merge_client.MergeServerUnavailable:
                assert time.monotonic() < deadline, f"never ready:\n{self.log.read_text()[-3000:]}"
                time.sleep(0.5)
        assert status["pid"] == self.proc.pid and status["pipelines"] == [self.name]
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


