"""Values a schema change gives lake rows, and the type rules between Delta types (docs/schema-changes.md).

- `default_value`: what existing rows take when a column is added: the statement's constant DEFAULT, or MySQL's
  implicit default for a NOT NULL column without one, converted exactly as staging converts the binlog's value
  (the type map, cdc_core.model.types); `Reread` when only the source knows (an expression, a generated column).
- `exact_cast`: whether a Delta type converts to another exactly, as the source converts it (a widening).
- `normalise_delta_type`: one spelling per Delta type (`int` = `INT` = `integer`).
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass
from typing import Any

from cdc_core.model.changes import SourceColumn
from cdc_core.model.errors import UnsupportedType
from cdc_core.model.schema_changes import DEFAULT_EXPRESSION, DEFAULT_LITERAL, DEFAULT_NONE, DEFAULT_NULL, ColumnSpec


@dataclass(frozen=True)
class Literal:
    """A typed constant the lake writes (a default's value): a Python value of the Delta type's kind."""

    value: Any  # None, bool, int, float, decimal.Decimal, str, bytes, date, naive datetime (NTZ), aware datetime
    delta_type: str

    def to_json(self) -> Any:
        v = self.value
        if isinstance(v, decimal.Decimal):
            return {"decimal": str(v)}
        if isinstance(v, bytes):
            return {"hex": v.hex()}
        if isinstance(v, dt.datetime):
            return {"datetime": v.isoformat()}
        if isinstance(v, dt.date):
            return {"date": v.isoformat()}
        return v

    @classmethod
    def from_json(cls, raw: Any, delta_type: str) -> Literal:
        if isinstance(raw, dict):
            if "decimal" in raw:
                return cls(decimal.Decimal(raw["decimal"]), delta_type)
            if "hex" in raw:
                return cls(bytes.fromhex(raw["hex"]), delta_type)
            if "datetime" in raw:
                return cls(dt.datetime.fromisoformat(raw["datetime"]), delta_type)
            if "date" in raw:
                return cls(dt.date.fromisoformat(raw["date"]), delta_type)
        return cls(raw, delta_type)


def normalise_delta_type(t: str) -> str:
    """Spark's simpleString and DDL spellings of one type compare equal (`int` = `INT` = `integer`)."""
    s = "".join(t.split()).lower()
    return {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint", "real": "float",
            "string": "string", "bool": "boolean"}.get(s, s)


# ------------------------------------------------------------------------------------- type rules

_INT_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
_INT_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}


def _decimal_args(t: str) -> tuple[int, int] | None:
    if not t.startswith("decimal("):
        return None
    p, s = t[len("decimal("):-1].split(",")
    return int(p), int(s)


def exact_cast(frm: str, to: str) -> bool:  # noqa: PLR0911 (a rule per type family)
    """Whether every value of Delta type `frm` converts to `to` exactly, as the source converts it: a
    widening (int -> bigint, decimal(10,2) -> decimal(12,2), float -> double, date -> timestamp_ntz), or an
    integer to a string (its decimal digits, as MySQL writes them)."""
    f, t = normalise_delta_type(frm), normalise_delta_type(to)
    if f == t:
        return True
    if f in _INT_RANK:
        if t in _INT_RANK:
            return _INT_RANK[f] < _INT_RANK[t]
        if t == "double":
            return f != "bigint"
        if t == "string":
            return True
        d = _decimal_args(t)
        return d is not None and d[0] - d[1] >= _INT_DIGITS[f]
    if f == "float":
        return t == "double"
    fd, td = _decimal_args(f), _decimal_args(t)
    if fd is not None and td is not None:
        return td[1] >= fd[1] and td[0] - td[1] >= fd[0] - fd[1]
    if f == "date":
        return t == "timestamp_ntz"
    return False


# ------------------------------------------------------------------------------------- defaults


@dataclass(frozen=True)
class Reread:
    """The change's effect on existing rows is not in the statement: the table must be re-read."""

    reason: str


def source_column(spec: ColumnSpec) -> SourceColumn:
    """The type map's view of a column a DDL statement defines."""
    from cdc_core.model.types import parse_labels, parse_type

    p = parse_type(spec.mysql_type)
    attrs: list[tuple[str, Any]] = []
    if p.base in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"):
        attrs.append(("charset", spec.charset or "utf8mb4"))
    if p.base in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        attrs.append(("charset", "binary"))
    if p.base in ("enum", "set"):
        attrs.append(("labels", parse_labels(p.args or "")))
    return SourceColumn(spec.name, spec.mysql_type, spec.nullable, tuple(attrs))


