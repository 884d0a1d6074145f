"""Vector kernels of DECIMAL(p,s) of any precision: up to 18 digits in int64, up to 38 straight into
decimal128 (128-bit arithmetic on uint64 limbs), wider as exact text (Arrow's string kernels, or the
compiled walk's `decimal_text`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.capture.rowdecode.arrays import be, gather, text_array, validity
from cdc_core.capture.rowdecode.layout import DIG2BYTES, ColumnLayout
from cdc_core.capture.rowdecode.native import rowscan


def k_decimal(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    p, s = lay.precision, lay.scale
    g, valid = gather(buf, offs, lay.width)
    g = g.copy()
    neg = (g[:, 0] & 0x80) == 0
    g[:, 0] ^= 0x80
    g[neg] ^= 0xFF
    intg = p - s
    pos = DIG2BYTES[intg % 9]
    int_part = be(g, 0, pos)
    for _ in range(intg // 9):
        int_part = int_part * 1_000_000_000 + be(g, pos, pos + 4)
        pos += 4
    frac = np.zeros(len(g), dtype=np.int64)
    for _ in range(s // 9):
        frac = frac * 1_000_000_000 + be(g, pos, pos + 4)
        pos += 4
    if s % 9:
        frac = frac * 10 ** (s % 9) + be(g, pos, pos + DIG2BYTES[s % 9])
    unscaled = int_part * 10**s + frac
    unscaled = np.where(neg, -unscaled, unscaled)
    unscaled = np.where(valid, unscaled, 0)
    pairs = np.empty((len(g), 2), dtype=np.int64)
    pairs[:, 0] = unscaled
    pairs[:, 1] = unscaled >> 63
    vbuf, nulls = validity(valid, len(g))
    return pa.Array.from_buffers(typ, len(g), [vbuf, pa.py_buffer(pairs)], null_count=nulls)


def _digits(values: np.ndarray, width: int | None) -> pa.Array:
    """Non-negative int64s as decimal text, zero-padded to `width` when given."""
    text = pc.cast(pa.array(values, pa.int64()), pa.string())
    return pc.utf8_lpad(text, width=width, padding="0") if width else text


def k_decimal_text(lay: ColumnLayout, buf: np.ndarray, offs: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Any DECIMAL(p,s) as exact plain text with exactly s fraction digits and no '-' on zero (the wide
    DECIMAL converter's output), and the validity."""
    p, s = lay.precision, lay.scale
    g, valid = gather(buf, offs, lay.width)
    g = g.copy()
    neg = (g[:, 0] & 0x80) == 0
    g[:, 0] ^= 0x80
    g[neg] ^= 0xFF
    intg = p - s
    lead = DIG2BYTES[intg % 9]
    parts: list[pa.Array] = []
    nonzero = np.zeros(len(g), dtype=bool)
    pos = 0
    if lead:
        v = be(g, 0, lead)
        nonzero |= v != 0
        parts.append(_digits(v, None))
        pos = lead
    for _ in range(intg // 9):
        v = be(g, pos, pos + 4)
        nonzero |= v != 0
        parts.append(_digits(v, 9))
        pos += 4
    if parts:
        int_text = pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]
        int_text = pc.utf8_ltrim(int_text, characters="0")
        int_text = pc.if_else(pc.equal(pc.utf8_length(int_text), 0), "0", int_text)
    else:
        int_text = pa.array(["0"] * len(g), pa.string())
    frac_parts: list[pa.Array] = []
    for _ in range(s // 9):
        v = be(g, pos, pos + 4)
        nonzero |= v != 0
        frac_parts.append(_digits(v, 9))
        pos += 4
    if s % 9:
        v = be(g, pos, pos + DIG2BYTES[s % 9])
        nonzero |= v != 0
        frac_parts.append(_digits(v, s % 9))
    sign = pa.array(np.where(neg & nonzero, "-", ""), pa.string())
    pieces = [sign, int_text]
    if frac_parts:
        pieces += [pa.array(np.full(len(g), "."), pa.string()), *frac_parts]
    text = pc.binary_join_element_wise(*pieces, "")
    return text, valid


_U32 = np.uint64(0xFFFFFFFF)
_SH32 = np.uint64(32)


def _mul_add_128(hi: np.ndarray, lo: np.ndarray, m: int, add: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) * m + add on unsigned 128-bit numbers held as two uint64 arrays (m, add < 2**32)."""
    mm = np.uint64(m)
    l0 = (lo & _U32) * mm  # < 2**62
    l1 = (lo >> _SH32) * mm  # < 2**62; lo * m = l1 * 2**32 + l0
    t = l0 + ((l1 & _U32) << _SH32)
    c1 = (t < l0).astype(np.uint64)
    new_lo = t + add
    c2 = (new_lo < t).astype(np.uint64)
    return hi * mm + (l1 >> _SH32) + c1 + c2, new_lo


def k_decimal128(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    """DECIMAL(p,s) with 18 < p <= 38 straight into decimal128: the digit groups folded into a 128-bit
    unscaled integer with uint64 limbs, negated in two's complement."""
    p, s = lay.precision, lay.scale
    g, valid = gather(buf, offs, lay.width)
    g = g.copy()
    neg = (g[:, 0] & 0x80) == 0
    g[:, 0] ^= 0x80
    g[neg] ^= 0xFF
    n = len(g)
    hi = np.zeros(n, dtype=np.uint64)
    lo = np.zeros(n, dtype=np.uint64)
    intg = p - s
    groups: list[tuple[int, int, int]] = []  # (first byte, bytes, digits)
    pos = 0
    if intg % 9:
        groups.append((0, DIG2BYTES[intg % 9], intg % 9))
        pos = DIG2BYTES[intg % 9]
    for _ in range(intg // 9 + s // 9):
        groups.append((pos, 4, 9))
        pos += 4
    if s % 9:
        groups.append((pos, DIG2BYTES[s % 9], s % 9))
    for start, nbytes, digits in groups:
        hi, lo = _mul_add_128(hi, lo, 10**digits, be(g, start, start + nbytes).astype(np.uint64))
    one = np.uint64(1)
    neg_lo = ~lo + one
    neg_hi = ~hi + (lo == 0).astype(np.uint64)
    pairs = np.empty((n, 2), dtype=np.uint64)
    pairs[:, 0] = np.where(valid, np.where(neg, neg_lo, lo), 0)
    pairs[:, 1] = np.where(valid, np.where(neg, neg_hi, hi), 0)
    vbuf, nulls = validity(valid, n)
    return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(pairs)], null_count=nulls)


def k_decimal_wide(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, *, native: bool
) -> pa.Array:
    if native and pa.types.is_string(typ):
        valid = offs >= 0
        wide, data = rowscan.decimal_text(buf, np.ascontiguousarray(offs, dtype=np.int64), lay.precision, lay.scale)
        return text_array(lay, typ, valid, np.frombuffer(wide, dtype=np.int64), data)
    text, valid = k_decimal_text(lay, buf, offs)
    if pa.types.is_decimal(typ):
        text = pc.if_else(pa.array(valid), text, "0")
        out = pc.cast(text, typ)
    else:
        out = text
    return pc.if_else(pa.array(valid), out, pa.scalar(None, typ))
