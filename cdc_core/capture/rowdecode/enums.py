"""Vector kernels of ENUM (labels by index), SET (each distinct mask of a batch joined once) and BIT(1..64)
(an unsigned number)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.arrays import gather, le, primitive, u64, validity
from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.model.errors import SourceError


def k_enum(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, name: str) -> pa.Array:
    g, valid = gather(buf, offs, lay.width)
    idx = le(g, 0, lay.width)
    if (valid & (idx >= len(lay.labels))).any():
        raise SourceError(
            f"column {name!r}: an ENUM index beyond its {len(lay.labels) - 1} labels; the table map does not "
            "match the row (re-check binlog_row_metadata=FULL)"
        )
    labels = pa.array(np.array(lay.labels, dtype=object), pa.string())
    return labels.take(pa.array(np.where(valid, idx, 0), mask=~valid))


def k_bit(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    """BIT(n) as an unsigned number (int64, or DECIMAL(20,0) for BIT(64))."""
    w = lay.width
    g, valid = gather(buf, offs, w)
    v = u64(g, big_endian=True)
    if lay.bits < 64:
        v = v & np.uint64((1 << lay.bits) - 1)  # the library reads only the column's bits of the first byte
    if pa.types.is_decimal(typ):
        pairs = np.zeros((len(v), 2), dtype=np.uint64)
        pairs[:, 0] = np.where(valid, v, 0)
        vbuf, nulls = validity(valid, len(v))
        return pa.Array.from_buffers(typ, len(v), [vbuf, pa.py_buffer(pairs)], null_count=nulls)
    return primitive(typ, v.astype(np.int64), valid)


def k_set(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    """SET as its labels comma-joined in definition order ('' for the empty set): each distinct mask of
    the batch is joined once."""
    g, valid = gather(buf, offs, lay.width)
    mask = u64(g, big_endian=False)
    mask = np.where(valid, mask, np.uint64(0))
    uniq, inverse = np.unique(mask, return_inverse=True)
    labels = lay.labels
    texts = [",".join([x for i, x in enumerate(labels) if int(m) >> i & 1]) for m in uniq.tolist()]
    return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1), pa.int64(), mask=~valid))
