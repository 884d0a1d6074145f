"""Column types by MySQL's type grammar, in the vocabulary of `cdc_core.capture.source.normalise_column_type`.

`read_type` reads a type and its type attributes (UNSIGNED, CHARACTER SET, COLLATE, BINARY, ASCII, ...) from
the tokens, not from sqlglot's dialect-neutral `DataType` (the package docstring says why). `final_type` gives
the type information_schema then shows, once the column's other attributes and the table's default character
set are known: text in CHARSET binary is its binary type, TEXT(M) / BLOB(M) the smallest size that holds M,
and ENUM / SET labels are quoted as the server writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_core.model.ddl.frame import NUM, STR, NotUnderstood, Stmt, Tok
from cdc_core.model.labels import quote_labels

_INTS = {
    "TINYINT": "tinyint", "INT1": "tinyint", "SMALLINT": "smallint", "INT2": "smallint",
    "MEDIUMINT": "mediumint", "MIDDLEINT": "mediumint", "INT3": "mediumint", "INT": "int", "INTEGER": "int",
    "INT4": "int", "BIGINT": "bigint", "INT8": "bigint",
}
_NO_ARGS = {
    "DATE": "date", "TINYTEXT": "tinytext", "MEDIUMTEXT": "mediumtext", "LONGTEXT": "longtext",
    "TINYBLOB": "tinyblob", "MEDIUMBLOB": "mediumblob", "LONGBLOB": "longblob", "JSON": "json", "UUID": "uuid",
    "INET4": "inet4", "INET6": "inet6", "GEOMETRY": "geometry", "POINT": "point", "LINESTRING": "linestring",
    "POLYGON": "polygon", "MULTIPOINT": "multipoint", "MULTILINESTRING": "multilinestring",
    "MULTIPOLYGON": "multipolygon", "GEOMETRYCOLLECTION": "geometrycollection", "GEOMCOLLECTION": "geomcollection",
    "BOOL": "tinyint", "BOOLEAN": "tinyint", "SERIAL": "bigint",
}
NUMERIC_BASES = {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "float", "double", "bit", "year"}
TEXT_BASES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_TEXT_TO_BINARY = {
    "char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob", "mediumtext": "mediumblob",
    "longtext": "longblob",
}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
# Bytes per character of the multi-byte character sets (any other known set has one).
_MBMAXLEN = {
    "big5": 2, "ujis": 3, "sjis": 2, "euckr": 2, "gb2312": 2, "gbk": 2, "utf8mb3": 3, "ucs2": 2, "utf8mb4": 4,
    "utf16": 4, "utf16le": 4, "utf32": 4, "cp932": 2, "eucjpms": 3, "gb18030": 4,
}
_SINGLE_BYTE = {
    "dec8", "cp850", "hp8", "koi8r", "latin1", "latin2", "swe7", "ascii", "hebrew", "tis620", "koi8u", "greek",
    "cp1250", "latin5", "armscii8", "cp866", "keybcs2", "macce", "macroman", "cp852", "latin7", "cp1251",
    "cp1256", "cp1257", "binary", "geostd8",
}


@dataclass
class TableDefaults:
    """A CREATE TABLE's own default character set, for the column types it decides."""

    charset: str | None = None


def charset_name(name: str) -> str:
    """A character set as information_schema names it (`utf8` is `utf8mb3`)."""
    lower = name.lower()
    return "utf8mb3" if lower == "utf8" else lower


def collation_charset(collation: str) -> str | None:
    """The character set a collation belongs to (`utf8mb4_bin` -> utf8mb4), None when its name does not say."""
    prefix = charset_name(collation.split("_", 1)[0])
    return prefix if prefix in _MBMAXLEN or prefix in _SINGLE_BYTE else None


@dataclass
class ColumnType:
    """A column type as the statement wrote it, before the attributes that may still change it."""

    base: str  # the information_schema base name
    args: str | None = None  # what goes between the parentheses in the final type
    unsigned: bool = False
    charset: str | None = None  # explicit (CHARACTER SET, CHARSET, NATIONAL, ASCII, UNICODE, BYTE)
    collation: str | None = None
    text_length: int | None = None  # TEXT(M) / BLOB(M): the size class is decided by M (and the charset)
    serial: bool = False
    compressed: bool = False


