"""A window's row images in transaction-aligned slices: what the reader copies (`Slice`), the picklable job
that decodes one (`decode_slice`, inline or in a worker process), and its batches with window ordinals
(`finish_slice`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.capture.rowdecode.decoder import OP_BYTE, OP_LABELS, OPC_BEFORE, TableDecoder, scan_table
from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.model.changes import RowBatch, TableSchema

# A window is cut into transaction-aligned slices of about SLICE_BYTES of row images (the columnar reader's
# setting, cdc_core.capture.binlog.columnar_reader). The reader only
# copies each rows event's images into the slice (`Slice`); `decode_slice` finds the rows, assigns
# slice-local ordinals and builds the batches, inline or in a worker process; the reader then shifts
# the ordinals by everything before the slice (`finish_slice`). Rows wait in the slice until their
# transaction commits (the commit time is in the commit event), so memory holds about two slices per
# worker plus the largest transaction, in compact form (raw images, Arrow batches).


@dataclass(frozen=True)
class TableSpec:
    """What decoding a table's row images needs (picklable; compiled once per process)."""

    shape: TableSchema
    layouts: tuple[ColumnLayout, ...]
    zero_dates: str = "null"  # the pipeline's `zero_dates` setting: "refuse" or "null"
    before_images: bool = False  # updates also stage their before images (the lake table keeps a change log)


class _SliceTable:
    __slots__ = ("buf", "commits", "ends", "kinds", "spec", "versions")

    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self.buf = bytearray()
        self.kinds = bytearray()  # per event: EV_*
        self.versions: list[int] = []  # per event
        self.ends: list[int] = []  # per event: end of its images in buf
        self.commits: list[tuple[int, int, int]] = []  # (events up to here, commit time in µs, txn version)


class Slice:
    """Row events of consecutive transactions, as the reader copies them (no decoding)."""

    def __init__(self) -> None:
        self.tables: dict[int, _SliceTable] = {}  # table id -> its images (ids grow with first sight)
        self.order: list[int] = []  # per event in binlog order: table id, or -1 for a DDL (one ordinal)
        self.ddl: list[Any] = []  # per DDL marker: the reader's statement (ddl_events.DdlStatement)
        self.nbytes = 0
        self.touched: dict[int, tuple[int, int]] = {}  # by the open transaction: id -> (bytes, events) before it
        self.committed = (0, 0)  # (order, ddl) lengths after the last commit

    def add_rows(  # noqa: PLR0917 - called once per rows event: positional on purpose
        self, tid: int, spec: TableSpec, kind: int, version: int, data: Any, start: int, end: int
    ) -> None:
        t = self.tables.get(tid)
        if t is None:
            t = self.tables[tid] = _SliceTable(spec)
        if tid not in self.touched:
            self.touched[tid] = (len(t.buf), len(t.kinds))
        t.buf += data[start:end]
        t.kinds.append(kind)
        t.versions.append(version)
        t.ends.append(len(t.buf))
        self.order.append(tid)
        self.nbytes += end - start

    def add_ddl(self, statement: Any) -> None:
        self.order.append(-1)
        self.ddl.append(statement)

    def commit(self, commit_ts: float, txn: int) -> None:
        """The open transaction committed at `commit_ts`; `txn`: the change version of its first event."""
        ts = round(commit_ts * 1_000_000)
        for tid in self.touched:
            t = self.tables[tid]
            t.commits.append((len(t.kinds), ts, txn))
        self.touched.clear()
        self.committed = (len(self.order), len(self.ddl))

    def rollback(self) -> None:
        """Drop the open transaction (one that never committed in the stream)."""
        if not self.touched and len(self.order) == self.committed[0]:
            return
        for tid, (nbytes, nev) in self.touched.items():
            t = self.tables[tid]
            self.nbytes -= len(t.buf) - nbytes
            del t.buf[nbytes:]
            del t.kinds[nev:]
            del t.versions[nev:]
            del t.ends[nev:]
            if not t.kinds:
                del self.tables[tid]
        self.touched.clear()
        del self.order[self.committed[0] :]
        del self.ddl[self.committed[1] :]

    def savepoint(self) -> tuple[int, int, dict[int, tuple[int, int]]]:
        """A mark of the open transaction's changes so far (a SAVEPOINT), for `rollback_to`."""
        return len(self.order), len(self.ddl), {tid: (len(self.tables[tid].buf), len(self.tables[tid].kinds))
                                                for tid in self.touched}

    def rollback_to(self, mark: tuple[int, int, dict[int, tuple[int, int]]]) -> None:
        """Drop the open transaction's changes after `mark` (a ROLLBACK TO SAVEPOINT the binlog kept)."""
        order, ddl, sizes = mark
        for tid in list(self.touched):
            t = self.tables[tid]
            nbytes, nev = sizes.get(tid, self.touched[tid])
            self.nbytes -= len(t.buf) - nbytes
            del t.buf[nbytes:]
            del t.kinds[nev:]
            del t.versions[nev:]
            del t.ends[nev:]
            if tid not in sizes:  # first touched after the savepoint
                del self.touched[tid]
                if not t.kinds:
                    del self.tables[tid]
        del self.order[order:]
        del self.ddl[ddl:]

    def park(self) -> list[tuple[Any, ...]]:
        """Take the open transaction out (an XA transaction prepared, its outcome not read yet): its events in
        binlog order, for `unpark` into this slice or a later one."""
        nev = {tid: first for tid, (_, first) in self.touched.items()}
        ddl = iter(self.ddl[self.committed[1] :])
        events: list[tuple[Any, ...]] = []
        for tid in self.order[self.committed[0] :]:
            if tid < 0:
                events.append((tid, None, 0, 0, next(ddl)))
                continue
            t = self.tables[tid]
            i = nev[tid]
            nev[tid] = i + 1
            events.append((tid, t.spec, t.kinds[i], t.versions[i], bytes(t.buf[t.ends[i - 1] if i else 0 : t.ends[i]])))
        self.rollback()
        return events

    def unpark(self, events: list[tuple[Any, ...]]) -> None:
        """Add a parked transaction's events to the open transaction (its XA COMMIT was read)."""
        for tid, spec, kind, version, data in events:
            if tid < 0:
                self.add_ddl(data)
            else:
                self.add_rows(tid, spec, kind, version, data, 0, len(data))

    @property
    def empty(self) -> bool:
        return not self.order

    def job(self, batch_rows: int, vectorize: bool, native: bool = False) -> tuple[Any, ...]:
        """The picklable work of decoding this slice (see `decode_slice`); `native`: with the compiled walk."""
        tables = [
            (tid, t.spec, bytes(t.buf), bytes(t.kinds), t.versions, t.ends, t.commits)
            for tid, t in sorted(self.tables.items())
        ]
        return (tables, self.order, batch_rows, vectorize, native)


