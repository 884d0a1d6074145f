"""Talking to the source database over SQL: connecting, inspecting binlog facts, checking readiness, and
describing the captured tables.

Everything here is thin I/O that gathers *facts* (`SourceFacts`, `TableSchema`); deciding what to do with
them (where to start, where a window ends) happens in pure functions elsewhere (`resolver`, `windows`).
Errors are `SourceError`s (or a subclass) whose text names the server, what was found and the fix; a
password never appears in any message, repr or log line.

Column types follow one vocabulary, shared with the binlog reader and the type map (`cdc_core.model.types`):
lowercase information_schema COLUMN_TYPE with integer display widths and ZEROFILL removed and ' unsigned'
kept (`int unsigned`, `decimal(10,2)`, `datetime(6)`, `enum('a','b')`); FLOAT/DOUBLE lose their legacy
(M,D); YEAR loses its width; MariaDB's JSON (a LONGTEXT with a json_valid CHECK) is reported as `json`.
`attrs` carry ('charset', name) for character and binary string types (including ENUM/SET) and
('labels', (...)) for ENUM/SET.
"""

from __future__ import annotations

import functools
import os
import re
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.connections import ConnectionInfo
from cdc_core.model.errors import ConfigError, MissingKey, SourceError, UnknownTable
from cdc_core.model.labels import parse_labels as parse_label_args
from cdc_core.model.labels import quote_labels as quote_label_args
from cdc_core.model.naming import NamePattern, parse_table_pattern, quote_mysql, table_id
from cdc_core.model.positions import BinlogFile, MariadbGtidList, ServerIdentity, SourceEnd

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")

# pymysql / server error codes we translate into actionable messages.
_ER_ACCESS_DENIED = 1045
_ER_HOST_NOT_PRIVILEGED = 1130
_ER_DBACCESS_DENIED = 1044
_CR_CONN_HOST_ERROR = 2003
_CR_UNKNOWN_HOST = 2005
_CR_SERVER_LOST = 2013
_ER_NO_BINARY_LOGGING = 1381


# ------------------------------------------------------------------------------------------ connect


@dataclass(frozen=True)
class SourceParams:
    """How to reach the source. The password is kept out of repr/str (and so out of logs and errors)."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    connect_timeout: int = 10

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_connection(cls, info: ConnectionInfo) -> SourceParams:
        """The source's parameters from a resolved connection (Airflow's or the CLI's)."""
        if not info.user:
            raise ConfigError(
                f"connection {info.conn_id!r} has no login: set the replication user's login and password on it"
            )
        return cls(host=info.host, port=info.port, user=info.user, password=info.password or "")

    def __repr__(self) -> str:
        return (
            f"SourceParams(host={self.host!r}, port={self.port}, user={self.user!r}, password='***', "
            f"connect_timeout={self.connect_timeout})"
        )

    __str__ = __repr__

    def pymysql_kwargs(self) -> dict[str, Any]:
        """Arguments for pymysql.connect (the only place the password leaves this object)."""
        return {
            "host": self.host,
            "port": int(self.port),
            "user": self.user,
            "password": self.password,
            "connect_timeout": self.connect_timeout,
        }


def source_error_from(e: BaseException, params: SourceParams, doing: str = "connect to") -> SourceError:
    """Translate a pymysql error into a SourceError that names host:port and user, never the password."""
    code = e.args[0] if getattr(e, "args", None) and isinstance(e.args[0], int) else None
    who = f"user {params.user!r} at {params.address}"
    if code in (_ER_ACCESS_DENIED, _ER_HOST_NOT_PRIVILEGED, _ER_DBACCESS_DENIED):
        return SourceError(
            f"cannot {doing} the source as {who}: access denied (error {code}). Check the user name and password "
            "in the source connection, and that the user may connect from this host "
            "(CREATE USER ...; GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO ...; GRANT SELECT ON "
            "`<captured schema>`.* TO ...; see docs/security.md)"
        )
    if code in (_CR_CONN_HOST_ERROR, _CR_UNKNOWN_HOST, _CR_SERVER_LOST):
        return SourceError(
            f"cannot {doing} the source at {params.address} (as {params.user!r}): server unreachable "
            f"(error {code}). Check that the server runs, that host and port in the source connection are right, "
            f"and that no firewall blocks the port (waited {params.connect_timeout}s)"
        )
    detail = str(e.args[1]) if len(getattr(e, "args", ())) > 1 else str(e)
    return SourceError(f"cannot {doing} the source at {params.address} as {params.user!r}: {detail} (error {code})")


