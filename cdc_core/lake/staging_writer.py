"""Writing one window's staged files: a Parquet file per (table, schema shape), row groups encoded on a
background thread while the reader decodes the next rows, and the window's manifest built from what was
written (cdc_core/lake/staging.py drives it; the layout is in cdc_core.model.manifest)."""

from __future__ import annotations

import contextlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_core.lake.staging_store import HashingSink, StagingStore, part_name
from cdc_core.model.changes import RowChange, TableSchema
from cdc_core.model.errors import SchemaConflict, StagingError
from cdc_core.model.layout import table_dir_rel
from cdc_core.model.manifest import (
    COL_OP,
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
from cdc_core.model.schema_changes import SchemaChange
from cdc_core.model.transforms import HASH_TYPE, TableTransform, Transforms, schema_change_lands, table_transform
from cdc_core.model.types import META_FIELDS, ColumnCodec, TableCodec, table_codec
from cdc_core.model.window_plan import WindowPlan

# Rows buffered across all tables before every buffer is flushed (bounds memory with many tables).
BUFFERED_ROWS_FACTOR = 4
# Row groups handed to the background writer and not yet written (each holds up to a row group of rows).
MAX_PENDING_WRITES = 2
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3
# A hashed column (hex digests: 4 bits of entropy a byte) compresses by entropy coding alone: zstd level 1 gives
# the same size as level 3 at a third of the time (bench/RESULTS.md, "Capture with hashed columns").
HASHED_COMPRESSION_LEVEL = 1
BEFORE_SUFFIX = ".before.parquet"  # a segment's before-image companion: part-NNNNN.before.parquet



@dataclass
class Segment:
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
    sink: HashingSink | None = None
    staged: StagedFile | None = None
    declared: bool = False  # written even without rows (an empty table still gets its Delta table)
    # The table's transform rule for this shape (cdc_core/model/transforms.py) and the staged form it gives
    # (`out_codec`); None: the rows are staged as read.
    transform: TableTransform | None = None
    out_codec: TableCodec | None = None
    to_delete: dict[str, int] = field(default_factory=lambda: {OP_INSERT: 0, OP_UPDATE: 0})  # by the filter
    # The updates' before images of this segment's rows (op 'B'; tables with a change log), in a file of their
    # own next to this one (`StagedFile.before`): no other reader of the window sees them.
    before: Segment | None = None
    is_before: bool = False  # this is such a companion: `rows` counts what the transform's filter kept

    @property
    def output(self) -> TableCodec:
        """The staged form of the rows: the transform's, or the source's."""
        return self.out_codec or self.codec


@dataclass
class TableState:
    schema: str
    table: str
    segments: list[Segment] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {OP_INSERT: 0, OP_UPDATE: 0, OP_DELETE: 0})
    current_shape: TableSchema | None = None  # the TableSchema object of the open segment (identity fast path)
    last_ordinal: int | None = None  # of the last RowBatch (batches are ordered per table, not globally)


