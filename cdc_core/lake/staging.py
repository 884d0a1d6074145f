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
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model.changes import RowBatch, RowChange, TableSchema
from cdc_core.model.errors import SchemaConflict, StagingError
from cdc_core.model.layout import table_dir_rel, unit_dir
from cdc_core.model.logfmt import line
from cdc_core.model.manifest import (
    COL_OP,
    MANIFEST_NAME,
    METADATA_COLUMNS,
    OP_DELETE,
    OP_INSERT,
    OP_UPDATE,
    SCRATCH_PREFIX,
    STAGED_META_COLUMNS,
    Manifest,
    SchemaEvent,
    StagedColumn,
    StagedFile,
    StagedTable,
    is_reserved_column,
)
from cdc_core.model.naming import window_dir_name
from cdc_core.model.schema_changes import SchemaChange
from cdc_core.model.types import TYPE_MAP_VERSION, TableCodec, table_codec
from cdc_core.model.window_plan import WindowPlan

log = logging.getLogger(__name__)

DEFAULT_ROW_GROUP_ROWS = 50_000
# Cap on a row group's estimated size (from the plan's average event size), for windows of big rows.
DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024
MIN_ROW_GROUP_ROWS = 64
# Rows buffered across all tables before every buffer is flushed (bounds memory with many tables).
BUFFERED_ROWS_FACTOR = 4
# Row groups handed to the background writer and not yet written (each holds up to a row group of rows).
MAX_PENDING_WRITES = 2
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3
PROGRESS_EVERY_ROWS = 10_000
PROGRESS_EVERY_SECS = 5.0
_CHUNK = 1 << 20

ProgressFn = Callable[..., None]


# ------------------------------------------------------------------------------------------- paths


def _part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


class _Store:
    """The staging root through fsspec; local filesystems additionally get fsync and atomic rename."""

    def __init__(self, staging_root: str, storage: Storage) -> None:
        self.root_url = staging_root
        fs, root = storage.fs(staging_root)
        self.fs: fsspec.AbstractFileSystem = fs
        self.root = root.rstrip("/")
        self.local = isinstance(fs, LocalFileSystem)

    def window_path(self, pipeline: str, seq: int) -> str:
        return f"{self.root}/{unit_dir(pipeline)}/{window_dir_name(seq)}"

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with self.fs.open(path, "rb") as f:
                return f.read()  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None

    def open_write(self, path: str) -> Any:
        parent = path.rpartition("/")[0]
        if parent:
            self.fs.makedirs(parent, exist_ok=True)
        return self.fs.open(path, "wb")

    def finish_file(self, f: Any) -> None:
        """Flush, fsync (local) and close a file opened with open_write."""
        f.flush()
        if self.local:
            os.fsync(f.fileno())
        f.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        f = self.open_write(path)
        try:
            f.write(data)
        finally:
            self.finish_file(f)

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path, recursive=True)

    def fsync_dir(self, path: str) -> None:
        if not self.local:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _HashingSink:
    """A write-only file for ParquetWriter that counts and hashes bytes on their way to the real file."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.sha = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        mv = memoryview(data)
        self.sha.update(mv)
        self._f.write(mv)
        self.size += mv.nbytes
        return mv.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._f.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        # ParquetWriter.close() does not close a Python sink; the store closes the real file.
        self.closed = True


# ---------------------------------------------------------------------------------------- staging


@dataclass
class _Segment:
    """One table shape's file: rows buffered for the next row group, and the open writer."""

    codec: TableCodec
    index: int
    rel_path: str
    buffer: list[RowChange] = field(default_factory=list)
    # Rows that arrived already in staged form (RowBatch), in order, all before `buffer`'s rows.
    batches: list[pa.RecordBatch] = field(default_factory=list)
    batch_rows: int = 0
    rows: int = 0
    writer: pq.ParquetWriter | None = None
    file: Any = None
    sink: _HashingSink | None = None
    staged: StagedFile | None = None
    declared: bool = False  # written even without rows (an empty table still gets its Delta table)


@dataclass
class _TableState:
    schema: str
    table: str
    segments: list[_Segment] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {OP_INSERT: 0, OP_UPDATE: 0, OP_DELETE: 0})
    current_shape: TableSchema | None = None  # the TableSchema object of the open segment (identity fast path)
    last_ordinal: int | None = None  # of the last RowBatch (batches are ordered per table, not globally)


