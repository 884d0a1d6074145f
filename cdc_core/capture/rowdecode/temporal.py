"""Vector kernels of the temporal family (DATE, DATETIME(fsp), TIMESTAMP(fsp), TIME(fsp), YEAR), and the
refusal of zero and partial dates (`zero_dates: refuse`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.arrays import be, gather, le, primitive
from cdc_core.capture.rowdecode.layout import ColumnLayout, fsp_bytes
from cdc_core.model.errors import SourceError, UnsupportedType

_US_PER_DAY = 86_400_000_000


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
    n = fsp_bytes(fsp)
    if n == 0:
        return np.zeros(g.shape[0], dtype=np.int64)
    micro = be(g, lo, lo + n)  # never negative for DATETIME2/TIMESTAMP2 fractions (< 10**fsp)
    if fsp % 2:
        micro = micro // 10
    micros: np.ndarray = micro * (10 ** (6 - fsp))
    return micros


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


def k_date(
    lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray, name: str, *, refuse_zero: bool = False
) -> pa.Array:
    g, valid = gather(buf, offs, 3)
    t = le(g, 0, 3)
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
    return primitive(typ, _days_from_civil(y, m, d).astype(np.int32), valid)


def k_datetime2(
    lay: ColumnLayout,
    typ: pa.DataType,
    buf: np.ndarray,
    offs: np.ndarray,
    *,
    name: str = "?",
    refuse_zero: bool = False,
) -> pa.Array:
    g, valid = gather(buf, offs, lay.width)
    data = be(g, 0, 5)
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
    return primitive(typ, us, valid)


def k_timestamp2(
    lay: ColumnLayout,
    typ: pa.DataType,
    buf: np.ndarray,
    offs: np.ndarray,
    *,
    name: str = "?",
    refuse_zero: bool = False,
) -> pa.Array:
    g, valid = gather(buf, offs, lay.width)
    secs = be(g, 0, 4)
    secs = np.where(secs >= 1 << 31, secs - (1 << 32), secs)
    us = secs * 1_000_000 + _fsp_micros(g, 4, lay.fsp)
    if refuse_zero:
        _refuse_zero(name, "TIMESTAMP", valid & (us == 0), lambda i: "0000-00-00 00:00:00")
    valid = valid & (us != 0)  # conv_timestamp: the zero value lands as NULL
    return primitive(typ, us, valid)


def k_year(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    g, valid = gather(buf, offs, 1)
    b = g[:, 0].astype(np.int16)
    return primitive(typ, np.where(b == 0, 0, b + 1900).astype(np.int16), valid)


def k_time2(lay: ColumnLayout, typ: pa.DataType, buf: np.ndarray, offs: np.ndarray) -> pa.Array:
    """TIME(fsp) as the type map's microseconds: `values.value_function` then `conv_time`,
    vectorized."""
    g, valid = gather(buf, offs, lay.width)
    raw3 = be(g, 0, 3)
    positive = raw3 >= 1 << 23  # the sign bit set means non-negative
    bits = np.where(positive, raw3, (-raw3) & 0xFFFFFF)
    secs = ((bits >> 12) & 0x3FF) * 3600 + ((bits >> 6) & 63) * 60 + (bits & 63)
    n = fsp_bytes(lay.fsp)
    micro = np.zeros(len(g), dtype=np.int64)
    if n:
        micro = be(g, 3, 3 + n)
        micro = np.where(micro >= 1 << (8 * n - 1), micro - (1 << (8 * n)), micro)  # signed, like the library
        if lay.fsp % 2:
            micro = np.sign(micro) * (np.abs(micro) // 10)  # int(micro / 10): toward zero
        micro = micro * 10 ** (6 - lay.fsp)
    us = np.where(positive, 1, -1) * (secs * 1_000_000 + micro)
    frac = (-us) % 1_000_000
    us = np.where((us < 0) & (frac != 0), us + 2 * frac - 1_000_000, us)  # conv_time's inverse of the skew
    return primitive(typ, us, valid)
