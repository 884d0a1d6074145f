"""The binlog as a stream of events, each reduced to what boundary tracking and the readers need.

`stream_events` connects with python-mysql-replication, then reads the dump's packets itself
(`compat.packet_reader`) and classifies each event (`StreamEvent`): the events every transaction carries
(MariaDB GTID, Xid, table maps of known tables, rows events) without the library's event objects, the rest
through the library exactly as `fetchone` would build them (`compat.LibraryEvents`). Positions are
`(file index, offset)` keys (`pos_key`); the stream's errors become SourceErrors that say what to do.
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
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
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_core.capture.binlog.compat import (
    CONNECTION_LOST,
    FL_ROLLBACK_ALTER,
    FL_START_ALTER,
    LibraryEvents,
    NoSilentResume,
    StreamLost,
    UnreadTableMap,
    packet_reader,
    previous_gtids_text,
)
from cdc_core.capture.binlog.compressed import COMPRESSED_EVENTS, plain_packet, rows_columns
from cdc_core.capture.binlog.xa import xid_name
from cdc_core.capture.source import SourceParams, source_error_from
from cdc_core.model.errors import PositionPurged, SourceError, StagingError
from cdc_core.model.positions import binlog_file_index, change_version

_ANONYMOUS_GTID_EVENT = 0x22
_MARIADB_FL_STANDALONE = 0x01
_MARIADB_FL_DDL = 0x20

# Replica server ids of our readers: high and random, so concurrent readers never share one (the server
# kills an existing dump connection when another registers with the same id) nor hit a real server's id.
_REPLICA_ID_RANGE = (1_000_000_000, 2_000_000_000)


def random_replica_server_id() -> int:
    return random.SystemRandom().randint(*_REPLICA_ID_RANGE)


@dataclass(slots=True)
class StreamEvent:
    """One binlog event reduced to what boundary tracking needs (built once per event: slots, not frozen)."""

    kind: str  # rotate | header | gtid | gtid_list | begin | commit | xa_prepare | query | tablemap | rows | other
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


# ------------------------------------------------------------------------------------------ positions


@functools.lru_cache(maxsize=256)
def cached_file_index(file: str) -> int:
    return binlog_file_index(file)


def pos_key(file: str, offset: int) -> tuple[int, int]:
    return (cached_file_index(file), offset)


@functools.lru_cache(maxsize=256)
def _version_base(epoch: int, file: str) -> int:
    return change_version(epoch, file, 0)


def fast_change_version(epoch: int, file: str, offset: int) -> int:
    """`positions.change_version`, with the per-file part computed once (called for every rows event)."""
    if not 0 <= offset <= 0xFFFFFFFF:
        return change_version(epoch, file, offset)  # raises with the full message
    return _version_base(epoch, file) | offset


# ------------------------------------------------------------------------------------------- events


def _classify(ev: Any, file: str, start: int, end: int) -> StreamEvent:
    ts = ev.packet.timestamp
    if isinstance(ev, RotateEvent):
        return StreamEvent("rotate", file, start, end, ts, query=ev.next_binlog, raw=ev)
    if isinstance(ev, FormatDescriptionEvent):
        return StreamEvent("header", file, start, end, ts)
    if isinstance(ev, MariadbGtidEvent):
        flags = ev.flags
        return StreamEvent(
            "gtid", file, start, end, ts, gtid=ev.gtid,
            standalone=bool(flags & _MARIADB_FL_STANDALONE), ddl=bool(flags & _MARIADB_FL_DDL),
        )
    if isinstance(ev, GtidEvent):
        return StreamEvent("gtid", file, start, end, ts, gtid=ev.gtid)
    if isinstance(ev, NotImplementedEvent) and ev.packet.event_type == _ANONYMOUS_GTID_EVENT:
        return StreamEvent("gtid", file, start, end, ts)
    if isinstance(ev, MariadbGtidListEvent):
        return StreamEvent("gtid_list", file, start, end, ts, gtid=",".join(g.gtid for g in ev.gtid_list))
    if isinstance(ev, PreviousGtidsEvent):
        return StreamEvent("gtid_list", file, start, end, ts, gtid=previous_gtids_text(ev))
    if isinstance(ev, XAPrepareEvent) and not ev.one_phase:  # its rows are changes only once committed (xa)
        return StreamEvent("xa_prepare", file, start, end, ts,
                           query=xid_name(ev.xid_format_id, ev.xid_gtrid, ev.xid_bqual))
    if isinstance(ev, (XidEvent, XAPrepareEvent)):
        return StreamEvent("commit", file, start, end, ts)
    if isinstance(ev, QueryEvent):
        q = ev.query.strip()
        schema = ev.schema.decode("utf-8", "replace") if isinstance(ev.schema, bytes) else str(ev.schema or "")
        word = q.rstrip(";").strip().upper()
        if word == "BEGIN" or word.startswith("XA START") or word.startswith("XA BEGIN"):
            return StreamEvent("begin", file, start, end, ts, query=q, schema=schema)
        if word in ("COMMIT", "ROLLBACK"):
            return StreamEvent("commit", file, start, end, ts, query=q, schema=schema)
        if getattr(ev, "gtid_flags3", 0) & (FL_START_ALTER | FL_ROLLBACK_ALTER):
            # An ALTER logged in two phases (binlog_alter_two_phase) changes the table at its COMMIT ALTER, which
            # repeats the statement; its START ALTER, and a ROLLBACK ALTER, change nothing: a transaction without
            # changes (applying both phases renamed twice; applying a rolled-back ALTER changed the lake alone).
            return StreamEvent("commit", file, start, end, ts, schema=schema)
        return StreamEvent("query", file, start, end, ts, query=q, schema=schema, raw=ev)
    if isinstance(ev, (TableMapEvent, UnreadTableMap)):
        return StreamEvent("tablemap", file, start, end, ts, raw=ev)
    if isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
        return StreamEvent("rows", file, start, end, ts, raw=ev)
    return StreamEvent("other", file, start, end, ts)


# Events after which table ids must be looked up afresh (see stream_events).
FORGET_TABLES = frozenset({"rotate", "header", "query"})

# Event types handled without building the library's event objects (the hot ones: every transaction).
_ARTIFICIAL_WHEN_UNPLACED = frozenset({0x04, 0x0F})  # Rotate, Format_description: a dump's own, not the file's
_XID_EVENT = 0x10
_ANNOTATE_ROWS_EVENT = 0xA0  # MariaDB: the statement of the rows events that follow (asked for on 11.4+ only)
_EXECUTE_LOAD_QUERY_EVENT = 0x12
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


def _load_query(lib: LibraryEvents, data: bytes, size: int) -> tuple[str, str]:
    """An Execute_load_query event's default database and statement (`LOAD DATA ... INTO TABLE ...`), which the
    library does not read: a query event's layout with 13 more post-header bytes."""
    schema_len = data[28]
    status_len = int.from_bytes(data[31:33], "little")
    pos = 20 + lib.post_header_len(_EXECUTE_LOAD_QUERY_EVENT, 26) + status_len
    end = 1 + size - (4 if lib.use_checksum else 0)
    schema = data[pos : pos + schema_len].decode("utf-8", "replace")
    return schema, data[pos + schema_len + 1 : end].decode("utf-8", "replace").strip()