class _WindowWriter:
    def __init__(self, store: _Store, dir_path: str, plan: WindowPlan, row_group_rows: int) -> None:
        self.store = store
        self.dir = dir_path
        self.plan = plan
        self.row_group_rows = row_group_rows
        self.max_buffered = row_group_rows * BUFFERED_ROWS_FACTOR
        self.buffered = 0
        self.tables: dict[tuple[str, str], _TableState] = {}
        self.open_segments: list[_Segment] = []
        self.ddl: list[SchemaEvent] = []
        self.schema_changes: list[SchemaChange] = []
        self.ddl_tables: dict[tuple[str, ...], tuple[str, ...]] = {}  # tables the window's DDL changes -> key
        self.bytes = 0
        # Row groups are encoded and compressed on one background thread (pyarrow releases the GIL
        # there) while the reader decodes the next rows; one thread keeps every file's writes in order.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdc-parquet")
        self._pending: deque[Future[None]] = deque()

    # -- background writes

    def _write(self, seg: _Segment, table: pa.Table) -> None:
        self._pending.append(self._pool.submit(self._write_now, seg, table))
        while len(self._pending) > MAX_PENDING_WRITES:  # bounds the row groups held in memory
            self._pending.popleft().result()

    def drain(self) -> None:
        """Wait for every submitted row group to be written (raises the first write error)."""
        while self._pending:
            self._pending.popleft().result()

    def shutdown(self) -> None:
        for fut in self._pending:
            fut.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)

    def _write_now(self, seg: _Segment, table: pa.Table) -> None:
        if seg.writer is None:
            self._open(seg, table.schema)
        assert seg.writer is not None
        seg.writer.write_table(table, row_group_size=table.num_rows)

    # -- segments

    def segment_for(self, shape: TableSchema) -> tuple[_TableState, _Segment]:
        key = (shape.schema, shape.table)
        state = self.tables.get(key)
        if state is None:
            state = self.tables[key] = _TableState(shape.schema, shape.table)
        elif state.segments:
            seg = state.segments[-1]
            if shape is state.current_shape:
                return state, seg
            cur = seg.codec.table
            if cur.columns == shape.columns and cur.key == shape.key:
                state.current_shape = shape  # same shape, another object: remember it for the fast path
                return state, seg
            self.close_segment(seg)  # a DDL changed the table: the next rows go to a new file
        reserved = [c.name for c in shape.columns if is_reserved_column(c.name)]
        if reserved:
            raise SchemaConflict(
                f"window {self.plan.label()}: table {shape.name} has column(s) {reserved}, whose names the lake "
                f"tables use for their own metadata ({', '.join(METADATA_COLUMNS)}, {SCRATCH_PREFIX}*; case does "
                "not matter). Rename the column(s) at the source, or exclude the table (tables.exclude)"
            )
        codec = table_codec(shape)
        index = len(state.segments)
        seg = _Segment(codec, index, f"{table_dir_rel(shape.schema, shape.table)}/{_part_name(index)}")
        state.segments.append(seg)
        state.current_shape = shape
        self.open_segments.append(seg)
        return state, seg

    def flush(self, seg: _Segment) -> None:
        """Write everything the segment buffers as one row group."""
        rows = seg.buffer
        if not rows and not seg.batches:
            return
        seg.buffer = []
        self.buffered -= len(rows) + seg.batch_rows
        if not seg.batches:
            self._write(seg, pa.Table.from_batches([self._batch(seg.codec, rows)]))
            return
        batches = seg.batches
        if rows:
            batches.append(self._batch(seg.codec, rows))
        seg.batches, seg.batch_rows = [], 0
        self._write(seg, pa.Table.from_batches(batches).combine_chunks())

    def add_batch(self, seg: _Segment, batch: pa.RecordBatch) -> None:
        """Buffer rows in staged form; cut a row group every `row_group_rows` rows of the segment, as the
        row-by-row path does."""
        if seg.buffer:  # keep arrival order: earlier RowChanges go first
            seg.batches.append(self._batch(seg.codec, seg.buffer))
            seg.batch_rows += len(seg.buffer)
            seg.buffer = []
        n = batch.num_rows
        seg.batches.append(batch)
        seg.batch_rows += n
        seg.rows += n
        self.buffered += n
        rg = self.row_group_rows
        while seg.batch_rows >= rg:
            table = pa.Table.from_batches(seg.batches)
            rest = table.slice(rg)
            seg.batches, seg.batch_rows = rest.to_batches(), rest.num_rows
            self.buffered -= rg
            self._write(seg, table.slice(0, rg).combine_chunks())
        if self.buffered >= self.max_buffered:
            self.flush_all()

    def _open(self, seg: _Segment, schema: pa.Schema) -> None:
        seg.file = self.store.open_write(f"{self.dir}/{seg.rel_path}")
        seg.sink = _HashingSink(seg.file)
        seg.writer = pq.ParquetWriter(
            seg.sink,
            schema,
            compression=COMPRESSION,
            compression_level=COMPRESSION_LEVEL,
            use_dictionary=_dictionary_columns(seg.codec),
            write_statistics=True,
        )

    def flush_all(self) -> None:
        for seg in self.open_segments:
            self.flush(seg)

    def close_segment(self, seg: _Segment) -> None:
        self.flush(seg)
        self.drain()
        if seg.writer is None and seg.declared:
            self._open(seg, seg.codec.arrow_schema)  # a file with the schema and no rows
        if seg.writer is not None and seg.sink is not None:
            seg.writer.close()
            self.store.finish_file(seg.file)
            seg.staged = StagedFile(
                path=seg.rel_path,
                rows=seg.rows,
                bytes=seg.sink.size,
                sha256=seg.sink.sha.hexdigest(),
                columns=tuple(c.name for c in seg.codec.columns),
            )
            self.bytes += seg.sink.size
            seg.writer = seg.file = seg.sink = None
        if seg in self.open_segments:
            self.open_segments.remove(seg)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.drain()
        for seg in self.open_segments:
            with contextlib.suppress(Exception):
                if seg.writer is not None:
                    seg.writer.close()
                if seg.file is not None:
                    seg.file.close()

    def _batch(self, codec: TableCodec, rows: list[RowChange]) -> pa.RecordBatch:
        schema = codec.arrow_schema
        arrays: list[pa.Array] = [
            pa.array([r.op for r in rows], schema.field(0).type),
            pa.array([r.version for r in rows], schema.field(1).type),
            pa.array([r.ordinal for r in rows], schema.field(2).type),
            # Commit times are whole seconds in the binlog; round to microseconds all the same.
            pa.array([round(r.commit_ts * 1_000_000) for r in rows], schema.field(3).type),
        ]
        values = [r.values for r in rows]
        for col in codec.columns:
            name = col.name
            try:
                raw = [v[name] for v in values]
            except KeyError:
                raise StagingError(
                    f"window {self.plan.label()}: a change to {codec.table.name!r} has no value for column "
                    f"{name!r}: the row image is incomplete; the source must log full row images "
                    "(binlog_row_image=FULL, binlog_row_metadata=FULL)"
                ) from None
            try:
                arrays.append(pa.array(col.convert_values(raw), col.arrow_type))
            except Exception as e:
                bad = _first_bad_value(col, raw)
                raise StagingError(
                    f"window {self.plan.label()}: table {codec.table.name!r} column {name!r} "
                    f"({col.mysql_type} -> {col.arrow_type}) cannot stage the value {bad!r}: {e}. This is a "
                    "type-map or reader bug: report it with the value; exclude the table to proceed"
                ) from e
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def add_ddl(self, item: Any, label: str) -> None:
        """A DDL statement of the window: its text, its typed changes, and the tables it changes."""
        self.ddl.append(_schema_event(item, label))
        self.schema_changes.extend(getattr(item, "changes", ()))
        keys = list(getattr(item, "keys", ()))
        for i, name in enumerate(getattr(item, "tables", ())):
            key = tuple(keys[i]) if i < len(keys) else ()
            if key or tuple(name) not in self.ddl_tables:
                self.ddl_tables[tuple(name)] = key

    # -- the manifest

    def finish(self, info: dict[str, Any]) -> Manifest:
        for seg in list(self.open_segments):
            self.close_segment(seg)
        tables = []
        for (schema, table), state in sorted(self.tables.items()):
            files = tuple(s.staged for s in state.segments if s.staged is not None)
            if not files:
                continue
            latest = state.segments[-1].codec
            tables.append(
                StagedTable(
                    schema=schema,
                    table=table,
                    key=latest.table.key,
                    columns=_union_columns([s.codec for s in state.segments]),
                    files=files,
                    inserts=state.counts[OP_INSERT],
                    updates=state.counts[OP_UPDATE],
                    deletes=state.counts[OP_DELETE],
                )
            )
        staged = {(t.schema, t.table) for t in tables}
        # A table the window changes only by DDL (a TRUNCATE, a RENAME's target, ...) is staged without files:
        # the merge applies its schema changes and records the window in it like in every other table.
        for (schema, table), key in self.ddl_tables.items():
            if (schema, table) not in staged:
                tables.append(StagedTable(schema=schema, table=table, key=key, columns=(), files=()))
                staged.add((schema, table))
        tables.sort(key=lambda t: (t.schema, t.table))
        return Manifest(plan=self.plan, tables=tuple(tables), ddl=tuple(self.ddl), info=info,
                        schema_changes=tuple(self.schema_changes))


