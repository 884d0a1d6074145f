"""Talking to the source database over SQL: inspecting binlog facts and checking readiness; connecting
(`connection`) and describing the captured tables (`tables`) are re-exported here, so this module is the
capture side's one SQL API.

Everything here is thin I/O that gathers *facts* (`SourceFacts`, `TableSchema`); deciding what to do with
them (where to start, where a window ends) happens in pure functions elsewhere (`resolver`, `windows`).
Errors are `SourceError`s (or a subclass) whose text names the server, what was found and the fix; a
password never appears in any message, repr or log line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pymysql

from cdc_core.capture.connection import (
    SourceConnection,
    SourceParams,
    conn_address,
    connect,
    open_connection,
    source_error_from,
)
from cdc_core.capture.tables import (
    SYSTEM_SCHEMAS,
    TableFilter,
    check_cascades,
    check_system_versioned,
    column_attrs,
    describe_tables,
    normalise_column_type,
    parse_labels,
    quote_labels,
)
from cdc_core.model.errors import SourceError
from cdc_core.model.naming import quote_mysql
from cdc_core.model.positions import BinlogFile, MariadbGtidList, ServerIdentity, SourceEnd

log = logging.getLogger("cdc.source")

__all__ = [
    "SYSTEM_SCHEMAS",
    "SourceConnection",
    "SourceFacts",
    "SourceParams",
    "TableFilter",
    "check_binlog_filters",
    "check_cascades",
    "check_cdc_ready",
    "check_first_contact",
    "check_privileges",
    "check_system_versioned",
    "column_attrs",
    "connect",
    "describe_tables",
    "grant_schema_pattern",
    "inspect_source",
    "mariadb_gtid_state",
    "normalise_column_type",
    "open_connection",
    "parse_labels",
    "quote_labels",
    "source_error_from",
]

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
    # The server's binlog filters (binlog_do_db / binlog_ignore_db, SHOW MASTER STATUS): databases whose row
    # changes it never logs.
    binlog_do_db: tuple[str, ...] = ()
    binlog_ignore_db: tuple[str, ...] = ()

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
    address = conn_address(conn)
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
    filters = status[2:4] if status is not None and len(status) > 3 else ("", "")
    do_db, ignore_db = _db_list(filters[0]), _db_list(filters[1])
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
        binlog_do_db=do_db,
        binlog_ignore_db=ignore_db,
    )


def _db_list(value: Any) -> tuple[str, ...]:
    return tuple(d for d in str(value or "").split(",") if d)


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


_FILTERS_WARNED: set[tuple[object, ...]] = set()  # (pipeline, filters, patterns) this process has warned about


def check_binlog_filters(facts: SourceFacts, table_filter: TableFilter, pipeline: str) -> None:
    """Refuse a source whose binlog filters (binlog_do_db / binlog_ignore_db) leave out a captured schema: its row
    changes are never logged, so nothing would land and nothing would say so. Any filter at all is warned about,
    once per process and setting (a run reads the source's facts several times):
    the server filters DDL by the statement's *default* database, so it can drop a captured table's DDL too."""
    if not facts.binlog_do_db and not facts.binlog_ignore_db:
        return
    warned = (pipeline, facts.binlog_do_db, facts.binlog_ignore_db, table_filter.include, table_filter.exclude)
    schemas = table_filter.literal_schemas()
    left_out = [d for d in facts.binlog_ignore_db if table_filter.may_match_schema(d)]
    if facts.binlog_do_db and schemas is not None:
        left_out += [d for d in schemas if d not in facts.binlog_do_db]
    elif facts.binlog_do_db and warned not in _FILTERS_WARNED:
        log.warning("pipeline %r: the source logs only the databases %s (binlog_do_db), and the include patterns "
                    "name no schema literally: captured tables elsewhere would land nothing", pipeline,
                    ", ".join(facts.binlog_do_db))
    if left_out:
        raise SourceError(
            f"pipeline {pipeline!r}: the source at {facts.address or str(facts.identity)} does not log the row "
            f"changes of captured schemas {', '.join(sorted(set(left_out)))} (binlog_do_db / binlog_ignore_db), so "
            "nothing of them would land. Remove the filter from my.cnf and restart the server (changes written "
            "before cannot be captured: re-snapshot those tables), or stop capturing those schemas"
        )
    if warned in _FILTERS_WARNED:
        return
    _FILTERS_WARNED.add(warned)
    log.warning("pipeline %r: the source filters its binlog (binlog_do_db=%s, binlog_ignore_db=%s); the server "
                "filters DDL by the statement's default database, so a captured table's DDL run from a filtered "
                "database is not logged, and the lake would not follow it", pipeline,
                ",".join(facts.binlog_do_db) or "-", ",".join(facts.binlog_ignore_db) or "-")


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


def check_first_contact(conn: Any, pipeline: str, table_filter: TableFilter, cascades_accepted: Iterable[str]) -> None:
    """What a pipeline checks once when it first reaches its source: the capture user's grants (a missing one is
    named, with the GRANT to run, before some statement fails with a bare "access denied" or information_schema
    silently hides a table), captured tables a cascade can change (`check_cascades`) and system-versioned ones
    (`check_system_versioned`)."""
    check_privileges(conn, pipeline, table_filter.literal_schemas() or ())
    check_cascades(conn, table_filter, pipeline, cascades_accepted)
    check_system_versioned(conn, table_filter, pipeline)


def check_privileges(conn: Any, pipeline: str, schemas: Iterable[str] = ()) -> None:
    """Raise a SourceError naming each missing grant of the capture user, with the GRANT statements to run.

    Least privilege: REPLICATION SLAVE (read the binlog) and REPLICATION CLIENT on MySQL / BINLOG MONITOR
    on MariaDB (SHOW BINARY LOGS / MASTER STATUS) are global; SELECT (describe the tables, verify) is
    needed on the captured schemas only (`schemas`; empty when the include patterns name no schema
    literally, then any SELECT grant is accepted).
    """
    address = conn_address(conn)
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


