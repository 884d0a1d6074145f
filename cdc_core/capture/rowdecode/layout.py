"""Where each column's value sits in a row image: `ColumnLayout`s from a table-map event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc_core.model.errors import SourceError
from cdc_core.model.types import python_codec

DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


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


def fsp_bytes(fsp: int) -> int:
    return (fsp + 1) // 2


def decimal_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return (intg // 9) * 4 + DIG2BYTES[intg % 9] + (scale // 9) * 4 + DIG2BYTES[scale % 9]


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
        return ColumnLayout(kind="time2", width=3 + fsp_bytes(fsp), prefix=0, fsp=fsp, **base)
    if t == FIELD_TYPE.DATETIME:
        return ColumnLayout(kind="datetime", width=8, prefix=0, **base)
    if t == FIELD_TYPE.DATETIME2:
        fsp = int(col.fsp)
        return ColumnLayout(kind="datetime2", width=5 + fsp_bytes(fsp), prefix=0, fsp=fsp, **base)
    if t == FIELD_TYPE.TIMESTAMP:
        return ColumnLayout(kind="timestamp", width=4, prefix=0, **base)
    if t == FIELD_TYPE.TIMESTAMP2:
        fsp = int(col.fsp)
        return ColumnLayout(kind="timestamp2", width=4 + fsp_bytes(fsp), prefix=0, fsp=fsp, **base)
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