def _dictionary_columns(codec: TableCodec) -> list[str]:
    """Columns worth dictionary encoding: the op and ENUM/SET labels. Most source columns of a change
    stream are high-cardinality, where trying a dictionary first costs about half the write time and
    gives bigger files than zstd alone (bench/RESULTS.md)."""
    low = [c.name for c in codec.columns if c.mysql_type.startswith(("enum(", "set("))]
    return [COL_OP, *low]


def _first_bad_value(col: Any, raw: list[Any]) -> Any:
    for v in raw:
        try:
            pa.array(col.convert_values([v]), col.arrow_type)
        except Exception:
            return v
    return None


def _union_columns(codecs: list[TableCodec]) -> tuple[StagedColumn, ...]:
    """All columns seen in the window, in the latest shape's order, latest type; dropped columns keep
    their place after the column they followed."""
    order: list[str] = [c.name for c in codecs[-1].columns]
    by_name: dict[str, StagedColumn] = {c.name: c.staged_column() for c in codecs[-1].columns}
    for codec in reversed(codecs[:-1]):
        prev: str | None = None
        for c in codec.columns:
            if c.name not in by_name:
                by_name[c.name] = c.staged_column()
                order.insert(order.index(prev) + 1 if prev is not None else 0, c.name)
            prev = c.name
    return tuple(by_name[n] for n in order)


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
) -> Manifest:
    """Stage a window's changes and return its manifest (or the existing one if already staged).

    `changes` yields `RowChange`s, `RowBatch`es and DDL events (any object with `ordinal`, `schema`,
    `query` and `version`), in binlog order (batches: in order per table). `progress(rows, tables=...,
    bytes=...)` is called every `progress_every_rows` rows or `progress_every_secs` seconds (checked every
    1,024 rows), and once at the end; never per row. Tables in `declare` are staged even when no change
    arrives for them (a file with their columns and no rows), so the merge creates their Delta table.
    """
    t0 = time.monotonic()
    store = _Store(staging_root, storage)
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
        _remove_stale_temp_dirs(store, parent, name)
        target = f"{parent}/.{name}.tmp-{uuid.uuid4().hex[:12]}"
    else:
        # No atomic rename: clear any leftover in place (manifest first, so it is never "staged").
        store.remove(f"{final}/{MANIFEST_NAME}")
        store.remove(final)
        target = final

    writer = _WindowWriter(store, target, plan, rg_rows)
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
            changes=manifest.changes, bytes=writer.bytes, secs=f"{time.monotonic() - t0:.2f}"),
    )
    return manifest