@dataclass(frozen=True)
class SliceResult:
    batches: list[tuple[TableSchema, pa.RecordBatch]]  # ordinals local to the slice (from 1)
    ddl_ordinals: list[int]
    ordinals: int  # ordinals the slice takes


_DECODERS: dict[tuple[TableSpec, bool, bool], TableDecoder] = {}


def _decoder(spec: TableSpec, vectorize: bool, native: bool) -> TableDecoder:
    dec = _DECODERS.get((spec, vectorize, native))
    if dec is None:
        if len(_DECODERS) > 256:
            _DECODERS.clear()
        dec = _DECODERS[(spec, vectorize, native)] = TableDecoder(
            spec.shape, spec.layouts, vectorize=vectorize, zero_dates=spec.zero_dates, native=native,
            before_images=spec.before_images,
        )
    return dec


def decode_slice(job: tuple[Any, ...]) -> SliceResult:
    """Decode a slice's row images into staged batches (runs in the reader or a worker process)."""
    tables, order, batch_rows, vectorize, native = job
    scanned = {}
    for tid, spec, raw, kinds, versions, ends, commits in tables:
        dec = _decoder(spec, vectorize, native)
        starts, counts, ops = scan_table(dec, raw, kinds, ends)
        taken = _ordinals_taken(ops)
        per_event = counts if taken is None else np.diff(taken[np.cumsum(counts, dtype=np.int64)], prepend=0).tolist()
        scanned[tid] = (spec, dec, raw, starts, counts, ops, versions, commits, taken, per_event)
    # Ordinals in binlog order across tables (DDL statements take one each; a before image takes none).
    firsts: dict[int, list[int]] = {tid: [] for tid in scanned}
    pointers = dict.fromkeys(scanned, 0)
    ddl_ordinals: list[int] = []
    running = 0
    for tid in order:
        if tid < 0:
            running += 1
            ddl_ordinals.append(running)
            continue
        e = pointers[tid]
        pointers[tid] = e + 1
        firsts[tid].append(running + 1)
        running += scanned[tid][9][e]
    batches: list[tuple[TableSchema, pa.RecordBatch]] = []
    for tid, (spec, dec, raw, starts, counts, ops, versions, commits, taken, _) in scanned.items():
        for batch in _materialize(dec, raw, starts, counts, ops, taken, versions, firsts[tid], commits, batch_rows):
            batches.append((spec.shape, batch))
    return SliceResult(batches, ddl_ordinals, running)


