"""Vector kernels of length-prefixed values copied as stored: UTF-8 text, JSON text and binary strings."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.arrays import le, validity
from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.capture.rowdecode.native import rowscan
from cdc_core.model.errors import SourceError, StagingError


def k_string(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, raw: Any, *, native: bool
) -> pa.Array:
    n = len(offs)
    if native:
        valid = offs >= 0
        wide, data = rowscan.gather(buf, np.ascontiguousarray(offs, dtype=np.int64), lay.prefix)
        aoff = np.frombuffer(wide, dtype=np.int64)
        total = int(aoff[-1])
    else:
        prefix = lay.prefix
        valid = offs >= 0
        safe = np.where(valid, offs, 0)
        g = buf[safe[:, None] + np.arange(prefix, dtype=np.int64)]
        lengths = np.where(valid, le(g, 0, prefix), 0)
        starts = safe + prefix
        aoff = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=aoff[1:])
        total = int(aoff[-1])
    if total >= 1 << 31:
        raise StagingError(
            f"column {lay.name!r}: {total} bytes of values in one batch exceed Arrow's 2 GiB string limit; "
            "lower the staging batch size"
        )
    if native:
        pass
    elif total == 0:
        data = b""
    elif len(buf) < 1 << 31:  # int32 indexes: half the memory traffic of int64
        idx = np.repeat((starts - aoff[:-1]).astype(np.int32), lengths)
        idx += np.arange(total, dtype=np.int32)
        data = buf[idx].tobytes()
    else:
        data = b"".join([raw[a : a + k] for a, k in zip(starts[valid].tolist(), lengths[valid].tolist(), strict=True)])
    vbuf, nulls = validity(valid, n)
    arr = pa.Array.from_buffers(
        typ, n, [vbuf, pa.py_buffer(aoff.astype(np.int32)), pa.py_buffer(data)], null_count=nulls
    )
    if pa.types.is_string(typ):
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid as e:
            raise SourceError(
                f"column {lay.name!r}: a value is not valid UTF-8 ({e}), which python-mysql-replication cannot "
                "decode either; check the column's character set"
            ) from e
    return arr


def string_parts(
    lay: ColumnLayout, buf: np.ndarray, offs: np.ndarray, native: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(validity, lengths, value starts in buf, the concatenated value bytes) of a length-prefixed column."""
    prefix = lay.prefix
    valid = offs >= 0
    if native:
        wide, data = rowscan.gather(buf, np.ascontiguousarray(offs, dtype=np.int64), prefix)
        aoff = np.frombuffer(wide, dtype=np.int64)
        return valid, np.diff(aoff), aoff, np.frombuffer(data, dtype=np.uint8)
    safe = np.where(valid, offs, 0)
    g = buf[safe[:, None] + np.arange(prefix, dtype=np.int64)]
    lengths = np.where(valid, le(g, 0, prefix), 0)
    starts = safe + prefix
    aoff = np.zeros(len(offs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=aoff[1:])
    total = int(aoff[-1])
    idx = np.repeat(starts - aoff[:-1], lengths) + np.arange(total, dtype=np.int64)
    return valid, lengths, aoff, buf[idx]
