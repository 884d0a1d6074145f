"""Durable, atomic, deterministic staging of one window's row changes (Parquet files + manifest).

`stage_window` streams the reader's changes into one Parquet file per (table, schema shape) under
the window directory (layout in `cdc_core.model.manifest`), flushing a row group at a time so memory does
not grow with the window, and writes `manifest.json` (sizes, sha256, per-table I/U/D counts, DDL) last.

Guarantees:

- Deterministic: the same plan and the same changes give byte-identical files and manifest (no
  wall-clock values, fixed compression, row groups cut by row counts only, tables sorted by name).
- Atomic: on a local filesystem the window is written into a hidden temp directory next to the final
  one (`.<wNNNNNNNNNN>.tmp-<random>`) and renamed into place, files and directories fsynced first.
  On object stores (any other fsspec URL: s3://, gs://, memory://) a directory rename is a copy, so
  the window is written in place and atomicity comes from the manifest alone: it is one object, PUT
  last, and only a window whose `manifest.json` exists is staged. Either way a reader that sees
  `manifest.json` sees a complete window; anything without one is a leftover that the next
  `stage_window` replaces.
- Idempotent: staging a window that is already staged (same plan, checksums good) returns the
  existing manifest; a damaged or incomplete copy is replaced.

The files are written by `staging_writer.WindowWriter`; reading, verifying, listing and deleting staged
windows live in `staging_store` and are re-exported here (this module is the staging's API).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.lake.staging_store import (
    StagingStore,
    delete_window,
    list_windows,
    load_manifest,
    read_manifest,
    read_table_changes,
    remove_stale_temp_dirs,
    verify_files,
    verify_window,
)
from cdc_core.lake.staging_writer import COMPRESSION, COMPRESSION_LEVEL, Segment, WindowWriter
from cdc_core.model.changes import RowBatch, RowChange, TableSchema
from cdc_core.model.errors import StagingError
from cdc_core.model.logfmt import line
from cdc_core.model.manifest import MANIFEST_NAME, OP_BEFORE, OP_DELETE, OP_INSERT, OP_UPDATE, Manifest
from cdc_core.model.transforms import Transforms
from cdc_core.model.types import TYPE_MAP_VERSION
from cdc_core.model.window_plan import WindowPlan

# The staging's public API: stage a window here; read, verify, list and delete staged windows (staging_store).
__all__ = [
    "DEFAULT_ROW_GROUP_BYTES",
    "DEFAULT_ROW_GROUP_ROWS",
    "delete_window",
    "effective_row_group_rows",
    "list_windows",
    "read_manifest",
    "read_table_changes",
    "stage_window",
    "verify_window",
]

log = logging.getLogger(__name__)

DEFAULT_ROW_GROUP_ROWS = 50_000
# Cap on a row group's estimated size (from the plan's average event size), for windows of big rows.
DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024
MIN_ROW_GROUP_ROWS = 64
PROGRESS_EVERY_ROWS = 10_000
PROGRESS_EVERY_SECS = 5.0
ProgressFn = Callable[..., None]


def effective_row_group_rows(plan: WindowPlan, row_group_rows: int, row_group_bytes: int) -> int:
    """Rows per row group: `row_group_rows`, fewer when the plan's events are large on average.

    Computed from the plan only, so it is the same every time the window is staged (determinism).
    """
    if plan.events > 0 and plan.bytes > 0:
        avg = max(1, plan.bytes // plan.events)
        row_group_rows = min(row_group_rows, max(MIN_ROW_GROUP_ROWS, row_group_bytes // avg))
    return max(1, row_group_rows)


def stage_window(
    plan: WindowPlan,
    changes: Iterable[Any],
    staging_root: str,
    *,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    progress: ProgressFn | None = None,
    progress_every_rows: int = PROGRESS_EVERY_ROWS,
    progress_every_secs: float = PROGRESS_EVERY_SECS,
    declare: Iterable[TableSchema] = (),
    storage: Storage = AMBIENT,
    transforms: Transforms | None = None,
) -> Manifest:
    """Stage a window's changes and return its manifest (or the existing one if already staged).

    `changes` yields `RowChange`s, `RowBatch`es and DDL events (any object with `ordinal`, `schema`,
    `query` and `version`), in binlog order (batches: in order per table). `progress(rows, tables=...,
    bytes=...)` is called every `progress_every_rows` rows or `progress_every_secs` seconds (checked every
    1,024 rows), and once at the end; never per row. Tables in `declare` are staged even when no change
    arrives for them (a file with their columns and no rows), so the merge creates their Delta table.
    `transforms`: the tables' transform rules (cdc_core/model/transforms.py), applied before anything is
    written.
    """
    t0 = time.monotonic()
    store = StagingStore(staging_root, storage)
    final = store.window_path(plan.pipeline, plan.seq)
    existing = _existing_window(store, final, plan)
    if existing is not None:
        log.info(
            "%s",
            line(event="window.already_staged", pipeline=plan.pipeline, seq=plan.seq, tables=len(existing.tables),
                changes=existing.changes),
        )
        return existing

    rg_rows = effective_row_group_rows(plan, row_group_rows, row_group_bytes)
    info = {
        "type_map_version": TYPE_MAP_VERSION,
        "parquet": f"pyarrow {pa.__version__} {COMPRESSION}({COMPRESSION_LEVEL})",
        "row_group_rows": rg_rows,
    }
    parent, _, name = final.rpartition("/")
    if store.local:
        remove_stale_temp_dirs(store, parent, name)
        target = f"{parent}/.{name}.tmp-{uuid.uuid4().hex[:12]}"
    else:
        # No atomic rename: clear any leftover in place (manifest first, so it is never "staged").
        store.remove(f"{final}/{MANIFEST_NAME}")
        store.remove(final)
        target = final

    writer = WindowWriter(store, target, plan, rg_rows, transforms)
    for shape in declare:
        writer.segment_for(shape)[1].declared = True
    try:
        _consume(writer, changes, progress, progress_every_rows, progress_every_secs)
        manifest = writer.finish(info)
        store.write_bytes(f"{target}/{MANIFEST_NAME}", manifest.to_json().encode())  # last
        if store.local:
            _fsync_tree(store, target)
            manifest = _move_into_place(store, target, final, plan, manifest)
    except BaseException:
        writer.abort()
        if store.local:
            with contextlib.suppress(Exception):
                store.remove(target)
        raise
    finally:
        writer.shutdown()
    if progress is not None:
        progress(manifest.changes, tables=len(manifest.tables), bytes=writer.bytes)
    log.info(
        "%s",
        line(event="window.staged", pipeline=plan.pipeline, seq=plan.seq, tables=len(manifest.tables),
            changes=manifest.changes, **({"before_images": manifest.before_images} if manifest.before_images else {}),
            bytes=writer.bytes, secs=f"{time.monotonic() - t0:.2f}"),
    )
    return manifest


def _consume(
    writer: WindowWriter,
    changes: Iterable[Any],
    progress: ProgressFn | None,
    every_rows: int,
    every_secs: float,
) -> None:
    label = writer.plan.label()
    last_ordinal: int | None = None
    last_shape: TableSchema | None = None
    seg: Segment | None = None
    counts: dict[str, int] = {}
    rows = 0
    next_report = every_rows
    last_report_t = time.monotonic()
    for item in changes:
        if item.__class__ is not RowChange and not isinstance(item, RowChange):
            if isinstance(item, RowBatch):
                n = _consume_batch(writer, item, label)
                rows += n
                if progress is not None and (rows >= next_report or time.monotonic() - last_report_t >= every_secs):
                    progress(rows, tables=len(writer.tables))
                    next_report = rows + every_rows
                    last_report_t = time.monotonic()
                last_shape = None  # the RowChange fast path must look its segment up again
                continue
            writer.add_ddl(item, label)
            continue
        ordinal = item.ordinal
        if last_ordinal is not None and ordinal <= last_ordinal:
            raise StagingError(
                f"window {label}: change ordinals must increase strictly, got {ordinal} after {last_ordinal}; "
                "this is a reader bug: report it"
            )
        shape = item.table
        if shape is not last_shape:  # runs of one table share one TableSchema object: skip the lookup
            state, seg = writer.segment_for(shape)
            counts = state.counts
            last_shape = shape
        assert seg is not None
        if item.op == OP_BEFORE:  # an update's before image: its update follows, with the same ordinal
            writer.add_row(writer.before_segment(seg), item)
            continue
        last_ordinal = ordinal
        try:
            counts[item.op] += 1
        except KeyError:
            raise StagingError(
                f"window {label}: change {ordinal} to {shape.name!r} has operation {item.op!r}, expected one of "
                f"{OP_INSERT!r}, {OP_UPDATE!r}, {OP_DELETE!r}; this is a reader bug: report it"
            ) from None
        writer.add_row(seg, item)
        rows += 1
        if progress is not None and not rows & 1023:
            now = time.monotonic()
            if rows >= next_report or now - last_report_t >= every_secs:
                progress(rows, tables=len(writer.tables))
                next_report = rows + every_rows
                last_report_t = now


def _consume_batch(writer: WindowWriter, item: RowBatch, label: str) -> int:
    state, seg = writer.segment_for(item.table)
    batch = item.batch
    n = batch.num_rows
    if n == 0:
        return 0
    if not batch.schema.equals(seg.codec.arrow_schema):
        raise StagingError(
            f"window {label}: a batch of changes to {item.table.name!r} has the schema {batch.schema}, not the "
            f"staged schema of the table ({seg.codec.arrow_schema}); this is a reader bug: report it"
        )
    if item.first_ordinal > item.last_ordinal or (
        state.last_ordinal is not None and item.first_ordinal <= state.last_ordinal
    ):
        raise StagingError(
            f"window {label}: change ordinals of {item.table.name!r} must increase strictly, got a batch "
            f"{item.first_ordinal}..{item.last_ordinal} after {state.last_ordinal}; this is a reader bug: report it"
        )
    state.last_ordinal = item.last_ordinal
    counts = state.counts
    befores = 0
    for entry in pc.value_counts(batch.column(0)).to_pylist():
        op = entry["values"]
        if op == OP_BEFORE:
            befores = entry["counts"]
            continue
        if op not in counts:
            raise StagingError(
                f"window {label}: a change to {item.table.name!r} has operation {op!r}, expected one of "
                f"{OP_INSERT!r}, {OP_UPDATE!r}, {OP_DELETE!r}; this is a reader bug: report it"
            )
        counts[op] += entry["counts"]
    if befores:  # updates' before images: to the segment's companion file, out of every other reader's way
        is_before = pc.equal(batch.column(0), OP_BEFORE)
        writer.add_batch(writer.before_segment(seg), batch.filter(is_before))
        batch = batch.filter(pc.invert(is_before))
        n -= befores
    writer.add_batch(seg, batch)
    return int(n)



def _fsync_tree(store: StagingStore, top: str) -> None:
    for dirpath, _dirs, _files in os.walk(top):
        store.fsync_dir(dirpath)


def _move_into_place(store: StagingStore, tmp: str, final: str, plan: WindowPlan, manifest: Manifest) -> Manifest:
    parent = final.rpartition("/")[0]
    old = None
    if os.path.lexists(final):
        old = f"{parent}/.{final.rpartition('/')[2]}.old-{uuid.uuid4().hex[:12]}"
        os.rename(final, old)
    try:
        os.rename(tmp, final)
    except OSError:
        # Someone else put a window there meanwhile (a zombie run of the same plan): keep theirs if good.
        theirs = _existing_window(store, final, plan)
        store.remove(tmp)
        if theirs is None:
            raise
        manifest = theirs
    store.fsync_dir(parent)
    if old is not None:
        store.remove(old)
    return manifest


def _existing_window(store: StagingStore, final: str, plan: WindowPlan) -> Manifest | None:
    """The staged manifest at `final` if it is complete, for `plan`, and its files verify."""
    manifest = load_manifest(store, final)
    if manifest is None:
        return None
    if manifest.plan.to_dict() != plan.to_dict():
        raise StagingError(
            f"{final} holds a staged window for a different plan ({manifest.plan.label()}) than the one being "
            f"staged ({plan.label()}); two pipelines or environments share a staging root, or the window was "
            "re-planned. Delete that directory (or point staging_root elsewhere) and re-run the stage step"
        )
    try:
        verify_files(store, final, manifest)
    except StagingError as e:
        log.warning("%s", line(event="window.restage", pipeline=plan.pipeline, seq=plan.seq, reason=str(e)))
        return None
    return manifest

