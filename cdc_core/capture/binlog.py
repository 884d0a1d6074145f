"""Reading the binlog with python-mysql-replication: transaction boundaries and a window's row changes.

Two readers over one event stream:

- `BinlogScanner` finds *transaction boundaries* cheaply (no row is decoded): the planner cuts windows
  from them (`scan_transactions`) and the start resolver searches them (`file_transactions`,
  `first_event_time`, `file_start_gtid`).
- `read_changes` replays exactly one planned window `[plan.start, plan.end)` as `RowChange`s and
  `SchemaChangeEvent`s, in binlog order.

How transactions look in the binlog (what `_TxnAssembler` recognises):
MariaDB DML is `GTID -> (Annotate_rows) -> Table_map -> rows ... -> Xid` (the GTID event implies BEGIN;
non-transactional engines end with a `COMMIT` query instead of Xid); MariaDB DDL is a standalone
`GTID -> Query`. MySQL adds a `BEGIN` query after its (possibly anonymous) GTID event; a DDL is a GTID
followed by a non-BEGIN query. Rolled-back InnoDB transactions are never written. A position therefore
always sits between transactions: a transaction starts at its GTID (or BEGIN) event and ends after its
Xid/COMMIT (or DDL query) event, and that end offset is the next window's start.

Library facts this relies on (python-mysql-replication 1.0.17): `is_mariadb=False, resume_stream=True`
with `log_file/log_pos` starts exactly there even on MariaDB; an event's start offset is
`packet.log_pos - packet.event_size`; the first events are an artificial Rotate and Format_description
with `log_pos` 0; non-blocking mode ends at the current end of the binlog; `end_log_pos` ignores the file
name, so `(file, offset)` bounds are enforced here.

Values in `RowChange.values` are what the library decodes (see `cdc_core.model.types` for how each lands):
ints, `Decimal`, `float`, `str` (text, ENUM label, MariaDB JSON text, BIT as a '0101' string), `bytes`,
`date`, naive `datetime` (DATETIME as written, TIMESTAMP in UTC), `timedelta` (TIME), `set` (SET), None.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import logging
import os
import random
import re
import struct
from collections import deque
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.constants.BINLOG import FORMAT_DESCRIPTION_EVENT, ROTATE_EVENT, TABLE_MAP_EVENT
from pymysqlreplication.constants.CHARSET import charsets as _library_charsets
from pymysqlreplication.constants.NONE_SOURCE import EMPTY_SET as _NONE_EMPTY_SET
from pymysqlreplication.constants.NONE_SOURCE import OUT_OF_DATE_RANGE as _NONE_ZERO_DATE
from pymysqlreplication.constants.NONE_SOURCE import OUT_OF_DATETIME2_RANGE as _NONE_ZERO_DATETIME2
from pymysqlreplication.constants.NONE_SOURCE import OUT_OF_DATETIME_RANGE as _NONE_ZERO_DATETIME
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    NotImplementedEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_core.capture.ddl_events import DdlStatement, typed_statement
from cdc_core.capture.source import (
    SourceParams,
    TableFilter,
    column_attrs,
    connect,
    mariadb_gtid_state,
    open_connection,
    quote_labels,
    source_error_from,
)
from cdc_core.model.changes import RowBatch, RowChange, SourceColumn, TableSchema
from cdc_core.model.errors import MissingKey, PositionPurged, SourceError, StagingError, UnknownTable, UnsupportedType
from cdc_core.model.manifest import OP_DELETE, OP_INSERT, OP_UPDATE
from cdc_core.model.naming import table_id
from cdc_core.model.positions import (
    BinlogPosition,
    GtidSet,
    MysqlGtidSet,
    ServerIdentity,
    binlog_file_index,
    change_version,
)
from cdc_core.model.schema_changes import SchemaChange
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.types import python_codec
from cdc_core.model.window_plan import WindowPlan
from cdc_core.model.windows import QuietTail, TxnBoundary

if TYPE_CHECKING:
    from cdc_core.capture import rowdecode

log = logging.getLogger("cdc.binlog")

_ANONYMOUS_GTID_EVENT = 0x22
_MARIADB_FL_STANDALONE = 0x01
_MARIADB_FL_DDL = 0x20

# Replica server ids of our readers: high and random, so concurrent readers never share one (the server
# kills an existing dump connection when another registers with the same id) nor hit a real server's id.
_REPLICA_ID_RANGE = (1_000_000_000, 2_000_000_000)


def _charset_to_encoding(name: str) -> str:
    return python_codec(name) or str(_library_charset_to_encoding(name))


# The library decodes text with Python codecs that differ from the server's for some charsets: latin1 as
# cp1252 (raises on the five bytes cp1252 leaves undefined, which the server's latin1 maps to C1
# controls), utf16/utf32/ucs2 in the machine's byte order (the server's are big-endian). Point it at the
# exact codecs (cdc_core.model.types.CHARSET_CODECS), as the columnar decoder does.
_library_charset_to_encoding = RowsEvent.charset_to_encoding
RowsEvent.charset_to_encoding = staticmethod(_charset_to_encoding)


def random_replica_server_id() -> int:
    return random.SystemRandom().randint(*_REPLICA_ID_RANGE)


# -------------------------------------------------------------------------------------------- values






@dataclass(frozen=True)
class SchemaChangeEvent:
    """A DDL statement inside a window (mirrored by `manifest.SchemaEvent`), with its typed changes of the
    captured tables (`cdc_core.capture.ddl_events`).

    `schema` is the statement's default database (may be '' when the statement names its tables fully).
    """

    ordinal: int
    schema: str
    query: str
    version: int
    commit_ts: float = 0.0
    changes: tuple[SchemaChange, ...] = ()
    tables: tuple[tuple[str, str], ...] = ()  # the captured tables whose lake tables it changes
    keys: tuple[tuple[str, ...], ...] = ()  # their keys as the source describes them (() when unknown)

    @classmethod
    def of(cls, ordinal: int, ddl: DdlStatement) -> SchemaChangeEvent:
        return cls(ordinal, ddl.schema, ddl.query, ddl.version, ddl.commit_ts,
                   tuple(replace(c, ordinal=ordinal, version=ddl.version) for c in ddl.changes), ddl.tables,
                   ddl.keys)


# ------------------------------------------------------------------------------------- event stream


@dataclass(slots=True)
class _Ev:
    """One binlog event reduced to what boundary tracking needs (built once per event: slots, not frozen)."""

    kind: str  # rotate | header | gtid | gtid_list | begin | commit | query | tablemap | rows | other
    file: str
    start: int
    end: int
    timestamp: int
    gtid: str | None = None
    standalone: bool = False  # MariaDB GTID flag: one statement, no COMMIT follows
    ddl: bool = False  # MariaDB GTID flag: the group holds DDL (also CREATE ... SELECT)
    query: str = ""
    schema: str = ""
    raw: Any = None


@functools.lru_cache(maxsize=256)
def _file_index(file: str) -> int:
    return binlog_file_index(file)


def _pos_key(file: str, offset: int) -> tuple[int, int]:
    return (_file_index(file), offset)


@functools.lru_cache(maxsize=256)
def _version_base(epoch: int, file: str) -> int:
    return change_version(epoch, file, 0)


def _change_version(epoch: int, file: str, offset: int) -> int:
    """`positions.change_version`, with the per-file part computed once (called for every rows event)."""
    if not 0 <= offset <= 0xFFFFFFFF:
        return change_version(epoch, file, offset)  # raises with the full message
    return _version_base(epoch, file) | offset


def _previous_gtids_text(ev: PreviousGtidsEvent) -> str:
    # The library renders this event oddly ("uuid-:['1-101']", with MySQL's exclusive interval ends).
    parts = []
    for entry in getattr(ev, "_gtids", []):
        uuid = entry[:36]
        ranges = [(int(lo), int(hi) - 1) for lo, hi in re.findall(r"(\d+)-(\d+)", entry[36:])]
        ranges = [(lo, hi) for lo, hi in ranges if hi >= lo]
        if ranges:
            parts.append(uuid + "".join(f":{lo}-{hi}" for lo, hi in ranges))
    return ",".join(parts)


def _classify(ev: Any, file: str, flavor: str) -> _Ev:
    pk = ev.packet
    start, end, ts = pk.log_pos - pk.event_size, pk.log_pos, pk.timestamp
    if isinstance(ev, RotateEvent):
        return _Ev("rotate", file, start, end, ts, query=ev.next_binlog, raw=ev)
    if isinstance(ev, FormatDescriptionEvent):
        return _Ev("header", file, start, end, ts)
    if isinstance(ev, MariadbGtidEvent):
        flags = ev.flags
        return _Ev(
            "gtid", file, start, end, ts, gtid=ev.gtid,
            standalone=bool(flags & _MARIADB_FL_STANDALONE), ddl=bool(flags & _MARIADB_FL_DDL),
        )
    if isinstance(ev, GtidEvent):
        return _Ev("gtid", file, start, end, ts, gtid=ev.gtid)
    if isinstance(ev, NotImplementedEvent) and pk.event_type == _ANONYMOUS_GTID_EVENT:
        return _Ev("gtid", file, start, end, ts)
    if isinstance(ev, MariadbGtidListEvent):
        return _Ev("gtid_list", file, start, end, ts, gtid=",".join(g.gtid for g in ev.gtid_list))
    if isinstance(ev, PreviousGtidsEvent):
        return _Ev("gtid_list", file, start, end, ts, gtid=_previous_gtids_text(ev))
    if isinstance(ev, (XidEvent, XAPrepareEvent)):
        return _Ev("commit", file, start, end, ts)
    if isinstance(ev, QueryEvent):
        q = ev.query.strip()
        schema = ev.schema.decode("utf-8", "replace") if isinstance(ev.schema, bytes) else str(ev.schema or "")
        word = q.rstrip(";").strip().upper()
        if word == "BEGIN" or word.startswith("XA START") or word.startswith("XA BEGIN"):
            return _Ev("begin", file, start, end, ts, query=q, schema=schema)
        if word in ("COMMIT", "ROLLBACK"):
            return _Ev("commit", file, start, end, ts, query=q, schema=schema)
        return _Ev("query", file, start, end, ts, query=q, schema=schema, raw=ev)
    if isinstance(ev, TableMapEvent):
        return _Ev("tablemap", file, start, end, ts, raw=ev)
    if isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
        return _Ev("rows", file, start, end, ts, raw=ev)
    return _Ev("other", file, start, end, ts)


# Events after which table ids must be looked up afresh (see _stream_events).
_FORGET_TABLES = frozenset({"rotate", "header", "query"})

# Event types handled without building the library's event objects (the hot ones: every transaction).
_XID_EVENT = 0x10
_TABLE_MAP_EVENT = 0x13
_MARIADB_GTID_EVENT = 0xA2
_ROWS_EVENTS = {
    0x17: ("write", False), 0x18: ("update", False), 0x19: ("delete", False),  # v1 (MariaDB, MySQL 5.x)
    0x1E: ("write", True), 0x1F: ("update", True), 0x20: ("delete", True),  # v2 (MySQL 5.6+)
}
_HEADER = struct.Struct("<IBIIIH")  # after the OK byte: timestamp, type, server_id, event_size, log_pos, flags
_GTID_BODY = struct.Struct("<QIB")  # MariaDB GTID: seq_no, domain_id, flags


ROWS_SKIP, ROWS_RAW, ROWS_LIBRARY = "skip", "raw", "library"


@dataclass(frozen=True, slots=True)
class RawRows:
    """A rows event not decoded by the library: the packet and where its row images are.

    `data[start:end]` holds the row images (checksum excluded); `kind` is write | update | delete.
    """

    kind: str
    table_id: int
    data: bytes
    start: int
    end: int


class _LibraryEvents:
    """Builds python-mysql-replication's event object for one packet, as `BinLogStreamReader.fetchone`
    does, with the reader's own settings (kept in its name-mangled attributes; mysql-replication is pinned
    to 1.0.17 and the integration tests read real binlogs through this path)."""

    def __init__(self, stream: BinLogStreamReader) -> None:
        self.stream = stream

        def private(name: str) -> Any:
            return getattr(stream, f"_BinLogStreamReader__{name}")

        self.private = private
        self.allowed = private("allowed_events")
        self.use_checksum = bool(private("use_checksum"))
        self._post_header_lengths: tuple[int, ...] | None = None  # from the Format_description event

    def event(self, pkt: Any) -> Any:
        s, p = self.stream, self.private
        wrapper = BinLogPacketWrapper(
            pkt, s.table_map, s._ctl_connection, s.mysql_version, p("use_checksum"),
            p("allowed_events_in_packet"), p("only_tables"), p("ignored_tables"), p("only_schemas"),
            p("ignored_schemas"), p("freeze_schema"), p("ignore_decode_errors"), p("verify_checksum"),
            p("optional_meta_data"), p("enable_logging"), p("use_column_name_cache"), p("post_header_lengths"),
        )
        ev = wrapper.event
        if wrapper.event_type == ROTATE_EVENT and wrapper.timestamp != 0:
            s.table_map = {}
        if wrapper.event_type == FORMAT_DESCRIPTION_EVENT and ev is not None:
            s.mysql_version = ev.mysql_version
            setattr(s, "_BinLogStreamReader__post_header_lengths", ev.post_header_len)  # noqa: B010
            self._post_header_lengths = None
        if wrapper.event_type == TABLE_MAP_EVENT and ev is not None:
            s.table_map[ev.table_id] = ev.get_table()
        if ev is None or ev.__class__ not in self.allowed:
            return None
        return ev

    def post_header_len(self, event_type: int, default: int) -> int:
        lengths = self._post_header_lengths
        if lengths is None:
            lengths = self._post_header_lengths = tuple(self.private("post_header_lengths") or ())
        if not 0 < event_type <= len(lengths):
            return default
        return int(lengths[event_type - 1])


class _Packets:
    """Reads the dump's packets off the library's pymysql connection, like its `_read_packet` (framing,
    sequence ids, packets over 16 MB, error packets) but returning the payload bytes: no packet object
    per binlog event, which is most of pymysql's cost per event."""

    _MAX = 0xFFFFFF

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        if conn._current_timeout != conn._read_timeout:
            conn._sock.settimeout(conn._read_timeout)
            conn._current_timeout = conn._read_timeout
        self.rfile_read = conn._rfile.read

    def read(self) -> bytes:
        conn, read = self.conn, self.rfile_read
        parts: list[bytes] = []
        while True:
            try:  # pymysql's _read_bytes, minus the EINTR retry Python does itself (PEP 475)
                header = read(4)
                size = header[0] | header[1] << 8 | header[2] << 16 if len(header) == 4 else -1
                data = read(size) if size >= 0 else b""
            except OSError as e:
                conn._force_close()
                raise pymysql.err.OperationalError(
                    2013, f"Lost connection to MySQL server during query ({e})"
                ) from None
            if len(data) != size:
                conn._force_close()
                raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
            if header[3] != conn._next_seq_id:
                conn._force_close()
                raise pymysql.err.OperationalError(
                    2013, f"Lost connection to MySQL server: packet sequence {header[3]}, expected {conn._next_seq_id}"
                )
            conn._next_seq_id = (header[3] + 1) % 256
            if size < self._MAX and not parts:
                break
            parts.append(data)
            if size < self._MAX:
                data = b"".join(parts)
                break
        if data[0] == 0xFF:
            pymysql.err.raise_mysql_exception(data)
        return data


