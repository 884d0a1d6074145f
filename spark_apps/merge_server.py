"""The warm merge option: one long-running Spark application that merges successive windows.

`spark-submit spark_apps/merge_window.py --spec <json>` pays a JVM, a Spark session and Delta's start-up for
every window. This server keeps one Spark application and runs, for each request, the very same job code
as that spark-submit (`merge_window.parse_args`, `parse_table_options`, `parse_table_properties`,
`read_manifest`, `zk_fence_check`, `merge_window`, `write_report`): the fence before each table commit, the
txnAppId/txnVersion idempotence and the report are the spark-submit path's, not a copy of them. Each request
runs in a session of its own (`spark.newSession()`: Delta's txnAppId/txnVersion and the commit's userMetadata
are session confs, so nothing one window sets reaches the next). Merges are serialised: one at a time (a
window's tables still land `spark.merge_parallelism` at a time inside it).

The answer is what spark-submit would have returned (exit code, the report as the last stdout line, the
job's error line on stderr, both from the one codec, `cdc_core.lake.job_outcome`), so the merge step
(`Pipeline.merge_locally`, through `cdc_core.lake.job_runner.MergeServerRunner`) decodes it exactly as a
spark-submit's outcome. Protocol: cdc_core/lake/merge_client.py.

Run it with `cdc merge-server <pipeline>` (foreground; it listens once its Spark session is up; SIGTERM or
SIGINT: stop accepting, let the merge in flight finish, stop Spark, exit 0). Killed at any moment (SIGKILL),
it is a crashed spark-submit: tables committed before stay committed, the rest not, the client's step fails
(retryable) and the next `cdc run` replays the window from its stored plan, idempotently.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

try:
    import cdc_core  # noqa: F401
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cdc_core.lake import merge_client
from cdc_core.lake.job_outcome import MERGE_PROG, job_error
from cdc_core.model.errors import CdcError, ConfigError
from cdc_core.model.logfmt import kv, one_line

log = logging.getLogger("cdc.merge_server")


def run_job(spark: Any, argv: Sequence[str]) -> dict[str, Any]:
    """The merge job of spark-submit (`merge_window.run_job`, the same code), on a new session of this
    application (the txn identity and commit metadata are session confs: never shared between requests)."""
    from spark_apps.merge.job import run_job

    return run_job(argv, lambda _spec: spark)


def failed(err: BaseException) -> merge_client.MergeAnswer:
    """The answer for a job that failed with `err`: its exit code and error line, as `merge_window.main`
    exits (cdc_core.lake.job_outcome.job_error, which the client decodes)."""
    rc, said = job_error(MERGE_PROG, err)
    return merge_client.MergeAnswer(rc, "", said + "\n")


def job_answer(job: Callable[[], dict[str, Any]]) -> merge_client.MergeAnswer:
    """Run `job` and answer as `merge_window.main` would have exited: 0 and the report as the last stdout
    line; else the error's exit code (1 for one that is no CdcError) and its `merge_window: ` line on stderr."""
    try:
        report = job()
    except Exception as e:
        return failed(e)
    return merge_client.MergeAnswer(0, json.dumps(report, sort_keys=True) + "\n", "")


def _spec_pipeline(argv: Sequence[str]) -> str | None:
    """The pipeline a request's spec names (None when it cannot be read: the job itself reports that)."""
    from cdc_core.lake.job_specs import SPEC_FLAG, MergeJobSpec

    try:
        return MergeJobSpec.from_json(list(argv)[list(argv).index(SPEC_FLAG) + 1]).pipeline
    except (ValueError, IndexError, CdcError):
        return None


