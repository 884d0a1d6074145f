"""Where the binlog reader reaches past the public API of python-mysql-replication and pymysql.

Written against mysql-replication 1.0.17 (pinned exactly in pyproject.toml) and pymysql 1.1. Everything here
touches a private attribute, a name-mangled one or a behaviour the library does not document, so a new
version of either library is checked against this module first: the integration tests
(tests/integration/test_binlog_reader.py, test_fast_decoder_mariadb.py, test_value_paths_mariadb.py) read
real binlogs through every shim, and tests/faults/test_fault_infra.py kills the dump connection mid-stream.

Why each shim exists:

- `patch_charset_decoding` (applied on import): the library decodes text with Python codecs that differ
  from the server's for some charsets; it is pointed at the exact ones.
- `patch_query_status_vars` (applied on import): the library stops at a query event's status variable it does
  not know; MariaDB 11.2+ writes Q_CHARACTER_SET_COLLATIONS for any statement that names a charset without a
  collation (`CREATE DATABASE d CHARACTER SET utf8mb4`), so those and Q_GTID_FLAGS3 are read here (the latter
  kept as the event's `gtid_flags3`: a two-phase ALTER's phase).
- `LibraryEvents`: builds the library's event object for one packet as `BinLogStreamReader.fetchone`
  does, from the reader's settings kept in its name-mangled attributes (`_BinLogStreamReader__*`), so the
  reader can read packets itself and still hand the rare events to the library.
- `Packets`: reads the dump's packets off the library's pymysql connection (`_stream_connection`, pymysql's
  `_rfile`, `_next_seq_id`, `_force_close`, ...) without a packet object per event.
- `NoSilentResume`: the library's connection factory hook (`pymysql_wrapper`) used to refuse its silent
  resume after a lost connection, which can drop rows without a word, and, on MariaDB 11.4+, to ask for the
  Annotate_rows events the stream needs to place events the server wrote without a position
  (`_request_annotate_rows`, in the dump packet pymysql's `_write_bytes` sends).
- `previous_gtids_text`: MySQL's Previous_gtids event from the library's private `_gtids` list.
- `collation_charsets`: the library's charset table (`charsets._by_id`), collation name -> charset name;
  `learn_collations` adds the server's collation ids it lacks.
- `UnreadTableMap`: a table map the library fails on (MariaDB's COMPRESSED columns), its names read from the
  packet (pymysql's `_data`), so that it stops only a pipeline that captures the table.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants.BINLOG import FORMAT_DESCRIPTION_EVENT, ROTATE_EVENT, TABLE_MAP_EVENT
from pymysqlreplication.constants.CHARSET import Charset
from pymysqlreplication.constants.CHARSET import charsets as _library_charsets
from pymysqlreplication.event import PreviousGtidsEvent, QueryEvent
from pymysqlreplication.exceptions import StatusVariableMismatch
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import RowsEvent

from cdc_core.capture.source import open_connection
from cdc_core.model.logfmt import line
from cdc_core.model.types import python_codec

log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------ text decoding

_library_charset_to_encoding = RowsEvent.charset_to_encoding


def _charset_to_encoding(name: str) -> str:
    return python_codec(name) or str(_library_charset_to_encoding(name))


def patch_charset_decoding() -> None:
    """Point the library's text decoding at the server's exact codecs.

    It decodes latin1 as cp1252 (which raises on the five bytes cp1252 leaves undefined, which the server's
    latin1 maps to C1 controls) and utf16/utf32/ucs2 in the machine's byte order (the server's are
    big-endian). `cdc_core.model.types.CHARSET_CODECS` holds the exact codecs, as the columnar decoder uses
    them. Idempotent."""
    RowsEvent.charset_to_encoding = staticmethod(_charset_to_encoding)


patch_charset_decoding()


# ------------------------------------------------------------------- query events' status variables

# MariaDB's status variable codes past the library's (sql/log_event.h), and their payloads.
Q_GTID_FLAGS3 = 0x82  # 1 byte of flags; with COMMIT/ROLLBACK ALTER (two-phase ALTER), an 8-byte seq_no follows
Q_CHARACTER_SET_COLLATIONS = 0x83  # 1 byte count, then count x (charset id, collation id), 2 bytes each
# Gtid_log_event's flags for an ALTER logged in two phases (binlog_alter_two_phase): START ALTER is logged when it
# begins, then COMMIT ALTER or ROLLBACK ALTER (both carrying the START's seq_no), each with the statement's text.
FL_START_ALTER, FL_COMMIT_ALTER, FL_ROLLBACK_ALTER = 0x02, 0x04, 0x08
_ALTER_SEQ_NO_FLAGS = FL_COMMIT_ALTER | FL_ROLLBACK_ALTER
_unknown_codes_logged: set[int] = set()
_library_read_status_var = QueryEvent._read_status_vars_value_for_key


def _read_status_var(self: Any, key: int) -> None:
    if key == Q_GTID_FLAGS3:
        self.gtid_flags3 = self.packet.read_uint8()
        if self.gtid_flags3 & _ALTER_SEQ_NO_FLAGS:
            self.packet.advance(8)
    elif key == Q_CHARACTER_SET_COLLATIONS:
        self.packet.advance(4 * self.packet.read_uint8())
    else:
        try:
            _library_read_status_var(self, key)
        except StatusVariableMismatch:
            # A code newer than this module: its length is unknown, so the rest of the block is skipped (the
            # block's length is in the post-header). What is lost is what this event's statement says of its
            # session (sql_mode, charsets); sql_mode reads as unknown, which DDL handling treats conservatively.
            end = self._declared_post_header_len(13) + self.status_vars_length
            self.packet.advance(end - self.packet.read_bytes)
            if key not in _unknown_codes_logged:
                _unknown_codes_logged.add(key)
                log.warning(line("binlog.query_status_var_unknown", code=f"0x{key:02x}",
                               note="the rest of the status block of each query event with this code is skipped; "
                                    "its sql_mode may read as unknown (DDL then re-reads tables where it matters)"))


def patch_query_status_vars() -> None:
    """Let the library read MariaDB 11's query events (the codes above) and skip past codes it does not know,
    instead of stopping the stream. Idempotent."""
    QueryEvent._read_status_vars_value_for_key = _read_status_var


patch_query_status_vars()


# ---------------------------------------------------------------------------- the library's events


class LibraryEvents:
    """Builds python-mysql-replication's event object for one packet, as `BinLogStreamReader.fetchone`
    does, with the reader's own settings (kept in its name-mangled attributes)."""

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
        try:
            wrapper = BinLogPacketWrapper(
                pkt, s.table_map, s._ctl_connection, s.mysql_version, self.use_checksum,
                p("allowed_events_in_packet"), p("only_tables"), p("ignored_tables"), p("only_schemas"),
                p("ignored_schemas"), p("freeze_schema"), p("ignore_decode_errors"), p("verify_checksum"),
                p("optional_meta_data"), p("enable_logging"), p("use_column_name_cache"), p("post_header_lengths"),
            )
        except Exception as e:
            data = pkt._data
            if len(data) > 5 and data[5] == TABLE_MAP_EVENT:
                return UnreadTableMap.read(data, self.post_header_len(TABLE_MAP_EVENT, 8), e)
            raise
        ev = wrapper.event
        if wrapper.event_type == ROTATE_EVENT and wrapper.timestamp != 0:
            s.table_map = {}
        if wrapper.event_type == FORMAT_DESCRIPTION_EVENT and ev is not None:
            # Each binlog file says in its Format_description whether its events end in a CRC32: a server whose
            # binlog_checksum changed holds files of both kinds, and the library decides once, at connect time.
            if ev.checksum_algorithm is not None:
                self.use_checksum = ev.checksum_algorithm == 1
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


