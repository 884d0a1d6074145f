"""MERGE one staged window into its Delta tables, exactly once: the tables of the window, their schema changes first,
then each table on up to `parallelism` writer threads (docs/merge.md).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession

from cdc_core.lake import delta_state, small_writer
from cdc_core.lake.object_store import AMBIENT, Storage, commit_storage, is_s3
from cdc_core.model import faults
from cdc_core.model.errors import (
    CdcError,
    ConfigError,
    LakeError,
    StagingError,
)
from cdc_core.model.lake_writers import foreign_writer_message, writer_pipeline
from cdc_core.model.layout import TOMBSTONE_DIR, table_uri
from cdc_core.model.logfmt import kv, one_line
from cdc_core.model.manifest import (
    Manifest,
    StagedTable,
)
from cdc_core.model.merge_semantics import (
    DELETE_HARD,
    DELETE_MODES,
    STATUS_ALREADY,
    holds_window,
)
from cdc_core.model.naming import path_component
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.schema_window import resolve as resolve_window
from cdc_core.model.snapshot_state import chunks_of
from cdc_core.model.sources import Route, unit_name
from cdc_core.model.window_plan import KIND_SNAPSHOT
from spark_apps.merge import schema_steps
from spark_apps.merge.land import MergeRun
from spark_apps.merge.tables import parse_table_options, table_writer_and_txn
from spark_apps.merge.targets import LakeTarget, lake_tables_of_schemas, lake_targets, members_by_their_rows
from spark_apps.spark_job import is_table_not_found
from spark_apps.writer_threads import in_threads

log = logging.getLogger("cdc.merge")


# Tables of one window merged at the same time (one Spark session each), unless --parallelism says
# otherwise (the pipeline's `spark.merge_parallelism`). On local[2] the per-table cost is mostly
# driver-side (Delta log reads, planning, commits), which overlaps well; 4 keeps the driver's memory
# and the number of open Delta snapshots small.
DEFAULT_PARALLELISM = 4


def _no_fence() -> None:
    return None


def _land_table(run: MergeRun, st: LakeTarget) -> dict[str, Any]:
    """One table of the window, with the concurrent-creation retry; errors as LakeError/CdcError."""
    try:
        try:
            return run.merge_table(st)
        except Exception as e:
            if not is_table_not_found(e):
                raise
            # A concurrent run of this window is creating the table (its first commit not visible
            # yet to one of our reads): wait for it, then merge the table again (idempotent).
            run.wait_for_table(table_uri(run.lake_root, st.schema, st.table), e)
            run.log("merge.retry", table=st.name, reason=one_line(e))
            return run.merge_table(st)
    except CdcError:
        raise
    except Exception as e:
        raise LakeError(
            f"{run.label()}: merging table {st.name} into {table_uri(run.lake_root, st.schema, st.table)} failed: "
            f"{one_line(e)}; tables merged before it stay merged and the merge is safe to retry"
        ) from e


def _merge_tables(run: MergeRun, targets: Sequence[LakeTarget], parallelism: int) -> dict[str, Any]:
    """Land every table of the window; results in manifest order.

    Tables whose txn version already holds the window are found without Spark (delta-rs reads the
    log) and never reach a writer. The others go to at most `parallelism` writer threads, each with
    its own Spark session (Delta's txnAppId/txnVersion and the commit's userMetadata are session
    confs, so two writers must never share one). The first failure stops new tables from starting;
    tables already merging finish (or fail), then the window fails with that first error: whatever
    committed stays committed, and a retry re-lands only the tables without the window's txn.
    """
    tables: dict[str, Any] = {}
    todo: list[LakeTarget] = []
    foreign: list[tuple[str, str, str]] = []
    unclaimed: set[str] = set()
    landed_by_table: dict[str, int | None] = {}
    # One log read per table (on an object store several at a time): its writer record and this pipeline's
    # txn version.
    uris = [table_uri(run.lake_root, st.schema, st.table) for st in targets]
    states = delta_state.per_table(
        lambda uri: table_writer_and_txn(run.spark, uri, run.app_id, run.table_props, storage=run.storage),
        uris, run.lake_root,
    )
    for st, uri, state in zip(targets, uris, states, strict=True):
        owner = writer_pipeline(state[0]) if state else None
        if owner is not None and owner != run.pipeline:
            foreign.append((st.name, uri, owner))
        elif state is not None and owner is None:
            unclaimed.add(uri)
        landed_by_table[st.name] = state[1] if state else None
    if foreign:  # before anything is written: one writer per table (cdc_core.model.lake_writers)
        raise LakeError(foreign_writer_message(run.pipeline, run.seq, foreign))
    # A table read above without the window is not read again before it lands: a concurrent run of the
    # window that lands it meanwhile is found by the writer's own check (delta-rs) or Delta's txn (Spark).
    unlanded = frozenset(uri for st, uri in zip(targets, uris, strict=True)
                         if not holds_window(landed_by_table[st.name], run.seq))
    run = replace(run, unclaimed=frozenset(unclaimed), unlanded=unlanded)
    for st in targets:
        landed = landed_by_table[st.name]
        if holds_window(landed, run.seq):
            tables[st.name] = {
                "status": STATUS_ALREADY, "inserted": 0, "updated": 0, "deleted": 0, "delta_version": None,
                "seconds": 0.0,
            }
            run.log("merge.table", table=st.name, status=STATUS_ALREADY, landed=landed)
        else:
            todo.append(st)
    run.log("merge.plan", tables=len(targets), to_merge=len(todo), parallelism=min(parallelism, len(todo)))
    run.check_outputs_follow(todo)  # a DDL a table's history or change log cannot follow: before any write
    run.schema_phase(todo, parallelism)
    crash_after_first = len(targets) > 1
    done: dict[str, Any] = {}
    if parallelism <= 1 or len(todo) <= 1:
        for st in todo:
            done[st.name] = _land_table(run, st)
            if crash_after_first and len(done) == 1:
                faults.point("mid_merge")  # crash suite: some tables committed, others not
    else:
        done = _merge_concurrently(run, todo, parallelism, crash_after_first)
    for st in targets:
        if st.name in done:
            tables[st.name] = done[st.name]
    return tables


def _merge_concurrently(
    run: MergeRun, todo: Sequence[LakeTarget], parallelism: int, crash_after_first: bool
) -> dict[str, Any]:
    def after_each(n: int) -> None:
        if crash_after_first and n == 1:
            # Crash suite: some tables committed, others still merging. An in-process fault (the suite's merge
            # server) raises here: it stops the whole job as a SIGKILL would.
            faults.point("mid_merge")

    results = in_threads(run, todo, parallelism, _land_table, after_each)
    return {st.name: r for st, r in zip(todo, results, strict=True) if r is not None}


def merge_window(  # noqa: PLR0917 (the job's identity: callers pass it positionally)
    spark: SparkSession,
    manifest: Manifest,
    window_dir: str,
    lake_root: str,
    pipeline: str,
    seq: int,
    token: int,
    *,
    delete_mode: str = DELETE_HARD,
    table_options: dict[str, Any] | str | None = None,
    fence_check: Callable[[], None] | None = None,
    table_properties: dict[str, str] | None = None,
    parallelism: int = DEFAULT_PARALLELISM,
    source: str | None = None,
    routes: Sequence[Route] = (),
    group_sources: Sequence[str] = (),
    small_table_rows: int = small_writer.DEFAULT_MAX_ROWS,
    conditional_puts: str = "auto",
    schema_policy: SchemaPolicy | None = None,
    zero_dates: str = "refuse",
    storage: Storage = AMBIENT,
) -> dict[str, Any]:
    """MERGE every table of the staged window into the lake, exactly once; returns the report.

    Up to `parallelism` tables land at the same time, each writer thread with a Spark session of
    its own (`spark.newSession()`: the txn identity is a session conf). `source`, `routes`: a group
    pipeline's source and the pipeline's routes (cdc_core.model.sources): which Delta table each staged
    table lands in and the lineage columns its rows carry. `small_table_rows`: tables holding at most this
    many rows once the window lands are merged by delta-rs, without a Spark job (0: none); on an object store only
    when it honours conditional writes (`conditional_puts` auto: probed once here). `storage`: the driver's
    way to the staging and lake (the job's object-store credentials, spark_apps.spark_job.job_storage)."""
    t0 = time.monotonic()
    if delete_mode not in DELETE_MODES:
        raise ConfigError(f"delete_mode must be one of {', '.join(DELETE_MODES)}, got {delete_mode!r}")
    app_id = unit_name(pipeline, source)
    if manifest.plan.pipeline != app_id or manifest.plan.seq != seq:
        raise StagingError(
            f"the manifest in {window_dir} is window {manifest.plan.seq} of pipeline {manifest.plan.pipeline!r}, "
            f"not window {seq} of {app_id!r}; check --window-dir"
        )
    policy = schema_policy or SchemaPolicy()
    window = resolve_window(
        manifest.schema_changes, [(t.schema, t.table) for t in manifest.tables], policy,
        lake_tables_of_schemas(lake_root, manifest.schema_changes, unit_name(pipeline, source), storage=storage),
    )
    staged = {(t.schema, t.table) for t in manifest.tables}
    extra = sorted({c.lake for c in window.changes} - staged)
    if extra:  # a dropped database's lake tables: each is emptied and records the window like the others
        manifest = replace(manifest, tables=(*manifest.tables, *(StagedTable(s, t, (), (), ()) for s, t in extra)))
    try:
        targets = lake_targets(manifest, routes, source, window.placements)
    except ValueError as e:  # a route whose target is not schema.table for this table
        raise ConfigError(str(e)) from None
    if window.placements:  # a name renamed away: its rows before the rename decide nothing after it
        targets = members_by_their_rows(
            targets, lambda st: schema_steps.file_versions(window_dir, st, storage=storage)
        )
    for target in targets:
        if path_component(target.schema) == TOMBSTONE_DIR:
            raise ConfigError(
                f"lake schema {target.schema!r} collides with the lake's tombstone directory {TOMBSTONE_DIR!r}"
            )
        target.columns()  # a routed pair of incompatible columns fails the window before anything is written
        target.key  # noqa: B018 (same, for routed tables with different keys)
    if small_table_rows > 0:
        storage, why = commit_storage(storage, lake_root, conditional_puts)
        if is_s3(lake_root):
            log.info("%s", kv(event="merge.object_store_commits", lake=lake_root,
                              small_tables="delta-rs" if why is None else "spark", reason=why or "conditional puts"))
    run = MergeRun(
        spark=spark,
        window_dir=window_dir,
        lake_root=lake_root,
        pipeline=pipeline,
        seq=seq,
        token=token,
        delete_mode=delete_mode,
        table_options=parse_table_options(table_options),
        fence=fence_check or _no_fence,
        run_id=uuid.uuid4().hex,
        default_properties=dict(table_properties or {}),
        source=source,
        group_sources=tuple(group_sources),
        routes=tuple(routes),
        small_table_rows=max(0, int(small_table_rows)),
        window=window,
        schema_policy=policy,
        chunks={c.table: c for c in chunks_of(manifest.plan)} if manifest.plan.kind == KIND_SNAPSHOT else {},
        snapshot=manifest.plan.kind == KIND_SNAPSHOT,
        zero_dates=zero_dates,
        storage=storage,
    )
    tables = _merge_tables(run, targets, max(1, int(parallelism)))
    report = {
        "pipeline": app_id,
        "seq": seq,
        "token": token,
        "tables": tables,
        "seconds": round(time.monotonic() - t0, 3),
    }
    if run.rereads:
        report["rereads"] = run.rereads
    run.log("merge.window", tables=len(tables), secs=report["seconds"])
    return report
