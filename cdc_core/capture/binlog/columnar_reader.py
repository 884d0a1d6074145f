"""The columnar-path reader: a window's changes as Arrow `RowBatch`es, decoded column-wise.

`read_change_batches` reads the same window as `library_reader.read_changes`, with the same checks, but
copies each rows event's row images into transaction-aligned slices that `cdc_core.capture.rowdecode` decodes
(per-table compiled scanners, vectorized column kernels) on a background thread or, for big windows without
the compiled row walk, in worker processes (`cdc_core.capture.decode_worker`).
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cdc_core.capture.binlog.savepoints import Savepoints
from cdc_core.capture.binlog.schema_events import SchemaChangeEvent, ddl_typer
from cdc_core.capture.binlog.stream import (
    FORGET_TABLES,
    ROWS_RAW,
    RawRows,
    cached_file_index,
    fast_change_version,
    partial_images_error,
    pos_key,
    random_replica_server_id,
    stream_events,
)
from cdc_core.capture.binlog.table_maps import SchemaBuilder
from cdc_core.capture.binlog.transactions import TxnAssembler, check_window_read, verify_identity, with_pipeline
from cdc_core.capture.binlog.xa import PreparedHold
from cdc_core.capture.ddl_events import DdlStatement
from cdc_core.capture.source import SourceParams, TableFilter
from cdc_core.model.changes import RowBatch, TableSchema
from cdc_core.model.errors import UnsupportedType
from cdc_core.model.positions import ServerIdentity, change_version
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.window_plan import WindowPlan

if TYPE_CHECKING:
    from cdc_core.capture import rowdecode

# The columnar reader cuts a window into transaction-aligned slices of about this many bytes of row
# images (or events), decoded inline or, for windows of at least PARALLEL_MIN_BYTES, by worker processes.
SLICE_BYTES = 4 * 1024 * 1024
SLICE_EVENTS = 20_000
BATCH_ROWS = 16_384
PARALLEL_MIN_BYTES = 32 * 1024 * 1024


def decode_workers(plan: WindowPlan, native: bool | None = None) -> int:
    """Worker processes for decoding a window: none for small windows (starting them costs more), and
    none with the compiled row walk (`native`, default: when it is available): what is left to decode
    then costs less than pickling each slice's images to a worker and its batches back (measured on
    2 cores: inline 1.2-1.8x faster on text, JSON and wide tables; bench/RESULTS.md, issue 19)."""
    from cdc_core.capture import rowdecode

    if rowdecode.native_available() if native is None else native:
        return 0
    cores = os.cpu_count() or 1
    if cores < 2 or plan.bytes < PARALLEL_MIN_BYTES:
        return 0
    return min(cores, 4)


class _InlineDecoder:
    """Decodes slices in the reader's process, on one background thread: its numpy and Arrow work runs
    while the reader thread reads the next slice's packets (the per-row scan shares the GIL)."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdc-decode")

    def submit(self, job: tuple[Any, ...]) -> Callable[[], rowdecode.SliceResult]:
        from cdc_core.capture.rowdecode import decode_slice

        return self.pool.submit(decode_slice, job).result

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def read_change_batches(
    params: SourceParams,
    identity: ServerIdentity,
    plan: WindowPlan,
    table_filter: TableFilter,
    schemas: Callable[[str, str], TableSchema | None] | None = None,
    *,
    server_id_for_replica: int | None = None,
    workers: int | None = None,
    batch_rows: int = BATCH_ROWS,
    slice_bytes: int = SLICE_BYTES,
    vectorize: bool = True,
    zero_dates: str = "null",
    native: bool | None = None,
    schema_policy: SchemaPolicy | None = None,
    before_images: Callable[[str, str], bool] | None = None,
) -> Iterator[RowBatch | SchemaChangeEvent]:
    """The window's changes like `read_changes`, decoded column-wise straight into the staged form.

    Same window, same checks, same changes (op, version, ordinal, commit time, values after the type
    map) as `read_changes` + staging's conversion, but as `RowBatch`es of one table each: row images
    are decoded from the rows-event bytes by per-table compiled scanners and vectorized column kernels
    (`cdc_core.capture.rowdecode`) instead of the library's per-value Python, over transaction-aligned slices
    of the window, by `workers` processes (default `decode_workers(plan)`; 0: in this process).
    Batches come in ordinal order per table (tables interleave); a DDL event after the batches of
    its slice. `vectorize=False` decodes every column with the per-value functions (tests compare).
    `native`: walk row images with the compiled scanner (default: when built and not switched off with
    CDC_NATIVE_DECODER=0; `rowdecode.native_available`); False runs the same walk as generated Python.
    `before_images(schema, table)`: whether an update of the table also yields its before image (op 'B', the
    ordinal of its update, just before it), as `read_changes` does.
    """
    if plan.start.same_point(plan.end):
        return
    from cdc_core.capture import rowdecode  # numpy and the decoders: only for a window with changes
    from cdc_core.capture.decode_worker import WorkerPool

    verify_identity(params, identity)
    flavor = identity.flavor
    builder = SchemaBuilder(flavor, schemas, params, plan.pipeline)
    typer = ddl_typer(table_filter, schema_policy, plan.pipeline, builder)
    asm = TxnAssembler(identity, plan.start.epoch, None, plan.start.commit_ts, track_gtid=False, boundaries=False)
    start_key = pos_key(plan.start.file, plan.start.offset)
    end_key = pos_key(plan.end.file, plan.end.offset)
    end_index, end_offset = end_key
    epoch = plan.start.epoch
    tables: dict[int, tuple[int, rowdecode.TableSpec] | None] = {}  # table id -> (slice table id, spec)
    specs: dict[tuple[str, str], tuple[int, rowdecode.TableSpec]] = {}  # current shape per table name
    transactions = 0
    last_end: tuple[int, int] | None = None
    last_file = ""
    last_ts = float(plan.start.commit_ts or 0)
    prepared: PreparedHold[list[tuple[Any, ...]]] = PreparedHold(f"pipeline {plan.pipeline!r}: window {plan.label()}")
    savepoints: Savepoints[Any] = Savepoints()
    use_native = rowdecode.native_available() if native is None else native
    nworkers = decode_workers(plan, use_native) if workers is None else workers
    decoder: Any = WorkerPool(nworkers) if nworkers > 0 else _InlineDecoder()
    inflight: deque[tuple[Callable[[], rowdecode.SliceResult], list[DdlStatement]]] = deque()
    base = 0  # ordinals taken by the slices already yielded
    current = rowdecode.Slice()

    ids = itertools.count(1)  # slice table ids: a new shape of a table gets a later id (staged after)

    def table_spec(tm: Any) -> tuple[int, rowdecode.TableSpec] | None:
        shape = builder.build(tm)
        if shape is None:  # a sequence: not data
            return None
        wants = before_images is not None and before_images(shape.schema, shape.table)
        spec = rowdecode.TableSpec(shape, rowdecode.table_layout(tm), zero_dates, wants)
        name = (spec.shape.schema, spec.shape.table)
        known = specs.get(name)
        if known is None or known[1] != spec:
            known = specs[name] = (next(ids), spec)
        return known

    def finish(result: Callable[[], rowdecode.SliceResult], ddl: list[DdlStatement]) -> Iterator[Any]:
        nonlocal base
        try:
            done = result()
        except UnsupportedType as e:  # a refused zero date (zero_dates: refuse): name the pipeline
            raise with_pipeline(plan.pipeline, e) from None
        yield from rowdecode.finish_slice(done, base)
        for statement, ordinal in zip(ddl, done.ddl_ordinals, strict=True):
            yield SchemaChangeEvent.of(base + ordinal, statement)
        base += done.ordinals

    def submit(sl: rowdecode.Slice) -> Iterator[Any]:
        inflight.append((decoder.submit(sl.job(batch_rows, vectorize, use_native)), sl.ddl))
        while len(inflight) > max(1, nworkers):  # one slice decoding per worker (or the decode thread)
            yield from finish(*inflight.popleft())

    events = stream_events(
        params,
        plan.start.file,
        plan.start.offset,
        server_id=server_id_for_replica or random_replica_server_id(),
        only_schemas=table_filter.literal_schemas(),
        rows=ROWS_RAW,
    )
    file, file_index = "", -1  # the file of the last event and its index (events come file by file)
    started = False
    try:
        with closing(events):
            for ev in events:
                kind = ev.kind
                if kind in FORGET_TABLES:
                    tables.clear()
                if ev.end == 0:
                    continue
                if ev.file is not file:
                    file, file_index = ev.file, cached_file_index(ev.file)
                if not started:
                    if (file_index, ev.start) < start_key:
                        continue
                    started = True
                if file_index > end_index or (file_index == end_index and ev.start >= end_offset):
                    break
                if kind == "rows":
                    raw = ev.raw
                    found = tables.get(raw.table_id) if raw is not None else None
                    if found is not None:
                        if raw.__class__ is not RawRows:
                            raise partial_images_error(plan.pipeline, found[1].shape.name, ev.file, ev.start)
                        current.add_rows(
                            found[0], found[1], _EV_KIND[raw.kind], fast_change_version(epoch, ev.file, ev.start),
                            raw.data, raw.start, raw.end,
                        )
                elif kind == "gtid":
                    current.rollback()  # a transaction that never committed: its rows are dropped
                    savepoints.clear()
                elif kind == "tablemap":
                    tm = ev.raw
                    tables[tm.table_id] = table_spec(tm) if table_filter.matches(tm.schema, tm.table) else None
                elif kind == "query":
                    ddl = None
                    if not (asm.in_txn and savepoints.statement(ev.query, current.savepoint, current.rollback_to)):
                        ddl = typer(ev)
                    if ddl is not None:
                        current.add_ddl(replace(ddl, version=change_version(epoch, ev.file, ev.start)))
                b = asm.feed(ev)
                if b is None:
                    if not asm.in_txn:  # an event without row changes after the last transaction (QuietTail)
                        last_end, last_file = (file_index, ev.end), file
                    continue
                transactions += 1
                savepoints.clear()
                last_end, last_file = (file_index, b.end), file  # b is this event: the transaction's end
                txn = fast_change_version(epoch, asm.closed_file, asm.closed_start)  # where the transaction began
                if asm.closed_prepare is not None:  # changes once its XA COMMIT is read (xa)
                    prepared.prepare(asm.closed_prepare, current.park(), txn)
                    continue
                if asm.closed_outcome is not None:
                    committed = prepared.outcome(asm.closed_outcome)
                    if committed is not None:
                        current.unpark(committed[0])
                        txn = committed[1]
                last_ts = float(b.timestamp or 0)
                current.commit(last_ts, txn)
                if current.nbytes >= slice_bytes or len(current.order) >= SLICE_EVENTS:
                    yield from submit(current)
                    current = rowdecode.Slice()
        last_label = "nothing" if last_end is None else f"up to {last_file}:{last_end[1]}"
        check_window_read(
            plan, params, reached_end=last_end == end_key, last_label=last_label, transactions=transactions
        )
        current.rollback()
        for held, txn in prepared.left_open():
            current.unpark(held)
            current.commit(last_ts, txn)
        if not current.empty:
            yield from submit(current)
        while inflight:
            yield from finish(*inflight.popleft())
    finally:
        decoder.shutdown()


_EV_KIND = {"write": 0, "update": 1, "delete": 2}  # rowdecode.EV_WRITE, EV_UPDATE, EV_DELETE