def _raw_rows(lib: _LibraryEvents, data: bytes, event_type: int, size: int) -> RawRows | None:
    """The row images of a rows event of a known table, or None when the library must decode it."""
    kind, v2 = _ROWS_EVENTS[event_type]
    table_id = int.from_bytes(data[20:26], "little")
    end = 1 + size - (4 if lib.use_checksum else 0)
    known = 10 if v2 else 8
    pos = 20 + lib.post_header_len(event_type, known)
    if v2:
        extra = int.from_bytes(data[28:30], "little")
        pos += max(0, extra - 2)
    ncols = data[pos]
    if ncols >= 251:
        return None  # over 250 columns: a longer length code; let the library do it
    pos += 1
    nbytes = (ncols + 7) // 8
    full = (1 << ncols) - 1
    for _ in range(2 if kind == "update" else 1):
        if int.from_bytes(data[pos : pos + nbytes], "little") & full != full:
            return None  # not a full row image: the library decodes it, staging reports what is missing
        pos += nbytes
    return RawRows(kind, table_id, data, pos, end)


def _stream_events(
    params: SourceParams,
    file: str,
    offset: int,
    flavor: str,
    *,
    server_id: int,
    only_schemas: tuple[str, ...] | None = None,
    rows: str = "library",
) -> Generator[_Ev, None, None]:
    """Events from (file, offset) to the current end of the binlog, each tagged with its file and offsets.

    Artificial events (log_pos 0: the leading Rotate and Format_description) are reported as 'rotate' /
    'header' with start = end = 0. The stream is closed when the generator is closed or exhausted.

    python-mysql-replication connects, registers and requests the dump; packets are then read here.
    The events every transaction carries are handled without the library's event objects (most of
    its per-event cost): MariaDB GTID, Xid, table maps of known table ids (skipped, like the library
    does with `freeze_schema`), and rows events as `rows` says: ROWS_SKIP reports them with `raw` =
    None (boundary scans), ROWS_RAW as a `RawRows` (the library's event when it is not a plain full
    image), ROWS_LIBRARY as the library's rows event (decoded lazily). Everything else is built by the
    library exactly as `fetchone` would.

    Table maps: decoding one is most of the library's per-event cost, and every transaction repeats
    them, so a table map is decoded (and reported) only the first time its table id appears. The
    table-id cache is dropped at every rotation and file header (table ids are reused after a server
    restart) and at every DDL statement (which may change a table's columns), so a consumer keeping
    its own table-id map must drop it on the same events: kinds 'rotate', 'header' and 'query'.
    """
    settings = {**params.pymysql_kwargs(), "charset": "utf8mb4"}
    settings["passwd"] = settings.pop("password")
    stream = BinLogStreamReader(
        connection_settings=settings,
        pymysql_wrapper=_NoSilentResume(),
        server_id=server_id,
        resume_stream=True,
        blocking=False,
        log_file=file,
        log_pos=offset,
        is_mariadb=False,
        only_schemas=list(only_schemas) if only_schemas is not None else None,
        filter_non_implemented_events=False,
        enable_logging=False,
        freeze_schema=True,
    )
    current = file
    ignored: set[int] = set()  # table ids whose table map the library filtered out (only_schemas)
    try:
        try:
            first = stream.fetchone()  # connects; the artificial Rotate to the starting file
            lib = _LibraryEvents(stream)
            read_packet = _Packets(stream._stream_connection).read
        except pymysql.err.MySQLError as e:
            raise _stream_error(e, params, current, offset) from None
        if first is None:
            return
        stream.table_map.clear()
        if isinstance(first, RotateEvent):
            current = first.next_binlog
            yield _Ev("rotate", current, 0, 0, 0, query=first.next_binlog)
        header = _HEADER.unpack_from
        while True:
            try:
                data = read_packet()
            except pymysql.err.MySQLError as e:
                if e.args and e.args[0] in _CONNECTION_LOST:  # never resumed: see _NoSilentResume
                    e = _StreamLost(*e.args)
                raise _stream_error(e, params, current, offset) from None
            if data[0] == 0xFE and len(data) < 9:  # EOF: the end of the binlog (non-blocking dump)
                return
            if data[0] != 0:
                continue
            ts, etype, server, size, log_pos, _flags = header(data, 1)
            if log_pos:
                start = log_pos - size
                if etype == _MARIADB_GTID_EVENT:
                    seq_no, domain, gflags = _GTID_BODY.unpack_from(data, 20)
                    yield _Ev(
                        "gtid", current, start, log_pos, ts, gtid=f"{domain}-{server}-{seq_no}",
                        standalone=bool(gflags & _MARIADB_FL_STANDALONE), ddl=bool(gflags & _MARIADB_FL_DDL),
                    )
                    continue
                if etype == _XID_EVENT:
                    yield _Ev("commit", current, start, log_pos, ts)
                    continue
                if etype == _TABLE_MAP_EVENT:
                    table_id = int.from_bytes(data[20:26], "little")
                    if table_id in stream.table_map or table_id in ignored:
                        continue
                elif etype in _ROWS_EVENTS and rows != ROWS_LIBRARY:
                    table_id = int.from_bytes(data[20:26], "little")
                    if table_id not in stream.table_map:
                        continue  # its table map was filtered out: so is the library's rows event
                    raw = _raw_rows(lib, data, etype, size) if rows == ROWS_RAW else None
                    if raw is not None or rows == ROWS_SKIP:
                        yield _Ev("rows", current, start, log_pos, ts, raw=raw)
                        continue
            ev = lib.event(MysqlPacket(data, "utf8mb4"))
            if ev is None:
                if etype == _TABLE_MAP_EVENT:
                    ignored.add(int.from_bytes(data[20:26], "little"))
                continue
            if log_pos == 0:  # artificial: not in the file
                stream.table_map.clear()
                ignored.clear()
                if isinstance(ev, RotateEvent):
                    current = ev.next_binlog
                    yield _Ev("rotate", current, 0, 0, 0, query=ev.next_binlog)
                else:
                    yield _Ev("header", current, 0, 0, ts)
                continue
            e2 = _classify(ev, current, flavor)
            if e2.kind in _FORGET_TABLES:
                stream.table_map.clear()
                ignored.clear()
            yield e2
            if e2.kind == "rotate":
                current = ev.next_binlog
    finally:
        stream.close()


