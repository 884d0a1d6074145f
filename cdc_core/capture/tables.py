"""Which source tables a pipeline captures (`TableFilter`) and what they look like (`describe_tables`: the
captured tables as `TableSchema`s from information_schema, with the key each lands by).

Column types follow one vocabulary, shared with the binlog reader and the type map (`cdc_core.model.types`):
lowercase information_schema COLUMN_TYPE with integer display widths and ZEROFILL removed and ' unsigned'
kept (`int unsigned`, `decimal(10,2)`, `datetime(6)`, `enum('a','b')`); FLOAT/DOUBLE lose their legacy
(M,D); YEAR loses its width; MariaDB's JSON (a LONGTEXT with a json_valid CHECK) is reported as `json`.
`attrs` carry ('charset', name) for character and binary string types (including ENUM/SET) and
('labels', (...)) for ENUM/SET.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pymysql

from cdc_core.capture.connection import conn_address
from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.errors import CascadingForeignKey, ConfigError, MissingKey, SystemVersionedTable, UnknownTable
from cdc_core.model.labels import parse_labels as parse_label_args
from cdc_core.model.labels import quote_labels as quote_label_args
from cdc_core.model.naming import NamePattern, parse_table_pattern, quote_mysql, table_id

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


@functools.lru_cache(maxsize=256)
def _parsed_patterns(patterns: tuple[str, ...]) -> tuple[tuple[NamePattern, NamePattern], ...]:
    """Parsed once per distinct filter: the binlog reader asks `matches` for every table-map event."""
    out = []
    for p in patterns:
        try:
            out.append(parse_table_pattern(p))
        except ValueError as e:
            raise ConfigError(f"table pattern {e}") from None
    return tuple(out)


@dataclass(frozen=True)
class TableFilter:
    """Which tables a pipeline captures: `schema.table` patterns, each side a name or an fnmatch glob
    (case-sensitive), or a backtick-quoted literal name (`naming.parse_table_pattern`).

    Schema and table are matched separately: `shop.*` never captures a table of a schema named `shop.x`.
    """

    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    # Online schema-change tools' table names (`_{table}_gho`, ...; schema_changes.ghost_tables / trash_tables):
    # such a table is never captured when its real table is (docs/schema-changes.md).
    osc_tables: tuple[str, ...] = ()

    @staticmethod
    def _parts(patterns: tuple[str, ...]) -> tuple[tuple[NamePattern, NamePattern], ...]:
        return _parsed_patterns(tuple(patterns))

    def _matches(self, schema: str, table: str) -> bool:
        return any(s.matches(schema) and t.matches(table) for s, t in self._parts(self.include)) and not any(
            s.matches(schema) and t.matches(table) for s, t in self._parts(self.exclude)
        )

    def matches(self, schema: str, table: str) -> bool:
        if not self._matches(schema, table):
            return False
        for template in self.osc_tables:
            prefix, _, suffix = template.partition("{table}")
            if len(table) > len(prefix) + len(suffix) and table.startswith(prefix) and table.endswith(suffix):
                real = table[len(prefix): len(table) - len(suffix)]
                if self._matches(schema, real):
                    return False
        return True

    def literal_includes(self) -> tuple[tuple[str, str], ...]:
        """Include entries without wildcards, as (schema, table): these must exist."""
        return tuple((s.text, t.text) for s, t in self._parts(self.include) if s.is_literal and t.is_literal)

    def literal_schemas(self) -> tuple[str, ...] | None:
        """The schemas the includes can match, when every include names its schema literally (else None)."""
        schemas: list[str] = []
        for s, _t in self._parts(self.include):
            if not s.is_literal:
                return None
            if s.text not in schemas:
                schemas.append(s.text)
        return tuple(schemas)

    def may_match_schema(self, schema: str) -> bool:
        """Whether some table of `schema` could be captured (for schema-wide DDL such as DROP DATABASE)."""
        return any(s.matches(schema) for s, _t in self._parts(self.include))


_INT_WIDTH = re.compile(r"^(tinyint|smallint|mediumint|int|integer|bigint)\(\d+\)")
_FLOAT_ARGS = re.compile(r"^(float|double|real)\(\d+,\d+\)")
_STRING_BASES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")
_BINARY_BASES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")


def normalise_column_type(column_type: str) -> str:
    """information_schema COLUMN_TYPE -> the shared mysql_type vocabulary (see the module docstring)."""
    t = column_type.strip()
    base = t.split("(", 1)[0].split(" ", 1)[0].lower()
    if base in ("enum", "set"):
        return base + t[len(base):]  # labels keep their case and quoting
    t = t.lower()
    t = _INT_WIDTH.sub(lambda m: "int" if m.group(1) == "integer" else m.group(1), t)
    t = _FLOAT_ARGS.sub(lambda m: "double" if m.group(1) == "real" else m.group(1), t)
    t = re.sub(r"^year\(\d+\)", "year", t)
    t = t.replace(" zerofill", "")
    return " ".join(t.split())


def parse_labels(column_type: str) -> tuple[str, ...]:
    """ENUM/SET labels from a COLUMN_TYPE: `enum('a','it''s','back\\\\slash')` -> ('a', "it's", 'back\\slash')
    (the server's escapes undone: cdc_core.model.labels; `quote_labels` is the inverse)."""
    return parse_label_args(column_type[column_type.index("(") + 1 : column_type.rindex(")")])


def quote_labels(labels: Iterable[str]) -> str:
    """The inverse of parse_labels for the part between the parentheses (as information_schema writes it)."""
    return quote_label_args(labels)


def column_attrs(
    mysql_type: str, charset: str | None, labels: tuple[str, ...] | None = None
) -> tuple[tuple[str, Any], ...]:
    base = mysql_type.split("(", 1)[0].split(" ", 1)[0]
    attrs: list[tuple[str, Any]] = []
    if base in _STRING_BASES or base in _BINARY_BASES:
        attrs.append(("charset", charset or "binary"))
    if base in ("enum", "set"):
        attrs.append(("labels", labels if labels is not None else parse_labels(mysql_type)))
    return tuple(attrs)


def _key_for(
    name: str,
    columns: tuple[SourceColumn, ...],
    indexes: list[tuple[str, bool, list[str | None]]],
    full_row: bool,
    pipeline: str,
) -> tuple[str, ...]:
    not_null = {c.name for c in columns if not c.nullable}
    for index_name, _unique, cols in indexes:
        if index_name == "PRIMARY":
            return tuple(c for c in cols if c is not None)
    for _name, unique, cols in indexes:
        # Functional key parts (column None) cannot identify a row from the binlog's values.
        if unique and cols and all(c is not None and c in not_null for c in cols):
            return tuple(c for c in cols if c is not None)
    if full_row:
        return tuple(c.name for c in columns)
    raise MissingKey(
        f"pipeline {pipeline!r}: table {name} has neither a PRIMARY KEY nor a UNIQUE key on NOT NULL columns, so "
        "its changes cannot be merged by key. Add one (ALTER TABLE ... ADD PRIMARY KEY (...)), or list the table "
        "under tables.full_row_key to use all columns as the key (identical rows then collapse into one), or "
        "exclude it (tables.exclude)"
    )


def describe_tables(
    conn: Any,
    table_filter: TableFilter,
    pipeline: str,
    full_row_key_tables: Iterable[str] = (),
) -> dict[str, TableSchema]:
    """The captured tables as `TableSchema`s, keyed by 'schema.table', from information_schema."""
    full_row = tuple(full_row_key_tables)
    address = conn_address(conn)
    schemas = table_filter.literal_schemas()
    with conn.cursor() as cur:
        where = "TABLE_TYPE = 'BASE TABLE'"
        args: list[Any] = []
        if schemas is not None:
            where += f" AND TABLE_SCHEMA IN ({','.join(['%s'] * len(schemas))})"
            args += list(schemas)
        else:
            where += f" AND TABLE_SCHEMA NOT IN ({','.join(['%s'] * len(SYSTEM_SCHEMAS))})"
            args += list(SYSTEM_SCHEMAS)
        cur.execute(f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE {where}", args)
        existing = sorted((str(s), str(t)) for s, t in cur.fetchall())
        for schema, table in table_filter.literal_includes():
            if (schema, table) in existing:
                continue
            in_schema = [t for s, t in existing if s == schema]
            if not in_schema:
                cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (schema,))
                row = cur.fetchone()
                if not row or not row[0]:
                    raise UnknownTable(
                        f"pipeline {pipeline!r}: table {table_id(schema, table)} does not exist on {address}: "
                        f"there is no schema {schema!r}. Fix tables.include, or create the table first"
                    )
            shown = ", ".join(in_schema[:50]) + (" ..." if len(in_schema) > 50 else "") if in_schema else "none"
            raise UnknownTable(
                f"pipeline {pipeline!r}: table {table_id(schema, table)} does not exist on {address}; tables in schema "
                f"{schema!r}: {shown}. Fix tables.include (names are case-sensitive)"
            )
        selected = [(s, t) for s, t in existing if table_filter.matches(s, t)]
        if not selected:
            return {}
        out: dict[str, TableSchema] = {}
        by_schema: dict[str, list[str]] = {}
        for s, t in selected:
            by_schema.setdefault(s, []).append(t)
        for schema, tables in by_schema.items():
            marks = ",".join(["%s"] * len(tables))
            cur.execute(
                "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, DATA_TYPE "
                "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN (" + marks + ") "
                "ORDER BY TABLE_NAME, ORDINAL_POSITION",
                [schema, *tables],
            )
            cols: dict[str, list[tuple[Any, ...]]] = {}
            for row in cur.fetchall():
                cols.setdefault(str(row[0]), []).append(row)
            json_cols = _mariadb_json_columns(cur, schema)
            for table in tables:
                columns = []
                for _t, name, ctype, nullable, charset, _dtype in cols.get(table, []):
                    mysql_type = normalise_column_type(str(ctype))
                    if mysql_type == "longtext" and (table, str(name)) in json_cols:
                        mysql_type = "json"
                    cs = None if mysql_type == "json" else (str(charset) if charset else None)
                    columns.append(
                        SourceColumn(
                            name=str(name),
                            mysql_type=mysql_type,
                            nullable=str(nullable).upper() == "YES",
                            attrs=column_attrs(mysql_type, cs) if mysql_type != "json" else (),
                        )
                    )
                name = table_id(schema, table)
                cur.execute(f"SHOW INDEX FROM {quote_mysql(schema)}.{quote_mysql(table)}")
                desc = [d[0].lower() for d in cur.description]
                i_name, i_nonunique, i_col = desc.index("key_name"), desc.index("non_unique"), desc.index("column_name")
                indexes: list[tuple[str, bool, list[str | None]]] = []
                for row in cur.fetchall():  # definition order, PRIMARY first
                    key_name = str(row[i_name])
                    if not indexes or indexes[-1][0] != key_name:
                        indexes.append((key_name, int(row[i_nonunique]) == 0, []))
                    indexes[-1][2].append(None if row[i_col] is None else str(row[i_col]))
                is_full_row = TableFilter(full_row).matches(schema, table) if full_row else False
                key = _key_for(name, tuple(columns), indexes, is_full_row, pipeline)
                out[name] = TableSchema(schema=schema, table=table, columns=tuple(columns), key=key)
    return out


def _mariadb_json_columns(cur: Any, schema: str) -> set[tuple[str, str]]:
    """(table, column) pairs whose CHECK is json_valid(`column`): MariaDB's JSON type (MySQL has a real one)."""
    try:
        cur.execute(
            "SELECT TABLE_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = %s AND CHECK_CLAUSE LIKE %s",
            (schema, "%json_valid%"),
        )
    except pymysql.err.MySQLError:
        return set()  # servers without CHECK_CONSTRAINTS: JSON stays 'longtext' (lands as the same string)
    out = set()
    for table, clause in cur.fetchall():
        m = re.fullmatch(r"\s*json_valid\(\s*`((?:[^`]|``)+)`\s*\)\s*", str(clause), re.I)
        if m:
            out.add((str(table), m.group(1).replace("``", "`")))
    return out


_CASCADING = ("CASCADE", "SET NULL", "SET DEFAULT")
# A foreign key as SHOW CREATE TABLE prints it (server-made text): its name, parent and ON DELETE / ON UPDATE rules.
_FOREIGN_KEY = re.compile(
    r"^\s*CONSTRAINT `((?:[^`]|``)+)` FOREIGN KEY \(.*?\) REFERENCES (.+?) \(.*?\)"
    r"(?: ON DELETE (CASCADE|SET NULL|SET DEFAULT|RESTRICT|NO ACTION))?"
    r"(?: ON UPDATE (CASCADE|SET NULL|SET DEFAULT|RESTRICT|NO ACTION))?,?\s*$",
    re.MULTILINE,
)


def cascading_keys(create_table: str, schema: str) -> list[str]:
    """The foreign keys of a SHOW CREATE TABLE text (of a table in `schema`) whose rules cascade, as
    `name: ON DELETE CASCADE ... from parent_schema.parent`."""
    out = []
    for m in _FOREIGN_KEY.finditer(create_table):
        name, parent, on_delete, on_update = m.groups()
        rules = [f"ON {verb} {rule}" for verb, rule in (("DELETE", on_delete), ("UPDATE", on_update))
                 if rule in _CASCADING]
        if rules:
            names = [n.replace("``", "`") for n in re.findall(r"`((?:[^`]|``)+)`", parent)]
            of = table_id(schema, names[0]) if len(names) == 1 else table_id(*names[:2])
            out.append(f"{name.replace('``', '`')}: {' '.join(rules)} from {of}")
    return out


def check_system_versioned(conn: Any, table_filter: TableFilter, pipeline: str) -> None:
    """Refuse captured system-versioned tables (MariaDB's WITH SYSTEM VERSIONING).

    Such a table keeps every updated or deleted row as a history row (hidden row_start / row_end columns, which
    are part of its primary key), and the binlog logs each as a row change: a DELETE is an UPDATE of row_end, an
    UPDATE also inserts the old version. The lake would hold every version as a live row where the source's
    SELECT shows the current ones. (A CREATE or ALTER that makes a captured table system-versioned later is refused
    by the DDL parser.)"""
    schemas = table_filter.literal_schemas()
    where = "TABLE_TYPE = 'SYSTEM VERSIONED'"
    if schemas is not None:
        where += f" AND TABLE_SCHEMA IN ({','.join(['%s'] * len(schemas))})"
    with conn.cursor() as cur:
        cur.execute(f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE {where} "
                    "ORDER BY TABLE_SCHEMA, TABLE_NAME", list(schemas or ()))
        found = [table_id(str(s), str(t)) for s, t in cur.fetchall() if table_filter.matches(str(s), str(t))]
    if found:
        raise SystemVersionedTable(
            f"pipeline {pipeline!r}: captured tables are system-versioned (WITH SYSTEM VERSIONING): "
            f"{', '.join(found[:20])}{' ...' if len(found) > 20 else ''}. The server keeps each updated or deleted row "
            "as a history row and logs it as a row change, so the lake would show every past version as a live row. "
            "Exclude them (tables.exclude), or make them plain tables at the source (ALTER TABLE ... DROP SYSTEM "
            "VERSIONING, which drops their history)"
        )


def check_cascades(conn: Any, table_filter: TableFilter, pipeline: str, accepted: Iterable[str] = ()) -> None:
    """Refuse captured tables whose rows a foreign key's cascade can change (ON DELETE / ON UPDATE CASCADE, SET
    NULL, SET DEFAULT), unless the configuration accepts them (`tables.cascading_foreign_keys`).

    MariaDB and MySQL (before 9.x moved foreign keys out of InnoDB) write no row event for the rows InnoDB changes
    by cascade: deleting a parent row logs that row only, so its child rows would stay in the lake. The rules are
    read from SHOW CREATE TABLE of the captured tables that have foreign keys (KEY_COLUMN_USAGE names them):
    information_schema.REFERENTIAL_CONSTRAINTS shows a replication user with SELECT nothing on MariaDB."""
    accepted_filter = TableFilter(tuple(accepted)) if accepted else None
    found = []
    with conn.cursor() as cur:
        schemas = table_filter.literal_schemas()
        where = "REFERENCED_TABLE_NAME IS NOT NULL"
        if schemas is not None:  # information_schema reads only these schemas' tables
            where += f" AND TABLE_SCHEMA IN ({','.join(['%s'] * len(schemas))})"
        cur.execute(
            f"SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE {where} "
            "ORDER BY TABLE_SCHEMA, TABLE_NAME",
            list(schemas or ()),
        )
        children = [(str(s), str(t)) for s, t in cur.fetchall()]
        for schema, table in children:
            if not table_filter.matches(schema, table):
                continue
            if accepted_filter is not None and accepted_filter.matches(schema, table):
                continue
            cur.execute(f"SHOW CREATE TABLE {quote_mysql(schema)}.{quote_mysql(table)}")
            found += [f"{table_id(schema, table)} ({c})" for c in cascading_keys(str(cur.fetchone()[1]), schema)]
    if found:
        raise CascadingForeignKey(
            f"pipeline {pipeline!r}: captured tables have foreign keys whose cascades change their rows: "
            f"{'; '.join(found[:20])}{' ...' if len(found) > 20 else ''}. The server writes no row event for a row a "
            "cascade changes (deleting a parent row logs that row only), so the lake would keep child rows the "
            "source deleted or changed. Either make the application change the child rows itself (ON DELETE / "
            "ON UPDATE RESTRICT, then explicit DELETEs or UPDATEs), or exclude those tables (tables.exclude), or "
            "accept it knowingly: list them under tables.cascading_foreign_keys, and repair with `cdc verify` and "
            "`cdc snapshot` after cascades (docs/operations.md)"
        )
