"""The type map: one table from MySQL/MariaDB column types to Arrow (staging) and Delta (Spark SQL DDL).

Staging writes every source column with the Arrow type given here, the Spark merge job declares the
Delta column with the Delta type given here, and `docs/type-map.md` is generated from `TYPE_RULES`
(`python -m cdc_core.model.types --write docs/type-map.md`; a unit test fails when they differ). Every
mapping is exact: a value read back from the staged Parquet (or the Delta table) equals what
`SELECT` returns on the source, or the rule documents the one representation change it makes (TIME
as microseconds, SET as comma-joined text, zero dates as NULL, DECIMAL wider than 38 digits as text).
A type the map cannot land exactly raises `UnsupportedType`, never a lossy guess.

Input vocabulary (`SourceColumn.mysql_type`): lowercase information_schema COLUMN_TYPE with integer
display widths removed, e.g. `int unsigned`, `decimal(10,2)`, `datetime(6)`, `enum('a','b')`, with
`attrs` ('charset', ...) for string types and ('labels', (...)) for ENUM/SET. Reader values are what
python-mysql-replication 1.0.17 decodes (see `_conv_*` below for the quirks each converter undoes).

For speed, everything is decided once per column (`column_codec`) and once per table shape
(`table_codec`): converting a value is then one precomputed function call, or nothing at all when
the reader's value is already what Arrow takes.
"""

from __future__ import annotations

import codecs
import datetime as dt
import decimal
import encodings.cp1252
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.errors import SchemaConflict, UnsupportedType
from cdc_core.model.labels import parse_labels as parse_label_args
from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_OP,
    COL_ORDINAL,
    COL_TXN,
    COL_VERSION,
    STAGED_META_COLUMNS,
    StagedColumn,
)

# Bumped when a mapping changes (a staged window records the version it was written with).
TYPE_MAP_VERSION = 1

# Spark's (and Delta's) widest decimal.
MAX_DECIMAL_PRECISION = 38