_CONNECTION_LOST = (2006, 2013)  # pymysql: server gone away, lost connection during query


class _StreamLost(pymysql.err.OperationalError):  # type: ignore[misc]
    """The binlog connection dropped after the stream started; the library wanted to resume silently."""


class _NoSilentResume:
    """Connection factory for BinLogStreamReader that refuses the library's silent resume.

    On a lost connection (errors 2006/2013) python-mysql-replication reconnects by itself and resumes
    at the end of the last event it read, which may be inside a transaction. The resumed stream starts
    with an artificial Rotate, after which the transaction's remaining row events reference a table map
    sent before the drop: the library cannot decode them and drops them without a word, and the
    transaction still ends with its Xid, so the counts match. That is silent loss (the fault suite saw
    388 of 60,000 rows of one transaction vanish after a `KILL` of the dump thread). So the stream
    connection is made once; a second one is refused, the read fails with a SourceError, and the step is
    retried from the window's start (reading and staging are idempotent). The control connection
    (`information_schema`, used for table metadata) may reconnect: it carries no position.
    """

    def __init__(self) -> None:
        self.stream_connects = 0

    def __call__(self, **kwargs: Any) -> Any:
        if kwargs.get("db") != "information_schema":
            self.stream_connects += 1
            if self.stream_connects > 1:
                raise _StreamLost(2013, "lost the binlog connection in the middle of the stream")
        return open_connection(**kwargs)