class WindowWriter:
    def __init__(
        self, store: StagingStore, dir_path: str, plan: WindowPlan, row_group_rows: int,
        transforms: Transforms | None = None,
    ) -> None:
        self.store = store
        self.transforms = transforms if transforms else None
        self.dir = dir_path
        self.plan = plan
        self.row_group_rows = row_group_rows
        self.max_buffered = row_group_rows * BUFFERED_ROWS_FACTOR
        self.buffered = 0
        self.tables: dict[tuple[str, str], TableState] = {}
        self.open_segments: list[Segment] = []
        self.ddl: list[SchemaEvent] = []
        self.schema_changes: list[SchemaChange] = []
        self.ddl_tables: dict[tuple[str, ...], tuple[str, ...]] = {}  # tables the window's DDL changes -> key
        self.bytes = 0
        # Row groups are encoded and compressed on one background thread (pyarrow releases the GIL
        # there) while the reader decodes the next rows; one thread keeps every file's writes in order.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdc-parquet")
        self._pending: deque[Future[None]] = deque()

    # -- background writes

    def _write(self, seg: Segment, table: pa.Table) -> None:
        if seg.transform is not None:  # on the reader's thread: the clear values never reach the writer's
            table, moved = seg.transform.apply(table, STAGED_META_COLUMNS)
            for op, n in moved.items():
                seg.to_delete[op] += n
        if seg.is_before:
            seg.rows += table.num_rows
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

    def _write_now(self, seg: Segment, table: pa.Table) -> None:
        if seg.writer is None:
            self._open(seg, table.schema)
        assert seg.writer is not None
        seg.writer.write_table(table, row_group_size=table.num_rows)

    # -- segments

    def segment_for(self, shape: TableSchema) -> tuple[TableState, Segment]:
        key = (shape.schema, shape.table)
        state = self.tables.get(key)
        if state is None:
            state = self.tables[key] = TableState(shape.schema, shape.table)
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
        seg = Segment(codec, index, f"{table_dir_rel(shape.schema, shape.table)}/{part_name(index)}")
        rule = self.transforms.rule_for(shape.name) if self.transforms is not None else None
        if rule is not None:
            assert self.transforms is not None
            seg.transform = table_transform(rule, self.transforms.key, shape.name, codec.columns, shape.key)
            out = tuple(ColumnCodec(c.name, c.mysql_type, c.arrow_type, c.delta_type, c.nullable, None)
                        for c in seg.transform.columns)
            seg.out_codec = TableCodec(shape, out, seg.transform.arrow_schema(META_FIELDS))
        state.segments.append(seg)
        state.current_shape = shape
        self.open_segments.append(seg)
        return state, seg

    def before_segment(self, seg: Segment) -> Segment:
        """The companion segment holding `seg`'s updates' before images (opened on the first one)."""
        if seg.before is None:
            rel = seg.rel_path.removesuffix(".parquet") + BEFORE_SUFFIX
            seg.before = Segment(seg.codec, seg.index, rel, transform=seg.transform, out_codec=seg.out_codec,
                                 is_before=True)
            self.open_segments.append(seg.before)
        return seg.before

    def flush(self, seg: Segment) -> None:
        """Write everything the segment buffers as one row group."""
        rows = seg.buffer
        if not rows and not seg.batches:
            return
        seg.buffer = []
        self.buffered -= len(rows) + seg.batch_rows
        if not seg.batches:
            self._write(seg, pa.Table.from_batches([self._batch(seg, rows)]))
            return
        batches = seg.batches
        if rows:
            batches.append(self._batch(seg, rows))
        seg.batches, seg.batch_rows = [], 0
        self._write(seg, pa.Table.from_batches(batches).combine_chunks())

    def add_row(self, seg: Segment, row: RowChange) -> None:
        """Buffer one change (the row-by-row path); a row group is cut every `row_group_rows` rows of the segment."""
        seg.buffer.append(row)
        if not seg.is_before:
            seg.rows += 1
        self.buffered += 1
        if len(seg.buffer) >= self.row_group_rows:
            self.flush(seg)
        elif self.buffered >= self.max_buffered:
            self.flush_all()

    def add_batch(self, seg: Segment, batch: pa.RecordBatch) -> None:
        """Buffer rows in staged form; cut a row group every `row_group_rows` rows of the segment, as the
        row-by-row path does."""
        if seg.buffer:  # keep arrival order: earlier RowChanges go first
            seg.batches.append(self._batch(seg, seg.buffer))
            seg.batch_rows += len(seg.buffer)
            seg.buffer = []
        n = batch.num_rows
        seg.batches.append(batch)
        seg.batch_rows += n
        if not seg.is_before:
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

    def _open(self, seg: Segment, schema: pa.Schema) -> None:
        seg.file = self.store.open_write(f"{self.dir}/{seg.rel_path}")
        seg.sink = HashingSink(seg.file)
        level: int | dict[str, int] = COMPRESSION_LEVEL
        hashed = [c.name for c in seg.transform.columns if c.mysql_type == HASH_TYPE] if seg.transform else []
        if hashed:
            level = dict.fromkeys(schema.names, COMPRESSION_LEVEL) | dict.fromkeys(hashed, HASHED_COMPRESSION_LEVEL)
        seg.writer = pq.ParquetWriter(
            seg.sink,
            schema,
            compression=COMPRESSION,
            compression_level=level,
            use_dictionary=_dictionary_columns(seg.output),
            write_statistics=True,
        )

    def flush_all(self) -> None:
        for seg in self.open_segments:
            self.flush(seg)

    def close_segment(self, seg: Segment) -> None:
        if seg.before is not None:
            self.close_segment(seg.before)
        self.flush(seg)
        self.drain()
        if seg.writer is None and seg.declared:
            self._open(seg, seg.output.arrow_schema)  # a file with the schema and no rows
        if seg.writer is not None and seg.sink is not None:
            seg.writer.close()
            self.store.finish_file(seg.file)
            seg.staged = StagedFile(
                path=seg.rel_path,
                rows=seg.rows,
                bytes=seg.sink.size,
                sha256=seg.sink.sha.hexdigest(),
                columns=tuple(c.name for c in seg.output.columns),
                key=seg.codec.table.key,
                before=seg.before.staged if seg.before is not None else None,
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

    def _batch(self, seg: Segment, rows: list[RowChange]) -> pa.RecordBatch:
        codec = seg.codec
        schema = codec.arrow_schema
        arrays: list[pa.Array] = [
            pa.array([r.op for r in rows], schema.field(0).type),
            pa.array([r.version for r in rows], schema.field(1).type),
            pa.array([r.ordinal for r in rows], schema.field(2).type),
            # Commit times are whole seconds in the binlog; round to microseconds all the same.
            pa.array([round(r.commit_ts * 1_000_000) for r in rows], schema.field(3).type),
            pa.array([r.txn for r in rows], schema.field(4).type),
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
                # A column the transform hides is never named with its value, not even in an error.
                if seg.transform is not None and name in seg.transform.sensitive:
                    raise StagingError(
                        f"window {self.plan.label()}: table {codec.table.name!r} column {name!r} "
                        f"({col.mysql_type} -> {col.arrow_type}) cannot stage a value (not shown: the table's "
                        f"transform hides the column; {type(e).__name__}). This is a type-map or reader bug: "
                        "report it; exclude the table to proceed"
                    ) from None
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
        self.schema_changes.extend(c for c in getattr(item, "changes", ()) if self._lands(c))
        keys = list(getattr(item, "keys", ()))
        for i, name in enumerate(getattr(item, "tables", ())):
            key = tuple(keys[i]) if i < len(keys) else ()
            if key or tuple(name) not in self.ddl_tables:
                self.ddl_tables[tuple(name)] = key

    def _lands(self, change: SchemaChange) -> bool:
        """Whether a schema change goes on to the lake under the tables' transforms (SchemaConflict: it would
        defeat one)."""
        if self.transforms is None or not change.table:
            return True
        rule = self.transforms.rule_for(change.table_name)
        if rule is None:
            return True
        target = self.transforms.rule_for(change.target_name) if change.target_name is not None else rule
        return schema_change_lands(rule, change, target)

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
            moved = {op: sum(s.to_delete[op] for s in state.segments) for op in (OP_INSERT, OP_UPDATE)}
            tables.append(
                StagedTable(
                    schema=schema,
                    table=table,
                    key=latest.table.key,
                    columns=_union_columns([s.output for s in state.segments]),
                    files=files,
                    inserts=state.counts[OP_INSERT] - moved[OP_INSERT],
                    updates=state.counts[OP_UPDATE] - moved[OP_UPDATE],
                    deletes=state.counts[OP_DELETE] + moved[OP_INSERT] + moved[OP_UPDATE],
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



def _schema_event(item: Any, label: str) -> SchemaEvent:
    try:
        return SchemaEvent(int(item.ordinal), str(item.schema), str(item.query), int(item.version))
    except AttributeError as e:
        raise StagingError(
            f"window {label}: the change stream yielded {type(item).__name__}, which is neither a RowChange nor a "
            f"DDL event (ordinal, schema, query, version): {e}"
        ) from e

