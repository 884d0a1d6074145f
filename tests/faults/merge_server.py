"""The fault suite's merge server: the product's warm merge server (spark_apps/merge_server.py) in the
pytest process, plus fault injection for the requesting CLI.

A `cdc run` started by the suite (tests/faults/cli_shim.py, harness.py) has `CDC_MERGE_SERVER` set, so
its merge step (`Pipeline.merge_locally`) sends the job's arguments to this server, exactly as the warm
option does in production (cdc_core/lake/merge_client.py): one Spark JVM for the whole suite instead of
one per window. The job code, the per-request session, the serialisation and the spark-submit-like
answer are the product's; this module only adds:

- Fault points inside the job (`mid_merge`, `mid_merge_table`) fire for the *requesting* process, whose
  armed points (CDC_FAULT, CDC_FAULT_ONCE) travel with the request: the server kills the client with
  SIGKILL at that point and abandons the rest of the job, which leaves the lake exactly as a crashed
  spark-submit would (tables before the point committed, the rest not). A client killed while the server
  merges leaves an orphaned merge running, like a spark-submit outliving its parent; it still fences on
  the lease before each table.
- `default_spark`: a small Delta session that the suite's oracles share (`server.spark()`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spark_apps.merge_server import MergeServer as ProductMergeServer

_local = threading.local()
# The request being merged (merges are serialised): the job's writer threads fire fault points too.
_merging: dict[str, Any] | None = None


class _ClientKilled(BaseException):  # not an Exception: the job must not wrap it in a LakeError
    """The requesting process was killed at a fault point: drop the rest of the job, answer nobody."""


class _FaultProxy:
    """Stands in for `cdc_core.model.faults.point` inside the merge job (spark_apps/merge/) while the server runs."""

    def __init__(self, real_point: Callable[[str], None]) -> None:
        self._real_point = real_point

    def point(self, name: str) -> None:
        req = getattr(_local, "request", None) or _merging
        if not req:  # not inside a served merge (the session's other tests): the product's own fault points
            self._real_point(name)
            return
        if name not in (req.get("fault") or "").split(","):
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


class MergeServer(ProductMergeServer):
    """`with MergeServer(spark_factory) as s:` ... clients use `s.address` ("host:port")."""

    def __init__(self, spark_factory: Callable[[], Any]):
        super().__init__(spark_factory)
        self._saved_faults: Any = None

    def start(self) -> MergeServer:
        from cdc_core.model import faults

        if self._saved_faults is None:  # every module of the merge job calls faults.point: patch it there
            self._saved_faults = faults.point
            faults.point = _FaultProxy(faults.point).point  # type: ignore[method-assign]
        super().start()
        return self

    def stop(self, stop_spark: bool = True) -> None:
        super().stop(stop_spark)
        if self._saved_faults is not None:
            from cdc_core.model import faults

            faults.point = self._saved_faults  # type: ignore[method-assign]
            self._saved_faults = None

    @contextlib.contextmanager
    def job_context(self, req: dict[str, Any]) -> Iterator[None]:
        global _merging  # noqa: PLW0603 (merges are serialised; writer threads read it)
        _local.request = _merging = req
        try:
            yield
        finally:
            _local.request = _merging = None

    def merge(self, req: dict[str, Any]) -> Any:
        try:
            return super().merge(req)
        except _ClientKilled:
            return None  # the client is dead: nobody to answer


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
