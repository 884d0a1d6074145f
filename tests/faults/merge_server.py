"""One Spark JVM for many `cdc run` subprocesses: the fault suite's merge service.

A `cdc run` merges a window with `spark-submit spark_apps/merge_window.py <args>`: a new JVM and Spark
session per window (10-25 s here, minutes when the machine is busy). The crash suite runs hundreds of
windows, so its CLI processes (tests/faults/cli_shim.py) hand the merge job's *arguments* to this
server instead, which runs the very same job code (`merge_window.parse_args`, `read_manifest`,
`zk_fence_check`, `merge_window`, `write_report`) in a Spark session it keeps. The answer mimics what
`spark-submit` returns (exit code, the report as the last stdout line, the error on stderr), so the
CLI's own merge step (`Pipeline.merge_locally`) runs unchanged.

Fault points inside the job (`mid_merge`, `mid_merge_table`) fire for the *requesting* process: the
server kills the client with SIGKILL at that point and abandons the rest of the job, which leaves the
lake exactly as a crashed spark-submit would (tables before the point committed, the rest not). A
client killed while the server merges leaves an orphaned merge running, like a spark-submit outliving
its parent; it still fences on the lease before each table.

Merges are serialised (one session); each client connection is served by its own thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

_local = threading.local()
# The request being merged (merges are serialised): the job's writer threads fire fault points too.
_merging: dict[str, Any] | None = None


class _ClientKilled(BaseException):  # not an Exception: the job must not wrap it in a LakeError
    """The requesting process was killed at a fault point: drop the rest of the job, answer nobody."""


class _FaultProxy:
    """Stands in for `cdc_core.model.faults` inside spark_apps.merge_window while the server runs."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def point(self, name: str) -> None:
        req = getattr(_local, "request", None) or _merging
        if not req or name not in (req.get("fault") or "").split(","):
            return
        once = req.get("fault_once")
        if once:
            marker = Path(once)
            fired = set(marker.read_text().split()) if marker.exists() else set()
            if name in fired:
                return
            marker.write_text(" ".join(sorted(fired | {name})))
        os.kill(int(req["pid"]), signal.SIGKILL)
        raise _ClientKilled(name)


class MergeServer:
    """`with MergeServer(spark_factory) as s:` ... clients use `s.address` ("host:port")."""

    def __init__(self, spark_factory: Callable[[], Any]):
        self._spark_factory = spark_factory
        self._spark: Any = None
        self._lock = threading.Lock()
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None
        self._saved_faults: Any = None
        self.merges = 0

    @property
    def address(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def spark(self) -> Any:
        """The session, (re)created when missing or stopped by someone else (a module's `spark` fixture)."""
        s = self._spark
        if s is None or s.sparkContext._jsc is None:
            self._spark = s = self._spark_factory()
        return s

    def start(self) -> MergeServer:
        import spark_apps.merge_window as mw

        self._saved_faults = mw.faults
        mw.faults = _FaultProxy(mw.faults)
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline()
                if not line:
                    return
                try:
                    answer = outer._merge(json.loads(line))
                except _ClientKilled:
                    return
                with contextlib.suppress(OSError):  # the client may be gone (killed by a test's timer)
                    self.wfile.write((json.dumps(answer) + "\n").encode())

        socketserver.ThreadingTCPServer.daemon_threads = True
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="merge-server", daemon=True)
        self._thread.start()
        return self

    def stop(self, stop_spark: bool = True) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._saved_faults is not None:
            import spark_apps.merge_window as mw

            mw.faults = self._saved_faults
            self._saved_faults = None
        if stop_spark and self._spark is not None:
            with contextlib.suppress(Exception):
                self._spark.stop()
            self._spark = None

    def __enter__(self) -> MergeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _merge(self, req: dict[str, Any]) -> dict[str, Any]:
        """What `spark-submit merge_window.py <args>` would have returned, as {rc, stdout, stderr}."""
        global _merging  # noqa: PLW0603 (merges are serialised; writer threads read it)
        import spark_apps.merge_window as mw
        from cdc_core.model.errors import CdcError
        from cdc_core.model.sources import Route

        close_zk: Callable[[], None] | None = None
        _local.request = req
        try:
            args = mw.parse_args(req["args"])
            options = mw.parse_table_options(args.table_options)
            manifest = mw.read_manifest(args.window_dir)
            fence = None
            if args.zk_hosts:
                fence, close_zk = mw.zk_fence_check(args.zk_hosts, args.zk_root, args.pipeline, args.token)
                fence()
            with self._lock:
                _merging = req
                try:
                    report = mw.merge_window(
                        self.spark(), manifest, args.window_dir, args.lake_root, args.pipeline, args.seq, args.token,
                        delete_mode=args.delete_mode, table_options=options, fence_check=fence,
                        parallelism=args.parallelism, source=args.source,
                        routes=[Route.from_dict(r) for r in args.routes], group_sources=args.group_sources,
                    )
                finally:
                    _merging = None
                self.merges += 1
            mw.write_report(args.report, report)
            return {"rc": 0, "stdout": json.dumps(report, sort_keys=True) + "\n", "stderr": ""}
        except _ClientKilled:
            raise
        except CdcError as e:
            err = f"merge_window: {type(e).__name__}: {mw.one_line(e)}\n"
            return {"rc": e.exit_code, "stdout": "", "stderr": err}
        except Exception as e:
            err = f"merge_window: unexpected {type(e).__name__}: {mw.one_line(e)}\n"
            return {"rc": 1, "stdout": "", "stderr": err}
        finally:
            _local.request = None
            if close_zk is not None:
                close_zk()


def request_merge(address: str, app_args: list[str], timeout: float = 1800) -> dict[str, Any]:
    """Client side (in the CLI process): send the job's arguments, wait for the answer."""
    host, _, port = address.rpartition(":")
    req = {
        "args": app_args,
        "pid": os.getpid(),
        "fault": os.environ.get("CDC_FAULT", ""),
        "fault_once": os.environ.get("CDC_FAULT_ONCE"),
    }
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall((json.dumps(req) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data:
        return {"rc": 1, "stdout": "", "stderr": "merge server closed the connection without an answer\n"}
    answer: dict[str, Any] = json.loads(data)
    return answer


def default_spark() -> Any:
    """A small Delta-enabled local session with the project's jars (as tests/conftest.py's)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from cdc_core.lake.spark_conf import spark_confs

    builder = SparkSession.builder.master("local[2]").appName("cdc-fault-merges")
    for k, v in spark_confs().items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
