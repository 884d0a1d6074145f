"""A table's decoder (`TableDecoder`: scanners, kernels and key comparison, decided once per table shape and
binlog layout), and the scan of a table's rows events into rows and op codes (`scan_table`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.kernels import Kernel, vector_kernel
from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.capture.rowdecode.native import rowscan
from cdc_core.capture.rowdecode.temporal import ZeroDate, zero_date_error
from cdc_core.capture.rowdecode.values import value_function, value_span
from cdc_core.capture.rowdecode.walk import compile_scanners, row_offsets
from cdc_core.model.changes import TableSchema
from cdc_core.model.errors import SourceError, StagingError
from cdc_core.model.manifest import OP_BEFORE, OP_DELETE, OP_INSERT, OP_UPDATE
from cdc_core.model.types import ColumnCodec, TableCodec, table_codec

# Kinds of the rows events in a slice (the columnar reader's `_EV_KIND`).
EV_WRITE, EV_UPDATE, EV_DELETE = 0, 1, 2


# Op codes in the accumulator (index into OP_LABELS). OPC_BEFORE: an update's before image, recorded just
# before its update row when the table stages before images (`TableDecoder.before_images`).
OPC_INSERT, OPC_UPDATE, OPC_DELETE, OPC_BEFORE = 0, 1, 2, 3
OP_LABELS = (OP_INSERT, OP_UPDATE, OP_DELETE, OP_BEFORE)
OP_BYTE = (b"\x00", b"\x01", b"\x02", b"\x03")


class TableDecoder:
    """Everything decided once per (table shape, binlog layout): scanners, kernels, key comparison."""

    def __init__(
        self,
        shape: TableSchema,
        layouts: tuple[ColumnLayout, ...],
        *,
        vectorize: bool = True,
        zero_dates: str = "null",
        native: bool = False,
        before_images: bool = False,
    ) -> None:
        if [lay.name for lay in layouts] != list(shape.column_names):
            raise SourceError(
                f"table {shape.name}: the table map's columns {[lay.name for lay in layouts]} differ from the "
                f"table's columns {list(shape.column_names)}"
            )
        self.shape = shape
        self.layouts = layouts
        self.before_images = before_images
        self.codec: TableCodec = table_codec(shape)
        index = {lay.name: i for i, lay in enumerate(layouts)}
        self.key_columns = [index[k] for k in shape.key]
        self.scan, self.image = compile_scanners(layouts, self.key_columns)
        self.native = native and rowscan is not None
        # The layout as the compiled walk takes it (int32 widths and prefixes, a byte per flag).
        self.walk_layout = (
            np.array([lay.width for lay in layouts], dtype=np.int32).tobytes(),
            np.array([lay.prefix for lay in layouts], dtype=np.int32).tobytes(),
            bytes(int(lay.nullable) for lay in layouts),
        )
        self.kernels: list[Kernel | None] = [
            vector_kernel(lay, c, zero_dates, self.native) if vectorize else None
            for lay, c in zip(layouts, self.codec.columns, strict=True)
        ]
        self.refuse_zero = zero_dates == "refuse"
        self.values = [value_function(lay) for lay in layouts]
        # Raw bytes compare exactly where the library's values do; elsewhere compare decoded values
        # (-0.0 == 0.0, two invalid DATETIMEs are both None, ...).
        self.key_raw = [layouts[i].kind in ("int", "year", "enum", "set", "bit", "string") for i in self.key_columns]

    def offsets(self, buf: np.ndarray, starts: np.ndarray) -> list[np.ndarray]:
        """Every column's value offsets (-1 for NULL) in the row images at `starts` (`row_offsets`)."""
        if not self.native:
            return row_offsets(self.layouts, buf, starts)
        flat = np.frombuffer(
            rowscan.column_offsets(buf, np.ascontiguousarray(starts, dtype=np.int64), *self.walk_layout),
            dtype=np.int64,
        ).reshape(len(self.layouts), len(starts))
        return list(flat)

    def key_changed(self, d: Any, before: tuple[int, ...], after: tuple[int, ...]) -> bool:
        for j, (i, raw) in enumerate(zip(self.key_columns, self.key_raw, strict=True)):
            ob, oa = before[j + 2], after[j + 2]
            if ob < 0 or oa < 0:
                if ob != oa:
                    return True
                continue
            lay = self.layouts[i]
            if raw:
                if d[ob : ob + value_span(lay, d, ob)] != d[oa : oa + value_span(lay, d, oa)]:
                    return True
            elif self.values[i](d, ob) != self.values[i](d, oa):
                return True
        return False

    def decode_column(self, i: int, buf: np.ndarray, raw: Any, offs: np.ndarray) -> pa.Array:
        kernel = self.kernels[i]
        if kernel is not None:
            try:
                return kernel(buf, offs, raw)
            except ZeroDate as z:
                raise zero_date_error(self.shape.name, z.column, z.mysql_type, z.value) from None
        codec = self.codec.columns[i]
        fn = self.values[i]
        vals = [None if o < 0 else fn(raw, o) for o in offs.tolist()]
        if self.refuse_zero and self.layouts[i].kind in _ZERO_DATE_KINDS:
            self._refuse_zero_values(i, raw, offs, vals)
        try:
            return pa.array(codec.convert_values(vals), codec.arrow_type)
        except Exception as e:
            bad = _first_bad(codec, vals)
            raise StagingError(
                f"table {self.shape.name!r} column {codec.name!r} ({codec.mysql_type} -> {codec.arrow_type}) "
                f"cannot stage the value {bad!r}: {e}. This is a type-map or reader bug: report it with the "
                "value; exclude the table to proceed"
            ) from e


    def _refuse_zero_values(self, i: int, raw: Any, offs: np.ndarray, vals: list[Any]) -> None:
        """The per-value path's zero-date check: a present value that decodes to None (or TIMESTAMP's 0)."""
        lay = self.layouts[i]
        zero_ts = lay.kind.startswith("timestamp")
        for o, v in zip(offs.tolist(), vals, strict=True):
            if o >= 0 and (v is None or (zero_ts and self.codec.columns[i].convert_values([v]) == [None])):
                typ = "DATE" if lay.kind == "date" else "TIMESTAMP" if zero_ts else "DATETIME"
                value = "0000-00-00 00:00:00" if zero_ts else "zero or partial"
                raise zero_date_error(self.shape.name, lay.name, typ, value)