def _stream_error(e: BaseException, params: SourceParams, file: str, offset: int) -> SourceError:
    if isinstance(e, _StreamLost):
        return SourceError(
            f"the connection to the source at {params.address} was lost while reading the binlog (this read "
            f"started at {file}:{offset}); a resumed stream can skip rows of the transaction it resumes in, so "
            "the read stops here and nothing it read is kept. Retry the step: it re-reads the window from its start"
        )
    code = e.args[0] if e.args and isinstance(e.args[0], int) else None
    text = str(e.args[1]) if len(e.args) > 1 else str(e)
    if code == 1236:
        if "could not find" in text.lower() or "purged" in text.lower():
            return PositionPurged(
                f"binlog {file} (reading from offset {offset}) is no longer on the source at {params.address}: "
                f"{text}. The changes there are gone; backfill from a later timestamp or re-snapshot the tables"
            )
        return SourceError(
            f"the source at {params.address} refused to send its binlog from {file}:{offset}: {text}. "
            "The position is not inside the server's binlog (was the server reset or replaced?)"
        )
    return source_error_from(e, params, doing="read the binlog from")


# ------------------------------------------------------------------------------------- boundaries


def _parse_state(text: str | None, flavor: str) -> GtidSet | None:
    if text is None:
        return None
    if flavor == "mariadb":
        return mariadb_gtid_state(text)
    return MysqlGtidSet.parse(text)


class _TxnAssembler:
    """Turns a stream of `_Ev` into `TxnBoundary`s (pure; no I/O).

    `feed` returns the boundary completed by this event, if any. The GTID state is tracked from
    `start_gtid`; when that is unknown, the Gtid_list / Previous_gtids event at the head of the next
    file supplies it.
    """

    def __init__(
        self,
        identity: ServerIdentity,
        epoch: int,
        start_gtid: str | None,
        prev_commit_ts: float | None = None,
        *,
        track_gtid: bool = True,
        boundaries: bool = True,
    ) -> None:
        self.identity = identity
        # Readers only need where each transaction ends and when it committed: without `boundaries`,
        # `feed` returns the closing event itself (its file, end and timestamp) instead of a TxnBoundary.
        self.boundaries = boundaries
        self.flavor = identity.flavor
        self.epoch = epoch
        # Readers only count transactions: without GTID tracking, boundaries carry no GTID state.
        self.track_gtid = track_gtid
        self.state: GtidSet | None = _parse_state(start_gtid, self.flavor) if track_gtid else None
        self.prev_commit_ts = prev_commit_ts
        self._reset()

    def _reset(self) -> None:
        self.in_txn = False
        self.begun = False
        self.t_file = ""
        self.t_start = 0
        self.t_gtid: str | None = None
        self.t_events = 0
        self.t_ddl = False

    def _open(self, ev: _Ev, gtid: str | None, begun: bool, ddl: bool = False) -> None:
        if self.in_txn:
            log.warning("binlog transaction at %s:%s never committed; dropped", self.t_file, self.t_start)
        self.in_txn = True
        self.begun = begun
        self.t_file, self.t_start, self.t_gtid, self.t_events = ev.file, ev.start, gtid, 0
        self.t_ddl = ddl

    def _close(self, ev: _Ev, is_ddl: bool) -> Any:
        if not self.boundaries:
            self._reset()
            return ev
        start_state = self.state
        if self.state is not None and self.t_gtid is not None:
            self.state = self.state.add(self.t_gtid)
        end = BinlogPosition(
            file=ev.file,
            offset=ev.end,
            server=self.identity,
            gtid=None if self.state is None else str(self.state),
            commit_ts=float(ev.timestamp),
            epoch=self.epoch,
        )
        b = TxnBoundary(
            start_file=self.t_file,
            start_offset=self.t_start,
            end=end,
            gtid=self.t_gtid,
            events=self.t_events,
            bytes=ev.end - self.t_start if ev.file == self.t_file else ev.end,
            is_ddl=is_ddl or self.t_ddl,
            start_gtid=None if start_state is None else str(start_state),
            prev_commit_ts=self.prev_commit_ts,
        )
        self.prev_commit_ts = end.commit_ts
        self._reset()
        return b

    def feed(self, ev: _Ev) -> Any:
        """The TxnBoundary this event completes (with `boundaries=False`: the event), else None."""
        k = ev.kind
        if k == "gtid":
            # MariaDB's GTID event opens the transaction (no BEGIN follows) unless it is standalone (DDL).
            self._open(ev, ev.gtid, begun=self.flavor == "mariadb" and not ev.standalone, ddl=ev.ddl)
            self.t_events = 1
            return None
        if k == "gtid_list":
            if self.track_gtid and not self.in_txn and ev.gtid is not None:
                header = _parse_state(ev.gtid, self.flavor)
                if self.state is None and header is not None and (self.flavor == "mariadb" or header):
                    self.state = header
            return None
        if k in ("rotate", "header"):
            return None
        if k == "begin":
            if not self.in_txn:
                self._open(ev, None, begun=True)
            self.begun = True
            self.t_events += 1
            return None
        if k == "commit":
            if not self.in_txn:
                return None
            self.t_events += 1
            return self._close(ev, is_ddl=False)
        if k == "query":
            if self.in_txn and self.begun:
                self.t_events += 1
                return None
            if not self.in_txn:  # a statement without GTID or BEGIN (old servers): its own transaction
                self._open(ev, None, begun=False)
            self.t_events += 1
            return self._close(ev, is_ddl=not ev.query.upper().startswith("XA "))
        # table maps, rows, annotate/intvar/rand/user-var events, checkpoints
        if self.in_txn:
            self.t_events += 1
        return None


# ---------------------------------------------------------------------------------------- scanner


