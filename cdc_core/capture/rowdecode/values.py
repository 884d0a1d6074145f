"""Per-value decoding that mirrors python-mysql-replication exactly (the library's values, quirks included).

Used where no vector kernel applies (MySQL's binary JSON, the pre-5.6 temporal formats, ENUMs without label
metadata, `vectorize=False`) and to compare key columns of update events; staging's converters
(`ColumnCodec.convert_values`) then apply as on the row-by-row path."""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Callable
from typing import Any

from cdc_core.capture.rowdecode.layout import DIG2BYTES, ColumnLayout, fsp_bytes
from cdc_core.model.errors import SourceError

_EPOCH = dt.datetime(1970, 1, 1)


# --------------------------------------------------------------------- per-value (library mirrors)
# Each returns exactly what python-mysql-replication 1.0.17 returns for the value at `o` (see its
# row_event.RowsEvent.__read_values_name); staging's converters then apply as on the row-by-row path.

_S_b, _S_B, _S_h, _S_H = struct.Struct("<b"), struct.Struct("<B"), struct.Struct("<h"), struct.Struct("<H")
_S_i, _S_I, _S_q, _S_Q = struct.Struct("<i"), struct.Struct("<I"), struct.Struct("<q"), struct.Struct("<Q")
_S_f, _S_d = struct.Struct("<f"), struct.Struct("<d")
_S_BE_i = struct.Struct(">i")


def uint_le(d: Any, o: int, n: int) -> int:
    return int.from_bytes(d[o : o + n], "little")


def _int_be(d: Any, o: int, n: int) -> int:
    """The library's read_int_be_by_size: signed big-endian for 1, 2, 3, 4 bytes; unsigned for 5."""
    if n == 5:
        return int.from_bytes(d[o : o + 5], "big")
    return int.from_bytes(d[o : o + n], "big", signed=True)


def _slice_bits(binary: int, start: int, size: int, length: int) -> int:
    return (binary >> (length - (start + size))) & ((1 << size) - 1)


def _read_fsp(d: Any, o: int, fsp: int) -> int:
    n = fsp_bytes(fsp)
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
    lead, tail = DIG2BYTES[comp_int], DIG2BYTES[comp_frac]

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
    t = uint_le(d, o, 3)
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
    time = uint_le(d, o, 3)
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
        n = uint_le(d, o, prefix)
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
        n = uint_le(d, o, prefix)
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
                return lambda d, o: uint_le(d, o, 3)
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
        return lambda d, o: labels[uint_le(d, o, w)]
    if k == "set":
        labels = lay.labels

        def set_value(d: Any, o: int) -> Any:
            mask = uint_le(d, o, w)
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
        return lambda d, o: bytes(d[o + prefix : o + prefix + uint_le(d, o, prefix)])
    raise AssertionError(f"unknown column kind {k}")


def value_span(lay: ColumnLayout, d: Any, o: int) -> int:
    """Bytes the value at `o` takes in the row image (length prefix included)."""
    if lay.width:
        return lay.width
    return lay.prefix + uint_le(d, o, lay.prefix)
