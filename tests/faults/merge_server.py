"""The fault suite's merge server: the product's warm merge server (spark_apps/merge_server.py) in the
pytest process, plus fault injection for the requesting CLI.

A `cdc run` started by the suite (tests/faults/cli_shim.py, harness.py) has `CDC_MERGE_SERVER` set, so
its merge step (`Pipeline.merge_locally`) sends the job's arguments to this server, exactly as the warm
option does in production (cdc_core/lake/merge_client.py): one Spark JVM for the whole suite instead of
one per window. The job code, the per-request session, the serialisation and the spark-submit-like
answer are the product's; this module only adds:

- Fault points inside the job (`mid_merge`, `mid_merge_table`, `mid_derive`, and `mid_schema_change` in
  spark_apps/schema_steps.py) fire for the *requesting* process, whose
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


# The job's modules that fire fault points: each one's `faults` is replaced by the proxy while the server runs.
_JOB_MODULES = ("spark_apps.merge_window", "spark_apps.schema_steps")


class _FaultProxy:
    """Stands in for `cdc_core.model.faults` inside the job's modules (_JOB_MODULES) while the server runs."""

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


class MergeServer(ProductMergeServer):
    """`with MergeServer(spark_factory) as s:` ... clients use `s.address` ("host:port")."""

    def __init__(self, spark_factory: Callable[[], Any]):
        super().__init__(spark_factory)
        self._saved_faults: dict[str, Any] = {}

    def start(self) -> MergeServer:
        import importlib

        if not self._saved_faults:
            for name in _JOB_MODULES:
                module = importlib.import_module(name)
                self._saved_faults[name] = module.faults
                module.faults = _FaultProxy(module.faults)
        super().start()
        return self

    def stop(self, stop_spark: bool = True) -> None:
        import importlib

        super().stop(stop_spark)
        for name, real in self._saved_faults.items():
            importlib.import_module(name).faults = real
        self._saved_faults = {}

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