def read_type(st: Stmt, i: int, hi: int) -> tuple[ColumnType, int]:
    """MySQL's data_type grammar over toks[i:hi] -> (the type, the index after it and its type attributes)."""
    w = st.word(i)
    if i >= hi or not w:
        raise NotUnderstood(f"expected a column type at {st.snippet(i, hi)}")
    j = i + 1
    national = False
    if w in ("NATIONAL", "NCHAR", "NVARCHAR"):
        national = True
        if w == "NATIONAL":
            w = st.word(j)
            j += 1
            if w not in ("CHAR", "CHARACTER", "VARCHAR", "VARCHARACTER"):
                raise NotUnderstood(f"unknown column type at {st.snippet(i, hi)}")
        elif w == "NCHAR":
            w = "CHAR"
        else:
            w = "VARCHAR"
    if w in ("CHAR", "CHARACTER") and (st.at(j, "VARYING") or (national and st.at(j, "VARCHAR|VARCHARACTER"))):
        w, j = "VARCHAR", j + 1  # CHAR VARYING, NATIONAL CHAR VARYING, NCHAR VARCHAR
    elif w == "DOUBLE" and st.at(j, "PRECISION"):
        j += 1
    elif w == "LONG":
        if st.at(j, "VARBINARY"):
            w, j = "MEDIUMBLOB", j + 1
        else:
            w, j = "MEDIUMTEXT", j + (1 if st.at(j, "VARCHAR|VARCHARACTER") else 0)
    t = _type_base(w, st, i, hi)
    if national:
        t.charset = "utf8mb3"
    if w == "SERIAL":
        t.unsigned, t.serial = True, True
    args: list[Tok] = []
    if st.punct(j, "("):
        close = st.close(j)
        if close >= hi:
            raise NotUnderstood(f"unbalanced parentheses in the type at {st.snippet(i, hi)}")
        args = [st.toks[k] for k in range(j + 1, close) if not st.punct(k, ",")]
        commas = sum(1 for k in range(j + 1, close) if st.punct(k, ","))
        if commas != max(len(args) - 1, 0) or (close > j + 1 and not args):
            raise NotUnderstood(f"cannot read the type's parameters at {st.snippet(i, hi)}")
        j = close + 1
    _type_args(t, w, args, st.snippet(i, hi))
    while j < hi:  # type attributes
        a = st.word(j)
        if a in ("UNSIGNED", "SIGNED", "ZEROFILL") and t.base in NUMERIC_BASES:
            t.unsigned = t.unsigned or a != "SIGNED"  # ZEROFILL implies UNSIGNED
            j += 1
        elif a == "BINARY" and t.base in TEXT_BASES:
            j += 1  # the charset's binary collation: still text
        elif a == "BYTE" and t.base in ("char", "varchar"):
            t.charset, j = "binary", j + 1
        elif a == "ASCII" and t.base in TEXT_BASES:
            t.charset, j = "latin1", j + 1
        elif a == "UNICODE" and t.base in TEXT_BASES:
            t.charset, j = "ucs2", j + 1
        elif (st.at(j, "CHARACTER|CHAR", "SET") or a == "CHARSET") and t.base in TEXT_BASES | {"json"}:
            j += 1 if a == "CHARSET" else 2
            if not st.is_name(j) and not (j < hi and st.toks[j].kind == STR):
                raise NotUnderstood(f"expected a character set at {st.snippet(j, hi)}")
            t.charset, j = charset_name(st.toks[j].text), j + 1
        elif a == "COLLATE" and t.base in TEXT_BASES | {"json"}:
            if not st.is_name(j + 1) and not (j + 1 < hi and st.toks[j + 1].kind == STR):
                raise NotUnderstood(f"expected a collation at {st.snippet(j + 1, hi)}")
            t.collation, j = st.toks[j + 1].text, j + 2
        else:
            break
    return t, j


def _type_base(w: str, st: Stmt, i: int, hi: int) -> ColumnType:
    if w in _INTS:
        return ColumnType(_INTS[w])
    if w in _NO_ARGS:
        return ColumnType(_NO_ARGS[w])
    simple = {
        "DECIMAL": "decimal", "DEC": "decimal", "NUMERIC": "decimal", "FIXED": "decimal", "FLOAT": "float",
        "FLOAT4": "float", "FLOAT8": "double", "DOUBLE": "double", "REAL": "double", "BIT": "bit", "TIME": "time",
        "DATETIME": "datetime", "TIMESTAMP": "timestamp", "YEAR": "year", "CHAR": "char", "CHARACTER": "char",
        "VARCHAR": "varchar", "VARCHARACTER": "varchar", "BINARY": "binary", "VARBINARY": "varbinary",
        "TEXT": "text", "BLOB": "blob", "ENUM": "enum", "SET": "set", "VECTOR": "vector", "MEDIUMTEXT": "mediumtext",
        "MEDIUMBLOB": "mediumblob",
    }
    if w in simple:
        return ColumnType(simple[w])
    raise NotUnderstood(f"unknown column type at {st.snippet(i, hi)}")