class BinlogScanner:
    """Cheap scans of transaction boundaries (rows are skipped without decoding)."""

    def __init__(
        self, params: SourceParams, identity: ServerIdentity, server_id_for_replica: int | None = None
    ) -> None:
        self.params = params
        self.identity = identity
        self.server_id = server_id_for_replica or random_replica_server_id()

    def _events(self, file: str, offset: int) -> Generator[_Ev, None, None]:
        return _stream_events(self.params, file, offset, self.identity.flavor, server_id=self.server_id, rows=ROWS_SKIP)

    def scan_transactions(
        self,
        start_file: str,
        start_offset: int,
        start_gtid: str | None,
        epoch: int,
        *,
        stop: tuple[str, int] | None = None,
        start_commit_ts: float | None = None,
    ) -> Generator[TxnBoundary, None, None]:
        """Complete transactions from a boundary up to the current end of the binlog (or `stop`), across files.

        A transaction is yielded only when its commit event ends at or before `stop`. Stop consuming
        whenever you like: the stream is closed with the generator.
        """
        with closing(self.scan_to_end(start_file, start_offset, start_gtid, epoch, stop=stop,
                                      start_commit_ts=start_commit_ts, tail=False)) as scan:
            for b in scan:
                if isinstance(b, TxnBoundary):
                    yield b

    def scan_to_end(
        self,
        start_file: str,
        start_offset: int,
        start_gtid: str | None,
        epoch: int,
        *,
        stop: tuple[str, int] | None = None,
        start_commit_ts: float | None = None,
        tail: bool = True,
    ) -> Generator[TxnBoundary | QuietTail, None, None]:
        """`scan_transactions`, and with `tail` a scan that reaches the end of the binlog (or `stop`)
        finishes with a `QuietTail` when events without row changes follow the last transaction (or
        the start) and no transaction is open after them (what stream and backfill windows plan over:
        a backfill's last window then ends exactly at its `until`, a position that may follow such
        events)."""
        asm = _TxnAssembler(self.identity, epoch, start_gtid, start_commit_ts)
        stop_key = _pos_key(*stop) if stop is not None else None
        start_key = _pos_key(start_file, start_offset)
        last_end = start_key  # end of the last transaction yielded (or the start)
        idle: tuple[str, int] | None = None  # end of the last event seen outside any transaction
        with closing(self._events(start_file, start_offset)) as events:
            for ev in events:
                if ev.end == 0:
                    continue  # artificial rotate / header
                if _pos_key(ev.file, ev.start) < start_key:
                    continue
                if stop_key is not None and _pos_key(ev.file, ev.start) >= stop_key:
                    break
                b = asm.feed(ev)
                if b is not None:
                    last_end = _pos_key(b.end.file, b.end.offset)
                    idle = None
                    yield b
                elif not asm.in_txn and (stop_key is None or _pos_key(ev.file, ev.end) <= stop_key):
                    idle = (ev.file, ev.end)
        if tail and idle is not None and _pos_key(*idle) > last_end:
            state = None if asm.state is None else str(asm.state)
            yield QuietTail(BinlogPosition(idle[0], idle[1], self.identity, state, asm.prev_commit_ts, epoch))

    def file_transactions(self, file: str) -> Generator[TxnBoundary, None, None]:
        """Every complete transaction that starts in `file`, read from the file's start (epoch 0).

        GTID states come from the file's Gtid_list / Previous_gtids header.
        """
        asm = _TxnAssembler(self.identity, 0, None)
        with closing(self._events(file, 4)) as events:
            for ev in events:
                if ev.file != file:
                    return  # rotated into the next file
                if ev.end == 0:
                    continue
                b = asm.feed(ev)
                if b is not None:
                    yield b
                if ev.kind == "rotate":
                    return

    def file_start_gtid(self, file: str) -> str | None:
        """The GTID state at the start of `file` (its Gtid_list / Previous_gtids event), None without GTIDs."""
        with closing(self._events(file, 4)) as events:
            for ev in events:
                if ev.end == 0:
                    continue
                if ev.kind == "gtid_list":
                    state = _parse_state(ev.gtid, self.identity.flavor)
                    if self.identity.flavor == "mariadb" or state:
                        return str(state)
                    return None
                if ev.kind in ("gtid", "begin", "query", "commit", "rotate") or ev.file != file:
                    break
        return None

    def first_event_time(self, file: str) -> float | None:
        """Commit time of the first transaction in `file` (None when it holds none)."""
        with closing(self.file_transactions(file)) as txns:
            for b in txns:
                return b.commit_ts
        return None

    def transaction_start_at_or_before(self, file: str, offset: int) -> tuple[str, int]:
        """The last transaction boundary at or before (file, offset): a transaction's start when the
        offset falls inside it, else the end of the transaction before it (or the file's start, 4)."""
        best = 4
        with closing(self.file_transactions(file)) as txns:
            for b in txns:
                if b.start_offset > offset:
                    break
                best = b.start_offset
                if b.end.offset <= offset:
                    best = b.end.offset
        return file, best


# ------------------------------------------------------------------------------------ table schemas

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


def _collation_charsets(dbms: str) -> dict[str, str]:
    return {c.collation: c.name for c in _library_charsets._by_id.get(dbms, {}).values()}


_CHARSET_BY_COLLATION = {"mariadb": _collation_charsets("mariadb"), "mysql": _collation_charsets("mysql")}


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


class _SchemaBuilder:
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

    def build(self, ev: TableMapEvent) -> TableSchema:
        schema, table = ev.schema, ev.table
        name = table_id(schema, table)
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
        if self.flavor == "mariadb" and any(c.mysql_type == "longtext" for c in columns):
            # MariaDB's JSON is a LONGTEXT with a json_valid CHECK: only information_schema knows.
            known = self.lookup(schema, table)
            if known is not None:
                json_cols = {c.name for c in known.columns if c.mysql_type == "json"}
                columns = [
                    SourceColumn(c.name, "json", c.nullable, ())
                    if c.mysql_type == "longtext" and c.name in json_cols
                    else c
                    for c in columns
                ]
        if not key:
            known = self.lookup(schema, table)
            if known is not None and known.key and set(known.key) == set(known.column_names):
                key = tuple(names)  # configured full-row key: all columns in force now
            elif known is not None and known.key and all(k in names for k in known.key):
                key = known.key
            else:
                raise MissingKey(
                    f"pipeline {self.pipeline!r}: table {name} has no primary key in the binlog and no usable "
                    "UNIQUE NOT NULL key in information_schema; add a primary key, list the table under "
                    "tables.full_row_key, or exclude it"
                )
        built = TableSchema(schema=schema, table=table, columns=tuple(columns), key=key)
        # One object per distinct shape: every transaction re-sends the table map, and consumers
        # (staging) take the fast path when consecutive changes share the very same TableSchema.
        return self._interned.setdefault(built, built)


# -------------------------------------------------------------------------------------------- DDL

