"""Which vector kernel decodes a column: `vector_kernel` picks the family's kernel when its output equals
the per-value path's for the column's layout and staged type, else None (the per-value path decodes it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from cdc_core.capture.rowdecode.binary import k_binary_padded
from cdc_core.capture.rowdecode.charsets import SINGLE_BYTE_CODECS, WIDE_UNITS, k_single_byte_text, k_wide_text
from cdc_core.capture.rowdecode.decimals import k_decimal, k_decimal128, k_decimal_wide
from cdc_core.capture.rowdecode.enums import k_bit, k_enum, k_set
from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.capture.rowdecode.numbers import k_float, k_int
from cdc_core.capture.rowdecode.strings import k_string
from cdc_core.capture.rowdecode.temporal import k_date, k_datetime2, k_time2, k_timestamp2, k_year
from cdc_core.model.types import (
    ColumnCodec,
    conv_bit,
    conv_bytes,
    conv_json,
    conv_time,
    conv_timestamp,
    conv_year,
    parse_labels,
    parse_type,
)

Kernel = Callable[[np.ndarray, np.ndarray, Any], pa.Array]


def vector_kernel(
    lay: ColumnLayout, codec: ColumnCodec, zero_dates: str = "null", native: bool = False
) -> Kernel | None:
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
            return lambda buf, offs, raw: k_int(lay, typ, buf, offs)
        return None
    if k in ("float", "double") and conv is None and typ == (pa.float32() if k == "float" else pa.float64()):
        return lambda buf, offs, raw: k_float(lay, typ, buf, offs)
    if k == "decimal" and conv is None and lay.precision <= 18 and typ == pa.decimal128(lay.precision, lay.scale):
        return lambda buf, offs, raw: k_decimal(lay, typ, buf, offs)
    if k == "date" and conv is None and typ == pa.date32():
        return lambda buf, offs, raw: k_date(lay, typ, buf, offs, name, refuse_zero=rz)
    if k == "datetime2" and conv is None and typ == pa.timestamp("us"):
        return lambda buf, offs, raw: k_datetime2(lay, typ, buf, offs, name=name, refuse_zero=rz)
    if k == "timestamp2" and conv is conv_timestamp and typ == pa.timestamp("us", tz="UTC"):
        return lambda buf, offs, raw: k_timestamp2(lay, typ, buf, offs, name=name, refuse_zero=rz)
    if k == "year" and conv is conv_year and typ == pa.int16():
        return lambda buf, offs, raw: k_year(lay, typ, buf, offs)
    if k == "enum" and conv is None and typ == pa.string() and lay.labels:
        return lambda buf, offs, raw: k_enum(lay, typ, buf, offs, name)
    if k == "string":
        if lay.encoding in ("utf8", "utf-8") and typ == pa.string() and conv in (None, conv_json):
            return lambda buf, offs, raw: k_string(lay, typ, buf, offs, raw, native=native)
        if lay.encoding is None and typ == pa.binary() and conv in (None, conv_bytes):
            return lambda buf, offs, raw: k_string(lay, typ, buf, offs, raw, native=native)
        pt = parse_type(codec.mysql_type)
        if lay.encoding is None and typ == pa.binary() and pt.base in ("binary", "char") and conv is not None:
            n = (pt.int_args() or (1,))[0]
            return lambda buf, offs, raw: k_binary_padded(lay, typ, buf, offs, n, native=native)
        if lay.encoding in SINGLE_BYTE_CODECS and typ == pa.string() and conv is None:
            return lambda buf, offs, raw: k_single_byte_text(lay, typ, buf, offs, native)
        if lay.encoding in WIDE_UNITS and typ == pa.string() and conv is None:
            return lambda buf, offs, raw: k_wide_text(lay, typ, buf, offs, native)
    if k == "time2" and conv is conv_time and typ == pa.int64():
        return lambda buf, offs, raw: k_time2(lay, typ, buf, offs)
    if k == "bit" and conv is conv_bit and typ in (pa.int64(), pa.decimal128(20, 0)) and 1 <= lay.bits <= 64:
        return lambda buf, offs, raw: k_bit(lay, typ, buf, offs)
    if (
        k == "set" and typ == pa.string() and lay.labels and len(lay.labels) <= 64
        and parse_labels(parse_type(codec.mysql_type).args or "") == lay.labels
    ):
        return lambda buf, offs, raw: k_set(lay, typ, buf, offs)
    if k == "decimal" and lay.precision > 18:
        if conv is None and typ == pa.decimal128(lay.precision, lay.scale):
            return lambda buf, offs, raw: k_decimal128(lay, typ, buf, offs)
        if typ == pa.string() and conv is not None and lay.precision > 38:
            return lambda buf, offs, raw: k_decimal_wide(lay, typ, buf, offs, native=native)
    return None