def _ints(args: list[Tok], where: str) -> list[int]:
    if not all(a.kind == NUM and a.text.isdigit() for a in args):
        raise NotUnderstood(f"cannot read the type's parameters at {where}")
    return [int(a.text) for a in args]


def _type_args(t: ColumnType, w: str, args: list[Tok], where: str) -> None:
    """Fold the parenthesised parameters into the type (information_schema's spelling)."""
    b = t.base
    if b in ("enum", "set"):
        if not args or not all(a.kind == STR for a in args):
            raise NotUnderstood(f"cannot read the {b.upper()} labels at {where}")
        # The server drops trailing spaces from labels and writes them with append_unescaped().
        t.args = quote_labels(a.text.rstrip(" ") for a in args)
        return
    nums = _ints(args, where)
    if b in _INTS.values() or w in ("YEAR", "BOOL", "BOOLEAN", "SERIAL"):
        if len(nums) > 1 or (nums and w in ("BOOL", "BOOLEAN", "SERIAL")):
            raise NotUnderstood(f"cannot read the type's parameters at {where}")
        return  # display widths are not part of the type
    if b == "decimal":
        if len(nums) > 2:
            raise NotUnderstood(f"cannot read the type's parameters at {where}")
        precision = nums[0] if nums else 10
        scale = nums[1] if len(nums) > 1 else 0
        t.args = f"{precision},{scale}"
    elif b in ("float", "double"):
        if len(nums) > 2 or (len(nums) == 1 and b == "double"):
            raise NotUnderstood(f"cannot read the type's parameters at {where}")
        if len(nums) == 1 and nums[0] > 24:
            t.base = "double"  # FLOAT(p), p > 24: a DOUBLE; FLOAT(M,D) / DOUBLE(M,D) lose (M,D) in the vocabulary
    elif b in ("bit", "char", "binary"):
        if len(nums) > 1:
            raise NotUnderstood(f"cannot read the type's parameters at {where}")
        t.args = str(nums[0] if nums else 1)
    elif b in ("varchar", "varbinary", "vector"):
        if len(nums) != 1:
            raise NotUnderstood(f"{b.upper()} needs a length at {where}")
        t.args = str(nums[0])
    elif b in ("time", "datetime", "timestamp"):
        if len(nums) > 1:
            raise NotUnderstood(f"cannot read the type's parameters at {where}")
        t.args = str(nums[0]) if nums and nums[0] else None
    elif b in ("text", "blob"):
        if len(nums) > 1:
            raise NotUnderstood(f"cannot read the type's parameters at {where}")
        t.text_length = nums[0] if nums else None
    elif nums or args:
        raise NotUnderstood(f"{b.upper()} takes no parameters at {where}")


def final_type(
    t: ColumnType, charset: str | None, collation: str | None, defaults: TableDefaults
) -> tuple[str, str | None]:
    """(mysql_type, ColumnSpec.charset) once every attribute is known."""
    explicit = charset or t.charset or _collation_of(collation or t.collation)
    base = t.base
    if base in TEXT_BASES and (explicit or defaults.charset) == "binary" and base in _TEXT_TO_BINARY:
        base = _TEXT_TO_BINARY[base]
    if t.text_length is not None:
        base = _sized_text(base, t.text_length, explicit or defaults.charset)
    if base in _BINARY:
        spec_charset: str | None = "binary"
    elif base in TEXT_BASES:
        spec_charset = explicit
    else:
        spec_charset = None
    mysql_type = base if t.args is None else f"{base}({t.args})"
    if t.unsigned and base in NUMERIC_BASES - {"bit", "year"}:
        mysql_type += " unsigned"
    if t.compressed:
        mysql_type += " /*m!100301 compressed*/"  # what information_schema shows for MariaDB's COMPRESSED
    return mysql_type, spec_charset


def _collation_of(collation: str | None) -> str | None:
    return None if collation is None else collation_charset(collation)


def _sized_text(base: str, length: int, charset: str | None) -> str:
    """TEXT(M) / BLOB(M): the smallest type that holds M characters (bytes for BLOB)."""
    blob = base in _BINARY
    if blob or charset in _SINGLE_BYTE:
        widths = {1}
    elif charset in _MBMAXLEN:
        widths = {_MBMAXLEN[charset]}
    else:
        widths = {1, 2, 3, 4}  # the charset is the table's or the database's: not in the statement
    kinds = set()
    for width in widths:
        size = length * width
        kind = "tiny" if size <= 255 else "" if size <= 65535 else "medium" if size <= 16777215 else "long"
        kinds.add(kind + ("blob" if blob else "text"))
    if len(kinds) > 1:
        raise NotUnderstood(
            f"TEXT({length}) is TINYTEXT, TEXT or MEDIUMTEXT depending on the column's character set, which this "
            "statement does not give"
        )
    return kinds.pop()