_IDENT = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$\u0080-\uffff]+)"
_NAME = rf"({_IDENT}(?:\s*\.\s*{_IDENT})?)"
_DDL_PATTERNS = [
    re.compile(rf"^\s*ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?{_NAME}", re.I),
    re.compile(
        rf"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_NAME}", re.I
    ),
    re.compile(rf"^\s*TRUNCATE\s+(?:TABLE\s+)?{_NAME}", re.I),
    re.compile(rf"^\s*(?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?"
               rf"INDEX\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_IDENT}\s+ON\s+{_NAME}", re.I),
]
_DROP_TABLE = re.compile(r"^\s*DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?(.*)$", re.I | re.S)
_RENAME_TABLE = re.compile(r"^\s*RENAME\s+TABLES?\s+(.*)$", re.I | re.S)
_DATABASE_DDL = re.compile(
    rf"^\s*(?:CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?({_IDENT})", re.I
)


def _unquote(ident: str) -> str:
    ident = ident.strip()
    if ident.startswith("`") and ident.endswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def _split_name(name: str, default_schema: str) -> tuple[str, str]:
    parts = re.findall(_IDENT, name)
    if len(parts) >= 2:
        return _unquote(parts[0]), _unquote(parts[1])
    return default_schema, _unquote(parts[0]) if parts else ""


