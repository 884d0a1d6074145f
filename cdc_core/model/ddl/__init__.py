"""The DDL parser: one statement of the binlog (a query event) -> typed schema changes (`parse_statement`).

A statement becomes a `ParsedStatement` (cdc_core.model.schema_changes): one `SchemaChange` per action, in
the statement's order, plus every table and schema the statement names. Table DDL whose meaning cannot be
fully read is reported (`ParsedStatement.error`), never half-applied or skipped; statements that change no
table (GRANT, views, routines, DML logged as statements, BEGIN ...) give nothing. Pure: no I/O.

Why sqlglot and not regular expressions: a DDL statement is a small program in a grammar with nesting
(parentheses in defaults, generated columns, CHECKs, partition lists), quoting (backticked names that contain
spaces, dots or backticks; strings that contain commas, parentheses or `--`), comments, and optional words
everywhere (`ADD [COLUMN] [IF NOT EXISTS]`). Regular expressions over the text either reject what the server
accepted or, worse, misread it silently (a comma inside a DEFAULT string splitting an ALTER in two). sqlglot
is a maintained SQL parser with a MySQL dialect: its tokenizer implements MySQL's quoting and escapes, and
its parser gives a real AST for ALTER TABLE actions, column definitions (NULL / NOT NULL, DEFAULT, AUTO_INCREMENT,
PRIMARY KEY, `AS (expr) STORED`, FIRST / AFTER), defaults and expressions, DROP TABLE and TRUNCATE.

How the work is split. (1) `executable_sql` applies the servers' comment rules: versioned comments
`/*!50100 ...*/` and MariaDB's `/*M!100100 ...*/` are part of the statement when the server runs them; other
comments are dropped; quotes are respected. (2) sqlglot's MySQL tokenizer gives the tokens, from which the
statement's frame is read: which statement it is, its target names, and where each ALTER action or CREATE
TABLE item begins and ends (a top-level comma). (3) sqlglot's parser parses each action and item on its own,
and its AST is translated node by node; a node the translation does not know makes the statement not
understood. Parsing the parts separately keeps one clause sqlglot's grammar lacks (a MariaDB table option,
`PARTITION BY ... VALUES LESS THAN MAXVALUE`, `START TRANSACTION`) from hiding the rest, and lets the error
name the exact clause. The forms sqlglot's MySQL grammar does not parse are handled on its tokens:
`RENAME TABLE a TO b, c TO d`, `ALTER ONLINE|IGNORE TABLE`, `WAIT n | NOWAIT`, `ADD COLUMN (a INT, b INT)`,
`MODIFY|CHANGE COLUMN IF EXISTS`, `TRUNCATE|DROP|EXCHANGE PARTITION` and the other partition operations,
`CONVERT TO CHARACTER SET`, `IMPORT|DISCARD TABLESPACE`, `ENABLE|DISABLE KEYS`, index and CHECK forms with
`IF [NOT] EXISTS` or `IGNORED`, primary keys with prefix lengths or `USING` before the columns, and table
options sqlglot does not know.

Column types are read from the tokens by MySQL's type grammar, not from sqlglot's `DataType`: that type is
dialect-neutral and loses what the type map needs (sqlglot reads MySQL's INT8 as TINYINT, LONG as BIGINT,
REAL as FLOAT, and has no INET4, INET6, MIDDLEINT, LONG VARCHAR or FLOAT UNSIGNED). The type becomes the
vocabulary `cdc_core.capture.source.normalise_column_type` gives for the COLUMN_TYPE the server then shows
(checked against MariaDB by tests/integration/test_ddl_parser_mariadb.py), and sqlglot parses the column's
attributes with the type written as INT.

Server state the statement does not carry, and so the parser cannot see: the database's default character
set (a TEXT(M) whose size class depends on it is refused); an existing table's default charset in ALTER TABLE
... ADD (only CHARSET=binary would change a type); sql_mode (statements that rely on ANSI_QUOTES or
NO_BACKSLASH_ESCAPES are read with the default quoting, which usually leaves them not understood; under
REAL_AS_FLOAT a REAL column is still typed `double`); explicit_defaults_for_timestamp=OFF (an unqualified
TIMESTAMP column then reads as nullable).
"""

from __future__ import annotations

from cdc_core.model.ddl.comments import executable_sql
from cdc_core.model.ddl.statement import parse_statement

__all__ = ["executable_sql", "parse_statement"]