class UnreadTableMap:
    """A table map the library cannot read: MariaDB's COMPRESSED columns have types it does not know (their
    metadata then throws the rest of its reading off). Its table id and names are read here from the packet, so a
    table no pipeline captures costs nothing and a captured one is refused by name (table_maps.SchemaBuilder)."""

    __slots__ = ("error", "packet", "schema", "table", "table_id")

    def __init__(self, table_id: int, schema: str, table: str, error: str, packet: Any) -> None:
        self.table_id, self.schema, self.table, self.error = table_id, schema, table, error
        self.packet = packet  # timestamp, event_size, log_pos: as the library's packet has them

    @classmethod
    def read(cls, data: bytes, post_header_len: int, error: Exception) -> UnreadTableMap:
        pos = 20  # the OK byte and the 19-byte event header
        width = 4 if post_header_len == 6 else 6
        table_id = int.from_bytes(data[pos : pos + width], "little")
        pos += post_header_len
        schema_len = data[pos]
        schema = data[pos + 1 : pos + 1 + schema_len].decode("utf-8", "replace")
        pos += 2 + schema_len  # the length, the name, its NUL
        table = data[pos + 1 : pos + 1 + data[pos]].decode("utf-8", "replace")
        header = SimpleNamespace(timestamp=int.from_bytes(data[1:5], "little"),
                                 event_size=int.from_bytes(data[10:14], "little"),
                                 log_pos=int.from_bytes(data[14:18], "little"))
        return cls(table_id, schema, table, f"{type(error).__name__}: {error}", header)


# ------------------------------------------------------------------------------------------ packets


class Packets:
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