def full_images(ncols: int, *bitmaps: bytes) -> bool:
    """Whether a rows event's column bitmaps (one; an update's two) name every column: a session with
    binlog_row_image MINIMAL, NOBLOB or FULL_NODUP (MariaDB 11.4+) leaves columns out, which
    python-mysql-replication reads as NULL."""
    full = (1 << ncols) - 1
    return all(int.from_bytes(b, "little") & full == full for b in bitmaps)


def partial_images_error(pipeline: str, table: str, file: str, start: int) -> StagingError:
    return StagingError(
        f"pipeline {pipeline!r}: a rows event of {table} at {file}:{start} does not carry full row images (a session "
        "with binlog_row_image MINIMAL, NOBLOB or FULL_NODUP wrote it): its missing columns are unknown, so none of it "
        "can land. "
        "The source must log full row images (binlog_row_image=FULL, binlog_row_metadata=FULL, and no session "
        "setting binlog_row_image otherwise)"
    )


def _raw_rows(lib: LibraryEvents, data: bytes, event_type: int, size: int) -> RawRows | None:
    """The row images of a rows event of a known table, or None when the library must decode it."""
    kind, v2 = _ROWS_EVENTS[event_type]
    table_id = int.from_bytes(data[20:26], "little")
    end = 1 + size - (4 if lib.use_checksum else 0)
    try:
        ncols, pos = rows_columns(data, lib.post_header_len(event_type, 10 if v2 else 8), v2)
    except ValueError:
        return None  # let the library read it
    nbytes = (ncols + 7) // 8
    full = (1 << ncols) - 1
    for _ in range(2 if kind == "update" else 1):  # full_images, inlined: this runs once per rows event
        if int.from_bytes(data[pos : pos + nbytes], "little") & full != full:
            return None  # not a full row image: left to the library, whose reader refuses it (partial_images_error)
        pos += nbytes
    return RawRows(kind, table_id, data, pos, end)


