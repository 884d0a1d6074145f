"""What the binlog holds beyond plain transactions, the pure parts; against MariaDB:
tests/integration/test_binlog_quirks_mariadb.py and test_binlog_reader.py.

- Compressed events (log_bin_compress, cdc_core.capture.binlog.compressed) rebuilt as the plain ones.
- XA (two-phase) transactions (cdc_core.capture.binlog.xa): the outcome statements' xids, the boundaries' count
  of open XA transactions, windows that never end while one is open, and a slice that holds a prepared
  transaction's rows back until its XA COMMIT (and drops them at XA ROLLBACK).
- Savepoints kept in the binlog (cdc_core.capture.binlog.savepoints): the rows a ROLLBACK TO undid are dropped.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest

from cdc_core.capture import rowdecode
from cdc_core.capture.binlog.compressed import decompress, plain_packet
from cdc_core.capture.binlog.savepoints import Savepoints, savepoint_statement
from cdc_core.capture.binlog.stream import StreamEvent
from cdc_core.capture.binlog.transactions import TxnAssembler
from cdc_core.capture.binlog.xa import XA_COMMIT, XA_ROLLBACK, PreparedHold, xa_outcome, xid_name
from cdc_core.capture.rowdecode.layout import ColumnLayout
from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.errors import SourceError
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.window_plan import KIND_BACKFILL, WindowCaps
from cdc_core.model.windows import INFO_XA_OPEN, QuietTail, TxnBoundary, plan_window

pytestmark = pytest.mark.unit

MARIA = ServerIdentity("mariadb", 1)
X1 = xid_name(1, b"x1", b"")


@pytest.mark.parametrize(("query", "want"), [
    ("XA COMMIT X'7831',X'',1", (XA_COMMIT, X1)),  # as MariaDB and MySQL log it
    ("xa rollback 'x1'", (XA_ROLLBACK, X1)),
    ("XA COMMIT 0x7831, '', 1;", (XA_COMMIT, X1)),
    ("XA COMMIT 'a''b', 'q', 7", (XA_COMMIT, xid_name(7, b"a'b", b"q"))),
    ("XA COMMIT 'x1' ONE PHASE", None),  # never prepared: an ordinary transaction
    ("XA END 'x1'", None),
    ("XA COMMIT garbage(", None),
    ("COMMIT", None),
])
def test_outcome_statements_name_the_xid_as_the_prepare_event_does(query: str, want: Any) -> None:
    assert xa_outcome(query) == want


def feed(asm: TxnAssembler, events: list[tuple[Any, ...]]) -> list[TxnBoundary]:
    out, offset = [], 4
    for kind, size, *rest in events:
        ev = StreamEvent(kind, "mysql-bin.000003", offset, offset + size, 100, **(rest[0] if rest else {}))
        offset += size
        b = asm.feed(ev)
        if b is not None:
            out.append(b)
    return out


def xa_group(xid: bytes) -> list[tuple[Any, ...]]:
    name = xid_name(1, xid, b"")
    return [("gtid", 42, {"gtid": "0-1-1"}), ("tablemap", 50), ("rows", 60),
            ("query", 80, {"query": f"XA END X'{xid.hex()}',X'',1"}), ("xa_prepare", 38, {"query": name})]


def outcome(verb: str, xid: bytes) -> list[tuple[Any, ...]]:
    return [("gtid", 42, {"gtid": "0-1-2", "standalone": True}),
            ("query", 90, {"query": f"XA {verb} X'{xid.hex()}',X'',1"})]


def dml() -> list[tuple[Any, ...]]:
    return [("gtid", 42, {"gtid": "0-1-3"}), ("tablemap", 50), ("rows", 60), ("commit", 31)]


def test_boundaries_count_the_xa_transactions_open_after_them() -> None:
    asm = TxnAssembler(MARIA, epoch=0, start_gtid=None)
    got = feed(asm, [*xa_group(b"a"), *dml(), *xa_group(b"b"), *outcome("COMMIT", b"a"), *dml(),
                     *outcome("ROLLBACK", b"b"), *outcome("COMMIT", b"zz"), *dml()])
    assert [b.xa_open for b in got] == [1, 1, 2, 1, 1, 0, 0, 0]
    assert [b.is_ddl for b in got] == [False] * 8  # XA statements are not DDL
    assert [b.events for b in got[:2]] == [5, 4]


def stream(xa_open: list[int]) -> tuple[BinlogPosition, list[TxnBoundary]]:
    """One-event transactions of 100 bytes back to back, each leaving `xa_open[i]` XA transactions open."""
    start = BinlogPosition("mysql-bin.000001", 100, MARIA, None, None)
    out, offset = [], 100
    for i, n in enumerate(xa_open):
        end = BinlogPosition("mysql-bin.000001", offset + 100, MARIA, None, 1_700_000_000.0 + i)
        out.append(TxnBoundary("mysql-bin.000001", offset, end, None, 1, 100, xa_open=n))
        offset += 100
    return start, out


def test_a_window_never_ends_while_an_xa_transaction_is_open() -> None:
    start, txns = stream([0, 1, 1, 2, 1, 0, 0])
    caps = WindowCaps(max_transactions=2, max_events=1000, max_bytes=10**9)
    # The cap is reached inside the open XA: the window goes on to its outcome (as a big transaction does).
    w = plan_window("p", 1, start, txns, caps)
    assert (w.transactions, w.end) == (6, txns[5].end) and w.info.get("capped") == "max_transactions"
    assert INFO_XA_OPEN not in w.info
    # The boundaries run out while it is open: the window ends before its prepared group, and says where that is.
    start, txns = stream([0, 0, 1, 1])
    tail = QuietTail(BinlogPosition("mysql-bin.000001", 900, MARIA, None, None))
    w = plan_window("p", 1, start, [*txns, tail], WindowCaps(max_transactions=100))
    assert (w.transactions, w.end) == (2, txns[1].end) and "capped" not in w.info
    assert w.info[INFO_XA_OPEN] == {"prepared_at": "mysql-bin.000001:300", "open": 1}
    # Opened by the first transaction: an empty window at its start, the next one starts there again.
    start, txns = stream([1, 1])
    w = plan_window("p", 1, start, txns, WindowCaps(max_transactions=1), kind=KIND_BACKFILL)
    assert (w.transactions, w.end) == (0, start) and w.info[INFO_XA_OPEN]["prepared_at"] == "mysql-bin.000001:100"
    # Without XA: the tail still ends a window that took every transaction.
    start, txns = stream([0, 0])
    assert plan_window("p", 1, start, [*txns, tail], WindowCaps(max_transactions=100)).end.offset == 900


SHAPE = TableSchema("s", "t", (SourceColumn("id", "tinyint", False),), ("id",))
SPEC = rowdecode.TableSpec(SHAPE, (ColumnLayout("id", 1, "int", 1, 0, False),))


def test_a_slice_holds_a_prepared_transaction_until_its_commit_and_drops_a_rolled_back_one() -> None:
    sl = rowdecode.Slice()
    hold: PreparedHold[list[tuple[Any, ...]]] = PreparedHold("test")
    sl.add_rows(1, SPEC, rowdecode.EV_WRITE, 100, b"\x00\x01", 0, 2)  # xa 'a': insert 1, update it
    sl.add_rows(1, SPEC, rowdecode.EV_UPDATE, 110, b"\x00\x01\x00\x01", 0, 4)
    hold.prepare("a", sl.park(), 90)
    sl.add_rows(1, SPEC, rowdecode.EV_WRITE, 200, b"\x00\x02", 0, 2)  # xa 'b': insert 2
    hold.prepare("b", sl.park(), 190)
    sl.add_rows(1, SPEC, rowdecode.EV_WRITE, 300, b"\x00\x03", 0, 2)  # an ordinary transaction: insert 3
    sl.commit(11.0, 290)
    assert hold.outcome((XA_ROLLBACK, "b")) is None
    events, txn = hold.outcome((XA_COMMIT, "a"))
    sl.unpark(events)
    sl.commit(12.0, txn)
    assert hold.outcome((XA_COMMIT, "c")) is None and hold.left_open() == []  # prepared before: nothing held
    (batch,) = rowdecode.finish_slice(rowdecode.decode_slice(sl.job(batch_rows=1000, vectorize=True)), base=0)
    got = batch.batch.to_pydict()
    assert [t.timestamp() for t in got.pop("_cdc_commit_ts")] == [11, 12, 12]  # the XA COMMIT's time for 'a'
    assert got == {
        "_cdc_op": ["I", "I", "U"],
        "_cdc_version": [300, 100, 110],  # where each change is in the binlog (the prepared group's for 'a')
        "_cdc_ordinal": [1, 2, 3],  # in commit order
        "_cdc_txn": [290, 90, 90],
        "id": [3, 1, 1],
    }


@pytest.mark.parametrize(("query", "want"), [
    ("SAVEPOINT `a`", ("savepoint", "a")), ("savepoint A", ("savepoint", "a")),
    ("ROLLBACK TO `a b`", ("rollback", "a b")), ("ROLLBACK WORK TO SAVEPOINT x;", ("rollback", "x")),
    ("RELEASE SAVEPOINT `x``y`", ("release", "x`y")), ("ROLLBACK", None), ("SAVEPOINTS", None),
])
def test_savepoint_statements(query: str, want: Any) -> None:
    assert savepoint_statement(query) == want


def test_a_rollback_to_a_savepoint_drops_the_rows_after_it_and_the_savepoints_set_after_it() -> None:
    sl = rowdecode.Slice()
    points: Savepoints[Any] = Savepoints()

    def say(query: str) -> None:
        assert points.statement(query, sl.savepoint, sl.rollback_to)

    other = rowdecode.TableSpec(TableSchema("s", "u", SHAPE.columns, ("id",)), SPEC.layouts)
    sl.add_rows(1, SPEC, rowdecode.EV_WRITE, 100, b"\x00\x01", 0, 2)
    say("SAVEPOINT a")
    sl.add_rows(1, SPEC, rowdecode.EV_WRITE, 110, b"\x00\x02", 0, 2)
    say("SAVEPOINT b")
    sl.add_rows(2, other, rowdecode.EV_WRITE, 120, b"\x00\x07", 0, 2)  # a table first touched after both
    say("ROLLBACK TO a")  # drops 2 and u's 7, and savepoint b
    say("ROLLBACK TO b")  # b is gone: nothing to do
    sl.add_rows(1, SPEC, rowdecode.EV_WRITE, 130, b"\x00\x03", 0, 2)
    assert not points.statement("INSERT INTO t VALUES (1)", sl.savepoint, sl.rollback_to)
    sl.commit(5.0, 90)
    (batch,) = rowdecode.finish_slice(rowdecode.decode_slice(sl.job(batch_rows=100, vectorize=True)), base=0)
    assert batch.batch.to_pydict()["id"] == [1, 3] and batch.batch.to_pydict()["_cdc_ordinal"] == [1, 2]


def _compressed(raw: bytes) -> bytes:
    packed = zlib.compress(raw)
    return bytes([0x80 | 2]) + len(raw).to_bytes(2, "big") + packed


def _packet(etype: int, body: bytes, checksum: bool) -> bytes:
    size = 19 + len(body) + (4 if checksum else 0)
    return b"\x00" + struct.pack("<IBIIIH", 100, etype, 1, size, 5000, 0) + body + (b"\xaa" * 4 if checksum else b"")


@pytest.mark.parametrize("checksum", [True, False])
def test_compressed_events_are_rebuilt_as_the_plain_ones_at_the_same_position(checksum: bool) -> None:
    lengths = lambda etype, default: default  # noqa: E731 - the Format_description's post-header lengths
    images = b"\x00\x01\x00\x00\x00" * 50  # 50 rows of one INT column
    head = (7).to_bytes(6, "little") + b"\x01\x00" + bytes([1]) + b"\xff"  # table id, flags, 1 column, bitmap
    rows = plain_packet(_packet(166, head + _compressed(images), checksum), lengths, checksum, "f:1")
    want = _packet(0x17, head + images, checksum)
    assert rows == (want[:-4] + b"\x00" * 4 if checksum else want)  # a CRC32 is not checked: zeros
    post = (9).to_bytes(4, "little") + (0).to_bytes(4, "little") + bytes([2]) + b"\x00\x00" + (3).to_bytes(2, "little")
    sql = b"ALTER TABLE t ADD COLUMN c INT"
    query = plain_packet(_packet(165, post + b"\x01\x02\x03" + b"db\x00" + _compressed(sql), checksum), lengths,
                         checksum, "f:2")
    want = _packet(2, post + b"\x01\x02\x03" + b"db\x00" + sql, checksum)
    assert query == (want[:-4] + b"\x00" * 4 if checksum else want)
    with pytest.raises(SourceError, match=r"f:3.*damaged"):
        plain_packet(_packet(167, head + b"\xff" + _compressed(images)[1:], checksum), lengths, checksum, "f:3")
    assert decompress(_compressed(b"")) == b""


def _query_event(status_vars: bytes, schema: bytes, sql: bytes) -> Any:
    """The library's QueryEvent read from a packet built as MariaDB writes one (no checksum)."""
    from types import SimpleNamespace

    from pymysql.protocol import MysqlPacket
    from pymysqlreplication.event import QueryEvent
    from pymysqlreplication.packet import BinLogPacketWrapper

    from cdc_core.capture.binlog import compat  # noqa: F401 (its patches, applied on import)

    post = (9).to_bytes(4, "little") + (0).to_bytes(4, "little") + bytes([len(schema)]) + b"\x00\x00"
    body = post + len(status_vars).to_bytes(2, "little") + status_vars + schema + b"\x00" + sql
    conn = SimpleNamespace(charset="utf8mb4", _get_dbms=lambda: "mariadb")
    wrapper = BinLogPacketWrapper(MysqlPacket(_packet(2, body, False), "utf8mb4"), {}, conn, (11, 4, 5), False,
                                  frozenset({QueryEvent}), None, None, None, None, True, False, False, False, False,
                                  False, None)
    return wrapper.event


