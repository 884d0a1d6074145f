"""Typed schema changes: what a DDL statement does to a source table, as a value (docs/schema-changes.md).

The DDL parser (`cdc_core.model.ddl`) turns each statement of the binlog into `SchemaChange`s, one per
action, in the statement's order (`ALTER TABLE t ADD a INT, DROP b` is two). The binlog reader stages
them in the window's manifest at their place among the row changes (`version`, `ordinal`), and the merge
applies them to the lake in that order (`cdc_core.model.merge_semantics`).

Column types use the type map's vocabulary (`cdc_core.model.types`): lowercase information_schema
COLUMN_TYPE without integer display widths, e.g. `int unsigned`, `decimal(10,2)`, `varchar(20)`,
`enum('a','b')`, `datetime(6)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from cdc_core.model.naming import table_id

SCHEMA_CHANGE_FORMAT = 1

# --- kinds -------------------------------------------------------------------------------------
# Table-level
TRUNCATE_TABLE = "truncate_table"
DROP_TABLE = "drop_table"
RENAME_TABLE = "rename_table"  # (schema, table) -> (to_schema, to_table); ALTER TABLE ... RENAME TO too
CREATE_TABLE = "create_table"  # columns + key; `replace`: CREATE OR REPLACE; `as_select`: rows follow as row events
CREATE_TABLE_LIKE = "create_table_like"  # like (to_schema, to_table) = the table copied
# Column-level
ADD_COLUMN = "add_column"  # column (with default / generated / position)
DROP_COLUMN = "drop_column"  # name
RENAME_COLUMN = "rename_column"  # name -> new_name
MODIFY_COLUMN = "modify_column"  # name (the column before), column (the new definition; CHANGE may rename it)
SET_DEFAULT = "set_default"  # name, column.default: future inserts only, existing rows keep their values
DROP_DEFAULT = "drop_default"  # name
PRIMARY_KEY = "primary_key"  # key: the new primary key (empty: dropped)
CONVERT_CHARSET = "convert_charset"  # charset: CONVERT TO CHARACTER SET (text columns may change values)
# Partition-level (rows change without row events)
TRUNCATE_PARTITION = "truncate_partition"  # partitions ("ALL" for every one)
DROP_PARTITION = "drop_partition"  # partitions
EXCHANGE_PARTITION = "exchange_partition"  # partitions (one), with (to_schema, to_table)
# Whole schema
DROP_DATABASE = "drop_database"  # schema only (table "")
# A statement that changes a table's rows in a way no statement text can say (ALTER TABLE ... IMPORT
# TABLESPACE): the lake can only re-read the table.
REPLACE_ROWS = "replace_rows"

KINDS = (
    TRUNCATE_TABLE, DROP_TABLE, RENAME_TABLE, CREATE_TABLE, CREATE_TABLE_LIKE,
    ADD_COLUMN, DROP_COLUMN, RENAME_COLUMN, MODIFY_COLUMN, SET_DEFAULT, DROP_DEFAULT, PRIMARY_KEY,
    CONVERT_CHARSET, TRUNCATE_PARTITION, DROP_PARTITION, EXCHANGE_PARTITION, DROP_DATABASE, REPLACE_ROWS,
)

# Default kinds (DefaultSpec.kind)
DEFAULT_NONE = "none"  # no DEFAULT clause: MySQL's implicit default applies (NULL, or 0 / '' / first label ...)
DEFAULT_NULL = "null"  # DEFAULT NULL
DEFAULT_LITERAL = "literal"  # a constant: `value` is its text (strings unquoted), `is_string` says which
DEFAULT_EXPRESSION = "expression"  # anything else (CURRENT_TIMESTAMP, (uuid()), (a + 1)): `value` is its SQL


@dataclass(frozen=True)
class DefaultSpec:
    kind: str = DEFAULT_NONE
    value: str | None = None
    is_string: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "is_string": self.is_string}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> DefaultSpec:
        if not d:
            return cls()
        return cls(str(d.get("kind", DEFAULT_NONE)), d.get("value"), bool(d.get("is_string", False)))


@dataclass(frozen=True)
class ColumnSpec:
    """A column as a DDL statement defines it."""

    name: str
    mysql_type: str  # the type map's vocabulary (module docstring)
    charset: str | None = None  # "binary" for BINARY/VARBINARY/BLOB; the explicit charset of a text column, else None
    nullable: bool = True  # NOT NULL (or PRIMARY KEY) -> False
    default: DefaultSpec = field(default_factory=DefaultSpec)
    generated: str | None = None  # the generation expression (VIRTUAL / STORED / PERSISTENT)
    auto_increment: bool = False
    position: tuple[str, str | None] | None = None  # ("first", None) | ("after", column) | None (last)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mysql_type": self.mysql_type,
            "charset": self.charset,
            "nullable": self.nullable,
            "default": self.default.to_dict(),
            "generated": self.generated,
            "auto_increment": self.auto_increment,
            "position": list(self.position) if self.position else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ColumnSpec:
        pos = d.get("position")
        return cls(
            name=str(d["name"]),
            mysql_type=str(d["mysql_type"]),
            charset=d.get("charset"),
            nullable=bool(d.get("nullable", True)),
            default=DefaultSpec.from_dict(d.get("default")),
            generated=d.get("generated"),
            auto_increment=bool(d.get("auto_increment", False)),
            position=(str(pos[0]), pos[1]) if pos else None,
        )


@dataclass(frozen=True)
class SchemaChange:
    """One action of a DDL statement on one table (or, for DROP DATABASE, one schema).

    `version` and `ordinal` place it among the window's row changes (the statement's
    `positions.change_version` and the window's change ordinal); every action of one statement shares
    them and keeps the statement's order (`step`). `query` is the statement, for messages."""

    kind: str
    schema: str
    table: str
    version: int = 0
    ordinal: int = 0
    step: int = 0
    commit_ts: float = 0.0
    query: str = ""
    column: ColumnSpec | None = None  # add_column, modify_column (new definition), set_default (default only)
    name: str | None = None  # the column acted on (drop, rename, modify: the name before)
    new_name: str | None = None  # rename_column
    to_schema: str | None = None  # rename_table target; create_table_like source; exchange_partition's table
    to_table: str | None = None
    columns: tuple[ColumnSpec, ...] = ()  # create_table
    key: tuple[str, ...] = ()  # create_table's primary key; primary_key's new key
    partitions: tuple[str, ...] = ()  # truncate / drop / exchange partition
    charset: str | None = None  # convert_charset
    replace: bool = False  # create_table: CREATE OR REPLACE
    if_not_exists: bool = False  # create_table(_like), add_column: IF NOT EXISTS (a no-op when it exists)
    if_exists: bool = False  # modify_column, rename_column, drop_column: IF EXISTS (a no-op when it does not)
    as_select: bool = False  # create_table ... SELECT: columns unknown here, the rows follow as row events
    reason: str | None = None  # replace_rows: why the rows changed without row events (for the re-read's log)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown schema change kind {self.kind!r}")

    @property
    def table_name(self) -> str:
        return table_id(self.schema, self.table)

    @property
    def target_name(self) -> str | None:
        if self.to_table is None:
            return None
        return table_id(self.to_schema or self.schema, self.to_table)

    def placed(self, *, version: int, ordinal: int, commit_ts: float, query: str) -> SchemaChange:
        return replace(self, version=version, ordinal=ordinal, commit_ts=commit_ts, query=query)

    def describe(self) -> str:
        """`ALTER TABLE ... (add_column d)` style: the statement and the action, for messages."""
        what = self.kind.replace("_", " ")
        detail = self.name or (self.column.name if self.column else None) or self.target_name or ""
        return f"{what} {detail}".strip()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": SCHEMA_CHANGE_FORMAT,
            "kind": self.kind,
            "schema": self.schema,
            "table": self.table,
            "version": self.version,
            "ordinal": self.ordinal,
            "step": self.step,
            "commit_ts": self.commit_ts,
            "query": self.query,
        }
        optional: dict[str, Any] = {
            "column": self.column.to_dict() if self.column else None,
            "name": self.name,
            "new_name": self.new_name,
            "to_schema": self.to_schema,
            "to_table": self.to_table,
            "columns": [c.to_dict() for c in self.columns] or None,
            "key": list(self.key) or None,
            "partitions": list(self.partitions) or None,
            "charset": self.charset,
            "replace": self.replace or None,
            "if_not_exists": self.if_not_exists or None,
            "if_exists": self.if_exists or None,
            "as_select": self.as_select or None,
            "reason": self.reason,
        }
        d.update({k: v for k, v in optional.items() if v is not None})
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SchemaChange:
        if d.get("format", SCHEMA_CHANGE_FORMAT) != SCHEMA_CHANGE_FORMAT:
            raise ValueError(f"unsupported schema change format {d.get('format')!r}")
        return cls(
            kind=str(d["kind"]),
            schema=str(d["schema"]),
            table=str(d["table"]),
            version=int(d.get("version", 0)),
            ordinal=int(d.get("ordinal", 0)),
            step=int(d.get("step", 0)),
            commit_ts=float(d.get("commit_ts", 0.0)),
            query=str(d.get("query", "")),
            column=ColumnSpec.from_dict(d["column"]) if d.get("column") else None,
            name=d.get("name"),
            new_name=d.get("new_name"),
            to_schema=d.get("to_schema"),
            to_table=d.get("to_table"),
            columns=tuple(ColumnSpec.from_dict(c) for c in d.get("columns") or ()),
            key=tuple(d.get("key") or ()),
            partitions=tuple(d.get("partitions") or ()),
            charset=d.get("charset"),
            replace=bool(d.get("replace", False)),
            if_not_exists=bool(d.get("if_not_exists", False)),
            if_exists=bool(d.get("if_exists", False)),
            as_select=bool(d.get("as_select", False)),
            reason=d.get("reason"),
        )


@dataclass(frozen=True)
class ParsedStatement:
    """What the parser makes of one statement.

    `changes`: the typed actions, in order (empty for statements that change no table's columns or rows:
    indexes, options, GRANT, DML, ...). `tables` / `schemas`: every table and whole schema the statement
    names, also when it has no typed action (so the reader can tell whether it touches a captured table).
    `error`: set when the statement is DDL on tables but could not be fully understood; `tables` then
    holds what could still be read of its targets (possibly nothing)."""

    changes: tuple[SchemaChange, ...] = ()
    tables: tuple[tuple[str, str], ...] = ()
    schemas: tuple[str, ...] = ()
    error: str | None = None

    @property
    def understood(self) -> bool:
        return self.error is None