def _consume(
    writer: _WindowWriter,
    changes: Iterable[Any],
    progress: ProgressFn | None,
    every_rows: int,
    every_secs: float,
) -> None:
    rg_rows = writer.row_group_rows
    max_buffered = writer.max_buffered
    label = writer.plan.label()
    last_ordinal: int | None = None
    last_shape: TableSchema | None = None
    seg: _Segment | None = None
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
        last_ordinal = ordinal
        shape = item.table
        if shape is not last_shape:  # runs of one table share one TableSchema object: skip the lookup
            state, seg = writer.segment_for(shape)
            counts = state.counts
            last_shape = shape
        assert seg is not None
        try:
            counts[item.op] += 1
        except KeyError:
            raise StagingError(
                f"window {label}: change {ordinal} to {shape.name!r} has operation {item.op!r}, expected one of "
                f"{OP_INSERT!r}, {OP_UPDATE!r}, {OP_DELETE!r}; this is a reader bug: report it"
            ) from None
        seg.buffer.append(item)
        seg.rows += 1
        writer.buffered += 1
        rows += 1
        if len(seg.buffer) >= rg_rows:
            writer.flush(seg)
        elif writer.buffered >= max_buffered:
            writer.flush_all()
        if progress is not None and not rows & 1023:
            now = time.monotonic()
            if rows >= next_report or now - last_report_t >= every_secs:
                progress(rows, tables=len(writer.tables))
                next_report = rows + every_rows
                last_report_t = now