_ZERO_DATE_KINDS = ("date", "datetime", "datetime2", "timestamp", "timestamp2", "newdate")


def _first_bad(codec: ColumnCodec, vals: list[Any]) -> Any:
    for v in vals:
        try:
            pa.array(codec.convert_values([v]), codec.arrow_type)
        except Exception:
            return v
    return None


def scan_table(dec: TableDecoder, raw: bytes, kinds: bytes, ends: list[int]) -> tuple[Any, Any, bytes]:
    """Row starts, rows per event and op codes per row of a table's events."""
    if dec.native:
        return _scan_table_native(dec, raw, kinds, ends)
    starts: list[int] = []
    record = starts.append
    counts: list[int] = []
    ops = bytearray()
    scan = dec.scan
    pos = 0
    for kind, end in zip(kinds, ends, strict=True):
        if kind == EV_UPDATE:
            n = _scan_updates(dec, raw, pos, end, record=record, ops=ops)
        else:
            stop, n = scan(raw, pos, end, record)
            if stop != end:
                raise SourceError(
                    f"table {dec.shape.name}: a rows event's images end at byte {stop - pos} of {end - pos}; the "
                    "table map does not describe these rows (report this with the binlog position)"
                )
            ops += OP_BYTE[OPC_INSERT if kind == EV_WRITE else OPC_DELETE] * n
        counts.append(n)
        pos = end
    return starts, counts, bytes(ops)


def _scan_table_native(dec: TableDecoder, raw: bytes, kinds: bytes, ends: list[int]) -> tuple[Any, Any, bytes]:
    """`scan_table` by the compiled walk. Key columns whose bytes differ but whose values may still be
    equal (-0.0 and 0.0, two invalid DATETIMEs) are compared here, by `key_changed`, as the Python walk does."""

    def ask(before: int, after: int) -> bool:
        return dec.key_changed(raw, dec.image(raw, before), dec.image(raw, after))

    starts, counts, ops, bad_event, bad_stop = rowscan.scan_table(
        raw, kinds, np.array(ends, dtype=np.int64), *dec.walk_layout,
        np.array(dec.key_columns, dtype=np.int32).tobytes(), bytes(map(int, dec.key_raw)), ask,
        dec.before_images,
    )
    if bad_event >= 0:
        size = ends[bad_event] - (ends[bad_event - 1] if bad_event else 0)
        what = "an update event's" if kinds[bad_event] == EV_UPDATE else "a rows event's"
        raise SourceError(
            f"table {dec.shape.name}: {what} images end at byte {bad_stop} of {size}; the table map does not "
            "describe these rows (report this with the binlog position)"
        )
    return np.frombuffer(starts, dtype=np.int64), np.frombuffer(counts, dtype=np.int64).tolist(), ops


def _scan_updates(dec: TableDecoder, d: bytes, pos: int, stop: int, *, record: Any, ops: bytearray) -> int:
    """An update event: a key change is a delete of the before image and an insert of the after image,
    else an update with the after image (preceded by its before image when the table stages them). Returns the
    rows it records."""
    image, changed = dec.image, dec.key_changed
    with_before = dec.before_images
    base, n = pos, 0
    while pos < stop:
        before = image(d, pos)
        after = image(d, before[0])
        pos = after[0]
        if changed(d, before, after):
            record(before[1])
            record(after[1])
            ops += b"\x02\x00"  # OPC_DELETE, OPC_INSERT
            n += 2
        elif with_before:
            record(before[1])
            record(after[1])
            ops += b"\x03\x01"  # OPC_BEFORE, OPC_UPDATE
            n += 2
        else:
            record(after[1])
            ops += b"\x01"  # OPC_UPDATE
            n += 1
    if pos != stop:
        raise SourceError(
            f"table {dec.shape.name}: an update event's images end at byte {pos - base} of {stop - base}; the "
            "table map does not describe these rows (report this with the binlog position)"
        )
    return n
