"""A warm Airflow CLI for the e2e tests: `airflow dags test` (and any other `airflow` command) without paying
for Airflow's start-up each time.

One server process per test session imports Airflow with the session's environment (tests/support/e2e.py
`airflow_env`), builds the CLI and the in-process execution API (its versioned routes take ~30% of a short
`airflow dags test`), imports the project's Airflow glue, and then forks a child per command. The child is
what `airflow dags test` would have been: a process of its own (its own session and process group), with
exactly the command's environment, its stdout and stderr going to one file, running Airflow's own CLI entry
point (`airflow.__main__.main`, so `dags test` is `dag.test()` as the CLI calls it, tasks in-process), and
exiting with the CLI's exit code. A crash, a fault point's SIGKILL or a test's kill ends that child only.

The parent stays single-threaded and never opens the metadata database, so forking it is safe. A command
whose environment differs from the server's in an Airflow setting that is read once at import (anything
`AIRFLOW__*` except the DAGs folder, which the child re-reads, or AIRFLOW_HOME) runs as a plain
`airflow` subprocess instead: the same command, only slower.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# Airflow settings a forked child honours from its own environment: the DAGs folder (the child re-reads it,
# airflow.settings.configure_vars) and the secrets backend (looked up again on every use while the server's
# environment configures none: airflow.configuration / airflow.sdk.configuration `ensure_secrets_loaded`).
REREAD = frozenset({"AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__SECRETS__BACKEND", "AIRFLOW__SECRETS__BACKEND_KWARGS"})


def _airflow_keys(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if (k.startswith("AIRFLOW__") or k == "AIRFLOW_HOME") and k not in REREAD}


class WarmAirflow:
    """The client side, in the test process: `airflow(*args, env=..., timeout=...)` answers like
    `subprocess.run([airflow, *args], capture_output=True, text=True)` (stdout holds both streams)."""

    def __init__(self, env: dict[str, str], workdir: Path, cwd: Path) -> None:
        self.env, self.workdir, self.cwd = dict(env), workdir, cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.n = 0

    @property
    def socket_path(self) -> Path:
        return self.workdir / "warm-airflow.sock"

    @property
    def log(self) -> Path:
        return self.workdir / "warm-airflow.log"

    def accepts(self, env: dict[str, str]) -> bool:
        """Whether a command with this environment can run in a forked child (else: a plain subprocess)."""
        if self.env.get("AIRFLOW__SECRETS__BACKEND") and any(
            env.get(k) != self.env.get(k) for k in ("AIRFLOW__SECRETS__BACKEND", "AIRFLOW__SECRETS__BACKEND_KWARGS")
        ):
            return False  # one the server loaded already would be kept
        return _airflow_keys(env) == _airflow_keys(self.env)

    def ensure_running(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        self.close()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.warm_airflow", str(self.socket_path)],
                env={**self.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(self.cwd),
                                                                              self.env.get("PYTHONPATH")]))},
                cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + 600
        while not self.socket_path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-4000:]
                self.close()
                raise RuntimeError(f"the warm Airflow did not start:\n{tail}")
            time.sleep(0.2)

    def airflow(self, *args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
        self.ensure_running()
        self.n += 1
        output = self.workdir / f"command-{self.n}.out"
        request = {"argv": list(args), "env": env, "cwd": str(self.cwd), "output": str(output)}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(self.socket_path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            reader = conn.makefile("rb")
            pid = int(reader.readline())
            conn.settimeout(timeout)
            try:
                line = reader.readline()
            except TimeoutError:
                _kill_group(pid)  # the server reaps it
                raise subprocess.TimeoutExpired(["airflow", *args], timeout, output.read_text(errors="replace"))
        if not line:
            raise RuntimeError(f"the warm Airflow died running {args}:\n{self.log.read_text(errors='replace')[-4000:]}")
        returncode = int(line)
        text = output.read_text(errors="replace")
        output.unlink(missing_ok=True)
        return subprocess.CompletedProcess(["airflow", *args], returncode, text, "")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _kill_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_group(self.proc.pid)
                self.proc.wait(timeout=30)
        self.proc = None


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


# ------------------------------------------------------------------------------------------ the server


def _warm_up() -> None:
    """Import and build once what every `airflow dags test` of this project needs (nothing that opens the
    metadata database or starts a thread)."""
    import airflow.__main__  # noqa: F401  (configuration, settings, logging)
    import sqlalchemy.orm
    from airflow import plugins_manager
    from airflow.cli import cli_parser
    from airflow.cli.commands import dag_command  # noqa: F401
    from airflow.models import import_all_models
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    cli_parser.get_parser()
    app = in_process_api_server().app
    if not app._cadwyn_initialized:  # the versioned routes, otherwise built on the first task's first request
        app._cadwyn_initialize()
    plugins_manager.ensure_plugins_loaded()  # the repo's plugins/ (the monitor page, cdc_airflow)
    import_all_models()
    sqlalchemy.orm.configure_mappers()  # otherwise done on the first query of every child (~1 s)
    for module in (
        "alembic.runtime.environment", "alembic.script",  # the CLI's check of the database's revision
        "cdc_airflow.assets", "cdc_airflow.hooks", "cdc_airflow.maintenance", "cdc_airflow.operators",
        "cdc_airflow.tasks", "cdc_core.run.pipeline", "cdc_core.run.backfill", "cdc_core.run.status",
        "cdc_core.lake.delta_state", "deltalake", "pyarrow.compute", "pyarrow.parquet",
        "airflow.providers.apache.spark.hooks.spark_submit",
    ):
        importlib.import_module(module)


def _child(request: dict[str, Any]) -> int:
    os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    from airflow import settings
    from airflow.__main__ import main

    settings.configure_vars()  # the DAGs folder of this command's environment
    sys.argv = ["airflow", *request["argv"]]
    try:
        main()
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def serve(path: str) -> None:
    """Fork a child per request on the Unix socket `path`; exit when the test process that started this
    one is gone (even killed: nothing else would stop a server in a session of its own)."""
    import threading

    parent = os.getppid()
    _warm_up()
    assert threading.active_count() == 1, f"threads before forking: {threading.enumerate()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.tmp"
    server.bind(tmp)
    server.listen(4)
    server.settimeout(2)
    os.rename(tmp, path)  # ready: the client waits for the socket to exist
    print(f"warm Airflow ready on {path} (pid {os.getpid()})", flush=True)
    while True:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            if os.getppid() != parent:
                print("warm Airflow: the test process is gone, exiting", flush=True)
                return
            continue
        conn.settimeout(None)
        with conn:
            request = json.loads(conn.makefile("rb").readline())
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                code = 1
                try:
                    code = _child(request)
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            conn.sendall(f"{pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)  # -N when killed by signal N, as subprocess reports it
            with contextlib.suppress(OSError):  # the test may have given up waiting
                conn.sendall(f"{code}\n".encode())


if __name__ == "__main__":
    serve(sys.argv[1])