def stream_events(
    params: SourceParams,
    file: str,
    offset: int,
    *,
    server_id: int,
    only_schemas: tuple[str, ...] | None = None,
    rows: str = "library",
) -> Generator[StreamEvent, None, None]:
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

    Library facts this relies on (python-mysql-replication 1.0.17): `is_mariadb=False, resume_stream=True`
    with `log_file/log_pos` starts exactly there even on MariaDB; an event's start offset is
    `packet.log_pos - packet.event_size`; the first events are an artificial Rotate and Format_description
    with `log_pos` 0; non-blocking mode ends at the current end of the binlog; `end_log_pos` ignores the
    file name, so `(file, offset)` bounds are enforced by the readers.

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
        pymysql_wrapper=NoSilentResume(),
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
    next_start = offset  # where the next event begins: events without a position are placed from it
    ignored: set[int] = set()  # table ids whose table map the library filtered out (only_schemas)
    try:
        try:
            first = stream.fetchone()  # connects; the artificial Rotate to the starting file
            lib = LibraryEvents(stream)
            read_packet = packet_reader(stream)
        except pymysql.err.MySQLError as e:
            raise _stream_error(e, params, current, offset) from None
        if first is None:
            return
        stream.table_map.clear()
        if isinstance(first, RotateEvent):
            current = first.next_binlog
            yield StreamEvent("rotate", current, 0, 0, 0, query=first.next_binlog)
        header = _HEADER.unpack_from
        while True:
            try:
                data = read_packet()
            except pymysql.err.MySQLError as e:
                if e.args and e.args[0] in CONNECTION_LOST:  # never resumed: see compat.NoSilentResume
                    e = StreamLost(*e.args)
                raise _stream_error(e, params, current, offset) from None
            if data[0] == 0xFE and len(data) < 9:  # EOF: the end of the binlog (non-blocking dump)
                return
            if data[0] != 0:
                continue
            ts, etype, server, size, log_pos, _flags = header(data, 1)
            if log_pos:
                next_start = log_pos
            elif etype not in _ARTIFICIAL_WHEN_UNPLACED:
                # MariaDB 11.4+ (binlog_legacy_event_pos=OFF) writes a transaction's events without their end_log_pos.
                # They follow each other in the file, and the dump leaves none out (compat._request_annotate_rows).
                log_pos = next_start = next_start + size
            if log_pos:
                start = log_pos - size
                if etype == _ANNOTATE_ROWS_EVENT:
                    continue
                if etype in COMPRESSED_EVENTS:  # log_bin_compress: read as the plain event (same position)
                    data = plain_packet(data, lib.post_header_len, lib.use_checksum, f"{current}:{start}")
                    ts, etype, server, size, _log_pos, _flags = header(data, 1)
                if etype == _MARIADB_GTID_EVENT:
                    seq_no, domain, gflags = _GTID_BODY.unpack_from(data, 20)
                    yield StreamEvent(
                        "gtid", current, start, log_pos, ts, gtid=f"{domain}-{server}-{seq_no}",
                        standalone=bool(gflags & _MARIADB_FL_STANDALONE), ddl=bool(gflags & _MARIADB_FL_DDL),
                    )
                    continue
                if etype == _XID_EVENT:
                    yield StreamEvent("commit", current, start, log_pos, ts)
                    continue
                if etype == _EXECUTE_LOAD_QUERY_EVENT:  # LOAD DATA logged as a statement: refused as one (dml.py)
                    schema, query = _load_query(lib, data, size)
                    yield StreamEvent("query", current, start, log_pos, ts, query=query, schema=schema)
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
                        yield StreamEvent("rows", current, start, log_pos, ts, raw=raw)
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
                    yield StreamEvent("rotate", current, 0, 0, 0, query=ev.next_binlog)
                else:
                    yield StreamEvent("header", current, 0, 0, ts)
                continue
            e2 = _classify(ev, current, start, log_pos)  # start: where a compressed event was, not its plain one's
            if e2.kind in FORGET_TABLES:
                stream.table_map.clear()
                ignored.clear()
            yield e2
            if e2.kind == "rotate":
                current = ev.next_binlog
    finally:
        stream.close()


def _stream_error(e: BaseException, params: SourceParams, file: str, offset: int) -> SourceError:
    if isinstance(e, StreamLost):
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
