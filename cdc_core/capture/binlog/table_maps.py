"""Table maps as `TableSchema`s: each column's MySQL type from the binlog's FULL row metadata.

`binlog_column_type` names a table-map column's type in the vocabulary of `source.normalise_column_type`
(with its charset and ENUM/SET labels); `SchemaBuilder` turns a table-map event into the table's
`TableSchema`, asking information_schema (the `schemas` callback) only for what the binlog does not say:
MariaDB's JSON columns, and the key of a table without a primary key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import TableMapEvent

from cdc_core.capture.binlog.compat import UnreadTableMap, collation_charsets
from cdc_core.capture.source import SourceParams, column_attrs, connect, quote_labels
from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.errors import MissingKey, SourceError, UnknownTable, UnsupportedType
from cdc_core.model.naming import table_id

log = logging.getLogger("cdc.binlog")

_INT_NAMES = {
    FIELD_TYPE.TINY: "tinyint",
    FIELD_TYPE.SHORT: "smallint",
    FIELD_TYPE.INT24: "mediumint",
    FIELD_TYPE.LONG: "int",
    FIELD_TYPE.LONGLONG: "bigint",
}
_BLOB_PREFIX = {1: "tiny", 2: "", 3: "medium", 4: "long"}
# Bytes per character, to turn the binlog's byte lengths back into CHAR(n)/VARCHAR(n).
_MBMAXLEN = {
    "utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4, "big5": 2,
    "gbk": 2, "gb2312": 2, "gb18030": 4, "sjis": 2, "cp932": 2, "ujis": 3, "eucjpms": 3, "euckr": 2,
}


_CHARSET_BY_COLLATION = {"mariadb": collation_charsets("mariadb"), "mysql": collation_charsets("mysql")}


def _charset_name(collation: str | None, flavor: str) -> str | None:
    if not collation:
        return None
    if collation == "binary":
        return "binary"
    return _CHARSET_BY_COLLATION.get(flavor, {}).get(collation) or collation.split("_", 1)[0]


def binlog_column_type(col: Any, flavor: str) -> tuple[str, str | None, tuple[str, ...] | None]:
    """(mysql_type, charset, labels) of a table-map column, in the vocabulary of `source.normalise_column_type`."""
    t = col.type
    unsigned = " unsigned" if getattr(col, "unsigned", False) else ""
    charset = _charset_name(getattr(col, "collation_name", None), flavor)
    if t in _INT_NAMES:
        return _INT_NAMES[t] + unsigned, None, None
    if t == FIELD_TYPE.NEWDECIMAL:
        return f"decimal({col.precision},{col.decimals})" + unsigned, None, None
    if t == FIELD_TYPE.FLOAT:
        return "float" + unsigned, None, None
    if t == FIELD_TYPE.DOUBLE:
        return "double" + unsigned, None, None
    if t in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return "date", None, None
    if t in (FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.TIME2):
        base = {FIELD_TYPE.DATETIME2: "datetime", FIELD_TYPE.TIMESTAMP2: "timestamp", FIELD_TYPE.TIME2: "time"}[t]
        fsp = int(getattr(col, "fsp", 0) or 0)
        return (f"{base}({fsp})" if fsp else base), None, None
    if t == FIELD_TYPE.DATETIME:
        return "datetime", None, None
    if t == FIELD_TYPE.TIMESTAMP:
        return "timestamp", None, None
    if t == FIELD_TYPE.TIME:
        return "time", None, None
    if t == FIELD_TYPE.YEAR:
        return "year", None, None
    if t == FIELD_TYPE.BIT:
        return f"bit({col.bits})", None, None
    if t == FIELD_TYPE.JSON:
        return "json", None, None
    if t == FIELD_TYPE.ENUM:
        labels = tuple((col.enum_values or [""])[1:])  # the library prepends '' (index 0)
        return f"enum({quote_labels(labels)})", charset, labels
    if t == FIELD_TYPE.SET:
        labels = tuple(col.set_values or [])
        return f"set({quote_labels(labels)})", charset, labels
    if t in (FIELD_TYPE.STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
        length = int(getattr(col, "max_length", 0) or 0)
        if charset == "binary":
            return (f"binary({length})" if t == FIELD_TYPE.STRING else f"varbinary({length})"), charset, None
        per = _MBMAXLEN.get(charset or "", 1)
        chars = -(-length // per)
        return (f"char({chars})" if t == FIELD_TYPE.STRING else f"varchar({chars})"), charset, None
    if t in (FIELD_TYPE.BLOB, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB):
        prefix = _BLOB_PREFIX.get(int(getattr(col, "length_size", 2) or 2), "")
        return prefix + ("blob" if charset == "binary" else "text"), charset, None
    if t == FIELD_TYPE.GEOMETRY:
        return "geometry", None, None
    return f"unknown_binlog_type_{t}", charset, None


# A MariaDB SEQUENCE is a table of these columns without a key, and NEXTVAL logs its rows when it takes a block of
# values. Not data (snapshots, which read base tables, never see one either): its rows never land.
SEQUENCE_COLUMNS = ("next_not_cached_value", "minimum_value", "maximum_value", "start_value", "increment",
                    "cache_size", "cycle_option", "cycle_count")


# MariaDB types a table map shows as the type they are stored as: JSON is a LONGTEXT with a json_valid CHECK (it
# lands as JSON text), UUID and INET6 are BINARY(16), INET4 is BINARY(4) (the type map refuses those three with
# what to do, as the snapshot does: landed as the bytes, they silently differed from what SELECT shows).
_MARIADB_STORED_AS = {"longtext": ("json",), "binary(16)": ("uuid", "inet6"), "binary(4)": ("inet4",)}


class SchemaBuilder:
    """TableSchemas from table-map events (FULL metadata), with the `schemas` callback as fallback."""

    def __init__(
        self,
        flavor: str,
        schemas: Callable[[str, str], TableSchema | None] | None,
        params: SourceParams,
        pipeline: str,
    ) -> None:
        self.flavor = flavor
        self.schemas = schemas
        self.params = params
        self.pipeline = pipeline
        self._lookups: dict[tuple[str, str], TableSchema | None] = {}
        self._interned: dict[TableSchema, TableSchema] = {}
        self._sequences: dict[tuple[str, str], bool] = {}

    def _is_sequence(self, schema: str, table: str) -> bool:
        """A table of SEQUENCE_COLUMNS is a sequence unless information_schema says it is a base table (one
        dropped since is taken for the sequence it looks like)."""
        key = (schema, table)
        if key not in self._sequences:
            conn = connect(self.params)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                                "TABLE_NAME = %s", key)
                    row = cur.fetchone()
            finally:
                conn.close()
            self._sequences[key] = row is None or str(row[0]).upper() == "SEQUENCE"
            if self._sequences[key]:
                log.info("pipeline %r: %s is a SEQUENCE: the rows NEXTVAL logs for it are not data and do not land",
                         self.pipeline, table_id(schema, table))
        return self._sequences[key]

    def lookup(self, schema: str, table: str) -> TableSchema | None:
        key = (schema, table)
        if key not in self._lookups:
            found: TableSchema | None = None
            if self.schemas is not None:
                try:
                    found = self.schemas(schema, table)
                except (UnknownTable, MissingKey):
                    found = None  # dropped or changed since: the binlog's own metadata has to do
            self._lookups[key] = found
        return self._lookups[key]

    def build(self, ev: TableMapEvent | UnreadTableMap) -> TableSchema | None:
        """The table's shape; None for a MariaDB SEQUENCE (its rows are the sequence's state, not data)."""
        schema, table = ev.schema, ev.table
        name = table_id(schema, table)
        if isinstance(ev, UnreadTableMap):
            raise UnsupportedType(
                f"pipeline {self.pipeline!r}: the binlog's table map of {name} cannot be read ({ev.error}); MariaDB "
                "writes one when the table has COMPRESSED columns, whose values the binlog carries compressed. "
                f"Exclude the table (tables.exclude: ['{name}']) or store the columns uncompressed (ALTER TABLE ... "
                "MODIFY the column without COMPRESSED); changes written before cannot be read: re-snapshot the table"
            )
        names = [c.name for c in ev.columns]
        if any(n is None or str(n).startswith("UNKNOWN_COL") for n in names) or not names:
            raise SourceError(
                f"pipeline {self.pipeline!r}: the binlog on {self.params.address} has no column names for table "
                f"{name}: it was written with binlog_row_metadata other than FULL. Set binlog_row_metadata=FULL "
                "(my.cnf, and SET GLOBAL binlog_row_metadata=FULL); changes written before that cannot be captured "
                "by name: start the pipeline (or a backfill) after the change, or re-snapshot the table"
            )
        mask = bytes(ev.null_bitmask) if ev.null_bitmask is not None else b""
        columns = []
        for i, col in enumerate(ev.columns):
            mysql_type, charset, labels = binlog_column_type(col, self.flavor)
            nullable = bool(mask[i // 8] >> (i % 8) & 1) if i // 8 < len(mask) else True
            columns.append(
                SourceColumn(
                    name=str(col.name),
                    mysql_type=mysql_type,
                    nullable=nullable,
                    attrs=column_attrs(mysql_type, charset, labels) if mysql_type != "json" else (),
                )
            )
        om = ev.optional_metadata
        key_idx = list(om.simple_primary_key_list or []) or list((om.primary_keys_with_prefix or {}).keys())
        key = tuple(names[i] for i in key_idx if 0 <= i < len(names))
        if self.flavor == "mariadb" and any(c.mysql_type in _MARIADB_STORED_AS for c in columns):
            # Types the binlog shows as their storage: only information_schema knows (_MARIADB_STORED_AS).
            known = self.lookup(schema, table)
            if known is not None:
                real = {c.name: c.mysql_type for c in known.columns}
                columns = [
                    SourceColumn(c.name, real[c.name], c.nullable, ())
                    if real.get(c.name) in _MARIADB_STORED_AS.get(c.mysql_type, ())
                    else c
                    for c in columns
                ]
        if not key:
            if self.flavor == "mariadb" and tuple(names) == SEQUENCE_COLUMNS and self._is_sequence(schema, table):
                return None
            known = self.lookup(schema, table)
            if known is not None and known.key and set(known.key) == set(known.column_names):
                key = tuple(names)  # configured full-row key: all columns in force now
            elif known is not None and known.key and all(k in names for k in known.key):
                key = known.key
            else:
                raise MissingKey(
                    f"pipeline {self.pipeline!r}: table {name} has no primary key in the binlog and no usable "
                    "UNIQUE NOT NULL key in information_schema. Add a primary key (or a UNIQUE key on NOT NULL "
                    "columns) at the source: the window reads it from information_schema at its next try. Listing "
                    "the table under tables.full_row_key, or excluding it, applies to the windows planned after "
                    "this one (a planned window replays with the tables and keys it was planned with)"
                )
        built = TableSchema(schema=schema, table=table, columns=tuple(columns), key=key)
        # One object per distinct shape: every transaction re-sends the table map, and consumers
        # (staging) take the fast path when consecutive changes share the very same TableSchema.
        return self._interned.setdefault(built, built)