def ddl_targets(query: str, default_schema: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Tables (schema, table) and whole schemas a DDL statement touches, by light parsing.

    Unknown statements touch nothing (GRANT, CREATE USER, ...).
    """
    q = re.sub(r"/\*(?!!).*?\*/", " ", query, flags=re.S).strip()  # plain comments, not /*! ... */
    for pat in _DDL_PATTERNS:
        m = pat.match(q)
        if m:
            return [_split_name(m.group(1), default_schema)], []
    m = _DROP_TABLE.match(q)
    if m:
        names = re.findall(rf"{_IDENT}(?:\s*\.\s*{_IDENT})?", m.group(1).split("/*")[0])
        return [_split_name(n, default_schema) for n in names if n.upper() not in ("RESTRICT", "CASCADE")], []
    m = _RENAME_TABLE.match(q)
    if m:
        names = re.findall(rf"{_IDENT}(?:\s*\.\s*{_IDENT})?", m.group(1))
        return [_split_name(n, default_schema) for n in names if n.upper() not in ("TO",)], []
    m = _DATABASE_DDL.match(q)
    if m:
        return [], [_unquote(m.group(1))]
    return [], []


def _ddl_schema(query: str, schema: str, table_filter: TableFilter) -> str | None:
    """The schema to report a DDL under when it touches a captured table (or a schema that may hold one), else None.

    That is the statement's default database, or when it has none, the schema it names.
    """
    tables, schemas = ddl_targets(query, schema)
    hit = [s for s, t in tables if table_filter.matches(s, t)]
    hit += [s for s in schemas if table_filter.may_match_schema(s)]
    if not hit:
        return None
    return schema or hit[0]


def _ddl_typer(
    table_filter: TableFilter, policy: SchemaPolicy | None, pipeline: str, builder: _SchemaBuilder
) -> Callable[[_Ev], DdlStatement | None]:
    """The window's DDL statements of captured tables, typed (cdc_core.capture.ddl_events), with the key of each
    table they change as the source describes it (a table the window changes only by DDL has no row to tell)."""
    active = policy or SchemaPolicy()

    def typed(ev: _Ev) -> DdlStatement | None:
        assert ev.query is not None
        found = typed_statement(
            ev.query, ev.schema or "", version=0, commit_ts=float(ev.timestamp or 0), position=f"{ev.file}:{ev.start}",
            captured=table_filter.matches, schema_captured=table_filter.may_match_schema, policy=active,
            pipeline=pipeline,
        )
        if found is None or not found.tables:
            return found
        keys = []
        for schema, table in found.tables:
            shape = builder.lookup(schema, table)
            keys.append(tuple(shape.key) if shape is not None else ())
        return replace(found, keys=tuple(keys))

    return typed


# ------------------------------------------------------------------------------------ read_changes


def _verify_identity(params: SourceParams, identity: ServerIdentity) -> None:
    conn = connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id, VERSION()")
            row = cur.fetchone()
            server_id, version = int(row[0]), str(row[1])
            uuid = None
            if "mariadb" not in version.lower():
                cur.execute("SELECT @@server_uuid")
                uuid = str(cur.fetchone()[0])
    finally:
        conn.close()
    found = ServerIdentity("mariadb" if "mariadb" in version.lower() else "mysql", server_id, uuid)
    if not found.same_server(identity):
        raise SourceError(
            f"the window was planned on {identity} but the source at {params.address} is now {found}: binlog file "
            "names and offsets do not carry over to another server. Let the next run re-plan from the cursor "
            "(failover handling), or point the source connection back at the original server"
        )


def read_changes(
    params: SourceParams,
    identity: ServerIdentity,
    plan: WindowPlan,
    table_filter: TableFilter,
    schemas: Callable[[str, str], TableSchema | None] | None = None,
    *,
    server_id_for_replica: int | None = None,
    zero_dates: str = "null",
    schema_policy: SchemaPolicy | None = None,
) -> Iterator[RowChange | SchemaChangeEvent]:
    """The window's changes, exactly `[plan.start, plan.end)`, in binlog order.

    `zero_dates` is the pipeline setting: "refuse" raises UnsupportedType on a zero or partial
    DATE/DATETIME/TIMESTAMP value, "null" lands it as NULL.

    Rows of one transaction are buffered until its commit event (that is where the commit time is),
    so memory grows with the largest transaction in the window, not with the window. Raises
    SourceError when the binlog does not hold the planned window (server replaced, files purged,
    transaction count differs from the plan).
    """
    if plan.start.same_point(plan.end):
        return
    _verify_identity(params, identity)
    flavor = identity.flavor
    builder = _SchemaBuilder(flavor, schemas, params, plan.pipeline)
    typer = _ddl_typer(table_filter, schema_policy, plan.pipeline, builder)
    asm = _TxnAssembler(identity, plan.start.epoch, plan.start.gtid, plan.start.commit_ts)
    start_key = _pos_key(plan.start.file, plan.start.offset)
    end_key = _pos_key(plan.end.file, plan.end.offset)
    epoch = plan.start.epoch
    # table_id -> schema (None: not captured); kept across transactions like the library's own map
    tables: dict[int, TableSchema | None] = {}
    # The open transaction's changes in binlog order: row tuples (op, schema, values, version) and DDL
    # tuples ("DDL", schema name, query, version).
    pending: list[tuple[Any, ...]] = []
    ordinal = 0
    transactions = 0
    last_end: tuple[int, int] | None = None
    last_label = "nothing"
    events = _stream_events(
        params,
        plan.start.file,
        plan.start.offset,
        flavor,
        server_id=server_id_for_replica or random_replica_server_id(),
        only_schemas=table_filter.literal_schemas(),
    )
    with closing(events):
        for ev in events:
            if ev.kind in _FORGET_TABLES:
                tables.clear()
            if ev.end == 0:
                continue
            key = _pos_key(ev.file, ev.start)
            if key < start_key:
                continue
            if key >= end_key:
                break
            if ev.kind == "gtid":
                pending.clear()
            elif ev.kind == "tablemap":
                tm = ev.raw
                if table_filter.matches(tm.schema, tm.table):
                    tables[tm.table_id] = builder.build(tm)
                else:
                    tables[tm.table_id] = None
            elif ev.kind == "rows":
                rows_ev = ev.raw
                schema = tables.get(rows_ev.table_id)
                if schema is not None:
                    version = change_version(epoch, ev.file, ev.start)
                    _row_changes(rows_ev, schema, version, pending)
                    if zero_dates == "refuse":
                        _refuse_zero_dates(plan.pipeline, schema, rows_ev.rows)
            elif ev.kind == "query":
                # DDL is a statement of its own, or opens a group (CREATE ... SELECT); DML statements
                # (statement-based logging inside a transaction) name no DDL target and are skipped.
                ddl = typer(ev)
                if ddl is not None:
                    pending.append(("DDL", replace(ddl, version=change_version(epoch, ev.file, ev.start)), None, 0))
            b = asm.feed(ev)
            if b is None:
                if not asm.in_txn:  # an event without row changes after the last transaction (QuietTail)
                    last_end = _pos_key(ev.file, ev.end)
                    last_label = f"up to {ev.file}:{ev.end}"
                continue
            transactions += 1
            last_end = _pos_key(b.end.file, b.end.offset)
            last_label = f"up to {b.end.file}:{b.end.offset}"
            commit_ts = float(b.end.commit_ts or 0.0)
            for op, schema, values, version in pending:
                ordinal += 1
                if op == "DDL":
                    yield SchemaChangeEvent.of(ordinal, schema)
                else:
                    yield RowChange(
                        op=op, table=schema, values=values, version=version, ordinal=ordinal, commit_ts=commit_ts
                    )
            pending.clear()
    if last_end != end_key:
        raise SourceError(
            f"pipeline {plan.pipeline!r}: window {plan.label()} could not be read to its end from "
            f"{params.address}: read {last_label} ({transactions} complete transactions). The binlog no longer holds "
            "the planned window (files purged, server reset or replaced); see the source, then re-plan"
        )
    if plan.transactions and transactions != plan.transactions:
        raise SourceError(
            f"pipeline {plan.pipeline!r}: window {plan.label()} holds {transactions} transactions on "
            f"{params.address} but {plan.transactions} when it was planned: the binlog changed under the plan "
            "(server reset or replaced). Do not merge this window; investigate the source"
        )


# The columnar reader cuts a window into transaction-aligned slices of about this many bytes of row
# images (or events), decoded inline or, for windows of at least PARALLEL_MIN_BYTES, by worker processes.
SLICE_BYTES = 4 * 1024 * 1024
SLICE_EVENTS = 20_000
BATCH_ROWS = 16_384
PARALLEL_MIN_BYTES = 32 * 1024 * 1024


def decode_workers(plan: WindowPlan, native: bool | None = None) -> int:
    """Worker processes for decoding a window: none for small windows (starting them costs more), and
    none with the compiled row walk (`native`, default: when it is available): what is left to decode
    then costs less than pickling each slice's images to a worker and its batches back (measured on
    2 cores: inline 1.2-1.8x faster on text, JSON and wide tables; bench/RESULTS.md, issue 19)."""
    from cdc_core.capture import rowdecode

    if rowdecode.native_available() if native is None else native:
        return 0
    cores = os.cpu_count() or 1
    if cores < 2 or plan.bytes < PARALLEL_MIN_BYTES:
        return 0
    return min(cores, 4)


class _InlineDecoder:
    """Decodes slices in the reader's process, on one background thread: its numpy and Arrow work runs
    while the reader thread reads the next slice's packets (the per-row scan shares the GIL)."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdc-decode")

    def submit(self, job: tuple[Any, ...]) -> Callable[[], rowdecode.SliceResult]:
        from cdc_core.capture.rowdecode import decode_slice

        return self.pool.submit(decode_slice, job).result

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def read_change_batches(
    params: SourceParams,
    identity: ServerIdentity,
    plan: WindowPlan,
    table_filter: TableFilter,
    schemas: Callable[[str, str], TableSchema | None] | None = None,
    *,
    server_id_for_replica: int | None = None,
    workers: int | None = None,
    batch_rows: int = BATCH_ROWS,
    slice_bytes: int = SLICE_BYTES,
    vectorize: bool = True,
    zero_dates: str = "null",
    native: bool | None = None,
    schema_policy: SchemaPolicy | None = None,
) -> Iterator[RowBatch | SchemaChangeEvent]:
    """The window's changes like `read_changes`, decoded column-wise straight into the staged form.

    Same window, same checks, same changes (op, version, ordinal, commit time, values after the type
    map) as `read_changes` + staging's conversion, but as `RowBatch`es of one table each: row images
    are decoded from the rows-event bytes by per-table compiled scanners and vectorized column kernels
    (`cdc_core.capture.rowdecode`) instead of the library's per-value Python, over transaction-aligned slices
    of the window, by `workers` processes (default `decode_workers(plan)`; 0: in this process).
    Batches come in ordinal order per table (tables interleave); a DDL event after the batches of
    its slice. `vectorize=False` decodes every column with the per-value functions (tests compare).
    `native`: walk row images with the compiled scanner (default: when built and not switched off with
    CDC_NATIVE_DECODER=0; `rowdecode.native_available`); False runs the same walk as generated Python.
    """
    if plan.start.same_point(plan.end):
        return
    from cdc_core.capture import rowdecode  # numpy and the decoders: only for a window with changes
    from cdc_core.capture.decode_worker import WorkerPool

    _verify_identity(params, identity)
    flavor = identity.flavor
    builder = _SchemaBuilder(flavor, schemas, params, plan.pipeline)
    typer = _ddl_typer(table_filter, schema_policy, plan.pipeline, builder)
    asm = _TxnAssembler(identity, plan.start.epoch, None, plan.start.commit_ts, track_gtid=False, boundaries=False)
    start_key = _pos_key(plan.start.file, plan.start.offset)
    end_key = _pos_key(plan.end.file, plan.end.offset)
    end_index, end_offset = end_key
    epoch = plan.start.epoch
    tables: dict[int, tuple[int, rowdecode.TableSpec] | None] = {}  # table id -> (slice table id, spec)
    specs: dict[tuple[str, str], tuple[int, rowdecode.TableSpec]] = {}  # current shape per table name
    transactions = 0
    last_end: tuple[int, int] | None = None
    last_file = ""
    use_native = rowdecode.native_available() if native is None else native
    nworkers = decode_workers(plan, use_native) if workers is None else workers
    decoder: Any = WorkerPool(nworkers) if nworkers > 0 else _InlineDecoder()
    inflight: deque[tuple[Callable[[], rowdecode.SliceResult], list[DdlStatement]]] = deque()
    base = 0  # ordinals taken by the slices already yielded
    current = rowdecode.Slice()

    ids = itertools.count(1)  # slice table ids: a new shape of a table gets a later id (staged after)

    def table_spec(tm: Any) -> tuple[int, rowdecode.TableSpec]:
        spec = rowdecode.TableSpec(builder.build(tm), rowdecode.table_layout(tm), zero_dates)
        name = (spec.shape.schema, spec.shape.table)
        known = specs.get(name)
        if known is None or known[1] != spec:
            known = specs[name] = (next(ids), spec)
        return known

    def finish(result: Callable[[], rowdecode.SliceResult], ddl: list[DdlStatement]) -> Iterator[Any]:
        nonlocal base
        try:
            done = result()
        except UnsupportedType as e:  # a refused zero date (zero_dates: refuse): name the pipeline
            raise _with_pipeline(plan.pipeline, e) from None
        yield from rowdecode.finish_slice(done, base)
        for statement, ordinal in zip(ddl, done.ddl_ordinals, strict=True):
            yield SchemaChangeEvent.of(base + ordinal, statement)
        base += done.ordinals

    def submit(sl: rowdecode.Slice) -> Iterator[Any]:
        inflight.append((decoder.submit(sl.job(batch_rows, vectorize, use_native)), sl.ddl))
        while len(inflight) > max(1, nworkers):  # one slice decoding per worker (or the decode thread)
            yield from finish(*inflight.popleft())

    events = _stream_events(
        params,
        plan.start.file,
        plan.start.offset,
        flavor,
        server_id=server_id_for_replica or random_replica_server_id(),
        only_schemas=table_filter.literal_schemas(),
        rows=ROWS_RAW,
    )
    file, file_index = "", -1  # the file of the last event and its index (events come file by file)
    started = False
    try:
        with closing(events):
            for ev in events:
                kind = ev.kind
                if kind in _FORGET_TABLES:
                    tables.clear()
                if ev.end == 0:
                    continue
                if ev.file is not file:
                    file, file_index = ev.file, _file_index(ev.file)
                if not started:
                    if (file_index, ev.start) < start_key:
                        continue
                    started = True
                if file_index > end_index or (file_index == end_index and ev.start >= end_offset):
                    break
                if kind == "rows":
                    raw = ev.raw
                    found = tables.get(raw.table_id) if raw is not None else None
                    if found is not None:
                        if raw.__class__ is not RawRows:
                            raise StagingError(
                                f"pipeline {plan.pipeline!r}: a rows event of {found[1].shape.name} at "
                                f"{ev.file}:{ev.start} does not carry full row images; the source must log full "
                                "row images (binlog_row_image=FULL, binlog_row_metadata=FULL)"
                            )
                        current.add_rows(
                            found[0], found[1], _EV_KIND[raw.kind], _change_version(epoch, ev.file, ev.start),
                            raw.data, raw.start, raw.end,
                        )
                elif kind == "gtid":
                    current.rollback()  # a transaction that never committed: its rows are dropped
                elif kind == "tablemap":
                    tm = ev.raw
                    tables[tm.table_id] = table_spec(tm) if table_filter.matches(tm.schema, tm.table) else None
                elif kind == "query":
                    ddl = typer(ev)
                    if ddl is not None:
                        current.add_ddl(replace(ddl, version=change_version(epoch, ev.file, ev.start)))
                b = asm.feed(ev)
                if b is None:
                    if not asm.in_txn:  # an event without row changes after the last transaction (QuietTail)
                        last_end, last_file = (file_index, ev.end), file
                    continue
                transactions += 1
                last_end, last_file = (file_index, b.end), file  # b is this event: the transaction's end
                current.commit(float(b.timestamp or 0))
                if current.nbytes >= slice_bytes or len(current.order) >= SLICE_EVENTS:
                    yield from submit(current)
                    current = rowdecode.Slice()
        if last_end != end_key:
            last_label = "nothing" if last_end is None else f"up to {last_file}:{last_end[1]}"
            raise SourceError(
                f"pipeline {plan.pipeline!r}: window {plan.label()} could not be read to its end from "
                f"{params.address}: read {last_label} ({transactions} complete transactions). The binlog no longer "
                "holds the planned window (files purged, server reset or replaced); see the source, then re-plan"
            )
        if plan.transactions and transactions != plan.transactions:
            raise SourceError(
                f"pipeline {plan.pipeline!r}: window {plan.label()} holds {transactions} transactions on "
                f"{params.address} but {plan.transactions} when it was planned: the binlog changed under the plan "
                "(server reset or replaced). Do not merge this window; investigate the source"
            )
        current.rollback()
        if not current.empty:
            yield from submit(current)
        while inflight:
            yield from finish(*inflight.popleft())
    finally:
        decoder.shutdown()