def _ordinals_taken(ops: bytes) -> np.ndarray | None:
    """taken[j]: the rows before row j that take an ordinal (a before image takes none: it shares its update's);
    None when every row takes one (no before image)."""
    if OP_BYTE[OPC_BEFORE] not in ops:
        return None
    return np.concatenate(([0], np.cumsum(np.frombuffer(ops, dtype=np.uint8) != OPC_BEFORE)))


def _materialize(  # noqa: PLR0917 - one call site, the scanned table's parts in order
    dec: TableDecoder, raw: bytes, starts: Any, counts: Any, ops: bytes, taken: np.ndarray | None,
    versions: list[int], firsts: list[int], commits: list[tuple[int, int, int]], batch_rows: int,
) -> list[pa.RecordBatch]:
    n = len(starts)
    if n == 0:
        return []
    counts_np = np.asarray(counts, dtype=np.int64)
    row_firsts = np.zeros(len(counts_np), dtype=np.int64)
    np.cumsum(counts_np[:-1], out=row_firsts[1:])
    versions_np = np.repeat(np.array(versions, dtype=np.int64), counts_np)
    # Each row's ordinal: its event's first plus the rows before it in the event that take one.
    taken = np.arange(n + 1, dtype=np.int64) if taken is None else taken
    ordinals = np.repeat(np.array(firsts, dtype=np.int64) - taken[row_firsts], counts_np) + taken[:n]
    rows_at = np.cumsum(counts_np)
    commit_rows = np.array([rows_at[e - 1] if e else 0 for e, _, _ in commits], dtype=np.int64)
    per_txn = np.diff(commit_rows, prepend=0)
    ts = np.repeat(np.array([t for _, t, _ in commits], dtype=np.int64), per_txn)
    txns = np.repeat(np.array([x for _, _, x in commits], dtype=np.int64), per_txn)
    if len(ts) != n:
        raise AssertionError(f"{dec.shape.name}: {n} rows but commit times for {len(ts)}")
    ops_np = np.frombuffer(ops, dtype=np.uint8).astype(np.int64)
    starts_np = np.asarray(starts, dtype=np.int64)
    buf = np.frombuffer(raw, dtype=np.uint8)
    schema = dec.codec.arrow_schema
    out = []
    lo = 0
    while lo < n:
        hi = min(n, lo + max(1, batch_rows))
        if ops[hi - 1] == OPC_BEFORE:  # a before image and its update stay in one batch (they share an ordinal)
            hi += 1
        arrays = [
            _op_labels().take(pa.array(ops_np[lo:hi])),
            pa.array(versions_np[lo:hi], pa.int64()),
            pa.array(ordinals[lo:hi], pa.int64()),
            pa.Array.from_buffers(schema.field(3).type, hi - lo, [None, pa.py_buffer(ts[lo:hi].copy())]),
            pa.array(txns[lo:hi], pa.int64()),
        ]
        offsets = dec.offsets(buf, starts_np[lo:hi])
        arrays += [dec.decode_column(i, buf, raw, offs) for i, offs in enumerate(offsets)]
        out.append(pa.RecordBatch.from_arrays(arrays, schema=schema))
        lo = hi
    return out


@functools.cache
def _op_labels() -> pa.Array:
    # Built on first use: any pa.array call makes pyarrow import pandas (a second on a small machine),
    # which a window without changes should not pay for.
    return pa.array(np.array(OP_LABELS, dtype=object), pa.string())


def finish_slice(result: SliceResult, base: int) -> list[RowBatch]:
    """The slice's batches with window ordinals (slice-local ordinal + `base`)."""
    out = []
    for shape, local in result.batches:
        ordinals = pc.add(local.column(2), pa.scalar(base, pa.int64()))
        batch = local.set_column(2, local.schema.field(2), ordinals)
        first, last = int(ordinals[0].as_py()), int(ordinals[-1].as_py())
        out.append(RowBatch(table=shape, batch=batch, first_ordinal=first, last_ordinal=last))
    return out