def test_query_events_with_mariadb_11_status_variables_and_unknown_ones_are_read() -> None:
    """MariaDB 11.2+ writes Q_CHARACTER_SET_COLLATIONS (0x83) for `CREATE TABLE ... CHARACTER SET utf8mb4`, and
    Q_GTID_FLAGS3 (0x82) with a two-phase ALTER: the library stopped at them (StatusVariableMismatch). A code
    no one knows yet skips the rest of the block instead of stopping the stream."""
    sql_mode = (1).to_bytes(1, "little") + (0x00200000).to_bytes(8, "little")  # STRICT_TRANS_TABLES
    collations = bytes([0x83, 2]) + bytes.fromhex("2d00 0009 2100 0008")  # utf8mb4->2304, utf8mb3->2048
    flags3 = bytes([0x82, 0x04]) + (77).to_bytes(8, "little")  # COMMIT ALTER: the START ALTER's seq_no
    charset = bytes([0x04]) + bytes.fromhex("2d00 2d00 0009")
    ev = _query_event(sql_mode + collations + flags3 + charset, b"db", b"CREATE TABLE t (v TEXT) CHARSET utf8mb4")
    assert (ev.schema, ev.query, ev.sql_mode) == (b"db", "CREATE TABLE t (v TEXT) CHARSET utf8mb4", 0x00200000)
    assert ev.collation_server == 2304
    unknown = _query_event(sql_mode + bytes([0x9F, 1, 2, 3]) + charset, b"db", b"DROP TABLE t")
    assert (unknown.schema, unknown.query, unknown.sql_mode) == (b"db", "DROP TABLE t", 0x00200000)
    assert not hasattr(unknown, "collation_server")  # after the unknown code: skipped with the rest of the block