def _consume_batch(writer: _WindowWriter, item: RowBatch, label: str) -> int:
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
    for entry in pc.value_counts(batch.column(0)).to_pylist():
        op = entry["values"]
        if op not in counts:
            raise StagingError(
                f"window {label}: a change to {item.table.name!r} has operation {op!r}, expected one of "
                f"{OP_INSERT!r}, {OP_UPDATE!r}, {OP_DELETE!r}; this is a reader bug: report it"
            )
        counts[op] += entry["counts"]
    writer.add_batch(seg, batch)
    return int(n)


def _schema_event(item: Any, label: str) -> SchemaEvent:
    try:
        return SchemaEvent(int(item.ordinal), str(item.schema), str(item.query), int(item.version))
    except AttributeError as e:
        raise StagingError(
            f"window {label}: the change stream yielded {type(item).__name__}, which is neither a RowChange nor a "
            f"DDL event (ordinal, schema, query, version): {e}"
        ) from e


def _remove_stale_temp_dirs(store: _Store, parent: str, name: str) -> None:
    """Leftovers of an interrupted staging of this window (never read: only the final name counts)."""
    try:
        entries = store.fs.ls(parent, detail=False)
    except FileNotFoundError:
        return
    for p in entries:
        base = str(p).rstrip("/").rpartition("/")[2]
        if base.startswith((f".{name}.tmp-", f".{name}.old-")):
            store.remove(str(p))


def _fsync_tree(store: _Store, top: str) -> None:
    for dirpath, _dirs, _files in os.walk(top):
        store.fsync_dir(dirpath)


def _move_into_place(store: _Store, tmp: str, final: str, plan: WindowPlan, manifest: Manifest) -> Manifest:
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


def _existing_window(store: _Store, final: str, plan: WindowPlan) -> Manifest | None:
    """The staged manifest at `final` if it is complete, for `plan`, and its files verify."""
    manifest = _load_manifest(store, final)
    if manifest is None:
        return None
    if manifest.plan.to_dict() != plan.to_dict():
        raise StagingError(
            f"{final} holds a staged window for a different plan ({manifest.plan.label()}) than the one being "
            f"staged ({plan.label()}); two pipelines or environments share a staging root, or the window was "
            "re-planned. Delete that directory (or point staging_root elsewhere) and re-run the stage step"
        )
    try:
        _verify(store, final, manifest)
    except StagingError as e:
        log.warning("%s", line(event="window.restage", pipeline=plan.pipeline, seq=plan.seq, reason=str(e)))
        return None
    return manifest


# ------------------------------------------------------------------------------------------ reading


def _load_manifest(store: _Store, wdir: str) -> Manifest | None:
    data = store.read_bytes(f"{wdir}/{MANIFEST_NAME}")
    if data is None:
        return None
    try:
        return Manifest.from_json(data)
    except (ValueError, KeyError, TypeError) as e:
        # Unreadable JSON is a damaged copy: treat the window as not staged, so it is staged again.
        log.warning("%s", line(event="window.bad_manifest", path=f"{wdir}/{MANIFEST_NAME}", error=str(e)))
        return None


def read_manifest(staging_root: str, pipeline: str, seq: int, *, storage: Storage = AMBIENT) -> Manifest | None:
    """The staged window's manifest, or None when the window is not (completely) staged."""
    store = _Store(staging_root, storage)
    wdir = store.window_path(pipeline, seq)
    manifest = _load_manifest(store, wdir)
    if manifest is not None and (manifest.plan.pipeline != pipeline or manifest.plan.seq != seq):
        raise StagingError(
            f"{wdir}/{MANIFEST_NAME} describes window {manifest.plan.label()}, not {pipeline}#{seq}; the staging "
            "directory was copied or renamed by hand. Delete it; the window will be re-staged from the source"
        )
    return manifest


