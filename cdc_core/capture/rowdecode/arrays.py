"""Building blocks of the vector kernels: gathering fixed-width bytes at recorded offsets, big- and
little-endian integers over rows, validity bitmaps, and Arrow arrays from numpy buffers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.model.errors import StagingError


def validity(valid: np.ndarray, n: int) -> tuple[pa.Buffer | None, int]:
    nulls = int(n - np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little").tobytes()), nulls


def primitive(typ: pa.DataType, values: np.ndarray, valid: np.ndarray) -> pa.Array:
    n = len(values)
    vbuf, nulls = validity(valid, n)
    if nulls:
        values = np.where(valid, values, 0).astype(values.dtype, copy=False)
    return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(np.ascontiguousarray(values))], null_count=nulls)


def gather(buf: np.ndarray, offs: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, width) bytes at each offset (row 0's bytes where the offset is -1), and the validity mask."""
    valid = offs >= 0
    if valid.all():
        return buf[offs[:, None] + np.arange(width, dtype=np.int64)], valid
    # NULL rows read whatever bytes are at the buffer's start (clipped: the buffer may be shorter than
    # one value when every row of a small slice is NULL here); the validity masks them.
    idx = np.where(valid, offs, 0)[:, None] + np.arange(width, dtype=np.int64)
    return buf[np.minimum(idx, len(buf) - 1)], valid


def be(g: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Unsigned big-endian integer of bytes [lo, hi) of each row (hi - lo <= 7)."""
    v = np.zeros(g.shape[0], dtype=np.int64)
    for j in range(lo, hi):
        v = (v << 8) | g[:, j]
    return v


def le(g: np.ndarray, lo: int, hi: int) -> np.ndarray:
    v = np.zeros(g.shape[0], dtype=np.int64)
    for j in range(hi - 1, lo - 1, -1):
        v = (v << 8) | g[:, j]
    return v


def u64(g: np.ndarray, *, big_endian: bool) -> np.ndarray:
    """Unsigned integer of each row's bytes (up to 8) as uint64."""
    w = g.shape[1]
    if w == 8:
        out: np.ndarray = np.ascontiguousarray(g).view(">u8" if big_endian else "<u8").reshape(-1).astype(np.uint64)
        return out
    return (be(g, 0, w) if big_endian else le(g, 0, w)).astype(np.uint64)


def text_array(lay: ColumnLayout, typ: pa.DataType, valid: np.ndarray, offsets: np.ndarray, data: Any) -> pa.Array:
    """A string array from int64 value offsets (n + 1) and the concatenated UTF-8 bytes."""
    if int(offsets[-1]) >= 1 << 31:
        raise StagingError(
            f"column {lay.name!r}: {int(offsets[-1])} bytes of values in one batch exceed Arrow's 2 GiB string "
            "limit; lower the staging batch size"
        )
    vbuf, nulls = validity(valid, len(valid))
    return pa.Array.from_buffers(
        typ, len(valid), [vbuf, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], null_count=nulls
    )
