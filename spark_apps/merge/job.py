"""The merge job as a process: its one argument (`--spec`, cdc_core.lake.job_specs.MergeJobSpec), a Spark session,
the fence, the report, and its exit code and error line (cdc_core.lake.job_outcome). spark-submit runs
spark_apps/merge_window.py, which calls `main`; the warm merge server calls `run_job` on a session of its own.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import SparkSession

from cdc_core.coordination.fence import zk_fence_check
from cdc_core.lake.job_outcome import MERGE_PROG, job_error
from cdc_core.lake.job_specs import SPEC_FLAG, MergeJobSpec
from cdc_core.lake.object_store import CONDITIONAL_PUTS
from cdc_core.model import faults
from cdc_core.model.errors import (
    ConfigError,
)
from cdc_core.model.merge_semantics import (
    DELETE_MODES,
)
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.sources import Route, unit_name
from spark_apps.merge.staged import read_manifest
from spark_apps.merge.tables import parse_table_options
from spark_apps.merge.window import merge_window
from spark_apps.spark_job import build_session, job_storage, write_report

log = logging.getLogger("cdc.merge")


def parse_args(argv: Sequence[str] | None = None) -> MergeJobSpec:
    """The job's one argument, `--spec <json>` (cdc_core.lake.job_specs.MergeJobSpec), checked."""
    p = argparse.ArgumentParser(prog="merge_window.py", description="MERGE one staged window into Delta, exactly once")
    p.add_argument(SPEC_FLAG, dest="spec", required=True, help="the job's spec: a JSON object (MergeJobSpec)")
    spec = MergeJobSpec.from_json(p.parse_args(argv).spec)
    if spec.delete_mode not in DELETE_MODES:
        raise ConfigError(f"spec delete_mode must be one of {', '.join(DELETE_MODES)}, got {spec.delete_mode!r}")
    if spec.zk_hosts and not spec.zk_root:
        raise ConfigError("spec zk_hosts needs zk_root (the pipeline's ZooKeeper root)")
    if spec.parallelism < 1:
        raise ConfigError(f"spec parallelism must be >= 1, got {spec.parallelism}")
    if spec.conditional_puts not in CONDITIONAL_PUTS:
        raise ConfigError(f"spec conditional_puts must be one of {', '.join(CONDITIONAL_PUTS)}, got "
                          f"{spec.conditional_puts!r}")
    return spec


def parse_table_properties(raw: str | dict[str, Any] | None) -> dict[str, str]:
    if not raw:
        return {}
    try:
        props = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise ConfigError(f'table_properties is not valid JSON ({e}); expected {{"delta.key": "value"}}') from e
    if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise ConfigError('table_properties must be a JSON object of strings {"delta.key": "value"}')
    return props


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # spark-submit merges the driver's stderr into stdout, and the report must be the last stdout line:
    # keep py4j's shutdown chatter quiet, and print the report only after every client is closed.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    report = None
    try:
        report = _run(argv)
    except Exception as e:  # the exit code and error line the callers decode (cdc_core.lake.job_outcome)
        rc, said = job_error(MERGE_PROG, e)
        print(said, file=sys.stderr, flush=True)
        return rc
    print(json.dumps(report, sort_keys=True), flush=True)
    return 0


def _run(argv: Sequence[str] | None) -> dict[str, Any]:
    """spark-submit's job: a Spark + Delta session of its own, stopped at the end."""
    started: list[SparkSession] = []

    def new_session(args: MergeJobSpec) -> SparkSession:
        spark = build_session(f"cdc-merge-{unit_name(args.pipeline, args.source)}-{args.seq}")
        spark.sparkContext.setLogLevel("WARN")
        started.append(spark)
        return spark

    try:
        return run_job(argv, new_session)
    finally:
        for spark in started:
            spark.stop()


def run_job(argv: Sequence[str] | None, session_for: Callable[[MergeJobSpec], SparkSession]) -> dict[str, Any]:
    """The merge job, on the session `session_for(spec)` gives (a new one for spark-submit, a new session of a
    running application for the warm merge server, spark_apps/merge_server.py): parse the spec, fence before
    anything, MERGE every table (fencing before each commit), write the report; returns the report."""
    close_zk: Callable[[], None] | None = None
    try:
        args = parse_args(argv)
        faults.point("merge_start")  # fault point: the job has its spec, nothing is written yet
        options = parse_table_options(args.table_options)
        properties = parse_table_properties(args.table_properties)
        storage = job_storage()  # the object store's credentials from the environment, passed down from here
        manifest = read_manifest(args.window_dir, storage=storage)
        fence = None
        if args.zk_hosts and args.zk_root:  # parse_args refused hosts without a root
            fence, close_zk = zk_fence_check(args.zk_hosts, args.zk_root, args.pipeline, args.token)
            fence()  # fail before paying for anything when already fenced
        t_session = time.monotonic()
        spark = session_for(args)
        session_seconds = round(time.monotonic() - t_session, 3)
        report = merge_window(
            spark,
            manifest,
            args.window_dir,
            args.lake_root,
            args.pipeline,
            args.seq,
            args.token,
            delete_mode=args.delete_mode,
            table_options=options,
            fence_check=fence,
            table_properties=properties,
            parallelism=args.parallelism,
            source=args.source,
            routes=[Route.from_dict(r) for r in args.routes],
            group_sources=args.group_sources,
            small_table_rows=args.small_table_rows,
            conditional_puts=args.conditional_puts,
            schema_policy=SchemaPolicy.from_dict(args.schema_changes),
            zero_dates=args.zero_dates,
            storage=storage,
        )
        report["session_seconds"] = session_seconds  # informational (Spark + Delta session start; ~0 when warm)
        write_report(args.report, report, storage=storage)
        return report
    finally:
        if close_zk is not None:
            close_zk()
