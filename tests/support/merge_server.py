"""A real `cdc merge-server` process for tests (the warm merge option): started as an operator runs it,
waited for until it answers, killed or stopped, and never leaving its Spark JVM behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cdc_core.lake import merge_client


def child_pids(pid: int) -> list[int]:
    """The direct children of `pid` (from /proc)."""
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

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The server's argv and what its environment adds to `base_env`."""
        return [sys.executable, "-m", "cdc_core.cli", "--config", self.config, "merge-server", self.name,
                "--listen", self.address], {}

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        self.n += 1
        argv, env = self.command()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, env={**self.base_env, "SPARK_LOCAL_IP": "127.0.0.1", **env, **(extra_env or {})},
                stdout=out, stderr=out,
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
        assert status["pid"] == self.proc.pid and status["pipelines"] == ([self.name] if self.name else [])
        self.jvms = child_pids(self.proc.pid)

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


class SharedMergeServer(ServerProcess):
    """One warm merge server for every pipeline of a test session (tests/conftest.py `warm_merges`): the
    product's server (spark_apps/merge_server.py) without a pipeline restriction, on local[2] with the
    project's Delta jars and default confs, as `Pipeline.merge_server_launch` builds them for one pipeline.
    It serves pipelines whose Spark job needs nothing of its own: local disk, no ZooKeeper credential, the
    default Spark confs."""

    def __init__(self, address: str, workdir: Path) -> None:
        super().__init__("", "", address, workdir)
        self.base_env.pop(merge_client.ADDRESS_ENV, None)

    def command(self) -> tuple[list[str], dict[str, str]]:
        from cdc_core.lake.spark_conf import LOCAL_MASTER, SparkJob, delta_jars, jar_list, job_confs, spark_env
        from cdc_core.model.config.sections import SparkConfig
        from cdc_core.run.merge_step import MERGE_SERVER_APP

        job = SparkJob(application=str(MERGE_SERVER_APP), args=["--listen", self.address],
                       name="cdc-tests-merge-server", jars=jar_list(delta_jars(), LOCAL_MASTER),
                       conf=job_confs(SparkConfig()), env=spark_env())
        return job.python_driver(LOCAL_MASTER)

    def ensure_running(self) -> str:
        """Its address, (re)started if it is not running (a test must never inherit a dead server)."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self.start()
        return self.address