@functools.cache
def _preferred_tls_context() -> ssl.SSLContext:
    """The TLS context pymysql uses for a connection without TLS options (its PREFERRED mode), built once.

    pymysql builds it on every connection with `ssl.create_default_context()`, which loads the system CA
    store (20-250 ms on a loaded machine) although the context then verifies nothing (CERT_NONE, no host
    check: PREFERRED encrypts if the server offers TLS and falls back to plain otherwise). A window opens
    up to three connections, so that was a fixed cost per window. This context has exactly the same
    settings minus the unused CA store, and is shared (an SSLContext is safe to share across threads).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    ctx.options |= ssl.OP_NO_SSLv2
    ctx.options |= ssl.OP_NO_SSLv3
    keylog = os.environ.get("SSLKEYLOGFILE")  # as create_default_context does
    if keylog:
        ctx.keylog_filename = keylog
    return ctx


class SourceConnection(pymysql.connections.Connection):  # type: ignore[misc]
    """A pymysql connection that reuses one PREFERRED-mode TLS context per process.

    Only the no-options case (`sslp == {}`, pymysql's PREFERRED mode) is served from the cache; explicit
    TLS options (a CA, client certificate, verification, an SSLContext) go through pymysql unchanged, so a
    configured TLS connection is exactly as strict as before.
    """

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        if isinstance(sslp, dict) and not sslp:
            return _preferred_tls_context()
        return super()._create_ssl_ctx(sslp)


def open_connection(**kwargs: Any) -> pymysql.connections.Connection:
    """`pymysql.connect(**kwargs)` with the shared PREFERRED TLS context (see `SourceConnection`)."""
    return SourceConnection(**kwargs)


def connect(params: SourceParams) -> pymysql.connections.Connection:
    """An autocommit utf8mb4 connection to the source, or a SourceError saying what to fix."""
    try:
        return open_connection(**params.pymysql_kwargs(), autocommit=True, charset="utf8mb4")
    except pymysql.err.MySQLError as e:
        raise source_error_from(e, params) from None


def _address(conn: Any) -> str:
    return f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"


# --------------------------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class SourceFacts:
    """What the resolver and planner need to know about the source, read in one go."""

    identity: ServerIdentity
    version: str
    binlogs: tuple[BinlogFile, ...]
    end: SourceEnd | None  # None when binary logging is off
    gtid_executed: str | None  # MariaDB @@gtid_binlog_pos (may be ''), MySQL @@gtid_executed; None: no GTIDs
    gtid_purged: str | None  # transactions no longer in the binlogs (MariaDB: oldest file's Gtid_list)
    log_bin: bool
    binlog_format: str | None
    binlog_row_image: str | None
    binlog_row_metadata: str | None  # None on servers too old to have the setting
    address: str = ""
    server_time: float | None = None

    @property
    def flavor(self) -> str:
        return self.identity.flavor

    @property
    def gtid_mode(self) -> bool:
        return self.gtid_executed is not None

    @property
    def oldest(self) -> BinlogFile | None:
        return self.binlogs[0] if self.binlogs else None

    @property
    def newest(self) -> BinlogFile | None:
        return self.binlogs[-1] if self.binlogs else None

    def binlog(self, name: str) -> BinlogFile | None:
        for f in self.binlogs:
            if f.name == name:
                return f
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "identity": self.identity.to_dict(),
            "version": self.version,
            "binlogs": [{"name": f.name, "size": f.size} for f in self.binlogs],
            "end": None
            if self.end is None
            else {"file": self.end.file, "offset": self.end.offset, "gtid": self.end.gtid},
            "gtid_executed": self.gtid_executed,
            "gtid_purged": self.gtid_purged,
            "log_bin": self.log_bin,
            "binlog_format": self.binlog_format,
            "binlog_row_image": self.binlog_row_image,
            "binlog_row_metadata": self.binlog_row_metadata,
            "address": self.address,
            "server_time": self.server_time,
        }


def _scalar(cur: Any, sql: str) -> Any:
    cur.execute(sql)
    row = cur.fetchone()
    return None if row is None else row[0]


def _variable(cur: Any, name: str) -> str | None:
    """A global variable's value, or None when the server does not have it."""
    cur.execute("SHOW GLOBAL VARIABLES LIKE %s", (name,))
    row = cur.fetchone()
    return None if row is None else str(row[1])


def mariadb_gtid_state(text: str) -> MariadbGtidList:
    """A MariaDB binlog *state* (possibly several server ids per domain) reduced to one GTID per domain."""
    state = MariadbGtidList()
    for raw in text.replace("[", "").replace("]", "").split(","):
        part = raw.strip()
        if part:
            state = state.union(MariadbGtidList.parse(part))
    return state


def _end_status(cur: Any, flavor: str, version: tuple[int, ...]) -> tuple[Any, ...] | None:
    if flavor == "mysql" and version >= (8, 2):
        cur.execute("SHOW BINARY LOG STATUS")  # SHOW MASTER STATUS is gone in 8.4
    else:
        cur.execute("SHOW MASTER STATUS")
    row = cur.fetchone()
    return None if row is None else tuple(row)


def _version_tuple(version: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def inspect_source(conn: Any) -> SourceFacts:
    """Read the source's identity, binlog files, current end and GTID state.

    The end and the GTID state are read consistently: on MariaDB they come from two statements, so
    we re-read the GTID position until no commit slipped in between (a position whose GTID state
    does not match its file offset would make a later failover skip or repeat a transaction).
    """
    address = _address(conn)
    try:
        with conn.cursor() as cur:
            version = str(_scalar(cur, "SELECT VERSION()"))
            flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
            vt = _version_tuple(version)
            server_id = int(_scalar(cur, "SELECT @@server_id"))
            server_uuid = str(_scalar(cur, "SELECT @@server_uuid")) if flavor == "mysql" else None
            log_bin = str(_variable(cur, "log_bin") or "OFF").upper() in ("ON", "1")
            binlog_format = _variable(cur, "binlog_format")
            binlog_row_image = _variable(cur, "binlog_row_image")
            binlog_row_metadata = _variable(cur, "binlog_row_metadata")
            server_time = float(_scalar(cur, "SELECT UNIX_TIMESTAMP(NOW(6))"))

            binlogs: tuple[BinlogFile, ...] = ()
            if log_bin:
                cur.execute("SHOW BINARY LOGS")
                binlogs = tuple(BinlogFile(str(r[0]), int(r[1])) for r in cur.fetchall())

            end: SourceEnd | None = None
            gtid_executed: str | None = None
            gtid_purged: str | None = None
            if flavor == "mariadb":
                for _ in range(20):
                    before = str(_scalar(cur, "SELECT @@GLOBAL.gtid_binlog_pos") or "")
                    status = _end_status(cur, flavor, vt) if log_bin else None
                    after = str(_scalar(cur, "SELECT @@GLOBAL.gtid_binlog_pos") or "")
                    if before == after:
                        break
                gtid_executed = after
                if status is not None:
                    end = SourceEnd(str(status[0]), int(status[1]), gtid_executed)
                gtid_purged = _mariadb_purged(cur, binlogs)
            else:
                gtid_mode = str(_variable(cur, "gtid_mode") or "OFF").upper()
                status = _end_status(cur, flavor, vt) if log_bin else None
                if gtid_mode == "ON":
                    executed = str(status[4]) if status is not None and len(status) > 4 else str(
                        _scalar(cur, "SELECT @@GLOBAL.gtid_executed") or ""
                    )
                    gtid_executed = executed.replace("\n", "")
                    gtid_purged = str(_scalar(cur, "SELECT @@GLOBAL.gtid_purged") or "").replace("\n", "")
                if status is not None:
                    end = SourceEnd(str(status[0]), int(status[1]), gtid_executed)
    except pymysql.err.MySQLError as e:
        raise SourceError(
            f"cannot read binlog facts from the source at {address}: {e.args[-1]} (error {e.args[0]}). "
            "The capture user needs REPLICATION CLIENT (MySQL) / BINLOG MONITOR (MariaDB) and SELECT"
        ) from None
    # A binlog file appears in SHOW BINARY LOGS with its size when the statement ran; the end may be later.
    if end is not None and binlogs and binlogs[-1].name == end.file and binlogs[-1].size < end.offset:
        binlogs = (*binlogs[:-1], BinlogFile(end.file, end.offset))
    return SourceFacts(
        identity=ServerIdentity(flavor=flavor, server_id=server_id, server_uuid=server_uuid),
        version=version,
        binlogs=binlogs,
        end=end,
        gtid_executed=gtid_executed,
        gtid_purged=gtid_purged,
        log_bin=log_bin,
        binlog_format=binlog_format,
        binlog_row_image=binlog_row_image,
        binlog_row_metadata=binlog_row_metadata,
        address=address,
        server_time=server_time,
    )


def _mariadb_purged(cur: Any, binlogs: tuple[BinlogFile, ...]) -> str | None:
    """The GTID state at the start of the oldest binlog (its Gtid_list event): everything up to it is gone."""
    if not binlogs:
        return None
    try:
        cur.execute("SHOW BINLOG EVENTS IN %s LIMIT 5", (binlogs[0].name,))  # bound: never trust a name in SQL
        for row in cur.fetchall():
            if str(row[2]) == "Gtid_list":
                return str(mariadb_gtid_state(str(row[5])))
    except pymysql.err.MySQLError:
        return None  # purged in between, or no privilege: the resolver treats None as "unknown"
    return None


# ----------------------------------------------------------------------------------------- readiness


def check_cdc_ready(facts: SourceFacts, pipeline: str) -> None:
    """Raise one SourceError listing every server setting that keeps row-level CDC from working."""
    section = "[mariadbd]" if facts.flavor == "mariadb" else "[mysqld]"
    where = f"pipeline {pipeline!r}: the source at {facts.address or str(facts.identity)}"
    problems: list[str] = []
    if not facts.log_bin:
        problems.append("binary logging is off: add `log_bin=mysql-bin` (and a unique `server_id`)")
    fmt = (facts.binlog_format or "").upper()
    if facts.log_bin and fmt != "ROW":
        problems.append(f"binlog_format is {facts.binlog_format!r}, not ROW: add `binlog_format=ROW`")
    image = (facts.binlog_row_image or "").upper()
    if facts.log_bin and image != "FULL":
        problems.append(f"binlog_row_image is {facts.binlog_row_image!r}, not FULL: add `binlog_row_image=FULL`")
    if facts.binlog_row_metadata is None:
        problems.append(
            "the server has no binlog_row_metadata setting (it needs MariaDB >= 10.5 or MySQL >= 8.0.14): "
            "upgrade the server"
        )
    elif facts.binlog_row_metadata.upper() != "FULL":
        problems.append(
            f"binlog_row_metadata is {facts.binlog_row_metadata!r}, not FULL (column names, unsigned flags and "
            "ENUM labels are missing from the binlog without it): add `binlog_row_metadata=FULL`"
        )
    if problems:
        raise SourceError(
            f"{where} is not ready for CDC: "
            + "; ".join(problems)
            + f". Put these lines under {section} in my.cnf and restart the server (the binlog_* settings can also "
            "be changed at runtime with SET GLOBAL, but only my.cnf survives a restart); changes written before "
            "the fix cannot be captured"
        )


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def grant_schema_pattern(schema: str) -> str:
    """A schema name as a GRANT ... ON `db`.* takes it: `_` and `%` are wildcards there, so escape them
    (an unescaped `t_1` would also grant `tx1`, and `%x` every schema ending in x)."""
    return quote_mysql(schema.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%"))


def _grant_covers(pattern: str, schema: str) -> bool:
    """Whether a grant on database `pattern` (LIKE wildcards, backslash escapes) covers `schema`."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.fullmatch("".join(out), schema, re.S) is not None


def check_privileges(conn: Any, pipeline: str, schemas: Iterable[str] = ()) -> None:
    """Raise a SourceError naming each missing grant of the capture user, with the GRANT statements to run.

    Least privilege: REPLICATION SLAVE (read the binlog) and REPLICATION CLIENT on MySQL / BINLOG MONITOR
    on MariaDB (SHOW BINARY LOGS / MASTER STATUS) are global; SELECT (describe the tables, verify) is
    needed on the captured schemas only (`schemas`; empty when the include patterns name no schema
    literally, then any SELECT grant is accepted).
    """
    address = _address(conn)
    schemas = list(schemas)
    with conn.cursor() as cur:
        version = str(_scalar(cur, "SELECT VERSION()"))
        flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
        current = str(_scalar(cur, "SELECT CURRENT_USER()"))
        user, _, host = current.rpartition("@")
        grantee = f"'{user}'@'{host}'"  # information_schema's spelling (no escaping there)
        grantees = [grantee]
        try:
            cur.execute("SELECT ROLE_NAME FROM information_schema.ENABLED_ROLES")
            roles = [str(r[0]) for r in cur.fetchall()]
            grantees += [f"'{r}'" for r in roles] + [f"'{r}'@'%'" for r in roles]
        except pymysql.err.MySQLError:
            pass
        marks = ",".join(["%s"] * len(grantees))
        cur.execute(
            f"SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE IN ({marks})", grantees
        )
        global_privs = {str(r[0]).upper() for r in cur.fetchall()}
        cur.execute(
            f"SELECT TABLE_SCHEMA FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE IN ({marks}) "
            "AND PRIVILEGE_TYPE = 'SELECT'",
            grantees,
        )
        schema_select = {str(r[0]) for r in cur.fetchall()}  # LIKE patterns, as granted
        cur.execute(
            f"SELECT DISTINCT TABLE_SCHEMA FROM information_schema.TABLE_PRIVILEGES WHERE GRANTEE IN ({marks}) "
            "AND PRIVILEGE_TYPE = 'SELECT'",
            grantees,
        )
        table_select = {str(r[0]) for r in cur.fetchall()}  # literal names
    to = f"{_sql_string(user)}@{_sql_string(host)}"
    missing: list[str] = []
    global_grants: list[str] = []
    if "REPLICATION SLAVE" not in global_privs:
        missing.append("REPLICATION SLAVE (to read the binlog)")
        global_grants.append("REPLICATION SLAVE")
    monitor = {"REPLICATION CLIENT", "SUPER"} | ({"BINLOG MONITOR"} if flavor == "mariadb" else set())
    if not (global_privs & monitor):
        name = "BINLOG MONITOR" if flavor == "mariadb" else "REPLICATION CLIENT"
        missing.append(f"{name} (to list binlogs: SHOW BINARY LOGS / SHOW MASTER STATUS)")
        global_grants.append(name)
    statements = [f"GRANT {', '.join(global_grants)} ON *.* TO {to};"] if global_grants else []
    if "SELECT" not in global_privs:
        wanted = [
            s for s in schemas if s not in table_select and not any(_grant_covers(p, s) for p in schema_select)
        ]
        if wanted:
            missing.append(f"SELECT on {', '.join(repr(s) for s in wanted)} (to describe the captured tables)")
            statements += [f"GRANT SELECT ON {grant_schema_pattern(s)}.* TO {to};" for s in wanted]
        elif not schemas and not (schema_select or table_select):
            missing.append("SELECT on the captured schemas (to describe the captured tables)")
            statements.append(f"GRANT SELECT ON `<schema>`.* TO {to};  -- once per captured schema")
    if missing:
        raise SourceError(
            f"pipeline {pipeline!r}: the capture user {current} on {address} lacks "
            + "; ".join(missing)
            + ". Run as an administrator: "
            + " ".join(statements)
        )


# ------------------------------------------------------------------------------------------- tables

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
    address = _address(conn)
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