def delta_type_of(spec: ColumnSpec, table: str) -> str:
    """The Delta type the type map gives the column (raises UnsupportedType like staging would)."""
    from cdc_core.model.types import column_types

    return column_types(source_column(spec), table)[1]


_ZERO_DATES = {"date": "0000-00-00", "datetime": "0000-00-00 00:00:00", "timestamp": "0000-00-00 00:00:00"}


def default_value(spec: ColumnSpec, table: str, zero_dates: str) -> Literal | Reread:  # noqa: PLR0911, PLR0912
    """The value existing rows take when the column is added: the statement's constant DEFAULT, or MySQL's
    implicit default for a NOT NULL column without one, converted as staging converts the binlog's value."""
    from cdc_core.model.types import parse_type, value_converter

    delta = delta_type_of(spec, table)
    if spec.generated is not None:
        return Reread(f"generated column {spec.name!r} AS ({spec.generated})")
    if spec.auto_increment:
        return Reread(f"AUTO_INCREMENT column {spec.name!r} numbers the existing rows")
    d = spec.default
    if d.kind == DEFAULT_EXPRESSION:
        return Reread(f"column {spec.name!r} DEFAULT {d.value} is not a constant")
    if d.kind == DEFAULT_NULL or (d.kind == DEFAULT_NONE and spec.nullable):
        return Literal(None, delta)
    p = parse_type(spec.mysql_type)
    base = p.base
    text: str | None = d.value if d.kind == DEFAULT_LITERAL else None
    if text is None:  # NOT NULL without a DEFAULT: MySQL's implicit default
        if base in _ZERO_DATES:
            text = _ZERO_DATES[base]
        elif base == "enum":
            labels = source_column(spec).attr("labels") or ("",)
            text = labels[0]
        elif base in ("time",):
            text = "00:00:00"
        elif base == "json":
            return Reread(f"JSON column {spec.name!r} NOT NULL without a default")
        elif delta in ("STRING", "BINARY"):
            text = ""
        else:
            text = "0"
    try:
        raw = _reader_value(base, p, text, spec)
    except (ValueError, ArithmeticError) as e:
        return Reread(f"column {spec.name!r} DEFAULT {text!r} ({e})")
    if isinstance(raw, Reread):
        return raw
    if raw is _ZERO:
        if zero_dates == "refuse":
            raise UnsupportedType(
                f"table {table!r}: ADD COLUMN {spec.name!r} gives every existing row the zero date {text!r}, which has "
                "no exact value; set the pipeline's zero_dates: null to land it as NULL, or give the column a real "
                "DEFAULT"
            )
        return Literal(None, delta)
    value = value_converter(source_column(spec), table)(raw)
    return Literal(value, delta)


_ZERO = object()


def _reader_value(base: str, p: Any, text: str, spec: ColumnSpec) -> Any:  # noqa: PLR0911, PLR0912
    """The value python-mysql-replication would decode for `text` in a column of this type."""
    if base in ("tinyint", "smallint", "mediumint", "int", "bigint", "year"):
        return int(decimal.Decimal(text.strip()))
    if base == "bit":
        return int(text.strip())
    if base == "decimal":
        args = p.int_args()
        scale = args[1] if len(args) > 1 else 0
        return decimal.Decimal(text.strip()).quantize(decimal.Decimal(1).scaleb(-scale))
    if base in ("float", "double"):
        return float(text)
    if base in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"):
        return text
    if base == "set":
        return {s for s in text.split(",") if s}
    if base in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        if not text.isascii():
            return Reread(f"binary column {spec.name!r} DEFAULT {text!r} depends on the connection's charset")
        return text.encode("ascii")
    if base == "date":
        if text.startswith("0000") or "-00" in text[:10]:
            return _ZERO
        return dt.date.fromisoformat(text.strip()[:10])
    if base == "datetime":
        if text.startswith("0000") or "-00" in text[:10]:
            return _ZERO
        return dt.datetime.fromisoformat(text.strip())
    if base == "timestamp":
        if text.startswith("0000") or "-00" in text[:10]:
            return _ZERO
        return Reread(f"TIMESTAMP column {spec.name!r} DEFAULT {text!r} is read in the session's time zone")
    if base == "time":
        sign = -1 if text.strip().startswith("-") else 1
        parts = text.strip().lstrip("-").split(":")
        h, m = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
        s = decimal.Decimal(parts[2]) if len(parts) > 2 else decimal.Decimal(0)
        return sign * dt.timedelta(hours=h, minutes=m, seconds=float(s))
    return Reread(f"column {spec.name!r} of type {spec.mysql_type} with DEFAULT {text!r}")