def _verify(store: _Store, wdir: str, manifest: Manifest) -> None:
    for t in manifest.tables:
        for f in t.files:
            path = f"{wdir}/{f.path}"
            what = _check_file(store, path, f)
            if what:
                raise StagingError(
                    f"staged window {manifest.plan.label()}: {path} {what}; the window will be re-staged from the "
                    "source (run the stage step again: it replaces the damaged copy)"
                )


def _check_file(store: _Store, path: str, f: StagedFile) -> str | None:
    sha = hashlib.sha256()
    size = 0
    try:
        with store.fs.open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                sha.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        return "is missing"
    if size != f.bytes:
        return f"has {size} bytes, the manifest says {f.bytes}"
    if sha.hexdigest() != f.sha256:
        return f"has sha256 {sha.hexdigest()}, the manifest says {f.sha256}"
    return None


# Windows this process verified (store, window directory, manifest digest): a step reads its window's manifest
# several times (stage, merge, ack), and hashing every staged file each time means downloading them again from an
# object store. Verified once per process: a file that changes afterwards is a fault of another kind (the merge
# reads the files the manifest names; a later process verifies again). The store's endpoint is part of the key:
# two pipelines of one process may keep the same paths on two stores.
_VERIFIED: set[tuple[str, str, str]] = set()
_VERIFIED_MAX = 256


def verify_window(staging_root: str, manifest: Manifest, *, storage: Storage = AMBIENT) -> None:
    """Check every staged file's size and sha256 against the manifest (once per process and window);
    StagingError names the first bad one."""
    store = _Store(staging_root, storage)
    wdir = store.window_path(manifest.plan.pipeline, manifest.plan.seq)
    endpoint = (storage.creds.endpoint_url if storage.creds is not None else None) or ""
    seen = (endpoint, wdir, hashlib.sha256(manifest.to_json().encode()).hexdigest())
    if seen in _VERIFIED:
        return
    _verify(store, wdir, manifest)
    if len(_VERIFIED) >= _VERIFIED_MAX:
        _VERIFIED.clear()
    _VERIFIED.add(seen)


def read_table_changes(
    staging_root: str, manifest: Manifest, table_name: str, *, storage: Storage = AMBIENT
) -> pa.Table:
    """All staged changes of one table (`schema.table`), metadata columns first, then the union of
    source columns in manifest order (NULL where a file lacks a column). For tests and tools."""
    table = manifest.table(table_name)
    store = _Store(staging_root, storage)
    wdir = store.window_path(manifest.plan.pipeline, manifest.plan.seq)
    parts = []
    for f in table.files:
        with store.fs.open(f"{wdir}/{f.path}", "rb") as fh:
            parts.append(pq.read_table(fh))
    names = [*STAGED_META_COLUMNS, *(c.name for c in table.columns)]
    if not parts:
        return pa.table({n: pa.array([], pa.null()) for n in names})
    out = pa.concat_tables(parts, promote_options="permissive")
    return out.select(names)


def delete_window(staging_root: str, pipeline: str, seq: int, *, storage: Storage = AMBIENT) -> bool:
    """Remove a staged window (manifest first, so it stops counting as staged at once).

    Returns whether anything was there.
    """
    store = _Store(staging_root, storage)
    wdir = store.window_path(pipeline, seq)
    found = store.exists(wdir)
    store.remove(f"{wdir}/{MANIFEST_NAME}")
    store.remove(wdir)
    if store.local:
        _remove_stale_temp_dirs(store, wdir.rpartition("/")[0], wdir.rpartition("/")[2])
    return found


def list_windows(staging_root: str, pipeline: str, *, storage: Storage = AMBIENT) -> list[int]:
    """Sequence numbers of the pipeline's completely staged windows (those with a manifest), ascending."""
    store = _Store(staging_root, storage)
    pdir = f"{store.root}/{unit_dir(pipeline)}"
    try:
        entries = store.fs.ls(pdir, detail=False)
    except FileNotFoundError:
        return []
    seqs = []
    for p in entries:
        base = str(p).rstrip("/").rpartition("/")[2]
        if len(base) == 11 and base[0] == "w" and base[1:].isdigit() and store.exists(f"{p}/{MANIFEST_NAME}"):
            seqs.append(int(base[1:]))
    return sorted(seqs)