class MergeServer:
    """A socket server running merge jobs in one Spark application.

    `spark_factory` builds the application's base session (on first use, and again if someone stopped it);
    every request runs in `base.newSession()`. `pipelines`: the pipelines this server merges for (its
    environment holds their credentials); a request for another one is refused (exit code 2). Empty: any.
    """

    def __init__(self, spark_factory: Callable[[], Any], host: str = "127.0.0.1", port: int = 0,
                 pipelines: Sequence[str] = ()) -> None:
        self._spark_factory = spark_factory
        self._spark: Any = None
        self._spark_lock = threading.Lock()
        self._merge_lock = threading.Lock()  # merges are serialised
        self._bind = (host, port)
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None
        self.pipelines = tuple(pipelines)
        self.merges = 0

    # ---------------------------------------------------------------------------------------- life

    @property
    def address(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def spark(self) -> Any:
        """The base session, (re)created when missing or stopped by someone else."""
        with self._spark_lock:
            s = self._spark
            if s is None or s.sparkContext._jsc is None:
                self._spark = s = self._spark_factory()
            return s

    def bind(self) -> MergeServer:
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    line = merge_client.read_line(self.connection)
                except (OSError, ValueError):
                    return
                if not line:
                    return
                answer = outer.handle_line(line)
                if answer is None:  # nobody to answer (a subclass dropped the request)
                    return
                with contextlib.suppress(OSError):  # the client may be gone (killed while waiting)
                    self.wfile.write(merge_client.encode(answer))

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(self._bind, Handler)
        return self

    def start(self) -> MergeServer:
        """Serve in a background thread (tests, in-process use)."""
        if self._server is None:
            self.bind()
        assert self._server is not None
        self._thread = threading.Thread(target=self._server.serve_forever, name="merge-server", daemon=True)
        self._thread.start()
        return self

    def stop(self, stop_spark: bool = True) -> None:
        """Stop accepting, wait for the merge in flight, then stop Spark (when asked)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._merge_lock:
            pass
        if stop_spark and self._spark is not None:
            with contextlib.suppress(Exception):
                self._spark.stop()
            self._spark = None

    def __enter__(self) -> MergeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------ requests

    def handle_line(self, line: bytes) -> dict[str, Any] | None:
        try:
            req = merge_client.decode(line, "request")
        except ValueError as e:
            return failed(ConfigError(str(e))).to_dict()
        op = req.get("op")
        if op == "ping":
            return {"v": merge_client.PROTOCOL_VERSION, "ok": True, "pid": os.getpid(), "merges": self.merges,
                    "pipelines": list(self.pipelines)}
        if op != "merge" or not isinstance(req.get("args"), list):
            return failed(ConfigError(f"unknown request {op!r}")).to_dict()
        answer = self.merge(req)
        return None if answer is None else answer.to_dict()

    @contextlib.contextmanager
    def job_context(self, req: dict[str, Any]) -> Iterator[None]:
        """Around one merge job, under the merge lock (a subclass's hook: the fault suite's fault points)."""
        yield

    def merge(self, req: dict[str, Any]) -> merge_client.MergeAnswer | None:
        """One merge request: the job in a session of its own, answered as spark-submit would have."""
        argv = [str(a) for a in req["args"]]
        pipeline = _spec_pipeline(argv)
        if self.pipelines and pipeline is not None and pipeline not in self.pipelines:
            err = ConfigError(
                f"this merge server merges for {', '.join(self.pipelines)}, not {pipeline!r} (its environment holds "
                "those pipelines' credentials): start one for that pipeline (`cdc merge-server <pipeline>`)"
            )
            return failed(err)
        t0 = time.monotonic()
        with self._merge_lock:
            log.info("merge_server.request %s", kv(pipeline=pipeline or "-", client_pid=req.get("pid", "-"),
                                                    waited=f"{time.monotonic() - t0:.1f}"))
            t1 = time.monotonic()
            with self.job_context(req):
                answer = job_answer(lambda: run_job(self.spark().newSession(), argv))
            self.merges += 1
        log.info("merge_server.answer %s", kv(pipeline=pipeline or "-", client_pid=req.get("pid", "-"),
                                               rc=answer.rc, secs=f"{time.monotonic() - t1:.1f}"))
        return answer


# ------------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="merge_server.py", description="Merge successive windows in one Spark application")
    p.add_argument("--listen", required=True, help="host:port to listen on")
    p.add_argument("--pipeline", action="append", default=[], help="a pipeline it merges for (repeatable)")
    args = p.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        host, port = merge_client.parse_address(args.listen)
    except ConfigError as e:
        print(f"merge_server: ConfigError: {e}", file=sys.stderr, flush=True)
        return e.exit_code

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("merge_server.stopping %s", kv(signal=signal.Signals(signum).name))
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def build() -> Any:
        from spark_apps.spark_job import build_session

        spark = build_session(f"cdc-merge-server-{'-'.join(args.pipeline) or 'any'}")
        spark.sparkContext.setLogLevel("WARN")
        return spark

    t0 = time.monotonic()
    server = MergeServer(build, host, port, pipelines=args.pipeline)
    try:
        server.spark()  # listen only once the session is up: a ping answered means ready
        server.bind().start()
    except Exception as e:
        print(f"merge_server: cannot start: {type(e).__name__}: {one_line(e)}", file=sys.stderr, flush=True)
        server.stop()
        return e.exit_code if isinstance(e, CdcError) else 1
    log.info("merge_server.ready %s", kv(address=server.address, pid=os.getpid(),
                                          pipelines=",".join(args.pipeline) or "any",
                                          session_secs=f"{time.monotonic() - t0:.1f}"))
    while not stop.wait(1.0):
        pass
    server.stop()
    log.info("merge_server.stopped %s", kv(merges=server.merges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
