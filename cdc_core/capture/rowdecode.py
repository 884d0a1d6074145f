"""Columnar decoding of rows-event bytes: per-table compiled scanners and vectorized column kernels.

python-mysql-replication decodes a row image value by value through several Python calls per column
(about 25 µs per column on a small machine), then staging converts each value again and hands Python
objects to Arrow. This module decodes the same bytes in two phases instead, per table shape:

1. *Scan* (per row, Python, compiled once per table-map layout): walk the row image and record where
   each column's value starts (-1 for NULL). Consecutive fixed-width NOT NULL columns share one
   recorded offset. That is all the per-row Python work there is: a few additions and appends per row.
2. *Decode* (per column, over many rows at once): gather the bytes at the recorded offsets with numpy
   and build the staged Arrow array directly: every integer width, FLOAT/DOUBLE, DECIMAL of any
   precision (up to 18 digits in int64; wider through exact text built by Arrow's string kernels),
   DATE, DATETIME/TIMESTAMP/TIME with every fsp, YEAR, ENUM, SET (each distinct mask of a batch joined
   once), BIT(1..64), UTF-8 text and JSON, UTF-16/UCS-2/UTF-32 text (one decode per batch), the
   single-byte charsets by a byte table, binary strings and BINARY(n) padding. Only MySQL's binary
   JSON, the pre-5.6 temporal formats and ENUMs without label metadata decode per value, with
   functions that mirror the library's decoding exactly, then go through the type map's converter
   (`ColumnCodec.convert_values`) like the row-by-row path.

Every kernel produces exactly what `pa.array(codec.convert_values(<library values>), codec.arrow_type)`
produces for the same bytes: tests/integration/test_fast_decoder_mariadb.py compares both for every
mapped type with edge values, against the real server. Library quirks are mirrored where they show in
staged values (a DATETIME the library cannot build lands as NULL, a TIMESTAMP of 0 as NULL, YEAR 0,
...; an empty SET is the empty set, not NULL, on both paths); an invalid DATE or ENUM index that makes
the library raise raises here too.

Accumulation (`TableAccumulator`) keeps a table's raw row images and offsets for many events and
transactions; `RowBatch`es are materialized from it in bounded slices.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import importlib
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.model.changes import RowBatch, TableSchema
from cdc_core.model.errors import SourceError, StagingError, UnsupportedType
from cdc_core.model.manifest import OP_DELETE, OP_INSERT, OP_UPDATE
from cdc_core.model.types import (
    CHARSET_CODECS,
    ColumnCodec,
    TableCodec,
    conv_bit,
    conv_bytes,
    conv_json,
    conv_time,
    conv_timestamp,
    conv_year,
    parse_labels,
    parse_type,
    python_codec,
    table_codec,
)

_rowscan: Any
try:  # the compiled row walk (cdc_core/capture/_rowscan.c), built by scripts/setup.sh and pip install
    _rowscan = importlib.import_module("cdc_core.capture._rowscan")
except ImportError:  # not built: the same walk runs as generated Python (slower, same results)
    _rowscan = None


def native_available() -> bool:
    """Whether the compiled row walk is used: built, and not switched off with CDC_NATIVE_DECODER=0."""
    return _rowscan is not None and os.environ.get("CDC_NATIVE_DECODER", "1") != "0"


# Op codes in the accumulator (index into _OP_LABELS).
OPC_INSERT, OPC_UPDATE, OPC_DELETE = 0, 1, 2
_OP_LABELS = (OP_INSERT, OP_UPDATE, OP_DELETE)
_OP_BYTE = (b"\x00", b"\x01", b"\x02")


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_EPOCH = dt.datetime(1970, 1, 1)
_US_PER_DAY = 86_400_000_000


# ------------------------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class ColumnLayout:
    """How one column's value sits in a row image (from the table-map event)."""

    name: str
    type: int  # FIELD_TYPE as logged (ENUM/SET resolved from STRING's real type, as the library does)
    kind: str
    width: int  # bytes of a fixed-width value; 0 when length-prefixed
    prefix: int  # bytes of the length prefix of a length-prefixed value
    nullable: bool
    unsigned: bool = False
    precision: int = 0
    scale: int = 0
    fsp: int = 0
    bits: int = 0
    encoding: str | None = None  # Python codec the library decodes text with; None: keep bytes
    labels: tuple[str, ...] = ()  # ENUM: the library's enum_values ('' first); SET: set_values


def _fsp_bytes(fsp: int) -> int:
    return (fsp + 1) // 2


