"""The DDL parser (cdc_core.model.ddl): statements of the binlog -> typed schema changes.

Tables of statements with the exact ParsedStatement each must give (every statement form and ALTER action,
gh-ost's and pt-online-schema-change's own statement texts, comments and versioned comments, hostile names),
column types, defaults and nullability, the statements that must be refused with an error or give nothing,
and properties: the parser never raises, names and string defaults survive any quoting, and every change
round-trips through to_dict / from_dict. tests/integration/test_ddl_parser_mariadb.py checks the column
definitions against a real MariaDB.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.capture.source import column_attrs
from cdc_core.model import types
from cdc_core.model.changes import SourceColumn
from cdc_core.model.ddl import executable_sql, parse_statement
from cdc_core.model.ddl.conversions import IGNORE_REASON
from cdc_core.model.errors import UnsupportedType
from cdc_core.model.naming import quote_mysql
from cdc_core.model.schema_changes import (
    ADD_COLUMN,
    CONVERT_CHARSET,
    CREATE_TABLE,
    CREATE_TABLE_LIKE,
    DROP_COLUMN,
    DROP_DATABASE,
    DROP_DEFAULT,
    DROP_PARTITION,
    DROP_TABLE,
    EXCHANGE_PARTITION,
    KINDS,
    MODIFY_COLUMN,
    PRIMARY_KEY,
    RENAME_COLUMN,
    RENAME_TABLE,
    REPLACE_ROWS,
    SET_DEFAULT,
    TRUNCATE_PARTITION,
    TRUNCATE_TABLE,
    ColumnSpec,
    DefaultSpec,
    ParsedStatement,
    SchemaChange,
)
from tests.support.security import HOSTILE_TABLES

pytestmark = pytest.mark.unit

DB = "db"
T = ((DB, "t"),)
NONE = DefaultSpec()
NULL = DefaultSpec("null")
MARIADB = 101106
MARIADB_10_4 = 100400
MYSQL = 80400


def lit(value: str, is_string: bool = False) -> DefaultSpec:
    return DefaultSpec("literal", value, is_string)


def expr(value: str) -> DefaultSpec:
    return DefaultSpec("expression", value)


def col(name: str, mysql_type: str, **kw: Any) -> ColumnSpec:
    return ColumnSpec(name, mysql_type, **kw)


def ch(kind: str, table: str = "t", schema: str = DB, **kw: Any) -> SchemaChange:
    return SchemaChange(kind, schema, table, **kw)


def parsed(*changes: SchemaChange, tables: tuple[tuple[str, str], ...] = T, schemas: tuple[str, ...] = ()) -> Any:
    numbered = tuple(SchemaChange.from_dict({**c.to_dict(), "step": k}) for k, c in enumerate(changes))
    return ParsedStatement(changes=numbered, tables=tables, schemas=schemas)


def parse(query: str, default_schema: str = DB, server_version: int | None = None) -> ParsedStatement:
    return parse_statement(query, default_schema, server_version=server_version)


# ------------------------------------------------------------------------------------------ statements

GH_OST = [
    pytest.param(
        "create /* gh-ost */ table `db`.`_t_gho` like `db`.`t`",
        parsed(ch(CREATE_TABLE_LIKE, "_t_gho", to_schema=DB, to_table="t"), tables=((DB, "_t_gho"), (DB, "t"))),
        id="gh-ost create ghost",
    ),
    pytest.param(
        "alter /* gh-ost */ table `db`.`_t_gho` add column extra int not null default 5",
        parsed(
            ch(ADD_COLUMN, "_t_gho", column=col("extra", "int", nullable=False, default=lit("5"))),
            tables=((DB, "_t_gho"),),
        ),
        id="gh-ost alter ghost",
    ),
    pytest.param(
        "create /* gh-ost */ table `db`.`_t_ghc` (\n\t\t\tid bigint auto_increment,\n\t\t\tlast_update timestamp not "
        "null DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n\t\t\thint varchar(64) charset ascii not null,"
        "\n\t\t\tvalue varchar(4096) charset ascii not null,\n\t\t\tprimary key(id),\n\t\t\tunique key hint_uidx(hint)"
        "\n\t\t) auto_increment=256 comment='gh-ost changelog'",
        parsed(
            ch(CREATE_TABLE, "_t_ghc", key=("id",), columns=(
                col("id", "bigint", nullable=False, auto_increment=True),
                col("last_update", "timestamp", nullable=False, default=expr("CURRENT_TIMESTAMP()")),
                col("hint", "varchar(64)", charset="ascii", nullable=False),
                col("value", "varchar(4096)", charset="ascii", nullable=False),
            )),
            tables=((DB, "_t_ghc"),),
        ),
        id="gh-ost changelog table",
    ),
    pytest.param(
        "create /* gh-ost */ table `db`.`_t_del` (\n\t\t\tid int auto_increment primary key\n\t\t) engine=InnoDB "
        "comment='ghost-cut-over-sentry'",
        parsed(
            ch(CREATE_TABLE, "_t_del", key=("id",), columns=(col("id", "int", nullable=False, auto_increment=True),)),
            tables=((DB, "_t_del"),),
        ),
        id="gh-ost cut-over sentry",
    ),
    pytest.param(
        "rename /* gh-ost */ table `db`.`t` to `db`.`_t_del`, `db`.`_t_gho` to `db`.`t`",
        parsed(
            ch(RENAME_TABLE, to_schema=DB, to_table="_t_del"),
            ch(RENAME_TABLE, "_t_gho", to_schema=DB, to_table="t"),
            tables=((DB, "t"), (DB, "_t_del"), (DB, "_t_gho")),
        ),
        id="gh-ost cut-over",
    ),
    pytest.param(
        "drop /* gh-ost */ table if exists `db`.`_t_del`",
        parsed(ch(DROP_TABLE, "_t_del"), tables=((DB, "_t_del"),)),
        id="gh-ost drop trash",
    ),
]

PT_OSC = [
    pytest.param(
        "CREATE TABLE `db`.`_t_new` LIKE `db`.`t`",
        parsed(ch(CREATE_TABLE_LIKE, "_t_new", to_schema=DB, to_table="t"), tables=((DB, "_t_new"), (DB, "t"))),
        id="pt-osc create like",
    ),
    pytest.param(
        "CREATE TABLE `db`.`_t_new` (\n  `id` int(11) NOT NULL AUTO_INCREMENT,\n  `v` varchar(20) COLLATE "
        "utf8mb4_unicode_ci DEFAULT NULL,\n  `at` datetime(6) NOT NULL DEFAULT current_timestamp(6),\n  PRIMARY KEY "
        "(`id`),\n  KEY `v` (`v`)\n) ENGINE=InnoDB AUTO_INCREMENT=51 DEFAULT CHARSET=utf8mb4 "
        "COLLATE=utf8mb4_unicode_ci",
        parsed(
            ch(CREATE_TABLE, "_t_new", key=("id",), columns=(
                col("id", "int", nullable=False, auto_increment=True),
                col("v", "varchar(20)", charset="utf8mb4", default=NULL),
                col("at", "datetime(6)", nullable=False, default=expr("CURRENT_TIMESTAMP(6)")),
            )),
            tables=((DB, "_t_new"),),
        ),
        id="pt-osc create from SHOW CREATE TABLE",
    ),
    pytest.param(
        "ALTER TABLE `db`.`_t_new` ADD COLUMN extra INT NOT NULL DEFAULT 5",
        parsed(
            ch(ADD_COLUMN, "_t_new", column=col("extra", "int", nullable=False, default=lit("5"))),
            tables=((DB, "_t_new"),),
        ),
        id="pt-osc alter new",
    ),
    pytest.param(
        "CREATE TRIGGER `pt_osc_db_t_ins` AFTER INSERT ON `db`.`t` FOR EACH ROW BEGIN DECLARE CONTINUE HANDLER FOR "
        "1146 begin end; REPLACE INTO `db`.`_t_new` (`id`, `v`) VALUES (NEW.`id`, NEW.`v`);END",
        parsed(),
        id="pt-osc insert trigger",
    ),
    pytest.param(
        "CREATE DEFINER=`root`@`localhost` TRIGGER `pt_osc_db_t_upd` BEFORE UPDATE ON `db`.`t` FOR EACH ROW BEGIN "
        "DECLARE CONTINUE HANDLER FOR 1146 begin end; DELETE IGNORE FROM `db`.`_t_new` WHERE !(OLD.`id` <=> NEW.`id`) "
        "AND `db`.`_t_new`.`id` <=> OLD.`id`; REPLACE INTO `db`.`_t_new` (`id`, `v`) VALUES (NEW.`id`, NEW.`v`); END",
        parsed(),
        id="pt-osc update trigger as logged, with its definer",
    ),
    pytest.param(
        "RENAME TABLE `db`.`t` TO `db`.`_t_old`, `db`.`_t_new` TO `db`.`t`",
        parsed(
            ch(RENAME_TABLE, to_schema=DB, to_table="_t_old"),
            ch(RENAME_TABLE, "_t_new", to_schema=DB, to_table="t"),
            tables=((DB, "t"), (DB, "_t_old"), (DB, "_t_new")),
        ),
        id="pt-osc swap",
    ),
    pytest.param("DROP TABLE IF EXISTS `db`.`_t_old`", parsed(ch(DROP_TABLE, "_t_old"), tables=((DB, "_t_old"),)),
                 id="pt-osc drop old"),
    pytest.param("DROP TRIGGER IF EXISTS `db`.`pt_osc_db_t_del`", ParsedStatement(), id="pt-osc drop trigger"),
]

TABLE_STATEMENTS = [
    # TRUNCATE
    pytest.param("TRUNCATE t", parsed(ch(TRUNCATE_TABLE)), id="truncate"),
    pytest.param(
        "truncate table `db2`.`x y` WAIT 5", parsed(ch(TRUNCATE_TABLE, "x y", "db2"), tables=(("db2", "x y"),)),
        id="truncate table qualified wait",
    ),
    pytest.param("TRUNCATE TABLE t NOWAIT", parsed(ch(TRUNCATE_TABLE)), id="truncate nowait"),
    pytest.param("TRUNCATE charset", parsed(ch(TRUNCATE_TABLE, "charset"), tables=((DB, "charset"),)),
                 id="truncate a keyword-named table"),
    # DROP TABLE
    pytest.param("DROP TABLE t", parsed(ch(DROP_TABLE)), id="drop"),
    pytest.param(
        "DROP TABLE IF EXISTS a, db2.b CASCADE",
        parsed(ch(DROP_TABLE, "a"), ch(DROP_TABLE, "b", "db2"), tables=((DB, "a"), ("db2", "b"))),
        id="drop several",
    ),
    pytest.param("DROP TABLES a WAIT 3 RESTRICT", parsed(ch(DROP_TABLE, "a"), tables=((DB, "a"),)),
                 id="drop tables wait restrict"),
    pytest.param("DROP TABLE `t` /* generated by server */", parsed(ch(DROP_TABLE)), id="drop as MariaDB logs it"),
    pytest.param("DROP TEMPORARY TABLE IF EXISTS t", ParsedStatement(), id="drop temporary"),
    # RENAME TABLE
    pytest.param(
        "RENAME TABLE a TO b, c TO d",
        parsed(ch(RENAME_TABLE, "a", to_schema=DB, to_table="b"), ch(RENAME_TABLE, "c", to_schema=DB, to_table="d"),
               tables=((DB, "a"), (DB, "b"), (DB, "c"), (DB, "d"))),
        id="rename pairs",
    ),
    pytest.param(
        "RENAME TABLE db1.a TO b",
        parsed(ch(RENAME_TABLE, "a", "db1", to_schema=DB, to_table="b"), tables=(("db1", "a"), (DB, "b"))),
        id="rename into the current database",
    ),
    pytest.param(
        "RENAME TABLES IF EXISTS a WAIT 5 TO other.b",
        parsed(ch(RENAME_TABLE, "a", to_schema="other", to_table="b"), tables=((DB, "a"), ("other", "b"))),
        id="rename tables if exists wait",
    ),
    pytest.param(
        "RENAME TABLE a TO b, b TO c",
        parsed(ch(RENAME_TABLE, "a", to_schema=DB, to_table="b"), ch(RENAME_TABLE, "b", to_schema=DB, to_table="c"),
               tables=((DB, "a"), (DB, "b"), (DB, "c"))),
        id="rename chain left to right",
    ),
    pytest.param("RENAME USER x TO y", ParsedStatement(), id="rename user"),
    # CREATE TABLE
    pytest.param(
        "CREATE TABLE t (id INT(11) UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20) CHARACTER SET latin1 "
        "COLLATE latin1_bin DEFAULT 'x''y', d DECIMAL(5), e ENUM('a','It''s'), ts TIMESTAMP(6) DEFAULT "
        "CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), g INT AS (id+1) STORED, KEY k (v)) ENGINE=InnoDB",
        parsed(ch(CREATE_TABLE, key=("id",), columns=(
            col("id", "int unsigned", nullable=False, auto_increment=True),
            col("v", "varchar(20)", charset="latin1", default=lit("x'y", True)),
            col("d", "decimal(5,0)"),
            col("e", "enum('a','It''s')"),
            col("ts", "timestamp(6)", default=expr("CURRENT_TIMESTAMP(6)")),
            col("g", "int", generated="id + 1"),
        ))),
        id="create with inline key",
    ),
    pytest.param(
        "CREATE TABLE IF NOT EXISTS db2.t (a INT NULL, b VARCHAR(5), PRIMARY KEY (b(3), a)) ENGINE=InnoDB "
        "PARTITION BY RANGE (a) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)",
        parsed(ch(CREATE_TABLE, schema="db2", if_not_exists=True, key=("b", "a"), columns=(
            col("a", "int", nullable=False), col("b", "varchar(5)", nullable=False),
        )), tables=(("db2", "t"),)),
        id="create with table key, prefix length and partitions",
    ),
    pytest.param(
        "CREATE OR REPLACE TABLE t (a INT, CONSTRAINT pk PRIMARY KEY USING BTREE (a)) START TRANSACTION",
        parsed(ch(CREATE_TABLE, replace=True, key=("a",), columns=(col("a", "int", nullable=False),))),
        id="create or replace, named key with USING, MySQL 8's START TRANSACTION",
    ),
    pytest.param(
        "CREATE TABLE t (a INT, b INT, UNIQUE KEY u (a), INDEX i (b) USING BTREE COMMENT 'x, y', FULLTEXT KEY f (a), "
        "CONSTRAINT fk FOREIGN KEY (a) REFERENCES u (id) ON DELETE CASCADE, CHECK (a > 0), CONSTRAINT c CHECK (b > 0), "
        "PERIOD FOR p(a, b))",
        parsed(ch(CREATE_TABLE, columns=(col("a", "int"), col("b", "int")))),
        id="create with indexes and constraints",
    ),
    pytest.param(
        "CREATE TABLE t (period INT, status INT, comment TEXT, text TEXT, date DATE, serial SERIAL, position INT KEY)",
        parsed(ch(CREATE_TABLE, key=("position",), columns=(
            col("period", "int"), col("status", "int"), col("comment", "text"), col("text", "text"),
            col("date", "date"), col("serial", "bigint unsigned", nullable=False, auto_increment=True),
            col("position", "int", nullable=False),
        ))),
        id="create with keyword-named columns",
    ),
    pytest.param(
        "CREATE TABLE t (b CHAR(3), c TEXT(100), d TEXT(100) CHARACTER SET latin1) DEFAULT CHARSET=binary",
        parsed(ch(CREATE_TABLE, columns=(
            col("b", "binary(3)", charset="binary"), col("c", "tinyblob", charset="binary"),
            col("d", "tinytext", charset="latin1"),
        ))),
        id="create in a binary table",
    ),
    pytest.param(
        "CREATE TABLE t (c TEXT(100)) CHARACTER SET = latin1",
        parsed(ch(CREATE_TABLE, columns=(col("c", "tinytext"),))),
        id="create TEXT(M) sized by the table's charset",
    ),
    pytest.param(
        "CREATE TABLE t (c TEXT(100)) DEFAULT COLLATE=utf8mb4_bin",
        parsed(ch(CREATE_TABLE, columns=(col("c", "text"),))),
        id="create TEXT(M) sized by the table's collation",
    ),
    pytest.param(
        "CREATE TABLE t (a INT) SELECT 1 AS a",
        parsed(ch(CREATE_TABLE, as_select=True, columns=(col("a", "int"),))),
        id="create select",
    ),
    pytest.param("CREATE TABLE t AS SELECT * FROM u", parsed(ch(CREATE_TABLE, as_select=True)), id="create as select"),
    pytest.param("CREATE TABLE t IGNORE SELECT 1", parsed(ch(CREATE_TABLE, as_select=True)),
                 id="create ignore select"),
    pytest.param("CREATE TABLE t (SELECT 1)", parsed(ch(CREATE_TABLE, as_select=True)), id="create (select)"),
    pytest.param("CREATE TABLE t ENGINE=InnoDB AS (SELECT 1)", parsed(ch(CREATE_TABLE, as_select=True)),
                 id="create options as (select)"),
    pytest.param("CREATE TABLE t WITH x AS (SELECT 1) SELECT * FROM x", parsed(ch(CREATE_TABLE, as_select=True)),
                 id="create with cte"),
    pytest.param(
        "CREATE TABLE t (LIKE s)",
        parsed(ch(CREATE_TABLE_LIKE, to_schema=DB, to_table="s"), tables=((DB, "t"), (DB, "s"))),
        id="create (like)",
    ),
    pytest.param(
        "CREATE OR REPLACE TABLE IF NOT EXISTS t LIKE db2.s",
        parsed(ch(CREATE_TABLE_LIKE, to_schema="db2", to_table="s", replace=True, if_not_exists=True),
               tables=((DB, "t"), ("db2", "s"))),
        id="create or replace like",
    ),
    pytest.param("CREATE TEMPORARY TABLE t (a INT)", ParsedStatement(), id="create temporary"),
    pytest.param("CREATE OR REPLACE TEMPORARY TABLE t LIKE s", ParsedStatement(), id="create or replace temporary"),
    # databases
    pytest.param("DROP DATABASE IF EXISTS `shop`", parsed(ch(DROP_DATABASE, "", "shop"), tables=(), schemas=("shop",)),
                 id="drop database"),
    pytest.param("DROP SCHEMA x", parsed(ch(DROP_DATABASE, "", "x"), tables=(), schemas=("x",)), id="drop schema"),
    pytest.param("CREATE DATABASE IF NOT EXISTS x CHARACTER SET utf8mb4", parsed(tables=(), schemas=("x",)),
                 id="create database"),
    pytest.param("CREATE OR REPLACE DATABASE x", parsed(ch(DROP_DATABASE, "", "x"), tables=(), schemas=("x",)),
                 id="create or replace database drops it first"),
    pytest.param("ALTER SCHEMA `x` COMMENT 'y'", parsed(tables=(), schemas=("x",)), id="alter schema"),
    pytest.param("ALTER DATABASE CHARACTER SET latin1", parsed(tables=(), schemas=(DB,)),
                 id="alter the current database"),
    # indexes and triggers
    pytest.param("CREATE INDEX i ON t (a)", parsed(), id="create index"),
    pytest.param("CREATE OR REPLACE UNIQUE INDEX IF NOT EXISTS i ON db2.t (a) USING BTREE",
                 parsed(tables=(("db2", "t"),)), id="create unique index"),
    pytest.param("CREATE ONLINE FULLTEXT INDEX f ON t (b)", parsed(), id="create online fulltext index"),
    pytest.param("DROP INDEX i ON t", parsed(), id="drop index"),
    pytest.param("DROP INDEX `PRIMARY` ON db2.t", parsed(ch(PRIMARY_KEY, schema="db2"), tables=(("db2", "t"),)),
                 id="drop index PRIMARY drops the primary key"),
    pytest.param("CREATE DEFINER=CURRENT_USER TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.a = 1", parsed(),
                 id="create trigger, definer current_user"),
    pytest.param(
        "CREATE OR REPLACE DEFINER='root'@'%' TRIGGER IF NOT EXISTS db.tr AFTER DELETE ON `weird t` FOR EACH ROW "
        "BEGIN DELETE FROM x WHERE id = OLD.id; END",
        parsed(tables=((DB, "weird t"),)),
        id="create or replace trigger with a body",
    ),
]

ALTER_STATEMENTS = [
    pytest.param(
        "ALTER TABLE db.t ADD COLUMN x INT NOT NULL DEFAULT 5 AFTER v, DROP COLUMN y, MODIFY z BIGINT FIRST, "
        "CHANGE a b INT, RENAME COLUMN c TO d, ALTER COLUMN e SET DEFAULT 3, ALTER f DROP DEFAULT",
        parsed(
            ch(ADD_COLUMN, column=col("x", "int", nullable=False, default=lit("5"), position=("after", "v"))),
            ch(DROP_COLUMN, name="y"),
            ch(MODIFY_COLUMN, name="z", column=col("z", "bigint", position=("first", None))),
            ch(MODIFY_COLUMN, name="a", column=col("b", "int")),
            ch(RENAME_COLUMN, name="c", new_name="d"),
            ch(SET_DEFAULT, name="e", column=col("e", "", default=lit("3"))),
            ch(DROP_DEFAULT, name="f"),
        ),
        id="alter with every column action",
    ),
    pytest.param(
        "ALTER ONLINE IGNORE TABLE IF EXISTS t WAIT 10 ADD IF NOT EXISTS c VARCHAR(5) CHARSET latin1 FIRST",
        parsed(ch(ADD_COLUMN, if_not_exists=True, column=col("c", "varchar(5)", charset="latin1",
                                                             position=("first", None))),
               ch(REPLACE_ROWS, reason=IGNORE_REASON)),
        id="alter online ignore if exists wait, add if not exists",
    ),
    pytest.param(
        "ALTER TABLE t ADD COLUMN (x INT, y VARCHAR(3) NOT NULL)",
        parsed(ch(ADD_COLUMN, column=col("x", "int")), ch(ADD_COLUMN, column=col("y", "varchar(3)", nullable=False))),
        id="add a column list",
    ),
    pytest.param(
        "ALTER TABLE t MODIFY COLUMN IF EXISTS x BIGINT UNSIGNED NOT NULL AFTER w, CHANGE COLUMN IF EXISTS y z TEXT",
        parsed(
            ch(MODIFY_COLUMN, name="x", column=col("x", "bigint unsigned", nullable=False, position=("after", "w")),
               if_exists=True),
            ch(MODIFY_COLUMN, name="y", column=col("z", "text"), if_exists=True),
        ),
        id="modify and change if exists",
    ),
    pytest.param(
        "ALTER TABLE t ALTER COLUMN c SET DEFAULT 'x', ALTER d SET DEFAULT NULL, ALTER e SET DEFAULT "
        "CURRENT_TIMESTAMP, ALTER f SET DEFAULT (uuid()), ALTER g SET DEFAULT -1, ALTER h SET DEFAULT 0x1F, "
        "ALTER j SET VISIBLE, ALTER COLUMN k SET INVISIBLE",
        parsed(
            ch(SET_DEFAULT, name="c", column=col("c", "", default=lit("x", True))),
            ch(SET_DEFAULT, name="d", column=col("d", "", default=NULL)),
            ch(SET_DEFAULT, name="e", column=col("e", "", default=expr("CURRENT_TIMESTAMP()"))),
            ch(SET_DEFAULT, name="f", column=col("f", "", default=expr("(UUID())"))),
            ch(SET_DEFAULT, name="g", column=col("g", "", default=lit("-1"))),
            ch(SET_DEFAULT, name="h", column=col("h", "", default=expr("x'1F'"))),  # the column's type decides
        ),
        id="alter column defaults and visibility",
    ),
    pytest.param(
        "ALTER TABLE t RENAME COLUMN IF EXISTS a TO b, DROP COLUMN IF EXISTS c, DROP d RESTRICT, DROP COLUMN charset",
        parsed(ch(RENAME_COLUMN, name="a", new_name="b", if_exists=True), ch(DROP_COLUMN, name="c", if_exists=True),
               ch(DROP_COLUMN, name="d"),
               ch(DROP_COLUMN, name="charset")),
        id="rename and drop columns",
    ),
    pytest.param(
        "ALTER TABLE t DROP PRIMARY KEY, ADD CONSTRAINT PRIMARY KEY (a, `b c`)",
        parsed(ch(PRIMARY_KEY), ch(PRIMARY_KEY, key=("a", "b c"))),
        id="replace the primary key",
    ),
    pytest.param(
        "ALTER TABLE t ADD CONSTRAINT pk PRIMARY KEY USING BTREE (a(10), b DESC), DROP INDEX `PRIMARY`",
        parsed(ch(PRIMARY_KEY, key=("a", "b")), ch(PRIMARY_KEY)),
        id="add key with USING and prefixes, drop index PRIMARY",
    ),
    pytest.param("ALTER TABLE t DROP KEY `primary`", parsed(ch(PRIMARY_KEY)), id="drop key primary"),
    pytest.param("ALTER TABLE t DROP CONSTRAINT `PRIMARY`, DROP CONSTRAINT IF EXISTS c1", parsed(ch(PRIMARY_KEY)),
                 id="drop constraint primary (MySQL 8)"),
    pytest.param(
        "ALTER TABLE t ADD UNIQUE KEY u (a), ADD FULLTEXT INDEX f (b), ADD SPATIAL INDEX s (g), ADD INDEX (a) USING "
        "BTREE, ADD KEY k (a DESC) COMMENT 'x', ADD INDEX IF NOT EXISTS i (a), ADD VECTOR INDEX (v)",
        parsed(),
        id="indexes",
    ),
    pytest.param(
        "ALTER TABLE t ADD CONSTRAINT fk FOREIGN KEY (a) REFERENCES u (id) ON DELETE CASCADE, DROP FOREIGN KEY "
        "fk2, DROP FOREIGN KEY IF EXISTS fk3, ADD CHECK (a > 0), ADD CONSTRAINT c CHECK (a < 5) NOT ENFORCED, "
        "DROP CHECK c1, DROP CONSTRAINT c2, ALTER CHECK c3 NOT ENFORCED",
        parsed(),
        id="foreign keys and checks",
    ),
    pytest.param(
        "ALTER TABLE t RENAME INDEX a TO b, RENAME KEY c TO d, ALTER INDEX i VISIBLE, ALTER INDEX j INVISIBLE, "
        "ALTER INDEX k IGNORED, ALTER INDEX l NOT IGNORED, DROP INDEX IF EXISTS m",
        parsed(),
        id="index renames and visibility",
    ),
    pytest.param(
        "ALTER TABLE t ENGINE=InnoDB, DEFAULT CHARSET=utf8mb4, CHARACTER SET = latin1, COLLATE utf8mb4_bin, COMMENT "
        "= 'x, y', AUTO_INCREMENT = 100, ROW_FORMAT=COMPRESSED, KEY_BLOCK_SIZE=8, STATS_PERSISTENT=0 "
        "STATS_SAMPLE_PAGES=10",
        parsed(),
        id="table options",
    ),
    pytest.param(
        "ALTER TABLE t ALGORITHM=INSTANT, LOCK=NONE, FORCE, ORDER BY a DESC, b, ENABLE KEYS, DISABLE KEYS, "
        "CHECKSUM=1, PAGE_CHECKSUM=1, TRANSACTIONAL=1, TABLESPACE ts, UNION=(a,b), INSERT_METHOD=LAST, "
        "DATA DIRECTORY='/x', ENCRYPTED=YES ENCRYPTION_KEY_ID=2, WITHOUT VALIDATION",
        parsed(),
        id="more options",
    ),
    pytest.param(
        "ALTER TABLE t ADD PARTITION (PARTITION p3 VALUES LESS THAN (2000)), COALESCE PARTITION 2, REORGANIZE "
        "PARTITION p0, p1 INTO (PARTITION p01 VALUES LESS THAN (100)), REBUILD PARTITION p0, p1, OPTIMIZE PARTITION "
        "ALL, ANALYZE PARTITION p0, CHECK PARTITION p0, REPAIR PARTITION p0, DISCARD PARTITION p0, p1 TABLESPACE",
        parsed(),
        id="partition maintenance",
    ),
    pytest.param("ALTER TABLE t REMOVE PARTITIONING", parsed(), id="remove partitioning"),
    pytest.param("ALTER TABLE t PARTITION BY HASH(id) PARTITIONS 4", parsed(), id="repartition"),
    pytest.param(
        "ALTER TABLE t ADD c INT PARTITION BY KEY(c) PARTITIONS 2",
        parsed(ch(ADD_COLUMN, column=col("c", "int"))),
        id="partitioning after the last action without a comma",
    ),
    pytest.param(
        "ALTER TABLE t TRUNCATE PARTITION p0, p1",
        parsed(ch(TRUNCATE_PARTITION, partitions=("p0", "p1"))),
        id="truncate partitions",
    ),
    pytest.param("ALTER TABLE t TRUNCATE PARTITION ALL", parsed(ch(TRUNCATE_PARTITION, partitions=("ALL",))),
                 id="truncate all partitions"),
    pytest.param(
        "ALTER TABLE t DROP PARTITION IF EXISTS p0, `p 1`, ADD COLUMN z INT",
        parsed(ch(DROP_PARTITION, partitions=("p0", "p 1")), ch(ADD_COLUMN, column=col("z", "int"))),
        id="drop partitions then add",
    ),
    pytest.param(
        "ALTER TABLE t EXCHANGE PARTITION p WITH TABLE db2.t2 WITHOUT VALIDATION",
        parsed(ch(EXCHANGE_PARTITION, partitions=("p",), to_schema="db2", to_table="t2"),
               ch(REPLACE_ROWS, "t2", "db2", reason=f"EXCHANGE PARTITION p of {DB}.t"),
               tables=((DB, "t"), ("db2", "t2"))),
        id="exchange partition",
    ),
    pytest.param("ALTER TABLE t IMPORT TABLESPACE", parsed(ch(REPLACE_ROWS)), id="import tablespace"),
    pytest.param("ALTER TABLE t IMPORT PARTITION p0, p1 TABLESPACE", parsed(ch(REPLACE_ROWS)),
                 id="import partition tablespace"),
    pytest.param("ALTER TABLE t DISCARD TABLESPACE", parsed(), id="discard tablespace"),
    pytest.param(
        "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        parsed(ch(CONVERT_CHARSET, charset="utf8mb4")),
        id="convert to character set",
    ),
    pytest.param("ALTER TABLE t CONVERT TO CHARSET utf8", parsed(ch(CONVERT_CHARSET, charset="utf8mb3")),
                 id="convert to charset utf8"),
    pytest.param("ALTER TABLE t CONVERT TO CHARACTER SET DEFAULT", parsed(ch(CONVERT_CHARSET)),
                 id="convert to the database default"),
    pytest.param("ALTER TABLE t DEFAULT CHARACTER SET utf8mb4", parsed(), id="default charset: future columns"),
    pytest.param(
        "ALTER TABLE t RENAME TO db2.u", parsed(ch(RENAME_TABLE, to_schema="db2", to_table="u"),
                                               tables=((DB, "t"), ("db2", "u"))),
        id="alter rename to",
    ),
    pytest.param(
        "ALTER TABLE db1.t RENAME AS u", parsed(ch(RENAME_TABLE, schema="db1", to_schema=DB, to_table="u"),
                                               tables=(("db1", "t"), (DB, "u"))),
        id="alter rename as, into the current database",
    ),
    pytest.param("ALTER TABLE t RENAME u", parsed(ch(RENAME_TABLE, to_schema=DB, to_table="u"),
                                                  tables=((DB, "t"), (DB, "u"))), id="alter rename"),
    pytest.param(
        "ALTER TABLE t RENAME TO u, ADD c INT",
        parsed(ch(ADD_COLUMN, column=col("c", "int")), ch(RENAME_TABLE, to_schema=DB, to_table="u"),
               tables=((DB, "t"), (DB, "u"))),
        id="the table is renamed after the other actions",
    ),
    pytest.param(
        "ALTER TABLE t ADD period INT, ADD system INT, ADD vector VECTOR(3)",
        parsed(ch(ADD_COLUMN, column=col("period", "int")), ch(ADD_COLUMN, column=col("system", "int")),
               ch(ADD_COLUMN, column=col("vector", "vector(3)"))),
        id="columns named like MariaDB's period and versioning words",
    ),
    pytest.param("ALTER TABLE t DROP period, DROP system", parsed(ch(DROP_COLUMN, name="period"),
                                                                  ch(DROP_COLUMN, name="system")),
                 id="dropping them"),
    pytest.param(
        "ALTER TABLE t ADD COLUMN c INT, ADD INDEX i (c), ALGORITHM=NOCOPY, LOCK=SHARED",
        parsed(ch(ADD_COLUMN, column=col("c", "int"))),
        id="add with index and algorithm",
    ),
    pytest.param("ALTER TABLE t", parsed(), id="alter without actions"),
    pytest.param(
        "ALTER TABLE t RENAME COLUMN a TO b, ADD COLUMN a INT",
        parsed(ch(RENAME_COLUMN, name="a", new_name="b"), ch(ADD_COLUMN, column=col("a", "int"))),
        id="rename then reuse the old name",
    ),
    pytest.param(
        "ALTER TABLE t DROP COLUMN b, RENAME COLUMN a TO b",
        parsed(ch(DROP_COLUMN, name="b"), ch(RENAME_COLUMN, name="a", new_name="b")),
        id="drop then rename into the name",
    ),
    pytest.param(
        "ALTER TABLE t CHANGE a a BIGINT, ALTER COLUMN a SET DEFAULT 1",
        parsed(ch(MODIFY_COLUMN, name="a", column=col("a", "bigint")),
               ch(SET_DEFAULT, name="a", column=col("a", "", default=lit("1")))),
        id="change in place then set its default",
    ),
    pytest.param("/*!40000 ALTER TABLE `t` DISABLE KEYS */;", parsed(), id="mysqldump's disable keys"),
]

COMMENTS_AND_QUOTES = [
    pytest.param("/* leading */ TRUNCATE t", parsed(ch(TRUNCATE_TABLE)), id="leading comment"),
    pytest.param("-- a line\nTRUNCATE t", parsed(ch(TRUNCATE_TABLE)), id="leading line comment"),
    pytest.param("# a line\n  TRUNCATE t ;  ", parsed(ch(TRUNCATE_TABLE)), id="hash comment, trailing semicolon"),
    pytest.param("TRUNCATE /* x */ t /* y */;;", parsed(ch(TRUNCATE_TABLE)), id="inner comments, two semicolons"),
    pytest.param(
        "ALTER TABLE t ADD c VARCHAR(20) DEFAULT '/* not a comment */'",
        parsed(ch(ADD_COLUMN, column=col("c", "varchar(20)", default=lit("/* not a comment */", True)))),
        id="comment-like string",
    ),
    pytest.param(
        "ALTER TABLE t ADD c VARCHAR(10) DEFAULT '-- x, #y', ADD d INT",
        parsed(ch(ADD_COLUMN, column=col("c", "varchar(10)", default=lit("-- x, #y", True))),
               ch(ADD_COLUMN, column=col("d", "int"))),
        id="line-comment-like string with a comma",
    ),
    pytest.param(
        "ALTER TABLE t ADD `c -- d` INT, ADD `e /* f */` INT, ADD `g, h` INT",
        parsed(ch(ADD_COLUMN, column=col("c -- d", "int")), ch(ADD_COLUMN, column=col("e /* f */", "int")),
               ch(ADD_COLUMN, column=col("g, h", "int"))),
        id="comment-like names",
    ),
    pytest.param(
        "ALTER TABLE t ADD c VARCHAR(10) DEFAULT 'a\\'b', ADD d VARCHAR(5) DEFAULT \"x\"\"y\"",
        parsed(ch(ADD_COLUMN, column=col("c", "varchar(10)", default=lit("a'b", True))),
               ch(ADD_COLUMN, column=col("d", "varchar(5)", default=lit('x"y', True)))),
        id="escaped quotes",
    ),
    pytest.param("ALTER TABLE t ADD c INT -- trailing comment", parsed(ch(ADD_COLUMN, column=col("c", "int"))),
                 id="trailing line comment"),
    pytest.param(
        "ALTER TABLE t ADD c INT # mysql comment\n, ADD d INT",
        parsed(ch(ADD_COLUMN, column=col("c", "int")), ch(ADD_COLUMN, column=col("d", "int"))),
        id="hash comment between actions",
    ),
    pytest.param(
        "ALTER TABLE `a``b` ADD `c``d` INT AFTER `e``f`",
        parsed(ch(ADD_COLUMN, "a`b", column=col("c`d", "int", position=("after", "e`f"))), tables=((DB, "a`b"),)),
        id="doubled backticks",
    ),
    pytest.param(
        "ALTER TABLE `日本`.`tëst x` ADD `ü 1` INT, ADD ß INT",
        parsed(ch(ADD_COLUMN, "tëst x", "日本", column=col("ü 1", "int")),
               ch(ADD_COLUMN, "tëst x", "日本", column=col("ß", "int")), tables=(("日本", "tëst x"),)),
        id="unicode names",
    ),
    pytest.param(
        "alter table T add column MixedCase int after `Other`",
        parsed(ch(ADD_COLUMN, "T", column=col("MixedCase", "int", position=("after", "Other"))), tables=((DB, "T"),)),
        id="names keep their case",
    ),
]


@pytest.mark.parametrize(("query", "expected"), GH_OST + PT_OSC + TABLE_STATEMENTS + ALTER_STATEMENTS
                         + COMMENTS_AND_QUOTES)
def test_statement(query: str, expected: ParsedStatement) -> None:
    assert parse(query, server_version=MARIADB) == expected


def test_unqualified_names_without_a_current_database() -> None:
    assert parse("TRUNCATE t", "") == parsed(ch(TRUNCATE_TABLE, schema=""), tables=(("", "t"),))
    assert parse("ALTER DATABASE CHARACTER SET latin1", "") == ParsedStatement()


# ------------------------------------------------------------------------------------ not understood

NOT_UNDERSTOOD = [
    ("ALTER TABLE t FOO BAR", T, "unknown action 'FOO BAR'"),
    ("ALTER TABLE t ADD c INT, ADD SYSTEM VERSIONING", T, "unknown action 'ADD SYSTEM VERSIONING'"),
    ("ALTER TABLE t DROP SYSTEM VERSIONING", T, "unknown action"),
    ("ALTER TABLE t ADD PERIOD FOR SYSTEM_TIME(s, e)", T, "unknown action"),
    ("ALTER TABLE t CONVERT PARTITION p TO TABLE t2", T, "moves rows between tables"),
    ("ALTER TABLE t CONVERT TABLE t2 TO PARTITION p VALUES LESS THAN (5)", T, "moves rows between tables"),
    ("ALTER TABLE t ADD COLUMN c NOSUCHTYPE", T, "unknown column type"),
    ("ALTER TABLE t ADD COLUMN c INT DEFAULT NEXT VALUE FOR s", T, "cannot read the column definition"),
    ("ALTER TABLE t ADD COLUMN c VARCHAR", T, "needs a length"),
    ("ALTER TABLE t ADD COLUMN c INT(3,4)", T, "parameters"),
    ("ALTER TABLE t ADD COLUMN c DATE(3)", T, "takes no parameters"),
    ("ALTER TABLE t ADD COLUMN c INT CHARACTER SET latin1", T, ""),
    ("ALTER TABLE t ADD c INT,", T, "a comma after the last action"),
    ("ALTER TABLE t ,ADD c INT", T, "an empty action"),
    ("ALTER TABLE t ADD COLUMN c TEXT(100)", T, "TEXT(100)"),
    ("ALTER TABLE t RENAME TO u, RENAME TO v", ((DB, "t"), (DB, "u"), (DB, "v")), "more than once"),
    ("ALTER TABLE t RENAME COLUMN a TO b, RENAME COLUMN b TO a", T, "separate statements"),
    ("ALTER TABLE t CHANGE a b INT, CHANGE b a INT", T, "separate statements"),
    ("ALTER TABLE t RENAME COLUMN a TO b, ALTER COLUMN a SET DEFAULT 1", T, "column 'a'"),
    ("ALTER TABLE t RENAME COLUMN A TO b, DROP COLUMN a", T, "column 'a'"),
    ("ALTER TABLE t ADD c INT; DROP TABLE t", T, ""),
    ("ALTER TABLE t ADD c VARCHAR(5) DEFAULT 'x", T, "unterminated"),
    ("ALTER TABLE `t ADD c INT", (), "unterminated"),
    ("ALTER TABLE", (), "expected a table name"),
    ("ALTER TABLE t EXCHANGE PARTITION p WITH t2", T, "WITH TABLE"),
    ("CREATE TABLE t (a INT) WITH SYSTEM VERSIONING", T, "system-versioned"),
    ("CREATE TABLE t (a INT WITH SYSTEM VERSIONING)", T, "system-versioned"),
    ("CREATE TABLE t (a INT PRIMARY KEY, PRIMARY KEY (a))", T, "more than one primary key"),
    ("CREATE TABLE t (a INT PRIMARY KEY, b INT KEY)", T, "more than one primary key"),
    ("CREATE TABLE t (a INT, 5)", T, "cannot read the item"),
    ("CREATE TABLE t (a INT,)", T, "empty item"),
    ("CREATE TABLE t (a INT, PRIMARY KEY ((a + 1)))", T, "key column"),
    ("CREATE TABLE t ENGINE=InnoDB", T, "expected a column list"),
    ("CREATE TABLE t (a INT", T, "unbalanced"),
    ("CREATE TABLE t (LIKE s) x", ((DB, "t"), (DB, "s")), "unexpected"),
    ("RENAME TABLE a b", ((DB, "a"),), "expected TO"),
    ("RENAME TABLE a TO", ((DB, "a"),), "expected a table name"),
    ("TRUNCATE TABLE a, b", ((DB, "a"),), "unexpected"),
    ("TRUNCATE", (), "expected a table name"),
    ("DROP TABLE a b", ((DB, "a"),), "unexpected"),
    ("DROP DATABASE", (), "expected a database name"),
    ("IMPORT TABLE FROM '/tmp/t.sdi'", (), "IMPORT TABLE"),
]


@pytest.mark.parametrize(("query", "tables", "message"), NOT_UNDERSTOOD)
def test_table_ddl_that_is_not_understood_is_an_error_naming_what_the_tokens_still_tell(
    query: str, tables: tuple[tuple[str, str], ...], message: str
) -> None:
    result = parse(query)
    assert result.error is not None and message in result.error, result.error
    assert not result.understood
    assert result.changes == ()
    assert result.tables == tables


NOTHING = [
    "SELECT 1", "BEGIN", "COMMIT", "ROLLBACK", "XA START 'x'", "XA END 'x'",
    "XA PREPARE 'x'", "XA COMMIT 'x'", "SAVEPOINT s", "RELEASE SAVEPOINT s", "SET @a = 1", "SET NAMES utf8mb4",
    "/*!40101 SET NAMES utf8 */", "FLUSH TABLES", "FLUSH TABLES t FOR EXPORT", "ANALYZE TABLE t", "OPTIMIZE TABLE t",
    "REPAIR TABLE t", "CHECK TABLE t", "GRANT SELECT ON *.* TO x", "REVOKE ALL ON db.* FROM x", "CREATE USER u",
    "DROP USER u", "ALTER USER u IDENTIFIED BY 'x'", "RENAME USER a TO b", "CREATE ROLE r", "CALL p()", "DO 1",
    "USE db", "CREATE VIEW v AS SELECT * FROM t", "CREATE OR REPLACE VIEW v AS SELECT 1",
    "CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` AS select 1 AS `1`",
    "ALTER VIEW v AS SELECT 2", "DROP VIEW IF EXISTS v", "CREATE PROCEDURE p() BEGIN CREATE TABLE x (a INT); END",
    "CREATE DEFINER=`root`@`%` PROCEDURE p() BEGIN ALTER TABLE t ADD c INT; END", "DROP PROCEDURE p",
    "CREATE FUNCTION f() RETURNS INT RETURN 1", "DROP FUNCTION f", "CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO "
    "TRUNCATE t", "ALTER EVENT e DISABLE", "DROP EVENT e", "CREATE SEQUENCE s", "DROP SEQUENCE s",
    "ALTER SEQUENCE s RESTART", "DROP TRIGGER tr", "CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (USER 'x')",
    "INSTALL PLUGIN x SONAME 'y'", "", "   ", ";", "/* only a comment */", "-- only\n", "(SELECT 1)",
    "DROP TEMPORARY TABLE t", "CREATE TEMPORARY TABLE t (a INT)", "SHOW TABLES", "KILL 5",
    "/*!50001 CREATE ALGORITHM=UNDEFINED */ /*!50013 DEFINER=`root`@`localhost` SQL SECURITY DEFINER */ "
    "/*!50001 VIEW `v` AS select 1 AS `1` */",  # mysqldump's view
]


@pytest.mark.parametrize("query", NOTHING)
def test_statements_that_change_no_table_give_nothing(query: str) -> None:
    assert parse(query) == ParsedStatement()


@pytest.mark.parametrize(("query", "tables"), [
    ("INSERT INTO t VALUES (1)", T), ("insert ignore into db2.t2 (a) select a from u", (("db2", "t2"),)),
    ("REPLACE t VALUES (1)", T), ("UPDATE t SET a = (SELECT max(b) FROM u)", T),
    ("UPDATE LOW_PRIORITY t JOIN db.u AS x ON t.id = x.id SET t.a = x.a", ((DB, "t"), (DB, "u"))),
    ("DELETE FROM t", T), ("DELETE QUICK IGNORE FROM `my t` ORDER BY id LIMIT 3", ((DB, "my t"),)),
    ("DELETE t.* FROM t WHERE x IN (SELECT a FROM u)", T),
    ("DELETE FROM t, u USING t INNER JOIN u INNER JOIN v", ((DB, "t"), (DB, "u"), (DB, "v"))),
    ("LOAD DATA LOCAL INFILE '/x' REPLACE INTO TABLE t FIELDS TERMINATED BY ','", T),
    ("/*!40000 DELETE FROM t */", T),
])
def test_row_changes_logged_as_statements_are_reported_with_the_tables_they_write(query: str, tables: Any) -> None:
    """binlog_format STATEMENT or MIXED in a session, or a MEMORY table emptied by a DELETE at a restart: no
    row event, so the statement is refused like DDL that cannot be applied exactly (dml.py)."""
    got = parse(query)
    assert got.tables == tables and got.error is not None and "binlog_format" in got.error


def test_a_huge_dml_statement_is_reported_by_its_head() -> None:
    query = "INSERT INTO t VALUES " + ",".join(["(1, 'x, y; /* z */')"] * 400_000) + ", ('unterminated"  # ~8 MB
    assert parse(query).tables == T


# --------------------------------------------------------------------------------------- column types

# (definition, mysql_type, charset): the vocabulary of `normalise_column_type` for what information_schema
# shows after the statement (the integration test checks these against MariaDB).
TYPES = [
    ("TINYINT", "tinyint", None), ("TINYINT(1)", "tinyint", None), ("TINYINT UNSIGNED", "tinyint unsigned", None),
    ("TINYINT(3) UNSIGNED ZEROFILL", "tinyint unsigned", None), ("SMALLINT(6)", "smallint", None),
    ("MEDIUMINT UNSIGNED", "mediumint unsigned", None), ("MIDDLEINT", "mediumint", None), ("INT", "int", None),
    ("INT(11)", "int", None), ("INTEGER", "int", None), ("INTEGER(5) SIGNED", "int", None),
    ("INT ZEROFILL", "int unsigned", None), ("BIGINT(20) UNSIGNED", "bigint unsigned", None),
    ("INT1", "tinyint", None), ("INT2", "smallint", None), ("INT3", "mediumint", None), ("INT4", "int", None),
    ("INT8", "bigint", None), ("BOOL", "tinyint", None), ("BOOLEAN", "tinyint", None),
    ("SERIAL", "bigint unsigned", None),
    ("DECIMAL", "decimal(10,0)", None), ("DECIMAL(5)", "decimal(5,0)", None), ("DECIMAL(10,2)", "decimal(10,2)", None),
    ("DECIMAL(10,2) UNSIGNED", "decimal(10,2) unsigned", None), ("DECIMAL(65,30)", "decimal(65,30)", None),
    ("DECIMAL(5,2) ZEROFILL", "decimal(5,2) unsigned", None), ("NUMERIC", "decimal(10,0)", None),
    ("NUMERIC(7,3)", "decimal(7,3)", None), ("DEC(4)", "decimal(4,0)", None), ("FIXED(4,1)", "decimal(4,1)", None),
    ("FLOAT", "float", None), ("FLOAT(10)", "float", None), ("FLOAT(24)", "float", None), ("FLOAT(25)", "double", None),
    ("FLOAT(53)", "double", None), ("FLOAT(7,4)", "float", None), ("FLOAT(7,4) UNSIGNED", "float unsigned", None),
    ("FLOAT ZEROFILL", "float unsigned", None), ("DOUBLE", "double", None), ("DOUBLE(10,2)", "double", None),
    ("DOUBLE PRECISION", "double", None), ("DOUBLE PRECISION(8,2) UNSIGNED", "double unsigned", None),
    ("REAL", "double", None), ("REAL(10,2)", "double", None), ("FLOAT4", "float", None), ("FLOAT8", "double", None),
    ("BIT", "bit(1)", None), ("BIT(5)", "bit(5)", None), ("BIT(64)", "bit(64)", None),
    ("CHAR", "char(1)", None), ("CHAR(10)", "char(10)", None), ("CHARACTER", "char(1)", None),
    ("NCHAR(3)", "char(3)", "utf8mb3"), ("NATIONAL CHAR(3)", "char(3)", "utf8mb3"),
    ("NATIONAL CHARACTER", "char(1)", "utf8mb3"), ("CHAR(3) BINARY", "char(3)", None),
    ("CHAR(3) BYTE", "binary(3)", "binary"), ("CHAR(3) ASCII", "char(3)", "latin1"),
    ("CHAR(3) UNICODE", "char(3)", "ucs2"), ("CHAR(3) CHARACTER SET latin1", "char(3)", "latin1"),
    ("CHAR(3) CHARSET binary", "binary(3)", "binary"), ("CHAR(3) COLLATE latin1_bin", "char(3)", "latin1"),
    ("CHAR(3) CHARACTER SET latin1 BINARY", "char(3)", "latin1"),
    ("VARCHAR(20)", "varchar(20)", None), ("VARCHAR(20) CHARSET utf8", "varchar(20)", "utf8mb3"),
    ("VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", "varchar(20)", "utf8mb4"),
    ("VARCHAR(20) COLLATE utf8_bin", "varchar(20)", "utf8mb3"), ("VARCHAR(3) CHARACTER SET 'latin2'", "varchar(3)",
                                                                  "latin2"),
    ("VARCHAR(3) BINARY", "varchar(3)", None), ("VARCHAR(3) BYTE", "varbinary(3)", "binary"),
    ("VARCHAR(3) CHARACTER SET binary", "varbinary(3)", "binary"), ("VARCHAR(3) COLLATE binary", "varbinary(3)",
                                                                    "binary"),
    ("NVARCHAR(3)", "varchar(3)", "utf8mb3"), ("NATIONAL VARCHAR(3)", "varchar(3)", "utf8mb3"),
    ("NCHAR VARCHAR(3)", "varchar(3)", "utf8mb3"), ("NATIONAL CHAR VARYING(3)", "varchar(3)", "utf8mb3"),
    ("NCHAR VARYING(3)", "varchar(3)", "utf8mb3"), ("CHARACTER VARYING(4)", "varchar(4)", None),
    ("CHAR VARYING(4)", "varchar(4)", None), ("VARCHARACTER(3)", "varchar(3)", None),
    ("VARCHAR(3) COLLATE utf8mb4_uca1400_ai_ci", "varchar(3)", "utf8mb4"),
    ("VARCHAR(3) COLLATE uca1400_ai_ci", "varchar(3)", None),  # MariaDB 11: a collation without its charset
    ("VARCHAR(5) NOT NULL COLLATE latin1_bin", "varchar(5)", "latin1"),
    ("TINYTEXT", "tinytext", None), ("TEXT", "text", None), ("MEDIUMTEXT", "mediumtext", None),
    ("LONGTEXT", "longtext", None), ("TEXT(50)", "tinytext", None), ("TEXT(63)", "tinytext", None),
    ("TEXT(100) CHARACTER SET latin1", "tinytext", "latin1"), ("TEXT(256) CHARACTER SET latin1", "text", "latin1"),
    ("TEXT(64) CHARACTER SET utf8", "tinytext", "utf8mb3"), ("TEXT(70000)", "mediumtext", None),
    ("TEXT(16777216)", "longtext", None), ("LONG", "mediumtext", None), ("LONG VARCHAR", "mediumtext", None),
    ("LONG CHARACTER SET latin1", "mediumtext", "latin1"), ("LONG BINARY", "mediumtext", None),
    ("TEXT CHARSET binary", "blob", "binary"), ("LONGTEXT CHARACTER SET binary", "longblob", "binary"),
    ("BINARY", "binary(1)", "binary"), ("BINARY(16)", "binary(16)", "binary"),
    ("VARBINARY(20)", "varbinary(20)", "binary"), ("TINYBLOB", "tinyblob", "binary"), ("BLOB", "blob", "binary"),
    ("BLOB(255)", "tinyblob", "binary"), ("BLOB(256)", "blob", "binary"), ("BLOB(70000)", "mediumblob", "binary"),
    ("MEDIUMBLOB", "mediumblob", "binary"), ("LONGBLOB", "longblob", "binary"),
    ("LONG VARBINARY", "mediumblob", "binary"),
    ("ENUM('a','b')", "enum('a','b')", None), ("ENUM('A','b''c','d\\\\e')", "enum('A','b''c','d\\\\e')", None),
    ("ENUM('x ', 'y')", "enum('x','y')", None), ("ENUM(' lead','Upper','')", "enum(' lead','Upper','')", None),
    ("ENUM('a\\nb','t\\tx','q\"x','z\\Z','c\\rr','n\\0n')", "enum('a\\nb','t\tx','q\"x','z\x1a','c\\rr','n\\0n')",
     None),
    ("ENUM('é','日本')", "enum('é','日本')", None), ("ENUM('a,b','c)d','(e')", "enum('a,b','c)d','(e')", None),
    ("ENUM(\"dq\", 'it\\'s')", "enum('dq','it''s')", None), ("ENUM('a\\%b','a\\_b')", "enum('a\\\\%b','a\\\\_b')",
                                                               None),
    ("ENUM('x') CHARACTER SET latin1", "enum('x')", "latin1"), ("ENUM('x') CHARACTER SET binary", "enum('x')",
                                                               "binary"),
    ("SET('x','y')", "set('x','y')", None), ("SET('a','B') COLLATE utf8mb4_bin", "set('a','B')", "utf8mb4"),
    ("SET('a  ','b')", "set('a','b')", None),
    ("DATE", "date", None), ("TIME", "time", None), ("TIME(0)", "time", None), ("TIME(3)", "time(3)", None),
    ("DATETIME", "datetime", None), ("DATETIME(0)", "datetime", None), ("DATETIME(6)", "datetime(6)", None),
    ("TIMESTAMP", "timestamp", None), ("TIMESTAMP(3)", "timestamp(3)", None), ("YEAR", "year", None),
    ("YEAR(4)", "year", None), ("YEAR(2)", "year", None),
    ("JSON", "json", None), ("UUID", "uuid", None), ("INET4", "inet4", None), ("INET6", "inet6", None),
    ("GEOMETRY", "geometry", None), ("POINT", "point", None), ("GEOMETRYCOLLECTION", "geometrycollection", None),
    ("VECTOR(3)", "vector(3)", None),
    ("BLOB COMPRESSED", "blob /*m!100301 compressed*/", "binary"),
    ("VARCHAR(100) COMPRESSED=zlib", "varchar(100) /*m!100301 compressed*/", None),
]


@pytest.mark.parametrize(("definition", "mysql_type", "charset"), TYPES)
def test_column_type(definition: str, mysql_type: str, charset: str | None) -> None:
    for query, spec in _specs(definition):
        assert (spec.mysql_type, spec.charset) == (mysql_type, charset), query


def _specs(definition: str) -> list[tuple[str, ColumnSpec]]:
    """The ColumnSpec of a definition as CREATE TABLE, ADD COLUMN, MODIFY and CHANGE read it."""
    out = []
    for query in (f"CREATE TABLE t (c {definition})", f"ALTER TABLE t ADD COLUMN c {definition}",
                  f"ALTER TABLE t MODIFY c {definition}", f"ALTER TABLE t CHANGE COLUMN b c {definition}"):
        result = parse(query)
        assert result.error is None, f"{query}: {result.error}"
        change, *rereads = result.changes  # a redefinition that may convert values re-reads (test_ddl_conversions)
        assert [r.kind for r in rereads] in ([], [REPLACE_ROWS]), query
        spec = change.columns[0] if change.kind == CREATE_TABLE else change.column
        assert spec is not None and spec.name == "c"
        out.append((query, spec))
    return out


@pytest.mark.parametrize(("definition", "mysql_type", "charset"), TYPES)
def test_the_type_map_reads_every_parsed_type(definition: str, mysql_type: str, charset: str | None) -> None:
    # A text column whose statement gives no charset has the table's (the reader supplies it: utf8mb4 here).
    col = SourceColumn("c", mysql_type, True, column_attrs(mysql_type, charset or "utf8mb4"))
    unsupported = ("uuid", "inet4", "inet6", "geometry", "point", "geometrycollection", "vector")
    if mysql_type.split("(", maxsplit=1)[0] in unsupported or "compressed" in mysql_type:
        with pytest.raises(UnsupportedType):
            types.resolve(col)
    else:
        types.resolve(col)


# (definition, nullable, auto_increment, generated)
NULLABILITY = [
    ("INT", True, False, None), ("INT NULL", True, False, None), ("INT NOT NULL", False, False, None),
    ("INT NULL NOT NULL", False, False, None), ("INT NOT NULL NULL", True, False, None),
    ("INT AUTO_INCREMENT UNIQUE", False, True, None), ("SERIAL", False, True, None),
    ("INT SERIAL DEFAULT VALUE", False, True, None), ("INT UNIQUE NOT NULL", False, False, None),
    ("INT GENERATED ALWAYS AS (a + 1) VIRTUAL", True, False, "a + 1"),
    ("INT AS (a * 2) PERSISTENT", True, False, "a * 2"), ("INT AS (a) STORED NOT NULL", False, False, "a"),
    ("VARCHAR(10) AS (concat(a,'x'))", True, False, "CONCAT(a, 'x')"), ("INT AS (t.a+1)", True, False, "t.a + 1"),
    ("INT INVISIBLE", True, False, None), ("INT VISIBLE NOT NULL", False, False, None),
    ("INT COMMENT 'a, (b)' NOT NULL", False, False, None), ("INT CHECK (c > 0)", True, False, None),
    ("INT CONSTRAINT c_pos CHECK (c > 0)", True, False, None), ("INT REFERENCES u (id) ON DELETE CASCADE", True,
                                                                 False, None),
    ("INT COLUMN_FORMAT FIXED STORAGE DISK", True, False, None), ("INT WITHOUT SYSTEM VERSIONING", True, False, None),
    ("POINT NOT NULL SRID 4326", False, False, None), ("INT ENGINE_ATTRIBUTE = '{}'", True, False, None),
    ("TIMESTAMP NULL ON UPDATE CURRENT_TIMESTAMP", True, False, None),
    ("INT /*!50000 NOT NULL */", False, False, None),
]


@pytest.mark.parametrize(("definition", "nullable", "auto_increment", "generated"), NULLABILITY)
def test_column_attributes(definition: str, nullable: bool, auto_increment: bool, generated: str | None) -> None:
    for query, spec in _specs(definition):
        assert (spec.nullable, spec.auto_increment, spec.generated) == (nullable, auto_increment, generated), query


def test_primary_key_columns_are_not_null() -> None:
    (change,) = parse("CREATE TABLE t (a INT NULL KEY, b INT)").changes
    assert [(c.name, c.nullable) for c in change.columns] == [("a", False), ("b", True)] and change.key == ("a",)
    (change,) = parse("CREATE TABLE t (a INT, b INT NULL, PRIMARY KEY (B))").changes  # names are case-insensitive
    assert [(c.name, c.nullable) for c in change.columns] == [("a", True), ("b", False)] and change.key == ("B",)
    (change,) = parse("ALTER TABLE t ADD c INT PRIMARY KEY").changes
    assert change.column is not None and not change.column.nullable


DEFAULTS = [
    ("INT", NONE), ("INT DEFAULT NULL", NULL), ("INT DEFAULT 5", lit("5")), ("INT DEFAULT -1", lit("-1")),
    ("INT DEFAULT - 1", lit("-1")), ("DECIMAL(5,2) DEFAULT +2.5", lit("2.5")), ("DECIMAL(5,2) DEFAULT 1.50",
                                                                                lit("1.50")),
    ("DOUBLE DEFAULT 1e3", lit("1e3")), ("DOUBLE DEFAULT .5", lit("0.5")), ("DOUBLE DEFAULT -1.5e-3", lit("-1.5e-3")),
    ("BIGINT UNSIGNED DEFAULT 18446744073709551615", lit("18446744073709551615")),
    ("TINYINT DEFAULT TRUE", lit("1")), ("TINYINT DEFAULT false", lit("0")),
    ("BIT(8) DEFAULT b'101'", lit("5")), ("BIT(8) DEFAULT 0b11", lit("3")), ("INT UNSIGNED DEFAULT 0x1F", lit("31")),
    ("INT DEFAULT X'0A'", lit("10")), ("INT DEFAULT x''", lit("0")),
    ("VARBINARY(4) DEFAULT x'1F'", expr("x'1F'")), ("VARCHAR(4) DEFAULT b'1000001'", expr("b'1000001'")),
    ("INT DEFAULT '5'", lit("5", True)), ("VARCHAR(10) DEFAULT ''", lit("", True)),
    ("VARCHAR(10) DEFAULT 'it''s'", lit("it's", True)), ("VARCHAR(10) DEFAULT 'a\\nb\\tc\\\\d\\%e\\_f\\zg'",
                                                         lit("a\nb\tc\\d\\%e\\_fzg", True)),
    ("VARCHAR(10) DEFAULT \"dq\"", lit("dq", True)), ("VARCHAR(10) DEFAULT _utf8mb4'x'", lit("x", True)),
    ("VARCHAR(10) DEFAULT _latin1 'y'", lit("y", True)), ("VARCHAR(10) DEFAULT N'z'", lit("z", True)),
    ("VARCHAR(10) DEFAULT 'a' 'b'", lit("ab", True)), ("VARCHAR(10) DEFAULT 'é日本'", lit("é日本", True)),
    ("DATE DEFAULT '2024-01-31'", lit("2024-01-31", True)),
    ("DATETIME DEFAULT CURRENT_TIMESTAMP", expr("CURRENT_TIMESTAMP()")),
    ("DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6)", expr("CURRENT_TIMESTAMP(6)")),
    ("DATETIME DEFAULT now()", expr("NOW()")), ("CHAR(36) DEFAULT (uuid())", expr("(UUID())")),
    ("CHAR(36) DEFAULT uuid()", expr("UUID()")), ("INT DEFAULT (1+2)", expr("(1 + 2)")),
    ("INT DEFAULT (5)", expr("(5)")), ("INT DEFAULT (-5)", expr("(-5)")),
    ("VARCHAR(10) DEFAULT 'x' NOT NULL", lit("x", True)),
]


@pytest.mark.parametrize(("definition", "default"), DEFAULTS)
def test_column_default(definition: str, default: DefaultSpec) -> None:
    for query, spec in _specs(definition):
        assert spec.default == default, query


# ------------------------------------------------------------------------------------- versioned comments

EXECUTABLE = [
    ("ALTER TABLE t ADD c INT", None, "ALTER TABLE t ADD c INT"),
    ("  ALTER /* gh-ost */ TABLE t;; ", None, "ALTER   TABLE t"),
    ("/*!40000 ALTER TABLE t DISABLE KEYS */;", 40000, "ALTER TABLE t DISABLE KEYS"),
    ("/*!40000 ALTER TABLE t DISABLE KEYS */", 39999, ""),
    ("SELECT 1 /*!50100 , 2 */", MARIADB, "SELECT 1   , 2"),
    ("SELECT 1 /*!80023 , 2 */", MARIADB, "SELECT 1"),  # MariaDB skips MySQL 5.7+ versions
    ("SELECT 1 /*!80023 , 2 */", MYSQL, "SELECT 1   , 2"),
    ("SELECT 1 /*!100000 , 2 */", MARIADB, "SELECT 1   , 2"),  # six digits
    ("SELECT 1 /*!100000 , 2 */", MYSQL, "SELECT 1"),
    ("SELECT 1 /*M!100301 , 2 */", MARIADB, "SELECT 1   , 2"),
    ("SELECT 1 /*M!100301 , 2 */", MYSQL, "SELECT 1"),  # MySQL: an ordinary comment
    ("SELECT 1 /*M!110000 , 2 */", MARIADB, "SELECT 1"),
    ("SELECT 1 /*! , 2 */", MYSQL, "SELECT 1   , 2"),  # no version: always
    ("SELECT 1 /*!123 , 2 */", MYSQL, "SELECT 1  123 , 2"),  # too few digits: not a version
    ("SELECT 1 /*!99999 , /* inner */ 2 */, 3", MARIADB, "SELECT 1  , 3"),  # one nested comment in a skipped one
    ("SELECT 1 /*!50000 , /* inner */ 2 */, 3", MARIADB, "SELECT 1   ,   2  , 3"),
    ("SELECT '/*!50000 x */', `-- y`, \"# z\"", None, "SELECT '/*!50000 x */', `-- y`, \"# z\""),
    ("SELECT 'it''s /* a */', 'a\\' /* b */'", None, "SELECT 'it''s /* a */', 'a\\' /* b */'"),
    ("SELECT `a``b /*`", None, "SELECT `a``b /*`"),
    ("SELECT 1 -- x\n, 2 # y\n, 3--4", None, "SELECT 1  , 2  , 3- -4"),
    ("SELECT 1 --\tx", None, "SELECT 1"),
    ("SELECT 1 /* unterminated", None, "SELECT 1"),
]


@pytest.mark.parametrize(("query", "server_version", "text"), EXECUTABLE)
def test_executable_sql(query: str, server_version: int | None, text: str) -> None:
    assert executable_sql(query, server_version) == text


@pytest.mark.parametrize(
    ("comment", "executed_by"),
    [
        ("/*!50000 NOT NULL */", {None, MARIADB, MARIADB_10_4, MYSQL}),
        ("/*!50700 NOT NULL */", {None, MYSQL}),
        ("/*!80023 NOT NULL */", {None, MYSQL}),
        ("/*!99999 NOT NULL */", {None}),
        ("/*!100000 NOT NULL */", {None, MARIADB, MARIADB_10_4}),
        ("/*M!100500 NOT NULL */", {None, MARIADB}),
        ("/*M!110000 NOT NULL */", {None}),
        ("/*M! NOT NULL */", {None, MARIADB, MARIADB_10_4}),
        ("/*! NOT NULL */", {None, MARIADB, MARIADB_10_4, MYSQL}),
        ("/* NOT NULL */", set()),
    ],
)
def test_versioned_comments_in_a_statement(comment: str, executed_by: set[int | None]) -> None:
    for version in (None, MARIADB, MARIADB_10_4, MYSQL):
        (change,) = parse(f"ALTER TABLE t ADD c INT {comment}", server_version=version).changes
        assert change.column is not None
        assert change.column.nullable is (version not in executed_by), (comment, version)


def test_a_versioned_comment_may_hold_the_whole_statement() -> None:
    assert parse("/*!50000 TRUNCATE TABLE t */", server_version=MARIADB) == parsed(ch(TRUNCATE_TABLE))
    assert parse("/*!99999 TRUNCATE TABLE t */", server_version=MARIADB) == ParsedStatement()
    assert parse("CREATE TABLE t (a INT) /*!50100 PARTITION BY HASH (a) PARTITIONS 2 */") == parsed(
        ch(CREATE_TABLE, columns=(col("a", "int"),))
    )


# ------------------------------------------------------------------------------------------ hostile names

HOSTILE = (*HOSTILE_TABLES, "a`b", "``", " lead and trail ", "*/ DROP TABLE x; /*", "' OR 1=1 --", "x\ny",
           "日本語", "a.b", "-- c", "# d", "\\")


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names(name: str) -> None:
    q = quote_mysql
    db = f"x_%\\ `'\" ../日本 -{name[:8]}"
    assert parse(f"TRUNCATE TABLE {q(db)}.{q(name)}") == parsed(ch(TRUNCATE_TABLE, name, db), tables=((db, name),))
    assert parse(f"DROP TABLE IF EXISTS {q(name)}, {q(db)}.{q(name)}") == parsed(
        ch(DROP_TABLE, name), ch(DROP_TABLE, name, db), tables=((DB, name), (db, name))
    )
    assert parse(f"RENAME TABLE {q(name)} TO {q(db)}.{q(name)}") == parsed(
        ch(RENAME_TABLE, name, to_schema=db, to_table=name), tables=((DB, name), (db, name))
    )
    assert parse(f"ALTER TABLE {q(name)} ADD COLUMN {q(name)} INT AFTER {q(name)}, DROP COLUMN {q(name + '2')}, "
                 f"RENAME COLUMN {q(name + '3')} TO {q(name + '4')}") == parsed(
        ch(ADD_COLUMN, name, column=col(name, "int", position=("after", name))),
        ch(DROP_COLUMN, name, name=name + "2"),
        ch(RENAME_COLUMN, name, name=name + "3", new_name=name + "4"),
        tables=((DB, name),),
    )
    assert parse(f"CREATE TABLE {q(name)} ({q(name)} INT PRIMARY KEY) COMMENT {q(name)}") == parsed(
        ch(CREATE_TABLE, name, key=(name,), columns=(col(name, "int", nullable=False),)), tables=((DB, name),)
    )
    assert parse(f"DROP DATABASE {q(db)}") == parsed(ch(DROP_DATABASE, "", db), tables=(), schemas=(db,))


# --------------------------------------------------------------------------------------------- properties

NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=20)


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''").replace("\x00", "\\0") + "'"


@settings(max_examples=300, deadline=None)
@given(NAMES, NAMES, NAMES)
def test_any_quoted_name_survives(schema: str, table: str, column: str) -> None:
    q = quote_mysql
    result = parse(f"ALTER TABLE {q(schema)}.{q(table)} ADD COLUMN {q(column)} INT NOT NULL AFTER {q(column)}")
    assert result == parsed(
        ch(ADD_COLUMN, table, schema, column=col(column, "int", nullable=False, position=("after", column))),
        tables=((schema, table),),
    )


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_any_string_default_survives(value: str) -> None:
    (change,) = parse(f"ALTER TABLE t ADD c VARCHAR(100) DEFAULT {_sql_string(value)}, ADD d INT").changes[:1]
    assert change.column is not None and change.column.default == lit(value, True)


CORPUS = [p.values[0] for p in GH_OST + PT_OSC + TABLE_STATEMENTS + ALTER_STATEMENTS + COMMENTS_AND_QUOTES] + [
    q for q, _, _ in NOT_UNDERSTOOD
]


def _well_formed(result: ParsedStatement) -> None:
    assert isinstance(result, ParsedStatement)
    assert [c.step for c in result.changes] == list(range(len(result.changes)))
    assert all(c.kind in KINDS for c in result.changes)
    if result.error is not None:
        assert result.changes == ()


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200))
def test_never_raises_on_any_text(text: str) -> None:
    _well_formed(parse(text))


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(("ALTER TABLE t ", "CREATE TABLE t (", "DROP TABLE ", "RENAME TABLE a TO ", "TRUNCATE ",
                        "CREATE TABLE t (a INT) ", "ALTER TABLE t ADD c ")),
       st.lists(st.sampled_from([*"abc ,()'\"`;-#/*!0123456789=.\\\n", "INT", "ADD", "DROP", "PARTITION",
                                 "COLUMN", "DEFAULT", "KEY", "TO", "PRIMARY", "IF", "EXISTS", "FIRST", "AFTER"]),
                max_size=40).map(" ".join))
def test_never_raises_on_ddl_shaped_text(head: str, tail: str) -> None:
    result = parse(head + tail)
    _well_formed(result)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(CORPUS), st.integers(0, 400), st.integers(0, 400), st.text(max_size=5))
def test_never_raises_on_a_damaged_statement(query: str, cut: int, at: int, insert: str) -> None:
    _well_formed(parse(query[:cut]))
    _well_formed(parse(query[:at] + insert + query[at:]))


# ------------------------------------------------------------------------------------------- round trip

def _all_changes() -> list[SchemaChange]:
    changes = []
    for query in CORPUS:
        changes.extend(parse(query).changes)
    for definition, *_ in TYPES + DEFAULTS + NULLABILITY:
        changes.extend(change for _, spec in _specs(definition) for change in [ch(ADD_COLUMN, column=spec)])
    return changes


def test_every_change_round_trips_through_its_dict() -> None:
    changes = _all_changes()
    assert {c.kind for c in changes} == set(KINDS)  # the corpus produces every kind of the contract
    for change in changes:
        placed = change.placed(version=7, ordinal=9, commit_ts=1.5, query="ALTER TABLE ...")
        for c in (change, placed):
            d = json.loads(json.dumps(c.to_dict()))
            assert SchemaChange.from_dict(d) == c


def test_application_time_periods() -> None:
    """MariaDB's application-time periods: a PERIOD FOR clause defines no column, a key part `p WITHOUT OVERLAPS`
    stands for the period's end and start columns (the server's index order, as information_schema shows it), and
    adding or dropping a period changes no column or row. SYSTEM_TIME is system versioning: refused."""
    (create,) = parse("CREATE TABLE t (id INT, `s s` DATE, e DATE, v INT, PERIOD FOR p (`s s`, e), "
                      "PRIMARY KEY (id, p WITHOUT OVERLAPS))").changes
    assert create.key == ("id", "e", "s s") and [c.name for c in create.columns] == ["id", "s s", "e", "v"]
    assert parse("CREATE TABLE t (id INT, s DATE, e DATE, PRIMARY KEY (id, q WITHOUT OVERLAPS))").error is not None
    assert parse("ALTER TABLE t ADD PERIOD FOR p (s, e)") == ParsedStatement(tables=T)
    assert parse("ALTER TABLE t DROP PERIOD FOR p") == ParsedStatement(tables=T)
    assert parse("ALTER TABLE t ADD PERIOD IF NOT EXISTS FOR p (s, e)") == ParsedStatement(tables=T)
    assert parse("ALTER TABLE t DROP PERIOD IF EXISTS FOR p") == ParsedStatement(tables=T)
    assert [c.kind for c in parse("ALTER TABLE t ADD period INT").changes] == [ADD_COLUMN]  # a column named so
    assert [c.kind for c in parse("ALTER TABLE t DROP period").changes] == [DROP_COLUMN]
    assert parse("ALTER TABLE t ADD PERIOD FOR SYSTEM_TIME (s, e)").error is not None
