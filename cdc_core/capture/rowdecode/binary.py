"""The vector kernel of BINARY(n): the stored bytes padded back to n (the binlog drops trailing zeros)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.arrays import validity
from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.capture.rowdecode.strings import string_parts


def k_binary_padded(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, n: int, *, native: bool
) -> pa.Array:
    """BINARY(n): the stored bytes padded back to n with 0x00 (the binlog drops trailing zeros)."""
    valid, lengths, aoff, data = string_parts(lay, buf, offs, native)
    rows = len(offs)
    width = np.where(valid, np.maximum(lengths, n), 0)
    out_off = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(width, out=out_off[1:])
    out = np.zeros(int(out_off[-1]), dtype=np.uint8)
    if len(data):
        dst = np.repeat(out_off[:-1] - aoff[:-1], lengths) + np.arange(len(data), dtype=np.int64)
        out[dst] = data
    vbuf, nulls = validity(valid, rows)
    return pa.Array.from_buffers(
        typ, rows, [vbuf, pa.py_buffer(out_off.astype(np.int32)), pa.py_buffer(out)], null_count=nulls
    )