_EV_KIND = {"write": 0, "update": 1, "delete": 2}  # rowdecode.EV_WRITE, EV_UPDATE, EV_DELETE


def _values(row: dict[str, Any], values: str, sources: str) -> dict[str, Any]:
    """A row image's values, with the empty sets the library hands back as None restored.

    python-mysql-replication returns None for both a NULL and an empty SET, but records which it was in
    the row's none-sources (the image's null bitmap vs a zero mask); an empty set is `set()`, which
    the type map lands as `''` like SELECT prints it."""
    vals: dict[str, Any] = row[values]
    empty = [name for name, why in (row.get(sources) or {}).items() if why == _NONE_EMPTY_SET]
    if not empty:
        return vals
    vals = dict(vals)
    for name in empty:
        if vals.get(name) is None:
            vals[name] = set()
    return vals


_ZERO_SOURCES = {_NONE_ZERO_DATE, _NONE_ZERO_DATETIME, _NONE_ZERO_DATETIME2}
_ZERO_TIMESTAMPS = (dt.datetime(1970, 1, 1), dt.datetime(1970, 1, 1, tzinfo=dt.UTC))


def _refuse_zero_dates(pipeline: str, schema: TableSchema, rows: list[dict[str, Any]]) -> None:
    """`zero_dates: refuse` on the library path: the library turns a zero or partial DATE/DATETIME into
    None (its none-source says why) and TIMESTAMP's zero value into the epoch."""
    from cdc_core.capture.rowdecode import zero_date_error

    types = {c.name: c.mysql_type for c in schema.columns}
    stamps = [c.name for c in schema.columns if c.mysql_type.startswith("timestamp")]
    for row in rows:
        for values, sources in (("values", "none_sources"), ("before_values", "before_none_sources"),
                                ("after_values", "after_none_sources")):
            for name, why in (row.get(sources) or {}).items():
                if why in _ZERO_SOURCES:
                    typ = types.get(name, "date")
                    raise _with_pipeline(pipeline, zero_date_error(schema.name, name, typ, "zero or partial"))
            vals = row.get(values)
            if vals:
                for name in stamps:
                    if vals.get(name) in _ZERO_TIMESTAMPS:
                        err = zero_date_error(schema.name, name, "timestamp", "0000-00-00 00:00:00")
                        raise _with_pipeline(pipeline, err)


def _with_pipeline(pipeline: str, e: Exception) -> UnsupportedType:
    return UnsupportedType(f"pipeline {pipeline!r}: {e}")


def _row_changes(ev: Any, schema: TableSchema, version: int, out: list[tuple[Any, ...]]) -> None:
    if isinstance(ev, WriteRowsEvent):
        for row in ev.rows:
            out.append((OP_INSERT, schema, _values(row, "values", "none_sources"), version))
    elif isinstance(ev, DeleteRowsEvent):
        for row in ev.rows:
            out.append((OP_DELETE, schema, _values(row, "values", "none_sources"), version))
    else:
        key = schema.key
        for row in ev.rows:
            before = _values(row, "before_values", "before_none_sources")
            after = _values(row, "after_values", "after_none_sources")
            if any(before.get(k) != after.get(k) for k in key):
                # A key change is a delete of the old key and an insert of the new one.
                out.append((OP_DELETE, schema, before, version))
                out.append((OP_INSERT, schema, after, version))
            else:
                out.append((OP_UPDATE, schema, after, version))