def decimal_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return (intg // 9) * 4 + _DIG2BYTES[intg % 9] + (scale // 9) * 4 + _DIG2BYTES[scale % 9]




def _encoding(charset_name: str | None) -> str | None:
    """The codec the library decodes text with (None: it keeps the bytes)."""
    if charset_name is None:
        return "utf-8"  # the library's default for servers without charset metadata
    from pymysqlreplication.row_event import RowsEvent

    exact = python_codec(charset_name)
    if exact is not None:
        return exact  # the server's decoding (utf16 is big-endian, latin1 has C1 controls; cdc_core.model.types)
    enc = RowsEvent.charset_to_encoding(charset_name)
    try:
        "".encode(enc)
    except LookupError:
        return None
    return str(enc)


def column_layout(col: Any, nullable: bool) -> ColumnLayout:
    """The layout of a python-mysql-replication table-map `Column`. Raises SourceError for a type the
    library cannot decode either."""
    # Imported here: decode workers never build layouts and need not load the library.
    from pymysqlreplication.constants import FIELD_TYPE

    int_width = {
        FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4, FIELD_TYPE.LONGLONG: 8
    }
    t = col.type
    name = str(col.name)
    base = {"name": name, "type": t, "nullable": nullable}
    if t in int_width:
        return ColumnLayout(kind="int", width=int_width[t], prefix=0, unsigned=bool(col.unsigned), **base)
    if t == FIELD_TYPE.FLOAT:
        return ColumnLayout(kind="float", width=4, prefix=0, **base)
    if t == FIELD_TYPE.DOUBLE:
        return ColumnLayout(kind="double", width=8, prefix=0, **base)
    if t == FIELD_TYPE.NEWDECIMAL:
        p, s = int(col.precision), int(col.decimals)
        return ColumnLayout(kind="decimal", width=decimal_size(p, s), prefix=0, precision=p, scale=s, **base)
    if t == FIELD_TYPE.DATE:
        return ColumnLayout(kind="date", width=3, prefix=0, **base)
    if t == FIELD_TYPE.TIME:
        return ColumnLayout(kind="time", width=3, prefix=0, **base)
    if t == FIELD_TYPE.TIME2:
        fsp = int(col.fsp)
        return ColumnLayout(kind="time2", width=3 + _fsp_bytes(fsp), prefix=0, fsp=fsp, **base)
    if t == FIELD_TYPE.DATETIME:
        return ColumnLayout(kind="datetime", width=8, prefix=0, **base)
    if t == FIELD_TYPE.DATETIME2:
        fsp = int(col.fsp)
        return ColumnLayout(kind="datetime2", width=5 + _fsp_bytes(fsp), prefix=0, fsp=fsp, **base)
    if t == FIELD_TYPE.TIMESTAMP:
        return ColumnLayout(kind="timestamp", width=4, prefix=0, **base)
    if t == FIELD_TYPE.TIMESTAMP2:
        fsp = int(col.fsp)
        return ColumnLayout(kind="timestamp2", width=4 + _fsp_bytes(fsp), prefix=0, fsp=fsp, **base)
    if t == FIELD_TYPE.YEAR:
        return ColumnLayout(kind="year", width=1, prefix=0, **base)
    if t == FIELD_TYPE.ENUM:
        return ColumnLayout(kind="enum", width=int(col.size), prefix=0, labels=tuple(col.enum_values or ()), **base)
    if t == FIELD_TYPE.SET:
        return ColumnLayout(kind="set", width=int(col.size), prefix=0, labels=tuple(col.set_values or ()), **base)
    if t == FIELD_TYPE.BIT:
        return ColumnLayout(kind="bit", width=int(col.bytes), prefix=0, bits=int(col.bits), **base)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        prefix = 2 if int(col.max_length) > 255 else 1
        enc = _encoding(col.character_set_name)
        return ColumnLayout(kind="string", width=0, prefix=prefix, encoding=enc, **base)
    if t == FIELD_TYPE.BLOB:
        enc = _encoding(col.character_set_name)
        return ColumnLayout(kind="string", width=0, prefix=int(col.length_size), encoding=enc, **base)
    if t == FIELD_TYPE.JSON:
        return ColumnLayout(kind="json", width=0, prefix=int(col.length_size), **base)
    if t == FIELD_TYPE.GEOMETRY:
        return ColumnLayout(kind="geometry", width=0, prefix=int(col.length_size), **base)
    raise SourceError(
        f"column {name!r} has binlog type {t}, which python-mysql-replication cannot decode either; "
        "exclude the table from the pipeline"
    )


def table_layout(tm: Any) -> tuple[ColumnLayout, ...]:
    """Layouts of every column of a library `TableMapEvent`."""
    mask = bytes(tm.null_bitmask) if tm.null_bitmask is not None else b""
    out = []
    for i, col in enumerate(tm.columns):
        nullable = bool(mask[i // 8] >> (i % 8) & 1) if i // 8 < len(mask) else True
        out.append(column_layout(col, nullable))
    return tuple(out)


# --------------------------------------------------------------------- per-value (library mirrors)
# Each returns exactly what python-mysql-replication 1.0.17 returns for the value at `o` (see its
# row_event.RowsEvent.__read_values_name); staging's converters then apply as on the row-by-row path.

_S_b, _S_B, _S_h, _S_H = struct.Struct("<b"), struct.Struct("<B"), struct.Struct("<h"), struct.Struct("<H")
_S_i, _S_I, _S_q, _S_Q = struct.Struct("<i"), struct.Struct("<I"), struct.Struct("<q"), struct.Struct("<Q")
_S_f, _S_d = struct.Struct("<f"), struct.Struct("<d")
_S_BE_i = struct.Struct(">i")


def _uint_le(d: Any, o: int, n: int) -> int:
    return int.from_bytes(d[o : o + n], "little")


def _int_be(d: Any, o: int, n: int) -> int:
    """The library's read_int_be_by_size: signed big-endian for 1, 2, 3, 4 bytes; unsigned for 5."""
    if n == 5:
        return int.from_bytes(d[o : o + 5], "big")
    return int.from_bytes(d[o : o + n], "big", signed=True)


def _slice_bits(binary: int, start: int, size: int, length: int) -> int:
    return (binary >> (length - (start + size))) & ((1 << size) - 1)


def _read_fsp(d: Any, o: int, fsp: int) -> int:
    n = _fsp_bytes(fsp)
    if n == 0:
        return 0
    micro = _int_be(d, o, n)
    if fsp % 2:
        micro = int(micro / 10)
    return int(micro * (10 ** (6 - fsp)))


def _pv_decimal(lay: ColumnLayout) -> Callable[[Any, int], Any]:
    p, s = lay.precision, lay.scale
    integral = p - s
    uncomp_int, comp_int = integral // 9, integral % 9
    uncomp_frac, comp_frac = s // 9, s % 9
    lead, tail = _DIG2BYTES[comp_int], _DIG2BYTES[comp_frac]

    def f(d: Any, o: int) -> decimal.Decimal:
        b = bytearray(d[o : o + lay.width])
        first = b[0]
        mask, res = (0, "") if first & 0x80 else (-1, "-")
        b[0] = first ^ 0x80
        pos = 0
        if lead:
            res += str(int.from_bytes(b[0:lead], "big", signed=True) ^ mask)
            pos = lead
        for _ in range(uncomp_int):
            res += f"{_S_BE_i.unpack_from(b, pos)[0] ^ mask:09d}"
            pos += 4
        res += "."
        for _ in range(uncomp_frac):
            res += f"{_S_BE_i.unpack_from(b, pos)[0] ^ mask:09d}"
            pos += 4
        if tail:
            res += f"{int.from_bytes(b[pos:pos + tail], 'big', signed=True) ^ mask:0{comp_frac}d}"
        return decimal.Decimal(res)

    return f


def _pv_time2(lay: ColumnLayout) -> Callable[[Any, int], Any]:
    fsp = lay.fsp

    def f(d: Any, o: int) -> dt.timedelta:
        data = _int_be(d, o, 3)
        sign = 1 if _slice_bits(data, 0, 1, 24) else -1
        if sign == -1:
            data = ~data + 1
        return (
            dt.timedelta(
                hours=_slice_bits(data, 2, 10, 24),
                minutes=_slice_bits(data, 12, 6, 24),
                seconds=_slice_bits(data, 18, 6, 24),
                microseconds=_read_fsp(d, o + 3, fsp),
            )
            * sign
        )

    return f


def _pv_datetime2(lay: ColumnLayout) -> Callable[[Any, int], Any]:
    fsp = lay.fsp

    def f(d: Any, o: int) -> dt.datetime | None:
        data = _int_be(d, o, 5)
        ym = _slice_bits(data, 1, 17, 40)
        try:
            t = dt.datetime(
                year=int(ym / 13), month=ym % 13, day=_slice_bits(data, 18, 5, 40),
                hour=_slice_bits(data, 23, 5, 40), minute=_slice_bits(data, 28, 6, 40),
                second=_slice_bits(data, 34, 6, 40),
            )
        except ValueError:
            return None
        micro = _read_fsp(d, o + 5, fsp)
        return t.replace(microsecond=micro) if micro > 0 else t

    return f


def _pv_timestamp2(lay: ColumnLayout) -> Callable[[Any, int], Any]:
    fsp = lay.fsp

    def f(d: Any, o: int) -> dt.datetime:
        t = _EPOCH + dt.timedelta(seconds=_int_be(d, o, 4))  # = utcfromtimestamp
        micro = _read_fsp(d, o + 4, fsp)
        return t.replace(microsecond=micro) if micro > 0 else t

    return f


def _pv_date(d: Any, o: int) -> dt.date | None:
    t = _uint_le(d, o, 3)
    if t == 0:
        return None
    year, month, day = (t & ((1 << 15) - 1) << 9) >> 9, (t & ((1 << 4) - 1) << 5) >> 5, t & ((1 << 5) - 1)
    if year == 0 or month == 0 or day == 0:
        return None
    return dt.date(year=year, month=month, day=day)


def _pv_datetime(d: Any, o: int) -> dt.datetime | None:
    value = _S_Q.unpack_from(d, o)[0]
    if value == 0:
        return None
    date = value / 1000000
    time = int(value % 1000000)
    year, month, day = int(date / 10000), int((date % 10000) / 100), int(date % 100)
    if year == 0 or month == 0 or day == 0:
        return None
    return dt.datetime(
        year=year, month=month, day=day, hour=int(time / 10000), minute=int((time % 10000) / 100),
        second=int(time % 100),
    )


def _pv_time(d: Any, o: int) -> dt.timedelta:
    time = _uint_le(d, o, 3)
    return dt.timedelta(hours=int(time / 10000), minutes=int((time % 10000) / 100), seconds=int(time % 100))


def _pv_bit(lay: ColumnLayout) -> Callable[[Any, int], Any]:
    nbytes, bits = lay.width, lay.bits

    def f(d: Any, o: int) -> str:
        resp = ""
        for byte in range(nbytes):
            data = d[o + byte]
            end = (bits if nbytes == 1 else (bits % 8 or 8)) if byte == 0 else 8
            resp += "".join("1" if data & (1 << bit) else "0" for bit in range(end))[::-1]
        return resp

    return f


def _pv_string(lay: ColumnLayout) -> Callable[[Any, int], Any]:
    prefix, enc = lay.prefix, lay.encoding

    def f(d: Any, o: int) -> Any:
        n = _uint_le(d, o, prefix)
        raw = bytes(d[o + prefix : o + prefix + n])
        if enc is None:
            return raw
        try:
            return raw.decode(enc)
        except UnicodeDecodeError as e:
            raise SourceError(
                f"column {lay.name!r}: the value {raw[:40]!r} is not valid in its character set ({enc}: {e.reason} "
                f"at byte {e.start}); it was written as raw bytes. Fix the row at the source or exclude the table"
            ) from None

    return f


def _pv_json(lay: ColumnLayout) -> Callable[[Any, int], Any]:
    from pymysqlreplication.json_binary import parse_json

    prefix = lay.prefix

    def f(d: Any, o: int) -> Any:
        n = _uint_le(d, o, prefix)
        if n == 0:
            return None
        data = bytes(d[o + prefix : o + prefix + n])
        return parse_json(data[0], data[1:])

    return f


def value_function(lay: ColumnLayout) -> Callable[[Any, int], Any]:
    """(buffer, offset) -> the value python-mysql-replication decodes for this column."""
    k, w = lay.kind, lay.width
    if k == "int":
        if w == 3:
            if lay.unsigned:
                return lambda d, o: _uint_le(d, o, 3)
            return lambda d, o: int.from_bytes(d[o : o + 3], "little", signed=True)
        st = {1: (_S_b, _S_B), 2: (_S_h, _S_H), 4: (_S_i, _S_I), 8: (_S_q, _S_Q)}[w][lay.unsigned]
        return lambda d, o: st.unpack_from(d, o)[0]
    if k == "float":
        return lambda d, o: _S_f.unpack_from(d, o)[0]
    if k == "double":
        return lambda d, o: _S_d.unpack_from(d, o)[0]
    if k == "decimal":
        return _pv_decimal(lay)
    if k == "date":
        return _pv_date
    if k == "time":
        return _pv_time
    if k == "time2":
        return _pv_time2(lay)
    if k == "datetime":
        return _pv_datetime
    if k == "datetime2":
        return _pv_datetime2(lay)
    if k == "timestamp":
        return lambda d, o: _EPOCH + dt.timedelta(seconds=_S_I.unpack_from(d, o)[0])
    if k == "timestamp2":
        return _pv_timestamp2(lay)
    if k == "year":
        return lambda d, o: d[o] + 1900
    if k == "enum":
        labels = lay.labels
        if not labels:
            return lambda d, o: None
        return lambda d, o: labels[_uint_le(d, o, w)]
    if k == "set":
        labels = lay.labels

        def set_value(d: Any, o: int) -> Any:
            mask = _uint_le(d, o, w)
            # An empty set is set(), never None: the row image's null bit, not the mask, says NULL.
            return {v for i, v in enumerate(labels) if mask & (1 << i)}

        return set_value
    if k == "bit":
        return _pv_bit(lay)
    if k == "string":
        return _pv_string(lay)
    if k == "json":
        return _pv_json(lay)
    if k == "geometry":
        prefix = lay.prefix
        return lambda d, o: bytes(d[o + prefix : o + prefix + _uint_le(d, o, prefix)])
    raise AssertionError(f"unknown column kind {k}")


def value_span(lay: ColumnLayout, d: Any, o: int) -> int:
    """Bytes the value at `o` takes in the row image (length prefix included)."""
    if lay.width:
        return lay.width
    return lay.prefix + _uint_le(d, o, lay.prefix)


# ------------------------------------------------------------------------------ vector kernels


def _validity(valid: np.ndarray, n: int) -> tuple[pa.Buffer | None, int]:
    nulls = int(n - np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little").tobytes()), nulls


def _primitive(typ: pa.DataType, values: np.ndarray, valid: np.ndarray) -> pa.Array:
    n = len(values)
    vbuf, nulls = _validity(valid, n)
    if nulls:
        values = np.where(valid, values, 0).astype(values.dtype, copy=False)
    return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(np.ascontiguousarray(values))], null_count=nulls)


def _gather(buf: np.ndarray, offs: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, width) bytes at each offset (row 0's bytes where the offset is -1), and the validity mask."""
    valid = offs >= 0
    if valid.all():
        return buf[offs[:, None] + np.arange(width, dtype=np.int64)], valid
    # NULL rows read whatever bytes are at the buffer's start (clipped: the buffer may be shorter than
    # one value when every row of a small slice is NULL here); the validity masks them.
    idx = np.where(valid, offs, 0)[:, None] + np.arange(width, dtype=np.int64)
    return buf[np.minimum(idx, len(buf) - 1)], valid


def _be(g: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Unsigned big-endian integer of bytes [lo, hi) of each row (hi - lo <= 7)."""
    v = np.zeros(g.shape[0], dtype=np.int64)
    for j in range(lo, hi):
        v = (v << 8) | g[:, j]
    return v


def _le(g: np.ndarray, lo: int, hi: int) -> np.ndarray:
    v = np.zeros(g.shape[0], dtype=np.int64)
    for j in range(hi - 1, lo - 1, -1):
        v = (v << 8) | g[:, j]
    return v


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm), vectorized."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = np.where(m > 2, m - 3, m + 9)
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days: np.ndarray = era * 146097 + doe - 719468
    return days


def _days_in_month(y: np.ndarray, m: np.ndarray) -> np.ndarray:
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    dim = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)[np.clip(m, 0, 12)]
    out: np.ndarray = dim + ((m == 2) & leap)
    return out


def _fsp_micros(g: np.ndarray, lo: int, fsp: int) -> np.ndarray:
    n = _fsp_bytes(fsp)
    if n == 0:
        return np.zeros(g.shape[0], dtype=np.int64)
    micro = _be(g, lo, lo + n)  # never negative for DATETIME2/TIMESTAMP2 fractions (< 10**fsp)
    if fsp % 2:
        micro = micro // 10
    micros: np.ndarray = micro * (10 ** (6 - fsp))
    return micros


def _k_int(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    w = lay.width
    g, valid = _gather(buf, offs, w)
    if w == 3:
        v = _le(g, 0, 3)
        if not lay.unsigned:
            v = np.where(v >= 1 << 23, v - (1 << 24), v)
    else:
        v = g.view(f"<{'u' if lay.unsigned else 'i'}{w}").reshape(-1)
    if pa.types.is_decimal(typ):  # BIGINT UNSIGNED -> DECIMAL(20,0): the unsigned value, high word 0
        pairs = np.zeros((len(v), 2), dtype=np.uint64)
        pairs[:, 0] = np.where(valid, v, 0)
        vbuf, nulls = _validity(valid, len(v))
        return pa.Array.from_buffers(typ, len(v), [vbuf, pa.py_buffer(pairs)], null_count=nulls)
    return _primitive(typ, v.astype(typ.to_pandas_dtype(), copy=False), valid)


def _k_float(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    g, valid = _gather(buf, offs, lay.width)
    return _primitive(typ, g.view("<f4" if lay.width == 4 else "<f8").reshape(-1), valid)


def _k_decimal(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    p, s = lay.precision, lay.scale
    g, valid = _gather(buf, offs, lay.width)
    g = g.copy()
    neg = (g[:, 0] & 0x80) == 0
    g[:, 0] ^= 0x80
    g[neg] ^= 0xFF
    intg = p - s
    pos = _DIG2BYTES[intg % 9]
    int_part = _be(g, 0, pos)
    for _ in range(intg // 9):
        int_part = int_part * 1_000_000_000 + _be(g, pos, pos + 4)
        pos += 4
    frac = np.zeros(len(g), dtype=np.int64)
    for _ in range(s // 9):
        frac = frac * 1_000_000_000 + _be(g, pos, pos + 4)
        pos += 4
    if s % 9:
        frac = frac * 10 ** (s % 9) + _be(g, pos, pos + _DIG2BYTES[s % 9])
    unscaled = int_part * 10**s + frac
    unscaled = np.where(neg, -unscaled, unscaled)
    unscaled = np.where(valid, unscaled, 0)
    pairs = np.empty((len(g), 2), dtype=np.int64)
    pairs[:, 0] = unscaled
    pairs[:, 1] = unscaled >> 63
    vbuf, nulls = _validity(valid, len(g))
    return pa.Array.from_buffers(typ, len(g), [vbuf, pa.py_buffer(pairs)], null_count=nulls)


def zero_date_error(table: str, column: str, mysql_type: str, value: str, where: str = "") -> UnsupportedType:
    """The refusal of a zero or partial date (pipeline setting `zero_dates: refuse`, the default)."""
    return UnsupportedType(
        f"{where}table {table!r} column {column!r} ({mysql_type}) holds the zero or partial date {value!r}, which has "
        "no exact value in Arrow/Delta (zero_dates: refuse). Ways out: set `zero_dates: null` in the pipeline "
        "config to land zero and partial dates as NULL knowingly; or fix the rows at the source and keep them out "
        "with sql_mode NO_ZERO_DATE,NO_ZERO_IN_DATE; or exclude the table (tables.exclude)"
    )


class ZeroDate(UnsupportedType):
    """A kernel's zero-date refusal; `TableDecoder` re-raises it naming the table."""

    def __init__(self, column: str, mysql_type: str, value: str) -> None:
        super().__init__(str(zero_date_error("?", column, mysql_type, value)))
        self.column, self.mysql_type, self.value = column, mysql_type, value


def _refuse_zero(name: str, mysql_type: str, bad: np.ndarray, text: Callable[[int], str]) -> None:
    """Raise the zero-date refusal for the first row of the mask `bad` (one vectorised check)."""
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ZeroDate(name, mysql_type, text(i))


def _k_date(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, name: str, *, refuse_zero: bool = False
) -> pa.Array:
    g, valid = _gather(buf, offs, 3)
    t = _le(g, 0, 3)
    y, m, d = t >> 9, (t >> 5) & 15, t & 31
    zero = (y == 0) | (m == 0) | (d == 0)
    bad = valid & ~zero & ((m > 12) | (d > _days_in_month(y, m)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SourceError(
            f"column {name!r} holds the invalid DATE {int(y[i]):04d}-{int(m[i]):02d}-{int(d[i]):02d} "
            "(sql_mode ALLOW_INVALID_DATES?), which python-mysql-replication cannot decode either; fix the row "
            "at the source or exclude the table"
        )
    if refuse_zero:
        _refuse_zero(name, "DATE", valid & zero, lambda i: f"{int(y[i]):04d}-{int(m[i]):02d}-{int(d[i]):02d}")
    valid = valid & ~zero
    return _primitive(typ, _days_from_civil(y, m, d).astype(np.int32), valid)


def _k_datetime2(
    lay: ColumnLayout,
    typ: pa.DataType,
    buf: np.ndarray,
    offs: np.ndarray,
    *,
    name: str = "?",
    refuse_zero: bool = False,
) -> pa.Array:
    g, valid = _gather(buf, offs, lay.width)
    data = _be(g, 0, 5)
    ym = (data >> 22) & 0x1FFFF
    y, m = ym // 13, ym % 13
    d, hh, mi, ss = (data >> 17) & 31, (data >> 12) & 31, (data >> 6) & 63, data & 63
    ok = (y >= 1) & (y <= 9999) & (m >= 1) & (d >= 1) & (d <= _days_in_month(y, m)) & (hh <= 23) & (mi <= 59)
    ok &= ss <= 59
    if refuse_zero:
        _refuse_zero(
            name, "DATETIME", valid & ~ok,
            lambda i: f"{int(y[i]):04d}-{int(m[i]):02d}-{int(d[i]):02d} "
            f"{int(hh[i]):02d}:{int(mi[i]):02d}:{int(ss[i]):02d}",
        )
    valid = valid & ok  # the library turns a DATETIME it cannot build (zero dates) into None
    mm = np.where(ok, m, 1)
    days = _days_from_civil(np.where(ok, y, 1970), mm, np.where(ok, d, 1))
    us = days * _US_PER_DAY + ((hh * 60 + mi) * 60 + ss) * 1_000_000 + _fsp_micros(g, 5, lay.fsp)
    return _primitive(typ, us, valid)


def _k_timestamp2(
    lay: ColumnLayout,
    typ: pa.DataType,
    buf: np.ndarray,
    offs: np.ndarray,
    *,
    name: str = "?",
    refuse_zero: bool = False,
) -> pa.Array:
    g, valid = _gather(buf, offs, lay.width)
    secs = _be(g, 0, 4)
    secs = np.where(secs >= 1 << 31, secs - (1 << 32), secs)
    us = secs * 1_000_000 + _fsp_micros(g, 4, lay.fsp)
    if refuse_zero:
        _refuse_zero(name, "TIMESTAMP", valid & (us == 0), lambda i: "0000-00-00 00:00:00")
    valid = valid & (us != 0)  # conv_timestamp: the zero value lands as NULL
    return _primitive(typ, us, valid)


def _k_year(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    g, valid = _gather(buf, offs, 1)
    b = g[:, 0].astype(np.int16)
    return _primitive(typ, np.where(b == 0, 0, b + 1900).astype(np.int16), valid)


def _k_enum(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, name: str) -> pa.Array:
    g, valid = _gather(buf, offs, lay.width)
    idx = _le(g, 0, lay.width)
    if (valid & (idx >= len(lay.labels))).any():
        raise SourceError(
            f"column {name!r}: an ENUM index beyond its {len(lay.labels) - 1} labels; the table map does not "
            "match the row (re-check binlog_row_metadata=FULL)"
        )
    labels = pa.array(np.array(lay.labels, dtype=object), pa.string())
    return labels.take(pa.array(np.where(valid, idx, 0), mask=~valid))


def _k_string(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, raw: Any, *, native: bool
) -> pa.Array:
    n = len(offs)
    if native:
        valid = offs >= 0
        wide, data = _rowscan.gather(buf, np.ascontiguousarray(offs, dtype=np.int64), lay.prefix)
        aoff = np.frombuffer(wide, dtype=np.int64)
        total = int(aoff[-1])
    else:
        prefix = lay.prefix
        valid = offs >= 0
        safe = np.where(valid, offs, 0)
        g = buf[safe[:, None] + np.arange(prefix, dtype=np.int64)]
        lengths = np.where(valid, _le(g, 0, prefix), 0)
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
    vbuf, nulls = _validity(valid, n)
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


def _u64(g: np.ndarray, *, big_endian: bool) -> np.ndarray:
    """Unsigned integer of each row's bytes (up to 8) as uint64."""
    w = g.shape[1]
    if w == 8:
        out: np.ndarray = np.ascontiguousarray(g).view(">u8" if big_endian else "<u8").reshape(-1).astype(np.uint64)
        return out
    return (_be(g, 0, w) if big_endian else _le(g, 0, w)).astype(np.uint64)


def _k_time2(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    """TIME(fsp) as the type map's microseconds: `_pv_time2` then `conv_time`, vectorized."""
    g, valid = _gather(buf, offs, lay.width)
    raw3 = _be(g, 0, 3)
    positive = raw3 >= 1 << 23  # the sign bit set means non-negative
    bits = np.where(positive, raw3, (-raw3) & 0xFFFFFF)
    secs = ((bits >> 12) & 0x3FF) * 3600 + ((bits >> 6) & 63) * 60 + (bits & 63)
    n = _fsp_bytes(lay.fsp)
    micro = np.zeros(len(g), dtype=np.int64)
    if n:
        micro = _be(g, 3, 3 + n)
        micro = np.where(micro >= 1 << (8 * n - 1), micro - (1 << (8 * n)), micro)  # signed, like the library
        if lay.fsp % 2:
            micro = np.sign(micro) * (np.abs(micro) // 10)  # int(micro / 10): toward zero
        micro = micro * 10 ** (6 - lay.fsp)
    us = np.where(positive, 1, -1) * (secs * 1_000_000 + micro)
    frac = (-us) % 1_000_000
    us = np.where((us < 0) & (frac != 0), us + 2 * frac - 1_000_000, us)  # conv_time's inverse of the skew
    return _primitive(typ, us, valid)


def _k_bit(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    """BIT(n) as an unsigned number (int64, or DECIMAL(20,0) for BIT(64))."""
    w = lay.width
    g, valid = _gather(buf, offs, w)
    v = _u64(g, big_endian=True)
    if lay.bits < 64:
        v = v & np.uint64((1 << lay.bits) - 1)  # the library reads only the column's bits of the first byte
    if pa.types.is_decimal(typ):
        pairs = np.zeros((len(v), 2), dtype=np.uint64)
        pairs[:, 0] = np.where(valid, v, 0)
        vbuf, nulls = _validity(valid, len(v))
        return pa.Array.from_buffers(typ, len(v), [vbuf, pa.py_buffer(pairs)], null_count=nulls)
    return _primitive(typ, v.astype(np.int64), valid)


def _k_set(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    """SET as its labels comma-joined in definition order ('' for the empty set): each distinct mask of
    the batch is joined once."""
    g, valid = _gather(buf, offs, lay.width)
    mask = _u64(g, big_endian=False)
    mask = np.where(valid, mask, np.uint64(0))
    uniq, inverse = np.unique(mask, return_inverse=True)
    labels = lay.labels
    texts = [",".join([x for i, x in enumerate(labels) if int(m) >> i & 1]) for m in uniq.tolist()]
    return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1), pa.int64(), mask=~valid))


def _string_parts(
    lay: ColumnLayout, buf: np.ndarray, offs: np.ndarray, native: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(validity, lengths, value starts in buf, the concatenated value bytes) of a length-prefixed column."""
    prefix = lay.prefix
    valid = offs >= 0
    if native:
        wide, data = _rowscan.gather(buf, np.ascontiguousarray(offs, dtype=np.int64), prefix)
        aoff = np.frombuffer(wide, dtype=np.int64)
        return valid, np.diff(aoff), aoff, np.frombuffer(data, dtype=np.uint8)
    safe = np.where(valid, offs, 0)
    g = buf[safe[:, None] + np.arange(prefix, dtype=np.int64)]
    lengths = np.where(valid, _le(g, 0, prefix), 0)
    starts = safe + prefix
    aoff = np.zeros(len(offs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=aoff[1:])
    total = int(aoff[-1])
    idx = np.repeat(starts - aoff[:-1], lengths) + np.arange(total, dtype=np.int64)
    return valid, lengths, aoff, buf[idx]


def _k_binary_padded(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, n: int, *, native: bool
) -> pa.Array:
    """BINARY(n): the stored bytes padded back to n with 0x00 (the binlog drops trailing zeros)."""
    valid, lengths, aoff, data = _string_parts(lay, buf, offs, native)
    rows = len(offs)
    width = np.where(valid, np.maximum(lengths, n), 0)
    out_off = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(width, out=out_off[1:])
    out = np.zeros(int(out_off[-1]), dtype=np.uint8)
    if len(data):
        dst = np.repeat(out_off[:-1] - aoff[:-1], lengths) + np.arange(len(data), dtype=np.int64)
        out[dst] = data
    vbuf, nulls = _validity(valid, rows)
    return pa.Array.from_buffers(
        typ, rows, [vbuf, pa.py_buffer(out_off.astype(np.int32)), pa.py_buffer(out)], null_count=nulls
    )


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


def _text_array(lay: ColumnLayout, typ: pa.DataType, valid: np.ndarray, offsets: np.ndarray, data: Any) -> pa.Array:
    """A string array from int64 value offsets (n + 1) and the concatenated UTF-8 bytes."""
    if int(offsets[-1]) >= 1 << 31:
        raise StagingError(
            f"column {lay.name!r}: {int(offsets[-1])} bytes of values in one batch exceed Arrow's 2 GiB string "
            "limit; lower the staging batch size"
        )
    vbuf, nulls = _validity(valid, len(valid))
    return pa.Array.from_buffers(
        typ, len(valid), [vbuf, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], null_count=nulls
    )


def _not_in_charset(lay: ColumnLayout, enc: str, value: bytes) -> SourceError:
    return SourceError(
        f"column {lay.name!r}: the value {value[:40]!r} is not valid in its character set ({enc}); it was written "
        "as raw bytes. Fix the row at the source or exclude the table"
    )


def _k_single_byte_text(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, native: bool
) -> pa.Array:
    """Text in a single-byte character set (latin1, cp1251, ...) transcoded to UTF-8 by a byte table."""
    enc = lay.encoding or ""
    table, lens, defined = _charset_table(enc)
    valid = offs >= 0
    if native:
        offs64 = np.ascontiguousarray(offs, dtype=np.int64)
        wide, text, bad = _rowscan.single_byte_text(
            buf, offs64, lay.prefix, table.tobytes(), lens.astype(np.uint8).tobytes()
        )
        if bad >= 0:
            o = int(offs[bad])
            raise _not_in_charset(lay, enc, bytes(buf[o + lay.prefix : o + lay.prefix + _uint_le(buf, o, lay.prefix)]))
        return _text_array(lay, typ, valid, np.frombuffer(wide, dtype=np.int64), text)
    _, lengths, aoff, data = _string_parts(lay, buf, offs, native=False)
    if len(data) and not defined[data].all():
        row = int(np.searchsorted(aoff, int(np.flatnonzero(~defined[data])[0]), side="right")) - 1
        start = int(aoff[row])
        raise _not_in_charset(lay, enc, data[start : start + int(lengths[row])].tobytes())
    per_byte = lens[data]
    cum = np.concatenate(([0], np.cumsum(per_byte)))
    out = table[data][np.arange(3) < per_byte[:, None]]
    return _text_array(lay, typ, valid, cum[aoff], out)


_WIDE_UNITS = {"utf-16-be": ">u2", "utf-16-le": "<u2", "utf-32-be": ">u4"}


def _k_wide_text(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, native: bool) -> pa.Array:
    """UTF-16/UCS-2/UTF-32 text: the batch's values decoded in one call (values are whole code units, so
    the concatenation decodes to the concatenation), UTF-8 offsets counted per code unit in numpy."""
    enc = lay.encoding or ""
    unit = np.dtype(_WIDE_UNITS[enc])
    valid, lengths, aoff, data = _string_parts(lay, buf, offs, native)
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
    vbuf, nulls = _validity(valid, len(offs))
    return pa.Array.from_buffers(
        typ, len(offs), [vbuf, pa.py_buffer(out_off.astype(np.int32)), pa.py_buffer(text)], null_count=nulls
    )


def _digits(values: np.ndarray, width: int | None) -> pa.Array:
    """Non-negative int64s as decimal text, zero-padded to `width` when given."""
    text = pc.cast(pa.array(values, pa.int64()), pa.string())
    return pc.utf8_lpad(text, width=width, padding="0") if width else text


def _k_decimal_text(lay: ColumnLayout, buf: np.ndarray, offs: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Any DECIMAL(p,s) as exact plain text with exactly s fraction digits and no '-' on zero (the wide
    DECIMAL converter's output), and the validity."""
    p, s = lay.precision, lay.scale
    g, valid = _gather(buf, offs, lay.width)
    g = g.copy()
    neg = (g[:, 0] & 0x80) == 0
    g[:, 0] ^= 0x80
    g[neg] ^= 0xFF
    intg = p - s
    lead = _DIG2BYTES[intg % 9]
    parts: list[pa.Array] = []
    nonzero = np.zeros(len(g), dtype=bool)
    pos = 0
    if lead:
        v = _be(g, 0, lead)
        nonzero |= v != 0
        parts.append(_digits(v, None))
        pos = lead
    for _ in range(intg // 9):
        v = _be(g, pos, pos + 4)
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
        v = _be(g, pos, pos + 4)
        nonzero |= v != 0
        frac_parts.append(_digits(v, 9))
        pos += 4
    if s % 9:
        v = _be(g, pos, pos + _DIG2BYTES[s % 9])
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


def _k_decimal128(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    """DECIMAL(p,s) with 18 < p <= 38 straight into decimal128: the digit groups folded into a 128-bit
    unscaled integer with uint64 limbs, negated in two's complement."""
    p, s = lay.precision, lay.scale
    g, valid = _gather(buf, offs, lay.width)
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
        groups.append((0, _DIG2BYTES[intg % 9], intg % 9))
        pos = _DIG2BYTES[intg % 9]
    for _ in range(intg // 9 + s // 9):
        groups.append((pos, 4, 9))
        pos += 4
    if s % 9:
        groups.append((pos, _DIG2BYTES[s % 9], s % 9))
    for start, nbytes, digits in groups:
        hi, lo = _mul_add_128(hi, lo, 10**digits, _be(g, start, start + nbytes).astype(np.uint64))
    one = np.uint64(1)
    neg_lo = ~lo + one
    neg_hi = ~hi + (lo == 0).astype(np.uint64)
    pairs = np.empty((n, 2), dtype=np.uint64)
    pairs[:, 0] = np.where(valid, np.where(neg, neg_lo, lo), 0)
    pairs[:, 1] = np.where(valid, np.where(neg, neg_hi, hi), 0)
    vbuf, nulls = _validity(valid, n)
    return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(pairs)], null_count=nulls)


def _k_decimal_wide(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, *, native: bool
) -> pa.Array:
    if native and pa.types.is_string(typ):
        valid = offs >= 0
        wide, data = _rowscan.decimal_text(buf, np.ascontiguousarray(offs, dtype=np.int64), lay.precision, lay.scale)
        return _text_array(lay, typ, valid, np.frombuffer(wide, dtype=np.int64), data)
    text, valid = _k_decimal_text(lay, buf, offs)
    if pa.types.is_decimal(typ):
        text = pc.if_else(pa.array(valid), text, "0")
        out = pc.cast(text, typ)
    else:
        out = text
    return pc.if_else(pa.array(valid), out, pa.scalar(None, typ))


_Kernel = Callable[[np.ndarray, np.ndarray, Any], pa.Array]


def vector_kernel(
    lay: ColumnLayout, codec: ColumnCodec, zero_dates: str = "null", native: bool = False
) -> _Kernel | None:
    """A vectorized decoder for the column when its output equals the per-value path's, else None.

    `zero_dates="refuse"`: a zero or partial DATE/DATETIME/TIMESTAMP raises UnsupportedType (a mask check).
    `native`: length-prefixed values are copied out by the compiled gather (same bytes as numpy's)."""
    typ, conv, k = codec.arrow_type, codec.convert, lay.kind
    rz = zero_dates == "refuse"
    if codec.none_as is not None:
        return None
    name = lay.name
    if k == "int" and conv is None:
        want = {
            (1, False): pa.int8(), (1, True): pa.int16(), (2, False): pa.int16(), (2, True): pa.int32(),
            (3, False): pa.int32(), (3, True): pa.int32(), (4, False): pa.int32(), (4, True): pa.int64(),
            (8, False): pa.int64(), (8, True): pa.decimal128(20, 0),
        }[(lay.width, lay.unsigned)]
        if typ == want:
            return lambda buf, offs, raw: _k_int(lay, typ, buf, offs)
        return None
    if k in ("float", "double") and conv is None and typ == (pa.float32() if k == "float" else pa.float64()):
        return lambda buf, offs, raw: _k_float(lay, typ, buf, offs)
    if k == "decimal" and conv is None and lay.precision <= 18 and typ == pa.decimal128(lay.precision, lay.scale):
        return lambda buf, offs, raw: _k_decimal(lay, typ, buf, offs)
    if k == "date" and conv is None and typ == pa.date32():
        return lambda buf, offs, raw: _k_date(lay, typ, buf, offs, name, refuse_zero=rz)
    if k == "datetime2" and conv is None and typ == pa.timestamp("us"):
        return lambda buf, offs, raw: _k_datetime2(lay, typ, buf, offs, name=name, refuse_zero=rz)
    if k == "timestamp2" and conv is conv_timestamp and typ == pa.timestamp("us", tz="UTC"):
        return lambda buf, offs, raw: _k_timestamp2(lay, typ, buf, offs, name=name, refuse_zero=rz)
    if k == "year" and conv is conv_year and typ == pa.int16():
        return lambda buf, offs, raw: _k_year(lay, typ, buf, offs)
    if k == "enum" and conv is None and typ == pa.string() and lay.labels:
        return lambda buf, offs, raw: _k_enum(lay, typ, buf, offs, name)
    if k == "string":
        if lay.encoding in ("utf8", "utf-8") and typ == pa.string() and conv in (None, conv_json):
            return lambda buf, offs, raw: _k_string(lay, typ, buf, offs, raw, native=native)
        if lay.encoding is None and typ == pa.binary() and conv in (None, conv_bytes):
            return lambda buf, offs, raw: _k_string(lay, typ, buf, offs, raw, native=native)
        pt = parse_type(codec.mysql_type)
        if lay.encoding is None and typ == pa.binary() and pt.base in ("binary", "char") and conv is not None:
            n = (pt.int_args() or (1,))[0]
            return lambda buf, offs, raw: _k_binary_padded(lay, typ, buf, offs, n, native=native)
        if lay.encoding in _SINGLE_BYTE_CODECS and typ == pa.string() and conv is None:
            return lambda buf, offs, raw: _k_single_byte_text(lay, typ, buf, offs, native)
        if lay.encoding in _WIDE_UNITS and typ == pa.string() and conv is None:
            return lambda buf, offs, raw: _k_wide_text(lay, typ, buf, offs, native)
    if k == "time2" and conv is conv_time and typ == pa.int64():
        return lambda buf, offs, raw: _k_time2(lay, typ, buf, offs)
    if k == "bit" and conv is conv_bit and typ in (pa.int64(), pa.decimal128(20, 0)) and 1 <= lay.bits <= 64:
        return lambda buf, offs, raw: _k_bit(lay, typ, buf, offs)
    if (
        k == "set" and typ == pa.string() and lay.labels and len(lay.labels) <= 64
        and parse_labels(parse_type(codec.mysql_type).args or "") == lay.labels
    ):
        return lambda buf, offs, raw: _k_set(lay, typ, buf, offs)
    if k == "decimal" and lay.precision > 18:
        if conv is None and typ == pa.decimal128(lay.precision, lay.scale):
            return lambda buf, offs, raw: _k_decimal128(lay, typ, buf, offs)
        if typ == pa.string() and conv is not None and lay.precision > 38:
            return lambda buf, offs, raw: _k_decimal_wide(lay, typ, buf, offs, native=native)
    return None


# Single-byte charsets the byte-table kernel transcodes (the type map's exact ones; cdc_core.model.types).
_SINGLE_BYTE_CODECS = frozenset(
    c for c in set(CHARSET_CODECS.values()) if c not in ("utf-8", "utf-16-be", "utf-16-le", "utf-32-be")
)


# ------------------------------------------------------------------------------------ the scanner
# Only the row boundaries are found row by row: the scanner records where each row image starts and
# walks to its end (null bitmap, fixed widths, length prefixes). Column offsets are then recomputed for
# all rows at once from the recorded starts (`row_offsets`), with the same walk done in numpy.

# Runs of fixed-width columns are skipped with one lookup per this many columns, indexed by their null
# bits (the table holds the run's width for each combination).
_LOOKUP_BITS = 10


class _Walk:
    """Emits the code walking a row image. Constant advances are carried in `pending` (an offset from
    `pos` not yet added) and folded into the next length read, so most columns cost one statement."""

    def __init__(self, layouts: Sequence[ColumnLayout], tables: list[tuple[int, ...]]) -> None:
        self.layouts = layouts
        self.tables = tables
        self.lines: list[str] = []
        self.pending = 0

    def at(self, extra: int = 0) -> str:
        k = self.pending + extra
        return f"pos + {k}" if k else "pos"

    def length(self, lay: ColumnLayout) -> str:
        p = lay.prefix
        if p == 1:
            return f"d[{self.at()}]"
        if p in (2, 3, 4):  # byte reads: cheaper than slicing for int.from_bytes (JSON, LONGTEXT: 4 bytes)
            return "(" + " | ".join(f"d[{self.at(j)}] << {8 * j}" if j else f"d[{self.at()}]" for j in range(p)) + ")"
        return f"int.from_bytes(d[{self.at()}:{self.at(p)}], 'little')"

    def var(self, i: int, lay: ColumnLayout) -> None:
        step = f"pos += {lay.prefix} + {self.length(lay)}"
        if lay.nullable:
            self.lines += [f"if not nb & {1 << i}:", f"    {step}"]
        else:
            self.lines.append(step)

    def fixed(self, cols: list[int]) -> None:
        """Advance over consecutive fixed-width columns `cols`, by their null bits in `nb`."""
        layouts = self.layouts
        for c in range(0, len(cols), _LOOKUP_BITS):
            chunk = cols[c : c + _LOOKUP_BITS]
            nullable = [i for i in chunk if layouts[i].nullable]
            self.pending += sum(layouts[i].width for i in chunk if not layouts[i].nullable)
            if len(nullable) <= 1:
                for i in nullable:
                    self.lines += [f"if not nb & {1 << i}:", f"    pos += {layouts[i].width}"]
                continue
            lo, span = nullable[0], nullable[-1] - nullable[0] + 1
            table = tuple(
                sum(layouts[lo + j].width for j in range(span) if layouts[lo + j].nullable and not (bits >> j) & 1)
                for bits in range(1 << span)
            )
            self.tables.append(table)
            self.lines.append(f"pos += T{len(self.tables) - 1}[nb >> {lo} & {(1 << span) - 1}]")

    def flush(self) -> None:
        if self.pending:
            self.lines.append(f"pos += {self.pending}")
            self.pending = 0


def _row_lines(layouts: Sequence[ColumnLayout], record: Sequence[int], tables: list[tuple[int, ...]]) -> list[str]:
    """Code that walks one row image from `pos` to its end; columns in `record` get their offset (-1 for
    NULL) in variables k0, k1, ..."""
    nbytes = (len(layouts) + 7) // 8
    w = _Walk(layouts, tables)
    if any(lay.nullable for lay in layouts):
        if nbytes <= 4:
            w.lines.append("nb = " + " | ".join(f"d[pos + {j}] << {8 * j}" if j else "d[pos]" for j in range(nbytes)))
        else:
            w.lines.append(f"nb = int.from_bytes(d[pos:pos + {nbytes}], 'little')")
    w.pending = nbytes
    run: list[int] = []
    for i, lay in enumerate(layouts):
        if i in record:
            w.fixed(run)
            run = []
            var = f"k{list(record).index(i)}"
            w.lines.append(f"{var} = -1 if nb & {1 << i} else {w.at()}" if lay.nullable else f"{var} = {w.at()}")
            if lay.width:
                w.fixed([i])
                continue
        elif lay.width:
            run.append(i)
            continue
        w.fixed(run)
        run = []
        w.var(i, lay)
    w.fixed(run)
    w.flush()
    return w.lines


def compile_scanners(
    layouts: Sequence[ColumnLayout], key_columns: Sequence[int] = ()
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(scan, image) for a table layout.

    `scan(d, pos, end, record) -> (pos, rows)` calls `record(row_start)` for every row image in
    d[pos:end] (write and delete events). `image(d, pos) -> (end, row_start, key offsets...)` reads one
    row image (update events read two per row and compare their keys).
    """
    tables: list[tuple[int, ...]] = []
    body = _row_lines(layouts, (), tables)
    src = ["def scan(d, pos, end, record):", "    n = 0", "    while pos < end:", "        record(pos)"]
    src += ["        " + line for line in body]
    src += ["        n += 1", "    return pos, n", "", "def image(d, pos):", "    start = pos"]
    src += ["    " + line for line in _row_lines(layouts, key_columns, tables)]
    keys = "".join(f", k{j}" for j in range(len(key_columns)))
    src.append(f"    return (pos, start{keys})")
    namespace: dict[str, Any] = {f"T{j}": t for j, t in enumerate(tables)}
    # Generated from the table map's layout only (column widths, prefixes, bit positions: all integers).
    exec(compile("\n".join(src), f"<row scanner {len(layouts)} columns>", "exec"), namespace)  # noqa: S102
    return namespace["scan"], namespace["image"]


def row_offsets(layouts: Sequence[ColumnLayout], buf: np.ndarray, starts: np.ndarray) -> list[np.ndarray]:
    """Every column's value offset (-1 for NULL) in each row image starting at `starts`: the scanner's
    walk, vectorized over rows."""
    nbytes = (len(layouts) + 7) // 8
    n = len(starts)
    bitmap = buf[starts[:, None] + np.arange(nbytes, dtype=np.int64)]
    running = starts + nbytes
    out: list[np.ndarray] = []
    for i, lay in enumerate(layouts):
        present = None
        if lay.nullable:
            present = ((bitmap[:, i >> 3] >> (i & 7)) & 1) == 0
        if lay.width:
            if present is None:
                out.append(running)
                running = running + lay.width
            else:
                out.append(np.where(present, running, -1))
                running = running + np.where(present, lay.width, 0)
            continue
        safe = running if present is None else np.where(present, running, 0)
        length = np.zeros(n, dtype=np.int64)
        last = len(buf) - 1  # NULL rows read clipped bytes (a buffer may be shorter than one prefix)
        for j in range(lay.prefix - 1, -1, -1):
            length = (length << 8) | buf[np.minimum(safe + j, last)]
        if present is None:
            out.append(running)
            running = running + lay.prefix + length
        else:
            out.append(np.where(present, running, -1))
            running = running + np.where(present, lay.prefix + length, 0)
    # Recorded images follow each other in the buffer (update events skip unrecorded before images).
    if n and (np.any(running[:-1] > starts[1:]) or running[-1] > len(buf)):
        raise SourceError(
            "row images overlap when decoded column-wise: the table map does not describe these rows "
            "(report this with the binlog position)"
        )
    return out


# ------------------------------------------------------------------------------------ the decoder


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
    ) -> None:
        if [lay.name for lay in layouts] != list(shape.column_names):
            raise SourceError(
                f"table {shape.name}: the table map's columns {[lay.name for lay in layouts]} differ from the "
                f"table's columns {list(shape.column_names)}"
            )
        self.shape = shape
        self.layouts = layouts
        self.codec: TableCodec = table_codec(shape)
        index = {lay.name: i for i, lay in enumerate(layouts)}
        self.key_columns = [index[k] for k in shape.key]
        self.scan, self.image = compile_scanners(layouts, self.key_columns)
        self.native = native and _rowscan is not None
        # The layout as the compiled walk takes it (int32 widths and prefixes, a byte per flag).
        self.walk_layout = (
            np.array([lay.width for lay in layouts], dtype=np.int32).tobytes(),
            np.array([lay.prefix for lay in layouts], dtype=np.int32).tobytes(),
            bytes(int(lay.nullable) for lay in layouts),
        )
        self.kernels: list[_Kernel | None] = [
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
            _rowscan.column_offsets(buf, np.ascontiguousarray(starts, dtype=np.int64), *self.walk_layout),
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


# ------------------------------------------------------------------------------------------ slices
# A window is cut into transaction-aligned slices of about SLICE_BYTES of row images. The reader only
# copies each rows event's images into the slice (`Slice`); `decode_slice` finds the rows, assigns
# slice-local ordinals and builds the batches, inline or in a worker process; the reader then shifts
# the ordinals by everything before the slice (`finish_slice`). Rows wait in the slice until their
# transaction commits (the commit time is in the commit event), so memory holds about two slices per
# worker plus the largest transaction, in compact form (raw images, Arrow batches).

EV_WRITE, EV_UPDATE, EV_DELETE = 0, 1, 2


@dataclass(frozen=True)
class TableSpec:
    """What decoding a table's row images needs (picklable; compiled once per process)."""

    shape: TableSchema
    layouts: tuple[ColumnLayout, ...]
    zero_dates: str = "null"  # the pipeline's `zero_dates` setting: "refuse" or "null"


class _SliceTable:
    __slots__ = ("buf", "commits", "ends", "kinds", "spec", "versions")

    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self.buf = bytearray()
        self.kinds = bytearray()  # per event: EV_*
        self.versions: list[int] = []  # per event
        self.ends: list[int] = []  # per event: end of its images in buf
        self.commits: list[tuple[int, int]] = []  # (events up to here, commit time in µs)


class Slice:
    """Row events of consecutive transactions, as the reader copies them (no decoding)."""

    def __init__(self) -> None:
        self.tables: dict[int, _SliceTable] = {}  # table id -> its images (ids grow with first sight)
        self.order: list[int] = []  # per event in binlog order: table id, or -1 for a DDL (one ordinal)
        self.ddl: list[Any] = []  # per DDL marker: the reader's statement (binlog.DdlStatement)
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

    def commit(self, commit_ts: float) -> None:
        ts = round(commit_ts * 1_000_000)
        for tid in self.touched:
            t = self.tables[tid]
            t.commits.append((len(t.kinds), ts))
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
            spec.shape, spec.layouts, vectorize=vectorize, zero_dates=spec.zero_dates, native=native
        )
    return dec


def decode_slice(job: tuple[Any, ...]) -> SliceResult:
    """Decode a slice's row images into staged batches (runs in the reader or a worker process)."""
    tables, order, batch_rows, vectorize, native = job
    scanned = {}
    for tid, spec, raw, kinds, versions, ends, commits in tables:
        dec = _decoder(spec, vectorize, native)
        scanned[tid] = (spec, dec, raw, *_scan_table(dec, raw, kinds, ends), versions, commits)
    # Ordinals in binlog order across tables (DDL statements take one each).
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
        running += scanned[tid][4][e]
    batches: list[tuple[TableSchema, pa.RecordBatch]] = []
    for tid, (spec, dec, raw, starts, counts, ops, versions, commits) in scanned.items():
        for batch in _materialize(dec, raw, starts, counts, ops, versions, firsts[tid], commits, batch_rows):
            batches.append((spec.shape, batch))
    return SliceResult(batches, ddl_ordinals, running)


def _scan_table(dec: TableDecoder, raw: bytes, kinds: bytes, ends: list[int]) -> tuple[Any, Any, bytes]:
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
            ops += _OP_BYTE[OPC_INSERT if kind == EV_WRITE else OPC_DELETE] * n
        counts.append(n)
        pos = end
    return starts, counts, bytes(ops)


def _scan_table_native(dec: TableDecoder, raw: bytes, kinds: bytes, ends: list[int]) -> tuple[Any, Any, bytes]:
    """`_scan_table` by the compiled walk. Key columns whose bytes differ but whose values may still be
    equal (-0.0 and 0.0, two invalid DATETIMEs) are compared here, by `key_changed`, as the Python walk does."""

    def ask(before: int, after: int) -> bool:
        return dec.key_changed(raw, dec.image(raw, before), dec.image(raw, after))

    starts, counts, ops, bad_event, bad_stop = _rowscan.scan_table(
        raw, kinds, np.array(ends, dtype=np.int64), *dec.walk_layout,
        np.array(dec.key_columns, dtype=np.int32).tobytes(), bytes(map(int, dec.key_raw)), ask,
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
    else an update with the after image. Returns the rows (ordinals) it takes."""
    image, changed = dec.image, dec.key_changed
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


def _materialize(  # noqa: PLR0917 - one call site, the scanned table's parts in order
    dec: TableDecoder, raw: bytes, starts: Any, counts: Any, ops: bytes, versions: list[int],
    firsts: list[int], commits: list[tuple[int, int]], batch_rows: int,
) -> list[pa.RecordBatch]:
    n = len(starts)
    if n == 0:
        return []
    counts_np = np.asarray(counts, dtype=np.int64)
    row_firsts = np.zeros(len(counts_np), dtype=np.int64)
    np.cumsum(counts_np[:-1], out=row_firsts[1:])
    versions_np = np.repeat(np.array(versions, dtype=np.int64), counts_np)
    ordinals = np.repeat(np.array(firsts, dtype=np.int64) - row_firsts, counts_np) + np.arange(n, dtype=np.int64)
    rows_at = np.cumsum(counts_np)
    commit_rows = np.array([rows_at[e - 1] if e else 0 for e, _ in commits], dtype=np.int64)
    ts = np.repeat(np.array([t for _, t in commits], dtype=np.int64), np.diff(commit_rows, prepend=0))
    if len(ts) != n:
        raise AssertionError(f"{dec.shape.name}: {n} rows but commit times for {len(ts)}")
    ops_np = np.frombuffer(ops, dtype=np.uint8).astype(np.int64)
    starts_np = np.asarray(starts, dtype=np.int64)
    buf = np.frombuffer(raw, dtype=np.uint8)
    schema = dec.codec.arrow_schema
    out = []
    for lo in range(0, n, max(1, batch_rows)):
        hi = min(n, lo + batch_rows)
        arrays = [
            _op_labels().take(pa.array(ops_np[lo:hi])),
            pa.array(versions_np[lo:hi], pa.int64()),
            pa.array(ordinals[lo:hi], pa.int64()),
            pa.Array.from_buffers(schema.field(3).type, hi - lo, [None, pa.py_buffer(ts[lo:hi].copy())]),
        ]
        offsets = dec.offsets(buf, starts_np[lo:hi])
        arrays += [dec.decode_column(i, buf, raw, offs) for i, offs in enumerate(offsets)]
        out.append(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return out


@functools.cache
def _op_labels() -> pa.Array:
    # Built on first use: any pa.array call makes pyarrow import pandas (a second on a small machine),
    # which a window without changes should not pay for.
    return pa.array(np.array(_OP_LABELS, dtype=object), pa.string())


def finish_slice(result: SliceResult, base: int) -> list[RowBatch]:
    """The slice's batches with window ordinals (slice-local ordinal + `base`)."""
    out = []
    for shape, local in result.batches:
        ordinals = pc.add(local.column(2), pa.scalar(base, pa.int64()))
        batch = local.set_column(2, local.schema.field(2), ordinals)
        first, last = int(ordinals[0].as_py()), int(ordinals[-1].as_py())
        out.append(RowBatch(table=shape, batch=batch, first_ordinal=first, last_ordinal=last))
    return out
