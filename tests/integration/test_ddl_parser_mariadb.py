"""The DDL parser's column definitions against the real MariaDB (cdc_core.model.ddl).

For every column definition of the corpus (each type family, charsets and collations, odd ENUM labels,
nullability, defaults, generated columns, MariaDB's own types and attributes) the server runs the statement
(CREATE TABLE, ALTER TABLE ... ADD COLUMN, MODIFY, CHANGE), and the parser's ColumnSpec must say what
information_schema.COLUMNS then shows: `mysql_type` equal to `normalise_column_type(COLUMN_TYPE)` (the
vocabulary of the type map; MariaDB's JSON is a LONGTEXT with a json_valid CHECK), the same nullability, the
same character set where the statement gave one, and a default of the same kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdc_core.capture.source import column_attrs, normalise_column_type
from cdc_core.model import types
from cdc_core.model.changes import SourceColumn
from cdc_core.model.ddl import parse_statement
from cdc_core.model.errors import UnsupportedType
from cdc_core.model.schema_changes import ADD_COLUMN, CREATE_TABLE, MODIFY_COLUMN, ColumnSpec

pytestmark = pytest.mark.integration

VERSION = 101106  # versioned comments: any MariaDB 10.11
BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")

# Column definitions (after the column's name). Those marked CREATE_ONLY make a key or an AUTO_INCREMENT
# column, which ADD COLUMN on a table of the corpus cannot repeat.
DEFINITIONS: tuple[str, ...] = (
    # integers
    "TINYINT", "TINYINT(1)", "TINYINT UNSIGNED", "TINYINT(3) UNSIGNED ZEROFILL", "SMALLINT", "SMALLINT(6) UNSIGNED",
    "MEDIUMINT", "MEDIUMINT UNSIGNED", "MIDDLEINT", "INT", "INT(11)", "INT UNSIGNED", "INT ZEROFILL", "INTEGER",
    "INTEGER(5) SIGNED", "BIGINT", "BIGINT(20) UNSIGNED", "BIGINT(5) UNSIGNED ZEROFILL", "INT1", "INT2", "INT3", "INT4",
    "INT8", "BOOL", "BOOLEAN",
    # fixed point
    "DECIMAL", "DECIMAL(5)", "DECIMAL(10,2)", "DECIMAL(10,2) UNSIGNED", "DECIMAL(65,30)", "DECIMAL(5,2) ZEROFILL",
    "NUMERIC", "NUMERIC(7,3)", "DEC(4)", "FIXED(4,1)",
    # floating point
    "FLOAT", "FLOAT(10)", "FLOAT(24)", "FLOAT(25)", "FLOAT(53)", "FLOAT(7,4)", "FLOAT(7,4) UNSIGNED", "FLOAT UNSIGNED",
    "FLOAT ZEROFILL", "DOUBLE", "DOUBLE(10,2)", "DOUBLE PRECISION", "DOUBLE PRECISION(8,2)", "DOUBLE UNSIGNED",
    "REAL", "REAL(10,2)", "FLOAT4", "FLOAT8",
    # bits
    "BIT", "BIT(1)", "BIT(5)", "BIT(64)",
    # fixed-length text
    "CHAR", "CHAR(10)", "CHARACTER", "CHARACTER(3)", "NCHAR(3)", "NATIONAL CHAR(3)", "NATIONAL CHARACTER(2)",
    "NATIONAL CHAR", "CHAR(3) BINARY", "CHAR(3) BYTE", "CHAR(3) ASCII", "CHAR(3) UNICODE",
    "CHAR(3) CHARACTER SET latin1", "CHAR(3) CHARSET binary", "CHAR(3) COLLATE latin1_bin",
    "CHAR(3) BINARY CHARACTER SET latin1", "CHAR(3) CHARACTER SET latin1 BINARY",
    # variable-length text
    "VARCHAR(20)", "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", "VARCHAR(20) CHARSET utf8",
    "VARCHAR(20) COLLATE utf8mb3_unicode_ci", "VARCHAR(20) COLLATE utf8_bin", "VARCHAR(3) CHARACTER SET ascii",
    "VARCHAR(3) CHARACTER SET ucs2", "VARCHAR(3) CHARACTER SET utf16", "VARCHAR(3) CHARACTER SET utf32",
    "VARCHAR(3) CHARACTER SET cp1251 COLLATE cp1251_bin", "VARCHAR(3) CHARACTER SET 'latin2'", "VARCHAR(3) BINARY",
    "VARCHAR(3) BYTE", "VARCHAR(3) CHARACTER SET binary", "VARCHAR(3) COLLATE binary", "NVARCHAR(3)",
    "NATIONAL VARCHAR(3)", "NCHAR VARCHAR(3)", "NATIONAL CHAR VARYING(3)", "NCHAR VARYING(3)",
    "CHARACTER VARYING(4)", "CHAR VARYING(4)", "VARCHARACTER(3)", "VARCHAR(5) NOT NULL COLLATE latin1_bin",
    "VARCHAR(3) COLLATE utf8mb4_uca1400_ai_ci", "VARCHAR(3) COLLATE latin1_german2_ci",
    # text
    "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT", "TEXT(50)", "TEXT(63)", "TEXT(100) CHARACTER SET latin1",
    "TEXT(255) CHARACTER SET latin1", "TEXT(256) CHARACTER SET latin1", "TEXT(64) CHARACTER SET utf8",
    "TEXT(16384) CHARACTER SET utf8mb4", "TEXT(70000)", "TEXT(16777216)", "LONG", "LONG VARCHAR",
    "LONG CHARACTER SET latin1",
    "LONG BINARY", "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", "TEXT CHARSET binary",
    "MEDIUMTEXT COLLATE latin1_german2_ci", "LONGTEXT CHARACTER SET binary",
    # binary strings
    "BINARY", "BINARY(16)", "VARBINARY(20)", "TINYBLOB", "BLOB", "BLOB(100)", "BLOB(255)", "BLOB(256)",
    "BLOB(70000)", "MEDIUMBLOB", "LONGBLOB", "LONG VARBINARY",
    # ENUM and SET
    "ENUM('a','b')", "ENUM('A','b''c','d\\\\e')", "ENUM('x ', 'y')", "ENUM(' lead','Upper','')",
    "ENUM('a\\nb','t\\tx','q\"x','z\\Z','c\\rr','n\\0n')", "ENUM('é','ü','日本')", "ENUM('a,b','c)d','(e')",
    "ENUM('x') CHARACTER SET latin1", "ENUM('x') CHARACTER SET binary", "ENUM('a\\%b','a\\_b')",
    "ENUM(\"dq\", 'it\\'s')", "SET('x','y')", "SET('a','B') COLLATE utf8mb4_bin", "SET('a  ','b')",
    "SET('x') NOT NULL",
    # dates and times
    "DATE", "TIME", "TIME(0)", "TIME(3)", "TIME(6)", "DATETIME", "DATETIME(0)", "DATETIME(6)", "TIMESTAMP",
    "TIMESTAMP(3)", "TIMESTAMP NULL", "TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
    "DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)", "YEAR", "YEAR(4)",
    # JSON and MariaDB's own types
    "JSON", "JSON NOT NULL", "UUID", "INET4", "INET6", "GEOMETRY", "POINT", "GEOMETRYCOLLECTION",
    # nullability, generated columns and MariaDB attributes
    "INT NOT NULL", "INT NULL", "INT NOT NULL DEFAULT 5", "INT UNIQUE NOT NULL", "INT NULL UNIQUE",
    "INT GENERATED ALWAYS AS (1+1) VIRTUAL", "INT AS (2) PERSISTENT", "INT AS (3) STORED",
    "VARCHAR(10) AS (concat('a','b')) VIRTUAL", "INT AS (id + 1) VIRTUAL", "INT INVISIBLE",
    "INT COMMENT 'a, (b)' NOT NULL", "INT CHECK (c > 0)",
    "BLOB COMPRESSED", "VARCHAR(100) COMPRESSED", "TEXT COMPRESSED=zlib",
    # defaults
    "INT DEFAULT -1", "INT DEFAULT - 1", "DECIMAL(5,2) DEFAULT +2.5", "BIT(8) DEFAULT b'101'", "BIT(8) DEFAULT 0b11",
    "INT UNSIGNED DEFAULT 0x1F", "VARBINARY(4) DEFAULT x'1F'", "VARCHAR(10) DEFAULT _latin1'x'",
    "VARCHAR(10) DEFAULT N'x'", "VARCHAR(10) DEFAULT 'a' 'b'", "CHAR(36) DEFAULT uuid()", "INT DEFAULT (1+2)",
    "DATETIME DEFAULT now()", "TINYINT DEFAULT TRUE", "TINYINT DEFAULT false", "DOUBLE DEFAULT 1e3",
    "DOUBLE DEFAULT .5",
    "VARCHAR(5) DEFAULT 'a\\nb'", "INT DEFAULT NULL", "VARCHAR(5) NOT NULL DEFAULT ''", "INT DEFAULT '5'",
    "VARCHAR(9) DEFAULT 'it''s'", "DATE DEFAULT '2024-01-31'", "DATETIME(3) DEFAULT '2024-01-31 10:00:00.5'",
    "ENUM('a','b') NOT NULL DEFAULT 'b'", "DECIMAL(10,2) DEFAULT 1.50", "INT DEFAULT (-5)",
    # versioned comments in a definition
    "INT /*!50000 UNSIGNED */", "INT /*M!100301 NOT NULL */", "INT /*!99999 NOT NULL */",
)
CREATE_ONLY: tuple[str, ...] = (
    "SERIAL", "INT PRIMARY KEY", "INT KEY", "INT NULL PRIMARY KEY", "INT AUTO_INCREMENT UNIQUE",
    "BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY", "INT SERIAL DEFAULT VALUE",
    "VARCHAR(10) PRIMARY KEY COLLATE latin1_bin", "INT WITHOUT SYSTEM VERSIONING",
)


@pytest.fixture
def conn(services: Any, source_db: str) -> Iterator[Any]:
    c = services.root_connect(source_db)
    yield c
    c.close()


def observed(conn: Any, db: str, table: str, column: str) -> dict[str, Any]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME, COLUMN_DEFAULT FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND COLUMN_NAME = %s",
            (db, table, column),
        )
        row = cur.fetchone()
        assert row is not None, f"{table}.{column} not found"
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s AND "
            "TABLE_NAME = %s AND CHECK_CLAUSE = %s",
            (db, table, f"json_valid(`{column}`)"),
        )
        json_check = cur.fetchone()[0] > 0
    column_type = str(row[0])
    mysql_type = normalise_column_type(column_type)
    if mysql_type == "longtext" and json_check:
        mysql_type = "json"  # MariaDB's JSON (describe_tables reads it the same way)
    return {
        "column_type": column_type, "mysql_type": mysql_type, "nullable": row[1] == "YES", "charset": row[2],
        "default": row[3],
    }


def problems(spec: ColumnSpec, seen: dict[str, Any]) -> list[str]:
    out = []
    if spec.mysql_type != seen["mysql_type"]:
        out.append(f"type {spec.mysql_type!r}, server {seen['column_type']!r} -> {seen['mysql_type']!r}")
    if spec.nullable != seen["nullable"]:
        out.append(f"nullable {spec.nullable}, server {seen['nullable']}")
    # A binary string type's charset is "binary" in the spec; information_schema shows none.
    server_charset = seen["charset"]
    if server_charset is None and spec.mysql_type.startswith(BINARY_TYPES):
        server_charset = "binary"
    if spec.charset is not None and spec.charset != server_charset:
        out.append(f"charset {spec.charset!r}, server {seen['charset']!r}")
    default, server = spec.default, seen["default"]
    if default.kind == "null" and server != "NULL":
        out.append(f"default NULL, server {server!r}")
    if default.kind in ("literal", "expression") and server in (None, "NULL"):
        out.append(f"default {default}, server {server!r}")
    integer = spec.mysql_type.split(" ")[0] in ("int", "tinyint")
    if default.kind == "literal" and not default.is_string and integer and int(str(default.value)) != int(server):
        out.append(f"default {default.value!r}, server {server!r}")
    simple = default.kind == "literal" and default.is_string and str(default.value).isalnum()
    if simple and server not in (f"'{default.value}'", default.value):
        out.append(f"default {default.value!r}, server {server!r}")
    # The type map reads the spec as it reads the described column (a text column whose statement gives no
    # character set has the table's: the reader supplies it).
    attrs = column_attrs(seen["mysql_type"], seen["charset"])
    described = SourceColumn("c", seen["mysql_type"], seen["nullable"], attrs)
    charset = spec.charset or seen["charset"]
    parsed = SourceColumn("c", spec.mysql_type, spec.nullable, column_attrs(spec.mysql_type, charset))
    if _rule(described) != _rule(parsed):
        out.append(f"type map row {_rule(parsed)}, server's {_rule(described)}")
    return out


def _rule(col: SourceColumn) -> str:
    if col.mysql_type == "json":
        col = SourceColumn(col.name, "json", col.nullable)
    try:
        return types.resolve(col)[0].mysql
    except UnsupportedType:
        return "unsupported"


def only(statement: str, default_schema: str, kind: str) -> Any:
    parsed = parse_statement(statement, default_schema, server_version=VERSION)
    assert parsed.error is None, f"{statement}: {parsed.error}"
    assert [c.kind for c in parsed.changes] == [kind], statement
    return parsed.changes[0]


def test_create_table_columns_read_as_information_schema_shows_them(conn: Any, source_db: str) -> None:
    failures = []
    with conn.cursor() as cur:
        for i, definition in enumerate(DEFINITIONS + CREATE_ONLY):
            statement = f"CREATE TABLE t{i} (id INT, c {definition})"
            cur.execute(statement)
            change = only(statement, source_db, CREATE_TABLE)
            spec = change.columns[1]
            seen = observed(conn, source_db, f"t{i}", "c")
            failures += [f"{definition}: {p}" for p in problems(spec, seen)]
    assert not failures, "\n".join(failures)


def test_add_column_reads_as_information_schema_shows_it(conn: Any, source_db: str) -> None:
    failures = []
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY)")
        for i, definition in enumerate(DEFINITIONS):
            statement = f"ALTER TABLE a ADD COLUMN c{i} {definition.replace('c > 0', f'c{i} > 0')}"
            cur.execute(statement)
            change = only(statement, source_db, ADD_COLUMN)
            assert change.column is not None and change.column.name == f"c{i}"
            seen = observed(conn, source_db, "a", f"c{i}")
            failures += [f"{definition}: {p}" for p in problems(change.column, seen)]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    ("before", "clause", "name"),
    [
        ("INT", "MODIFY c BIGINT UNSIGNED NOT NULL", "c"),
        ("INT", "MODIFY COLUMN c VARCHAR(10) CHARACTER SET latin1 DEFAULT 'x' FIRST", "c"),
        ("INT", "MODIFY COLUMN IF EXISTS c DECIMAL(12,4)", "c"),
        ("VARCHAR(5)", "CHANGE c d TEXT CHARACTER SET utf8 NOT NULL", "d"),
        ("VARCHAR(5)", "CHANGE COLUMN c `d e` ENUM('x','y''z') AFTER id", "d e"),
        ("VARCHAR(5)", "CHANGE COLUMN IF EXISTS c c VARBINARY(8)", "c"),
        ("DATETIME", "MODIFY c DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)", "c"),
    ],
)
def test_modify_and_change_read_as_information_schema_shows_them(
    conn: Any, source_db: str, before: str, clause: str, name: str
) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE m (id INT PRIMARY KEY, c {before})")
        statement = f"ALTER TABLE m {clause}"
        cur.execute(statement)
    change = only(statement, source_db, MODIFY_COLUMN)
    assert change.name == "c" and change.column is not None and change.column.name == name
    assert problems(change.column, observed(conn, source_db, "m", name)) == []


def test_primary_key_columns_are_not_null_and_positions_follow_the_server(conn: Any, source_db: str) -> None:
    create = "CREATE TABLE k (a INT NULL, b VARCHAR(10), c INT, PRIMARY KEY (b(4), a))"
    with conn.cursor() as cur:
        cur.execute(create)
        created = only(create, source_db, CREATE_TABLE)
        assert created.key == ("b", "a")
        for spec in created.columns:
            assert problems(spec, observed(conn, source_db, "k", spec.name)) == [], spec.name
        alter = "ALTER TABLE k ADD COLUMN z INT FIRST, ADD COLUMN y INT AFTER b, ADD w INT"
        cur.execute(alter)
        parsed = parse_statement(alter, source_db)
        order = [c.name for c in created.columns]
        for change in parsed.changes:
            assert change.column is not None
            where = change.column.position
            at = 0 if where == ("first", None) else order.index(where[1]) + 1 if where else len(order)
            order.insert(at, change.column.name)
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'k' "
            "ORDER BY ORDINAL_POSITION",
            (source_db,),
        )
        assert [r[0] for r in cur.fetchall()] == order


def test_refused_definitions_are_ones_the_statement_cannot_decide(conn: Any, source_db: str) -> None:
    # TEXT(100) is TINYTEXT in a latin1 table and TEXT in a utf8mb4 one: the statement alone cannot tell.
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE r1 (c TEXT(100)) CHARACTER SET latin1")
        cur.execute("CREATE TABLE r2 (c TEXT(100)) CHARACTER SET utf8mb4")
    assert observed(conn, source_db, "r1", "c")["mysql_type"] == "tinytext"
    assert observed(conn, source_db, "r2", "c")["mysql_type"] == "text"
    assert only("CREATE TABLE r1 (c TEXT(100)) CHARACTER SET latin1", source_db, CREATE_TABLE).columns[0].mysql_type \
        == "tinytext"
    assert parse_statement("ALTER TABLE r1 ADD d TEXT(100)", source_db).error is not None


def test_an_unqualified_rename_target_lands_in_the_current_database(services: Any, source_db: str) -> None:
    other = f"{source_db}_o"
    conn = services.root_connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{other}`")
            cur.execute(f"CREATE TABLE `{other}`.x (i INT)")
            cur.execute(f"CREATE TABLE `{other}`.y (i INT)")
            cur.execute(f"USE `{source_db}`")
            for statement in (f"RENAME TABLE `{other}`.x TO x2", f"ALTER TABLE `{other}`.y RENAME y2"):
                cur.execute(statement)
                (change,) = parse_statement(statement, source_db).changes
                assert (change.schema, change.to_schema) == (other, source_db)
                cur.execute(
                    "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (change.to_schema, change.to_table),
                )
                assert cur.fetchone()[0] == 1, statement
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{other}`")
        conn.close()
