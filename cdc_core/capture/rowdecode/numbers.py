"""Vector kernels of the integer and floating-point families: every integer width (BIGINT UNSIGNED as
DECIMAL(20,0)), FLOAT and DOUBLE."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.arrays import gather, le, primitive, validity
from cdc_core.capture.rowdecode.layout import ColumnLayout


def k_int(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    w = lay.width
    g, valid = gather(buf, offs, w)
    if w == 3:
        v = le(g, 0, 3)
        if not lay.unsigned:
            v = np.where(v >= 1 << 23, v - (1 << 24), v)
    else:
        v = g.view(f"<{'u' if lay.unsigned else 'i'}{w}").reshape(-1)
    if pa.types.is_decimal(typ):  # BIGINT UNSIGNED -> DECIMAL(20,0): the unsigned value, high word 0
        pairs = np.zeros((len(v), 2), dtype=np.uint64)
        pairs[:, 0] = np.where(valid, v, 0)
        vbuf, nulls = validity(valid, len(v))
        return pa.Array.from_buffers(typ, len(v), [vbuf, pa.py_buffer(pairs)], null_count=nulls)
    return primitive(typ, v.astype(typ.to_pandas_dtype(), copy=False), valid)


def k_float(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    g, valid = gather(buf, offs, lay.width)
    return primitive(typ, g.view("<f4" if lay.width == 4 else "<f8").reshape(-1), valid)
