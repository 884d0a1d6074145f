"""Vector kernels of text in other character sets, transcoded to UTF-8: the single-byte charsets by a
byte table, UTF-16/UCS-2/UTF-32 in one decode per batch."""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.arrays import text_array, validity
from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.capture.rowdecode.native import rowscan
from cdc_core.capture.rowdecode.strings import string_parts
from cdc_core.capture.rowdecode.values import uint_le
from cdc_core.model.errors import SourceError, StagingError
from cdc_core.model.types import CHARSET_CODECS


@functools.cache
def _charset_table(codec: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per byte: its UTF-8 bytes (padded to 3), their count, and whether the charset defines it."""
    table = np.zeros((256, 3), dtype=np.uint8)
    lens = np.zeros(256, dtype=np.int64)
    defined = np.ones(256, dtype=bool)
    for b in range(256):
        try:
            u = bytes([b]).decode(codec).encode("utf-8")
        except UnicodeDecodeError:
            defined[b] = False
            continue
        table[b, : len(u)] = np.frombuffer(u, dtype=np.uint8)
        lens[b] = len(u)
    return table, lens, defined


def _not_in_charset(lay: ColumnLayout, enc: str, value: bytes) -> SourceError:
    return SourceError(
        f"column {lay.name!r}: the value {value[:40]!r} is not valid in its character set ({enc}); it was written "
        "as raw bytes. Fix the row at the source or exclude the table"
    )


def k_single_byte_text(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, native: bool
) -> pa.Array:
    """Text in a single-byte character set (latin1, cp1251, ...) transcoded to UTF-8 by a byte table."""
    enc = lay.encoding or ""
    table, lens, defined = _charset_table(enc)
    valid = offs >= 0
    if native:
        offs64 = np.ascontiguousarray(offs, dtype=np.int64)
        wide, text, bad = rowscan.single_byte_text(
            buf, offs64, lay.prefix, table.tobytes(), lens.astype(np.uint8).tobytes()
        )
        if bad >= 0:
            o = int(offs[bad])
            raise _not_in_charset(lay, enc, bytes(buf[o + lay.prefix : o + lay.prefix + uint_le(buf, o, lay.prefix)]))
        return text_array(lay, typ, valid, np.frombuffer(wide, dtype=np.int64), text)
    _, lengths, aoff, data = string_parts(lay, buf, offs, native=False)
    if len(data) and not defined[data].all():
        row = int(np.searchsorted(aoff, int(np.flatnonzero(~defined[data])[0]), side="right")) - 1
        start = int(aoff[row])
        raise _not_in_charset(lay, enc, data[start : start + int(lengths[row])].tobytes())
    per_byte = lens[data]
    cum = np.concatenate(([0], np.cumsum(per_byte)))
    out = table[data][np.arange(3) < per_byte[:, None]]
    return text_array(lay, typ, valid, cum[aoff], out)


WIDE_UNITS = {"utf-16-be": ">u2", "utf-16-le": "<u2", "utf-32-be": ">u4"}


def k_wide_text(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, native: bool) -> pa.Array:
    """UTF-16/UCS-2/UTF-32 text: the batch's values decoded in one call (values are whole code units, so
    the concatenation decodes to the concatenation), UTF-8 offsets counted per code unit in numpy."""
    enc = lay.encoding or ""
    unit = np.dtype(WIDE_UNITS[enc])
    valid, lengths, aoff, data = string_parts(lay, buf, offs, native)
    if (lengths % unit.itemsize).any():
        raise SourceError(
            f"column {lay.name!r}: a value's length is not a whole number of {enc} code units; it was written as "
            "raw bytes. Fix the row at the source or exclude the table"
        )
    try:
        text = data.tobytes().decode(enc).encode("utf-8")
    except UnicodeDecodeError as e:
        raise SourceError(
            f"column {lay.name!r}: a value is not valid {enc} ({e.reason}); it was written as raw bytes. Fix the "
            "row at the source or exclude the table"
        ) from None
    u = data.view(unit).astype(np.int64)
    if unit.itemsize == 2:
        per = np.select([u < 0x80, u < 0x800, (u >= 0xD800) & (u < 0xDC00), (u >= 0xDC00) & (u < 0xE000)],
                        [1, 2, 4, 0], 3)
    else:
        per = np.select([u < 0x80, u < 0x800, u < 0x10000], [1, 2, 3], 4)
    cum = np.concatenate(([0], np.cumsum(per)))
    out_off = cum[aoff // unit.itemsize]
    if int(out_off[-1]) != len(text) or int(out_off[-1]) >= 1 << 31:
        raise StagingError(f"column {lay.name!r}: {enc} text of {len(text)} UTF-8 bytes in one batch cannot be staged")
    vbuf, nulls = validity(valid, len(offs))
    return pa.Array.from_buffers(
        typ, len(offs), [vbuf, pa.py_buffer(out_off.astype(np.int32)), pa.py_buffer(text)], null_count=nulls
    )


# Single-byte charsets the byte-table kernel transcodes (the type map's exact ones; cdc_core.model.types).
SINGLE_BYTE_CODECS = frozenset(
    c for c in set(CHARSET_CODECS.values()) if c not in ("utf-8", "utf-16-be", "utf-16-le", "utf-32-be")
)