def packet_reader(stream: BinLogStreamReader) -> Callable[[], bytes]:
    """The payload of the dump's next packet, read off the stream's connection (once it is connected)."""
    return Packets(stream._stream_connection).read


# ------------------------------------------------------------------------------------ lost connections

CONNECTION_LOST = (2006, 2013)  # pymysql: server gone away, lost connection during query


class StreamLost(pymysql.err.OperationalError):  # type: ignore[misc]
    """The binlog connection dropped after the stream started; the library wanted to resume silently."""


class NoSilentResume:
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
        if kwargs.get("db") == "information_schema":
            return open_connection(**kwargs)
        self.stream_connects += 1
        if self.stream_connects > 1:
            raise StreamLost(2013, "lost the binlog connection in the middle of the stream")
        conn = open_connection(**kwargs)
        # Checksum-aware whatever binlog_checksum is now: the library says so only when it is CRC32 at connect
        # time, and a server refuses to send files written with CRC32 to a reader that did not say so (after a
        # switch to NONE). Each file's own setting is then read from its Format_description (LibraryEvents).
        with conn.cursor() as cur:
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'binlog_legacy_event_pos'")
            leaves_positions_out = cur.fetchone() is not None
            learn_collations(cur, "mariadb" if "mariadb" in conn.get_server_info().lower() else "mysql")
        if leaves_positions_out:
            _request_annotate_rows(conn)
        return conn


_COM_BINLOG_DUMP = 0x12
_BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02


def _request_annotate_rows(conn: Any) -> None:
    """Ask the server for its Annotate_rows events (which the library's file-position dump never asks for).

    MariaDB 11.4+ (binlog_legacy_event_pos=OFF, its default) writes the events inside a transaction with an
    end_log_pos of 0. The stream then places each of them right after the one before (stream.EventPositions),
    which is exact only if no event of the file is left out of the dump: unasked, the server leaves out the
    Annotate_rows event that precedes each statement's rows (binlog_annotate_row_events, on by default). The flag
    is set in the COM_BINLOG_DUMP packet the library writes: its flags are the two bytes after the command byte
    and the 4-byte position."""
    write = conn._write_bytes

    def write_dump(data: bytes) -> None:
        if len(data) > 11 and data[4] == _COM_BINLOG_DUMP:
            flags = int.from_bytes(data[9:11], "little") | _BINLOG_SEND_ANNOTATE_ROWS_EVENT
            data = data[:9] + flags.to_bytes(2, "little") + data[11:]
        write(data)

    conn._write_bytes = write_dump


# ------------------------------------------------------------------------------ library-held metadata


def previous_gtids_text(ev: PreviousGtidsEvent) -> str:
    """MySQL's Previous_gtids event as a GTID set text. The library renders this event oddly
    ("uuid-:['1-101']", with MySQL's exclusive interval ends), so its private `_gtids` list is read."""
    parts = []
    for entry in getattr(ev, "_gtids", []):
        uuid = entry[:36]
        ranges = [(int(lo), int(hi) - 1) for lo, hi in re.findall(r"(\d+)-(\d+)", entry[36:])]
        ranges = [(lo, hi) for lo, hi in ranges if hi >= lo]
        if ranges:
            parts.append(uuid + "".join(f":{lo}-{hi}" for lo, hi in ranges))
    return ",".join(parts)


def collation_charsets(dbms: str) -> dict[str, str]:
    """Collation name -> charset name of a server flavor ("mariadb", "mysql"), from the library's table."""
    return {c.collation: c.name for c in _library_charsets._by_id.get(dbms, {}).values()}


def learn_collations(cur: Any, dbms: str) -> None:
    """Add the server's collation ids that the library's table lacks (MariaDB 11's uca1400 family, 2048 and up; a
    newer server's). Unknown to the library, a table map's character column has no collation, and its text would
    land as bytes. Read from information_schema: COLLATIONS, and on MariaDB 10.10+ the collation-charset pairs
    (`utf8mb4_uca1400_ai_ci` is one collation, uca1400_ai_ci, applied to utf8mb4), which COLLATIONS does not list."""
    known = _library_charsets._by_id[dbms]
    cur.execute("SELECT ID, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS WHERE ID IS NOT NULL")
    rows = list(cur.fetchall())
    try:
        cur.execute("SELECT ID, CHARACTER_SET_NAME, FULL_COLLATION_NAME FROM "
                    "information_schema.COLLATION_CHARACTER_SET_APPLICABILITY WHERE ID IS NOT NULL")
        rows += cur.fetchall()
    except pymysql.err.OperationalError as e:
        if e.args[0] != _UNKNOWN_COLUMN:
            raise
    for cid, charset, collation in rows:
        if int(cid) not in known and charset and collation:
            _library_charsets.add(Charset(int(cid), str(charset), str(collation), dbms=dbms))


_UNKNOWN_COLUMN = 1054