# The staged metadata columns (manifest.STAGED_META_COLUMNS), in order.
META_FIELDS: tuple[pa.Field, ...] = (
    pa.field(COL_OP, pa.string(), nullable=False),
    pa.field(COL_VERSION, pa.int64(), nullable=False),
    pa.field(COL_ORDINAL, pa.int64(), nullable=False),
    pa.field(COL_COMMIT_TS, pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field(COL_TXN, pa.int64(), nullable=True),
)
assert tuple(f.name for f in META_FIELDS) == STAGED_META_COLUMNS

Converter = Callable[[Any], Any]


# ------------------------------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class ParsedType:
    """A `mysql_type` split into its parts: `decimal(10,2) unsigned` -> ('decimal', '10,2', True)."""

    base: str
    args: str | None
    unsigned: bool

    def int_args(self) -> tuple[int, ...]:
        if not self.args:
            return ()
        return tuple(int(a.strip()) for a in self.args.split(","))


_TYPE_RE = re.compile(
    r"^\s*([A-Za-z][A-Za-z ]*?)\s*(?:\((.*)\))?\s*((?:\s*(?:unsigned|signed|zerofill))*)\s*$", re.S | re.I
)

# Synonyms information_schema would already have normalised; accepted so hand-written types work too.
_ALIASES = {
    "integer": "int",
    "int1": "tinyint",
    "int2": "smallint",
    "int3": "mediumint",
    "int4": "int",
    "int8": "bigint",
    "middleint": "mediumint",
    "bool": "tinyint",
    "boolean": "tinyint",
    "numeric": "decimal",
    "dec": "decimal",
    "fixed": "decimal",
    "real": "double",
    "double precision": "double",
    "float4": "float",
    "float8": "double",
    "character": "char",
    "character varying": "varchar",
    "nchar": "char",
    "nvarchar": "varchar",
    "national char": "char",
    "national varchar": "varchar",
    "long varchar": "mediumtext",
    "long": "mediumtext",
    "long varbinary": "mediumblob",
}


def parse_type(mysql_type: str) -> ParsedType:
    m = _TYPE_RE.match(mysql_type)
    if not m:
        return ParsedType(mysql_type.strip().lower(), None, False)
    base = " ".join(m.group(1).lower().split())
    mods = m.group(3).lower()
    # ZEROFILL implies UNSIGNED in MySQL.
    return ParsedType(_ALIASES.get(base, base), m.group(2), "unsigned" in mods or "zerofill" in mods)


def parse_labels(args: str) -> tuple[str, ...]:
    """ENUM/SET labels from the text between the parentheses: `'a','it''s'` -> ('a', "it's"), the server's
    escapes undone (cdc_core.model.labels)."""
    return parse_label_args(args)


# ---------------------------------------------------------------------------------------- converters
# Each converter takes a non-None reader value; None is handled by the caller (`ColumnCodec.none_as`).

_UTC_EPOCH = dt.datetime(1970, 1, 1)
_UTC_EPOCH_AWARE = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def conv_timestamp(v: dt.datetime) -> dt.datetime | None:
    # A TIMESTAMP's binlog value is seconds since the epoch, and 0 is MySQL's zero value
    # '0000-00-00 00:00:00' (the type's range starts at 1970-01-01 00:00:01 UTC); the reader turns
    # it into 1970-01-01 00:00:00. Zero dates land as NULL (`zero_dates: null`; `refuse` stops before this).
    if v in (_UTC_EPOCH, _UTC_EPOCH_AWARE):
        return None
    return v


def conv_time(v: dt.timedelta) -> int:
    us = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    if us < 0:
        # python-mysql-replication 1.0.17 decodes a negative TIME(fsp) with a fraction f as -(S + (1 - f))
        # instead of -(S + f) (it negates the whole seconds and the fraction separately; checked against
        # MariaDB 10.11: -01:00:00.000001 arrives as -01:00:00.999999). Whole seconds are right, so this
        # is an exact inverse. The reader must not correct it as well.
        frac = -us % 1_000_000
        if frac:
            us += 2 * frac - 1_000_000
    return us


def conv_year(v: int) -> int:
    # The binlog stores YEAR as year-1900 with 0 meaning 0000; the reader adds 1900 blindly, and
    # 1900 is otherwise outside YEAR's range (1901..2155), so 1900 can only be the zero year.
    return 0 if v == 1900 else v


def conv_bit(v: Any) -> int:
    # The reader returns BIT as a string of '0'/'1' characters (most significant first).
    if v.__class__ is str:
        return int(v, 2)
    if v.__class__ is int:
        return v
    return int.from_bytes(v, "big")


def _jsonable(v: Any) -> Any:
    # MySQL's binary JSON decodes with bytes keys/strings; MariaDB's JSON is plain text.
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, dict):
        return {_jsonable(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, decimal.Decimal):
        return float(v) if v != v.to_integral_value() else int(v)
    return v


def conv_json(v: Any) -> str:
    if v.__class__ is str:
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8")
    # MySQL binary JSON arrives decoded; re-serialise it the way MySQL prints JSON (', ' and ': ').
    return json.dumps(_jsonable(v), ensure_ascii=False)


def _make_set_converter(labels: tuple[str, ...]) -> Converter:
    def conv(v: Any) -> str:
        if v.__class__ is str:
            return v
        return ",".join([label for label in labels if label in v])  # definition order, like SELECT

    return conv


def _make_wide_decimal_converter(scale: int) -> Converter:
    quantum = decimal.Decimal(1).scaleb(-scale)
    ctx = decimal.Context(prec=100)

    def conv(v: Any) -> str:
        d = v if v.__class__ is decimal.Decimal else decimal.Decimal(v)
        d = d.quantize(quantum, context=ctx)
        if d.is_zero():
            d = abs(d)  # MySQL has no negative zero
        return format(d, "f")

    return conv


def _make_binary_pad_converter(length: int) -> Converter:
    # The binlog strips trailing 0x00 from BINARY(n) values (Field_string::pack); SELECT returns all n
    # bytes, so pad back. Exact: a BINARY(n) value always has n bytes.
    def conv(v: Any) -> bytes:
        if v.__class__ is str:
            v = v.encode("utf-8")
        b: bytes = v
        return b if len(b) >= length else b.ljust(length, b"\x00")

    return conv


def conv_bytes(v: Any) -> bytes:
    return v.encode("utf-8") if v.__class__ is str else v


# MariaDB's and MySQL's `latin1` is Windows-1252, except that the five bytes cp1252 leaves undefined
# (0x81, 0x8D, 0x8F, 0x90, 0x9D) are the C1 controls U+0081 ... (as SELECT returns them). Python's cp1252
# raises on them, so the binlog readers decode latin1 with this codec instead (`binlog` points the
# library's latin1 charset at it; `rowdecode` uses it on the columnar path).
MARIADB_LATIN1 = "cdc_mariadb_latin1"
_LATIN1_TABLE = "".join(
    chr(i) if c == "\ufffe" else c for i, c in enumerate(encodings.cp1252.decoding_table)
)
_LATIN1_ENCODING = codecs.charmap_build(_LATIN1_TABLE)


def _latin1_search(name: str) -> codecs.CodecInfo | None:
    if name != MARIADB_LATIN1:
        return None
    return codecs.CodecInfo(
        name=MARIADB_LATIN1,
        encode=lambda s, errors="strict": codecs.charmap_encode(s, errors, _LATIN1_ENCODING),
        decode=lambda b, errors="strict": codecs.charmap_decode(b, errors, _LATIN1_TABLE),
    )


codecs.register(_latin1_search)


# Character sets whose binlog bytes decode exactly (what SELECT returns through a utf8mb4 connection), and
# the Python codec that does it. Single-byte charsets were checked byte by byte against MariaDB 10.11
# (`CONVERT(UNHEX(..) USING cs)`); bytes a charset leaves undefined cannot be written as text and raise a
# clear error if they appear. The rest (cp1256, cp866, greek, hebrew, koi8u, tis620 differ from Python's
# codecs on some bytes; armscii8, dec8, geostd8, hp8, keybcs2, swe7 have no Python codec; the multi-byte
# legacy charsets big5, cp932, eucjpms, euckr, gb2312, gbk, sjis, ujis were not verified) are refused.
CHARSET_CODECS: dict[str, str] = {
    "utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8",
    "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be", "ucs2": "utf-16-be",
    "latin1": MARIADB_LATIN1, "ascii": "ascii", "latin2": "iso8859_2", "latin5": "iso8859_9",
    "latin7": "iso8859_13", "cp1250": "cp1250", "cp1251": "cp1251", "cp1257": "cp1257", "cp850": "cp850",
    "cp852": "cp852", "koi8r": "koi8_r", "macce": "mac_latin2", "macroman": "mac_roman",
}


def python_codec(charset: str | None) -> str | None:
    """The exact Python codec for a character set, named as the server does (`latin1`) or as
    python-mysql-replication's table map reports it (`cp1252` for latin1, `utf8` for utf8mb4); None if
    there is none (the type map refuses such columns)."""
    if charset is None:
        return None
    name = str(charset).lower()
    return CHARSET_CODECS.get(name) or _LIBRARY_NAMES.get(name)


_LIBRARY_NAMES = {"cp1252": MARIADB_LATIN1, "utf-8": "utf-8"}


# ------------------------------------------------------------------------------------------- the map


@dataclass(frozen=True)
class Mapped:
    """How one column lands: its Arrow and Delta types and how to convert the reader's values."""

    arrow: pa.DataType
    delta: str
    convert: Converter | None = None  # None: the reader's value is already what Arrow takes
    may_null: bool = False  # a non-NULL source value can land as NULL (zero dates)


@dataclass(frozen=True)
class TypeRule:
    """One row of the type map (and of docs/type-map.md)."""

    mysql: str  # the MySQL/MariaDB type(s) this row covers, as documented
    arrow: str  # Arrow type (generic form)
    delta: str  # Delta / Spark SQL DDL type (generic form)
    notes: str
    examples: tuple[str, ...]  # mysql_type strings this row maps (rendered and tested)
    example_attrs: tuple[tuple[str, Any], ...] = ()


R_TINYINT = TypeRule("TINYINT", "int8", "TINYINT", "", ("tinyint",))
R_TINYINT_U = TypeRule("TINYINT UNSIGNED", "int16", "SMALLINT", "next wider signed type", ("tinyint unsigned",))
R_SMALLINT = TypeRule("SMALLINT", "int16", "SMALLINT", "", ("smallint",))
R_SMALLINT_U = TypeRule("SMALLINT UNSIGNED", "int32", "INT", "next wider signed type", ("smallint unsigned",))
R_MEDIUMINT = TypeRule("MEDIUMINT", "int32", "INT", "", ("mediumint",))
R_MEDIUMINT_U = TypeRule("MEDIUMINT UNSIGNED", "int32", "INT", "0..16777215 fits INT", ("mediumint unsigned",))
R_INT = TypeRule("INT", "int32", "INT", "", ("int",))
R_INT_U = TypeRule("INT UNSIGNED", "int64", "BIGINT", "next wider signed type", ("int unsigned",))
R_BIGINT = TypeRule("BIGINT", "int64", "BIGINT", "", ("bigint",))
R_BIGINT_U = TypeRule(
    "BIGINT UNSIGNED", "decimal128(20, 0)", "DECIMAL(20,0)",
    "no unsigned 64-bit type in Spark; 0..18446744073709551615 exact", ("bigint unsigned",),
)
R_DECIMAL = TypeRule(
    "DECIMAL(p,s), p <= 38", "decimal128(p, s)", "DECIMAL(p,s)", "exact; `UNSIGNED` ignored (same digits)",
    ("decimal(10,2)", "decimal(38,10)", "decimal(20,0) unsigned"),
)
R_DECIMAL_WIDE = TypeRule(
    "DECIMAL(p,s), p > 38", "string", "STRING", "Spark's DECIMAL stops at 38 digits: exact plain text with exactly "
    "s fraction digits, as SELECT prints it (e.g. `-12.500`, no exponent)", ("decimal(65,30)",),
)
R_FLOAT = TypeRule("FLOAT", "float", "FLOAT", "4-byte IEEE, exact", ("float",))
R_DOUBLE = TypeRule("DOUBLE", "double", "DOUBLE", "8-byte IEEE, exact", ("double",))
R_DATE = TypeRule("DATE", "date32[day]", "DATE", "zero/partial dates (`0000-00-00`, `2024-00-10`): refused, or "
                  "NULL with `zero_dates: null`", ("date",))
R_DATETIME = TypeRule(
    "DATETIME(fsp)", "timestamp[us]", "TIMESTAMP_NTZ",
    "wall-clock value as stored, no time zone; zero dates: refused, or NULL with `zero_dates: null`",
    ("datetime", "datetime(6)"),
)
R_TIMESTAMP = TypeRule(
    "TIMESTAMP(fsp)", "timestamp[us, tz=UTC]", "TIMESTAMP",
    "an instant (the binlog stores UTC seconds); zero value `0000-00-00 00:00:00`: refused, or NULL with "
    "`zero_dates: null`",
    ("timestamp", "timestamp(3)"),
)
R_TIME = TypeRule(
    "TIME(fsp)", "int64", "BIGINT",
    "signed microseconds (`-838:59:59` -> -3020399000000, `01:00:00.5` -> 3600500000): Spark/Delta have no "
    "type for a signed duration beyond 24 h. Undoes python-mysql-replication's decoding of negative "
    "fractional TIME (`-00:00:01.25` arrives as -1.75 s)",
    ("time", "time(6)"),
)
R_YEAR = TypeRule("YEAR", "int16", "SMALLINT", "1901..2155, and 0 for `0000`", ("year",))
R_STRING = TypeRule(
    "CHAR(n), VARCHAR(n), TINYTEXT, TEXT, MEDIUMTEXT, LONGTEXT (non-binary charset)", "string", "STRING",
    "decoded text (UTF-8 in Parquet); CHAR trailing spaces are trimmed, as SELECT returns them. Character "
    "sets: utf8mb4, utf8mb3, utf16, utf16le, utf32, ucs2, latin1 (the server's cp1252), ascii, latin2, latin5, "
    "latin7, cp1250, cp1251, cp1257, cp850, cp852, koi8r, macce, macroman",
    ("char(10)", "varchar(255)", "tinytext", "text", "mediumtext", "longtext"), (("charset", "utf8mb4"),),
)
R_BINARY = TypeRule(
    "BINARY(n), VARBINARY(n), TINYBLOB, BLOB, MEDIUMBLOB, LONGBLOB (binary charset)", "binary", "BINARY",
    "bytes as stored; BINARY(n) values are n bytes (the binlog drops trailing 0x00, staging pads them back)",
    ("binary(16)", "varbinary(20)", "tinyblob", "blob", "mediumblob", "longblob"), (("charset", "binary"),),
)
R_JSON = TypeRule(
    "JSON", "string", "STRING",
    "the JSON text (MariaDB's JSON is LONGTEXT: the text as written; MySQL's binary JSON is re-serialised "
    "like MySQL prints it)",
    ("json",),
)
R_ENUM = TypeRule("ENUM(...)", "string", "STRING", "the label; `''` for the invalid-value index 0", ("enum('a','b')",))
R_SET = TypeRule(
    "SET(...)", "string", "STRING",
    "labels comma-joined in definition order, as SELECT prints them; `''` for the empty set, NULL only for "
    "NULL (nullable or not, binlog or snapshot)",
    ("set('x','y')",),
)
R_BIT = TypeRule(
    "BIT(n), n <= 63", "int64", "BIGINT", "the bits as an unsigned number (b'101' -> 5)",
    ("bit(1)", "bit(5)", "bit(63)"),
)
R_BIT64 = TypeRule("BIT(64)", "decimal128(20, 0)", "DECIMAL(20,0)", "the bits as an unsigned number", ("bit(64)",))

TYPE_RULES: tuple[TypeRule, ...] = (
    R_TINYINT, R_TINYINT_U, R_SMALLINT, R_SMALLINT_U, R_MEDIUMINT, R_MEDIUMINT_U, R_INT, R_INT_U, R_BIGINT,
    R_BIGINT_U, R_DECIMAL, R_DECIMAL_WIDE, R_FLOAT, R_DOUBLE, R_DATE, R_DATETIME, R_TIMESTAMP, R_TIME, R_YEAR,
    R_STRING, R_BINARY, R_JSON, R_ENUM, R_SET, R_BIT, R_BIT64,
)

# Types with no exact landing (documented in docs/type-map.md with what to do).
UNSUPPORTED_TYPES: tuple[tuple[str, str], ...] = (
    ("GEOMETRY, POINT, LINESTRING, POLYGON, MULTI*, GEOMETRYCOLLECTION",
     "no spatial type in Delta; exclude the table, or store the value as WKB in a VARBINARY column"),
    ("UUID, INET4, INET6 (MariaDB)",
     "stored in a server-specific binary layout; exclude the table, or use CHAR(36) (UUID) / VARCHAR(39) (INET)"),
    ("VECTOR (MariaDB 11.7+, MySQL 9)", "exclude the table"),
    ("COMPRESSED columns (MariaDB)", "the binlog carries them compressed, in a table map the reader refuses by "
     "name; exclude the table, or MODIFY the columns without COMPRESSED"),
    ("text in another character set (cp1256, cp866, greek, hebrew, koi8u, tis620, armscii8, dec8, geostd8, hp8, "
     "keybcs2, swe7, big5, cp932, eucjpms, euckr, gb2312, gbk, sjis, ujis)",
     "the binlog's bytes cannot be decoded exactly as the server does; convert the column to utf8mb4 "
     "(ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4) or exclude the table"),
    ("anything else", "exclude the table (`tables.exclude`) or change the column's type"),
)

_INT_RULES: dict[tuple[str, bool], tuple[TypeRule, pa.DataType, str]] = {
    ("tinyint", False): (R_TINYINT, pa.int8(), "TINYINT"),
    ("tinyint", True): (R_TINYINT_U, pa.int16(), "SMALLINT"),
    ("smallint", False): (R_SMALLINT, pa.int16(), "SMALLINT"),
    ("smallint", True): (R_SMALLINT_U, pa.int32(), "INT"),
    ("mediumint", False): (R_MEDIUMINT, pa.int32(), "INT"),
    ("mediumint", True): (R_MEDIUMINT_U, pa.int32(), "INT"),
    ("int", False): (R_INT, pa.int32(), "INT"),
    ("int", True): (R_INT_U, pa.int64(), "BIGINT"),
    ("bigint", False): (R_BIGINT, pa.int64(), "BIGINT"),
    ("bigint", True): (R_BIGINT_U, pa.decimal128(20, 0), "DECIMAL(20,0)"),
}
_STRING_BASES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BINARY_BASES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


def _unsupported(col: SourceColumn, table: str | None, why: str) -> UnsupportedType:
    where = f"table {table!r} column {col.name!r}" if table else f"column {col.name!r}"
    return UnsupportedType(
        f"{where} has type {col.mysql_type!r}, which the type map cannot land exactly ({why}). "
        f"Exclude the table from the pipeline (tables.exclude: ['{table or 'schema.table'}']) or change the "
        "column's type; see docs/type-map.md for the supported types"
    )


class UnsupportedCharset(Exception):
    """A text column's character set has no exact decoding (see CHARSET_CODECS)."""


def resolve(col: SourceColumn, table: str | None = None) -> tuple[TypeRule, Mapped]:
    """The type-map row for `col` and how the column lands. Raises UnsupportedType."""
    p = parse_type(col.mysql_type)
    base = p.base
    try:
        return _resolve(p, col)
    except UnsupportedType:
        raise
    except UnsupportedCharset as e:
        raise _unsupported(
            col, table, f"character set {e}: its binlog bytes cannot be decoded exactly as the server does; "
            f"supported: {', '.join(sorted(CHARSET_CODECS))}"
        ) from None
    except (ValueError, IndexError) as e:
        raise _unsupported(col, table, f"cannot read the type's parameters: {e}") from e
    except KeyError:
        pass
    if base.startswith(("geometry", "point", "linestring", "polygon", "multi")):
        raise _unsupported(col, table, "spatial types have no Delta equivalent")
    why = dict(UNSUPPORTED_TYPES)["UUID, INET4, INET6 (MariaDB)"] if base in ("uuid", "inet4", "inet6") else None
    raise _unsupported(col, table, why or f"unknown type {base!r}")


def _resolve(p: ParsedType, col: SourceColumn) -> tuple[TypeRule, Mapped]:
    base = p.base
    if (base, p.unsigned) in _INT_RULES:
        rule, arrow, delta = _INT_RULES[(base, p.unsigned)]
        return rule, Mapped(arrow, delta)
    if base == "decimal":
        args = p.int_args()
        precision = args[0] if args else 10
        scale = args[1] if len(args) > 1 else 0
        if not (1 <= precision <= 65 and 0 <= scale <= min(precision, 38)):
            raise ValueError(f"precision {precision}, scale {scale}")
        if precision <= MAX_DECIMAL_PRECISION:
            return R_DECIMAL, Mapped(pa.decimal128(precision, scale), f"DECIMAL({precision},{scale})")
        return R_DECIMAL_WIDE, Mapped(pa.string(), "STRING", _make_wide_decimal_converter(scale))
    if base == "float":
        # FLOAT(p) with p > 24 is a DOUBLE in MySQL (information_schema already says 'double').
        args = p.int_args()
        if len(args) == 1 and args[0] > 24:
            return R_DOUBLE, Mapped(pa.float64(), "DOUBLE")
        return R_FLOAT, Mapped(pa.float32(), "FLOAT")
    if base == "double":
        return R_DOUBLE, Mapped(pa.float64(), "DOUBLE")
    if base == "date":
        return R_DATE, Mapped(pa.date32(), "DATE", None, may_null=True)
    if base == "datetime":
        return R_DATETIME, Mapped(pa.timestamp("us"), "TIMESTAMP_NTZ", None, may_null=True)
    if base == "timestamp":
        return R_TIMESTAMP, Mapped(pa.timestamp("us", tz="UTC"), "TIMESTAMP", conv_timestamp, may_null=True)
    if base == "time":
        return R_TIME, Mapped(pa.int64(), "BIGINT", conv_time)
    if base == "year":
        return R_YEAR, Mapped(pa.int16(), "SMALLINT", conv_year)
    if base in _STRING_BASES:
        charset = col.attr("charset")
        if charset == "binary":
            # A CHAR/VARCHAR/TEXT with the binary charset is a BINARY/VARBINARY/BLOB.
            return _binary(p, "binary" if base == "char" else base)
        if charset is not None and str(charset).lower() not in CHARSET_CODECS:
            raise UnsupportedCharset(str(charset))
        return R_STRING, Mapped(pa.string(), "STRING")
    if base in _BINARY_BASES:
        return _binary(p, base)
    if base == "json":
        return R_JSON, Mapped(pa.string(), "STRING", conv_json)
    if base == "enum":
        return R_ENUM, Mapped(pa.string(), "STRING")
    if base == "set":
        labels = col.attr("labels")
        labels = tuple(labels) if labels is not None else parse_labels(p.args or "")
        return R_SET, Mapped(pa.string(), "STRING", _make_set_converter(labels))
    if base == "bit":
        args = p.int_args()
        bits = args[0] if args else 1
        if not 1 <= bits <= 64:
            raise ValueError(f"BIT width {bits}")
        if bits == 64:
            return R_BIT64, Mapped(pa.decimal128(20, 0), "DECIMAL(20,0)", conv_bit)
        return R_BIT, Mapped(pa.int64(), "BIGINT", conv_bit)
    raise KeyError(base)


def _binary(p: ParsedType, base: str) -> tuple[TypeRule, Mapped]:
    if base == "binary":
        args = p.int_args()
        length = args[0] if args else 1
        return R_BINARY, Mapped(pa.binary(), "BINARY", _make_binary_pad_converter(length))
    return R_BINARY, Mapped(pa.binary(), "BINARY", conv_bytes)


def column_types(col: SourceColumn, table: str | None = None) -> tuple[pa.DataType, str]:
    """(Arrow type, Delta/Spark SQL DDL type) of a source column. Raises UnsupportedType."""
    _, m = resolve(col, table)
    return m.arrow, m.delta


def staged_nullable(col: SourceColumn, table: str | None = None) -> bool:
    """Whether the staged/Delta column must be nullable: NULL in the source, or a zero date."""
    _, m = resolve(col, table)
    return col.nullable or m.may_null


def to_staged_column(col: SourceColumn, table: str | None = None) -> StagedColumn:
    _, m = resolve(col, table)
    return StagedColumn(col.name, col.mysql_type, str(m.arrow), m.delta, col.nullable or m.may_null)


def value_converter(col: SourceColumn, table: str | None = None) -> Converter:
    """A function from one reader value (None included) to the value Arrow takes for this column."""
    codec = column_codec(col, table)
    conv, none_as = codec.convert, codec.none_as
    if conv is None:
        return (lambda v: none_as if v is None else v)
    return lambda v: none_as if v is None else conv(v)


# ------------------------------------------------------------------------------------------- codecs


@dataclass(frozen=True)
class ColumnCodec:
    """Everything staging needs for one column, decided once."""

    name: str
    mysql_type: str
    arrow_type: pa.DataType
    delta_type: str
    nullable: bool  # staged nullability (see staged_nullable)
    convert: Converter | None
    none_as: Any = None  # what a reader None becomes (None: NULL; every reader None is a NULL now)

    def convert_values(self, raw: list[Any]) -> list[Any]:
        conv, none_as = self.convert, self.none_as
        if conv is None:
            if none_as is None:
                return raw
            return [none_as if v is None else v for v in raw]
        return [none_as if v is None else conv(v) for v in raw]

    def staged_column(self) -> StagedColumn:
        return StagedColumn(self.name, self.mysql_type, str(self.arrow_type), self.delta_type, self.nullable)


def column_codec(col: SourceColumn, table: str | None = None) -> ColumnCodec:
    _, m = resolve(col, table)
    # Both readers tell an empty SET (set(), landing as '') from NULL (None): the columnar decoder by the
    # row image's null bitmap, the library path by the row's none-sources (binlog.read_changes).
    return ColumnCodec(col.name, col.mysql_type, m.arrow, m.delta, col.nullable or m.may_null, m.convert)


@dataclass(frozen=True)
class TableCodec:
    """One table shape: its staged Arrow schema (metadata columns first) and column codecs."""

    table: TableSchema
    columns: tuple[ColumnCodec, ...]
    arrow_schema: pa.Schema

    def staged_columns(self) -> tuple[StagedColumn, ...]:
        return tuple(c.staged_column() for c in self.columns)


def table_codec(table: TableSchema) -> TableCodec:
    """Codecs for every column of a table shape. Raises UnsupportedType / SchemaConflict."""
    columns = tuple(column_codec(c, table.name) for c in table.columns)
    for c in columns:
        if c.name in STAGED_META_COLUMNS:
            raise SchemaConflict(
                f"table {table.name!r} has a column named {c.name!r}, which the pipeline reserves for its "
                "change metadata; rename the column or exclude the table"
            )
    # Staged fields are always nullable: a Parquet REQUIRED column would turn a surprise NULL into a
    # corrupt file instead of a clear merge error; the manifest carries the real nullability.
    fields = [*META_FIELDS, *(pa.field(c.name, c.arrow_type, nullable=True) for c in columns)]
    return TableCodec(table, columns, pa.schema(fields))


# ---------------------------------------------------------------------------------------------- docs

DOC_BEGIN = "<!-- BEGIN GENERATED: python -m cdc_core.model.types --write docs/type-map.md -->"
DOC_END = "<!-- END GENERATED -->"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown() -> str:
    """The generated part of docs/type-map.md: the rules, worked examples, and unsupported types."""
    lines = [
        DOC_BEGIN,
        f"Type map version {TYPE_MAP_VERSION}.",
        "",
        "| MySQL / MariaDB | Arrow (staged Parquet) | Delta (Spark SQL) | Notes |",
        "|---|---|---|---|",
    ]
    for r in TYPE_RULES:
        lines.append(f"| {_md(r.mysql)} | `{r.arrow}` | `{r.delta}` | {_md(r.notes)} |")
    lines += [
        "",
        "Worked examples (computed by `column_types`):",
        "",
        "| `mysql_type` | Arrow | Delta |",
        "|---|---|---|",
    ]
    for r in TYPE_RULES:
        for ex in r.examples:
            arrow, delta = column_types(SourceColumn("c", ex, attrs=r.example_attrs))
            lines.append(f"| `{_md(ex)}` | `{arrow}` | `{delta}` |")
    lines += ["", "Not supported (staging raises `UnsupportedType` naming the table, column and type):", ""]
    lines += ["| Type | What to do |", "|---|---|"]
    for t, todo in UNSUPPORTED_TYPES:
        lines.append(f"| {_md(t)} | {_md(todo)} |")
    lines.append(DOC_END)
    return "\n".join(lines) + "\n"


def generated_block(doc_text: str) -> str | None:
    """The generated block of a doc file (markers included), or None if it has none."""
    start = doc_text.find(DOC_BEGIN)
    end = doc_text.find(DOC_END)
    if start < 0 or end < start:
        return None
    return doc_text[start : end + len(DOC_END)] + "\n"


def _write_doc(path: str) -> None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    block = generated_block(text)
    new = text.replace(block, render_markdown()) if block else text + ("\n" if text else "") + render_markdown()
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--write":
        _write_doc(args[1])
        return 0
    if len(args) == 2 and args[0] == "--check":
        with open(args[1], encoding="utf-8") as f:
            ok = generated_block(f.read()) == render_markdown()
        print("in sync" if ok else f"{args[1]} is out of date: run python -m cdc_core.model.types --write {args[1]}")
        return 0 if ok else 1
    sys.stdout.write(render_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
