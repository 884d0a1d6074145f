"""The binlog reader and scanner against the real MariaDB.

Other tests write to the same server at the same time, so nothing here assumes the binlog holds only
this test's events: transactions are found by the GTID the server reports for them (`@@last_gtid`),
and changes are read through a table filter on this test's own database.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest

from cdc_core.capture.binlog import BinlogScanner, read_change_batches, read_changes
from cdc_core.capture.binlog.schema_events import SchemaChangeEvent
from cdc_core.capture.binlog.table_maps import SEQUENCE_COLUMNS
from cdc_core.capture.source import SourceFacts, SourceParams, TableFilter, connect, describe_tables
from cdc_core.model import types
from cdc_core.model.changes import RowChange
from cdc_core.model.errors import MissingKey, SourceError, StagingError, UnknownTable, UnsupportedType
from cdc_core.model.positions import BinlogPosition, binlog_file_index, change_version
from cdc_core.model.window_plan import WindowCaps, WindowPlan
from cdc_core.model.windows import TxnBoundary, plan_window
from tests.support.source_facts import facts_now

pytestmark = pytest.mark.integration


# ------------------------------------------------------------------------------------------ helpers


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def root(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    yield conn
    conn.close()



def start_of(facts: SourceFacts) -> BinlogPosition:
    assert facts.end is not None
    return BinlogPosition(facts.end.file, facts.end.offset, facts.identity, facts.gtid_executed)


def run(conn: Any, *statements: str, txn: bool = False) -> str:
    """Execute statements (in one transaction when txn=True); return the GTID of the last commit."""
    with conn.cursor() as cur:
        if txn:
            cur.execute("BEGIN")
        for s in statements:
            cur.execute(s)
        if txn:
            cur.execute("COMMIT")
        cur.execute("SELECT @@last_gtid")
        return str(cur.fetchone()[0])


def boundaries(
    params: SourceParams, facts: SourceFacts, start: BinlogPosition, stop: BinlogPosition | None = None
) -> list[TxnBoundary]:
    scanner = BinlogScanner(params, facts.identity)
    stop_at = (stop.file, stop.offset) if stop is not None else None
    with closing(scanner.scan_transactions(start.file, start.offset, start.gtid, start.epoch, stop=stop_at)) as it:
        return list(it)


def txn(found: list[TxnBoundary], gtid: str) -> TxnBoundary:
    for b in found:
        if b.gtid == gtid:
            return b
    raise AssertionError(f"transaction {gtid} not found among {len(found)} scanned")


def whole_window(params: SourceParams, before: SourceFacts, after: SourceFacts) -> WindowPlan:
    """A window from `before`'s end to `after`'s end (all transactions in between, whoever wrote them)."""
    start = start_of(before)
    return plan_window("t", 1, start, boundaries(params, after, start, start_of(after)), WindowCaps())


def changes(params: SourceParams, facts: SourceFacts, plan: WindowPlan, db: str, schemas: Any = None) -> list[Any]:
    return list(read_changes(params, facts.identity, plan, TableFilter((f"{db}.*",)), schemas))


def describe_one(params: SourceParams, db: str, table: str) -> Any:
    """The table as information_schema describes it (the readers' `schemas` callback in a pipeline)."""
    conn = connect(params)
    try:
        return describe_tables(conn, TableFilter((f"{db}.{table}",)), "t")[f"{db}.{table}"]
    finally:
        conn.close()


def rows(items: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c.op, c.values) for c in items if isinstance(c, RowChange)]


# -------------------------------------------------------------------------------------------- tests


def test_inserts_updates_deletes_and_a_key_change(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL)")
    before = facts_now(params)
    start = start_of(before)
    run(root, "INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    run(root, "UPDATE t SET v = 'a2' WHERE id = 1")
    run(root, "UPDATE t SET id = 10 WHERE id = 2")
    run(root, "DELETE FROM t WHERE id = 1")
    after = facts_now(params)
    plan = plan_window("t", 1, start, boundaries(params, after, start, start_of(after)), WindowCaps())
    got = changes(params, after, plan, source_db)
    assert rows(got) == [
        ("I", {"id": 1, "v": "a"}),
        ("I", {"id": 2, "v": "b"}),
        ("U", {"id": 1, "v": "a2"}),
        ("D", {"id": 2, "v": "b"}),  # a key change: delete of the old key (before image) ...
        ("I", {"id": 10, "v": "b"}),  # ... then insert of the new one (after image)
        ("D", {"id": 1, "v": "a2"}),
    ]
    assert [c.ordinal for c in got] == list(range(1, len(got) + 1))
    versions = [c.version for c in got]
    assert versions == sorted(versions) and versions[3] == versions[4]  # one row event, one version
    assert all(c.version >> 52 == 0 for c in got)  # epoch 0
    schema = got[0].table
    assert all(c.table is schema for c in got)  # one TableSchema object per shape, across transactions
    assert (schema.schema, schema.table, schema.key, schema.column_names) == (source_db, "t", ("id",), ("id", "v"))
    assert all(c.commit_ts >= after.server_time - 120 for c in got)  # type: ignore[operator]


def test_rolled_back_transaction_never_reaches_the_binlog(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE t (id INT PRIMARY KEY)")
    start = start_of(facts_now(params))
    with root.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (99)")
        cur.execute("ROLLBACK")
    kept = run(root, "INSERT INTO t VALUES (100)")
    after = facts_now(params)
    found = boundaries(params, after, start, start_of(after))
    plan = plan_window("t", 1, start, found, WindowCaps())
    assert rows(changes(params, after, plan, source_db)) == [("I", {"id": 100})]
    mine = txn(found, kept)
    assert mine.events >= 3 and not mine.is_ddl  # GTID, (Table_map,) Write_rows, Xid
    assert [b for b in found if b.gtid == kept] == [mine]


def test_window_reads_exactly_start_to_end(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE t (id INT PRIMARY KEY)")
    before = facts_now(params)
    a = run(root, "INSERT INTO t VALUES (1)")
    b = run(root, "INSERT INTO t VALUES (2), (3)", "INSERT INTO t VALUES (4)", txn=True)
    c = run(root, "INSERT INTO t VALUES (5)")
    after = facts_now(params)
    found = boundaries(params, after, start_of(before), start_of(after))
    ta, tb, tc = txn(found, a), txn(found, b), txn(found, c)
    only_b = WindowPlan("t", 1, tb.start_position(), tb.end, transactions=1)
    got = changes(params, after, only_b, source_db)
    assert rows(got) == [("I", {"id": 2}), ("I", {"id": 3}), ("I", {"id": 4})]
    assert [x.ordinal for x in got] == [1, 2, 3]
    assert all(x.version > change_version(0, tb.start_file, tb.start_offset) for x in got)
    assert all(x.version < change_version(0, tb.end.file, tb.end.offset) for x in got)
    # from A's start up to C's start: A and B, not C
    a_to_c = WindowPlan("t", 1, ta.start_position(), tc.start_position())
    assert [v["id"] for _, v in rows(changes(params, after, a_to_c, source_db))] == [1, 2, 3, 4]
    # an empty window reads nothing (and does not even connect)
    empty = WindowPlan("t", 1, tc.end, tc.end)
    assert changes(params, after, empty, source_db) == []


def test_transaction_bigger_than_the_caps_is_taken_whole(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE t (id INT PRIMARY KEY, pad VARCHAR(100))")
    before = facts_now(params)
    big = run(root, *[f"INSERT INTO t VALUES ({i}, REPEAT('x', 100))" for i in range(40)], txn=True)
    small = run(root, "INSERT INTO t VALUES (1000, 'y')")
    after = facts_now(params)
    found = boundaries(params, after, start_of(before), start_of(after))
    tb = txn(found, big)
    assert tb.events >= 40 and tb.bytes > 4000
    caps = WindowCaps(max_events=5, max_bytes=1000, max_transactions=10)
    tb_key = (binlog_file_index(tb.start_file), tb.start_offset)
    following = [x for x in found if (binlog_file_index(x.start_file), x.start_offset) >= tb_key]
    plan = plan_window("t", 1, tb.start_position(), following, caps)
    assert plan.transactions == 1 and plan.end == tb.end and plan.events == tb.events
    got = changes(params, after, plan, source_db)
    assert [v["id"] for _, v in rows(got)] == list(range(40))  # all of it, nothing of `small`
    assert txn(found, small).start_offset >= tb.end.offset or txn(found, small).start_file != tb.end.file


def test_ddl_between_changes_gives_each_change_the_columns_in_force(
    params: SourceParams, root: Any, source_db: str
) -> None:
    run(root, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    before = facts_now(params)
    run(root, "INSERT INTO t VALUES (1, 'a')")
    run(root, "ALTER TABLE t ADD COLUMN c INT UNSIGNED NOT NULL DEFAULT 7")
    run(root, "INSERT INTO t VALUES (2, 'b', 5)")
    run(root, "CREATE TABLE not_captured (x INT PRIMARY KEY)")  # DDL on a table outside the filter: not reported
    after = facts_now(params)
    found = boundaries(params, after, start_of(before), start_of(after))
    plan = plan_window("t", 1, start_of(before), found, WindowCaps())
    got = list(read_changes(params, after.identity, plan, TableFilter((f"{source_db}.t",))))
    assert [type(x).__name__ for x in got] == ["RowChange", "SchemaChangeEvent", "RowChange"]
    first, ddl, second = got
    assert first.table.column_names == ("id", "v") and first.values == {"id": 1, "v": "a"}
    assert isinstance(ddl, SchemaChangeEvent) and ddl.schema == source_db and "ADD COLUMN c" in ddl.query
    assert second.table.column_names == ("id", "v", "c") and second.values == {"id": 2, "v": "b", "c": 5}
    assert second.table.columns[2].mysql_type == "int unsigned" and not second.table.columns[2].nullable
    assert [x.ordinal for x in got] == [1, 2, 3] and first.version < ddl.version < second.version
    assert any(b.is_ddl for b in found)


def test_rotation_mid_window(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE t (id INT PRIMARY KEY)")
    before = facts_now(params)
    run(root, "INSERT INTO t VALUES (1)")
    run(root, "FLUSH BINARY LOGS")
    run(root, "INSERT INTO t VALUES (2)")
    after = facts_now(params)
    assert after.end is not None and binlog_file_index(after.end.file) > binlog_file_index(before.end.file)  # type: ignore[union-attr]
    found = boundaries(params, after, start_of(before), start_of(after))
    plan = plan_window("t", 1, start_of(before), found, WindowCaps())
    assert plan.end.file != plan.start.file
    got = changes(params, after, plan, source_db)
    assert [v["id"] for _, v in rows(got)] == [1, 2]
    file_of = [(c.version >> 32) & 0xFFFFF for c in got]  # the file index inside change_version
    assert file_of[0] < file_of[1] and file_of[1] <= binlog_file_index(plan.end.file)
    # GTID state carried across the rotation: the window's end state is the server's executed set
    assert found[-1].end.gtid == after.gtid_executed


def test_types_from_the_binlog_match_information_schema(params: SourceParams, root: Any, source_db: str) -> None:
    run(
        root,
        """CREATE TABLE t (
            id BIGINT UNSIGNED NOT NULL, k2 INT NOT NULL, a TINYINT(1), b SMALLINT, m MEDIUMINT UNSIGNED,
            d DECIMAL(12,3), du DECIMAL(5,0) UNSIGNED, f FLOAT, g DOUBLE, dt DATETIME(6), dt0 DATETIME,
            ts TIMESTAMP(3) NULL, tm TIME(6), y YEAR, dd DATE, c CHAR(10), cl CHAR(5) CHARACTER SET latin1,
            v VARCHAR(255), tx TEXT, tt TINYTEXT, mt MEDIUMTEXT, lt LONGTEXT, bn BINARY(16), vb VARBINARY(20),
            bl BLOB, tb TINYBLOB, mb MEDIUMBLOB, lb LONGBLOB, j JSON, e ENUM('a','it''s','x\\\\y'), s SET('p','q'),
            bt BIT(5), PRIMARY KEY (k2, id))""",
    )
    before = facts_now(params)
    run(root, "INSERT INTO t (id, k2, e, s, j) VALUES (18446744073709551615, 1, 'it''s', 'p,q', '{\"a\": 1}')")
    after = facts_now(params)
    plan = whole_window(params, before, after)
    described = describe_one(params, source_db, "t")
    got = changes(params, after, plan, source_db, schemas=lambda s, t: described)
    assert len(got) == 1
    from_binlog = got[0].table
    assert from_binlog.key == described.key == ("k2", "id")  # primary key order, not column order
    for b, i in zip(from_binlog.columns, described.columns, strict=True):
        assert (b.name, b.mysql_type, b.nullable, b.attrs) == (i.name, i.mysql_type, i.nullable, i.attrs)
    types = {c.name: c.mysql_type for c in described.columns}
    assert types["id"] == "bigint unsigned" and types["a"] == "tinyint" and types["y"] == "year"
    assert types["j"] == "json" and types["e"] == "enum('a','it''s','x\\\\y')"
    assert dict(described.columns[types_index(described, "e")].attrs)["labels"] == ("a", "it's", "x\\y")
    assert got[0].values["id"] == 18446744073709551615 and got[0].values["e"] == "it's"


def test_mariadb_uuid_and_inet_columns_are_refused_not_landed_as_their_bytes(
    params: SourceParams, root: Any, source_db: str
) -> None:
    """A table map shows MariaDB's UUID and INET6 as BINARY(16), INET4 as BINARY(4) (probed: they landed as raw
    bytes, which SELECT never shows). The readers take the type information_schema knows, as for JSON, so the type
    map refuses them with what to do, as the snapshot does; a real BINARY(16) stays one."""
    run(root, "CREATE TABLE t (id INT PRIMARY KEY, u UUID, i6 INET6, i4 INET4, bn BINARY(16), b4 BINARY(4))")
    before = facts_now(params)
    run(root, "INSERT INTO t VALUES (1, UUID(), '::1', '10.0.0.1', 'x', 'y')")
    after = facts_now(params)
    plan = whole_window(params, before, after)
    described = describe_one(params, source_db, "t")
    (got,) = changes(params, after, plan, source_db, schemas=lambda s, t: described)  # staging maps the types
    assert {c.name: c.mysql_type for c in got.table.columns} == {
        "id": "int", "u": "uuid", "i6": "inet6", "i4": "inet4", "bn": "binary(16)", "b4": "binary(4)"}
    with pytest.raises(UnsupportedType, match=r"column 'u' has type 'uuid'.*CHAR\(36\)"):
        [types.resolve(c, "t") for c in got.table.columns]
    with pytest.raises(UnsupportedType, match="column 'u' has type 'uuid'"):
        list(read_change_batches(params, after.identity, plan, TableFilter((f"{source_db}.*",)),
                                 lambda s, t: described))

    run(root, "CREATE TABLE b (id INT PRIMARY KEY, bn BINARY(16), b4 BINARY(4))")
    before = facts_now(params)
    run(root, "INSERT INTO b VALUES (1, 'x', 'y')")
    after = facts_now(params)
    plain = describe_one(params, source_db, "b")
    (got,) = changes(params, after, whole_window(params, before, after), source_db, schemas=lambda s, t: plain)
    assert [c.mysql_type for c in got.table.columns] == ["int", "binary(16)", "binary(4)"]
    assert (got.values["bn"], got.values["b4"]) == (b"x", b"y")  # the binlog drops the padding; staging adds it


@pytest.mark.parametrize("image", ["MINIMAL", "NOBLOB"])
def test_a_session_logging_partial_row_images_is_refused_by_both_readers(
    params: SourceParams, root: Any, source_db: str, image: str
) -> None:
    """binlog_row_image is also a session variable: a session with MINIMAL (or NOBLOB, for an update that leaves
    a BLOB alone) logs rows events without every column. The library reads the missing columns as NULL (probed:
    the library decoder landed a row with a NULL key and lost the update); both readers refuse the event, naming
    it."""
    run(root, "CREATE TABLE t (id INT PRIMARY KEY, a INT, b BLOB)")
    run(root, "INSERT INTO t VALUES (1, 1, 'x'), (2, 2, 'y')")
    before = facts_now(params)
    with root.cursor() as cur:
        cur.execute(f"SET SESSION binlog_row_image = {image}")
        cur.execute("UPDATE t SET a = 5 WHERE id = 1")
        cur.execute("SET SESSION binlog_row_image = FULL")
    after = facts_now(params)
    plan = whole_window(params, before, after)
    with pytest.raises(StagingError, match=f"{source_db}.t at mysql-bin.* does not carry full row images"):
        changes(params, after, plan, source_db)
    with pytest.raises(StagingError, match=f"{source_db}.t at mysql-bin.* does not carry full row images"):
        list(read_change_batches(params, after.identity, plan, TableFilter((f"{source_db}.*",))))


def test_a_table_with_compressed_columns_stops_only_a_pipeline_that_captures_it(
    params: SourceParams, root: Any, source_db: str
) -> None:
    """MariaDB's COMPRESSED columns have column types python-mysql-replication does not know, and their table map
    threw its reading off (probed: ValueError from the library, in the start resolver, for any table of a captured
    schema). Both readers now pass over such a table when it is not captured, and name it when it is."""
    run(root, "CREATE TABLE z (id INT PRIMARY KEY, b BLOB COMPRESSED, v VARCHAR(200) COMPRESSED)")
    run(root, "CREATE TABLE ok (id INT PRIMARY KEY, a INT)")
    before = facts_now(params)
    run(root, "INSERT INTO z VALUES (1, REPEAT('abc', 100), 'v')", "INSERT INTO ok VALUES (1, 1)")
    after = facts_now(params)
    plan = whole_window(params, before, after)
    others = TableFilter((f"{source_db}.*",), (f"{source_db}.z",))
    assert rows(list(read_changes(params, after.identity, plan, others))) == [("I", {"id": 1, "a": 1})]
    batches = list(read_change_batches(params, after.identity, plan, others))
    assert [b.table.table for b in batches] == ["ok"] and batches[0].batch.num_rows == 1
    match = f"table map of {source_db}.z cannot be read .*COMPRESSED.*tables.exclude"
    with pytest.raises(UnsupportedType, match=match):
        changes(params, after, plan, source_db)
    with pytest.raises(UnsupportedType, match=match):
        list(read_change_batches(params, after.identity, plan, TableFilter((f"{source_db}.*",))))


def types_index(schema: Any, name: str) -> int:
    return schema.column_names.index(name)


def test_keys_without_a_primary_key(params: SourceParams, root: Any, source_db: str) -> None:
    # InnoDB promotes the first UNIQUE NOT NULL key; the binlog's metadata then names it as the key.
    run(root, "CREATE TABLE u (a INT NOT NULL, b INT NOT NULL, v INT, UNIQUE KEY ub (b, a))")
    run(root, "CREATE TABLE n (a INT, v INT)")  # no usable key at all
    before = facts_now(params)
    run(root, "INSERT INTO u VALUES (1, 2, 3)")
    run(root, "UPDATE u SET v = 4")
    run(root, "INSERT INTO n VALUES (1, 1)")
    after = facts_now(params)
    plan = whole_window(params, before, after)
    conn = connect(params)
    try:
        everything = TableFilter((f"{source_db}.*",))
        described = describe_tables(conn, everything, "t", full_row_key_tables=(f"{source_db}.n",))
        with pytest.raises(MissingKey, match=f"{source_db}.n .*tables.full_row_key"):
            describe_tables(conn, TableFilter((f"{source_db}.*",)), "t")
    finally:
        conn.close()
    assert described[f"{source_db}.u"].key == ("b", "a") and described[f"{source_db}.n"].key == ("a", "v")
    got = changes(params, after, plan, source_db, schemas=lambda s, t: described.get(f"{s}.{t}"))
    assert [(c.table.table, c.table.key, c.op) for c in got] == [
        ("u", ("b", "a"), "I"), ("u", ("b", "a"), "U"), ("n", ("a", "v"), "I"),
    ]
    with pytest.raises(MissingKey, match=f"{source_db}.n"):
        changes(params, after, plan, source_db, schemas=None)


def test_a_sequences_rows_are_not_data_and_do_not_land(params: SourceParams, root: Any, source_db: str) -> None:
    """NEXTVAL logs a MariaDB SEQUENCE's row (a keyless table of fixed columns): both readers pass over it instead
    of refusing it for its missing key; a keyless table of the same columns is still refused."""
    run(root, "CREATE TABLE t (id INT PRIMARY KEY, v BIGINT)")
    run(root, "CREATE SEQUENCE s CACHE 2")
    before = facts_now(params)
    run(root, "INSERT INTO t VALUES (1, NEXTVAL(s)), (2, NEXTVAL(s)), (3, NEXTVAL(s))")  # takes a second block
    after = facts_now(params)
    plan = whole_window(params, before, after)
    assert [(c.op, c.values) for c in changes(params, after, plan, source_db)] == [
        ("I", {"id": 1, "v": 1}), ("I", {"id": 2, "v": 2}), ("I", {"id": 3, "v": 3})]
    batches = list(read_change_batches(params, after.identity, plan, TableFilter((f"{source_db}.*",))))
    assert [b.table.table for b in batches] == ["t"] and batches[0].batch.num_rows == 3

    columns = ", ".join(f"{c} BIGINT" for c in SEQUENCE_COLUMNS)
    run(root, f"CREATE TABLE lookalike ({columns})")
    before = facts_now(params)
    run(root, f"INSERT INTO lookalike VALUES ({', '.join(['1'] * len(SEQUENCE_COLUMNS))})")
    after = facts_now(params)
    with pytest.raises(MissingKey, match=f"{source_db}.lookalike"):
        changes(params, after, whole_window(params, before, after), source_db)


def test_rows_undone_by_a_rollback_to_a_savepoint_the_binlog_kept_are_not_changes(
    params: SourceParams, root: Any, source_db: str
) -> None:
    """A transaction that also changes a MyISAM table is logged whole, `SAVEPOINT` and `ROLLBACK TO` included,
    with the rows the rollback undid: both readers drop them, as a replica would."""
    run(root, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM")
    before = facts_now(params)
    run(root, "INSERT INTO m VALUES (1)", "INSERT INTO t VALUES (1, 1)", "SAVEPOINT `a b`",
        "INSERT INTO t VALUES (2, 2)", "SAVEPOINT c", "UPDATE t SET v = 10 WHERE id = 1",
        "ROLLBACK TO SAVEPOINT `a b`",  # undoes c's changes too, and c itself
        "INSERT INTO t VALUES (3, 3)", "SAVEPOINT d", "DELETE FROM t WHERE id = 3", "RELEASE SAVEPOINT d",
        txn=True)
    after = facts_now(params)
    plan = whole_window(params, before, after)
    want = [("m", "I", 1), ("t", "I", 1), ("t", "I", 3), ("t", "D", 3)]
    got = [c for c in changes(params, after, plan, source_db) if isinstance(c, RowChange)]
    assert [(c.table.table, c.op, c.values["id"]) for c in got] == want
    batches = list(read_change_batches(params, after.identity, plan, TableFilter((f"{source_db}.*",))))
    staged = sorted((b.table.table, r["_cdc_ordinal"], r["_cdc_op"], r["id"]) for b in batches
                    for r in b.batch.to_pylist())
    assert [(t, op, i) for t, _, op, i in sorted(staged, key=lambda r: r[1])] == want


def test_scanner_helpers(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE t (id INT PRIMARY KEY)")
    before = facts_now(params)
    g = run(root, "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)", txn=True)
    after = facts_now(params)
    scanner = BinlogScanner(params, after.identity)
    tb = txn(boundaries(params, after, start_of(before), start_of(after)), g)
    inside = scanner.transaction_start_at_or_before(tb.start_file, tb.start_offset + 30)
    assert inside == (tb.start_file, tb.start_offset)
    assert scanner.transaction_start_at_or_before(tb.end.file, tb.end.offset) == (tb.end.file, tb.end.offset)
    first = scanner.first_event_time(after.binlogs[-1].name)
    assert first is None or first <= tb.commit_ts  # type: ignore[operator]
    head = scanner.file_start_gtid(tb.start_file)
    assert head is not None  # MariaDB always writes a Gtid_list


def test_reading_a_window_planned_on_another_server_is_refused(params: SourceParams, root: Any, source_db: str) -> None:
    facts = facts_now(params)
    other = type(facts.identity)("mariadb", facts.identity.server_id + 1000)
    start = BinlogPosition(facts.end.file, 4, other)  # type: ignore[union-attr]
    plan = WindowPlan("t", 1, start, BinlogPosition(facts.end.file, 400, other))  # type: ignore[union-attr]
    with pytest.raises(SourceError, match="planned on"):
        list(read_changes(params, other, plan, TableFilter((f"{source_db}.*",))))


def test_wrong_credentials_and_unreachable_server(params: SourceParams) -> None:
    bad = SourceParams(params.host, params.port, params.user, "not-the-password-xyz")
    with pytest.raises(SourceError) as e:
        connect(bad)
    msg = str(e.value)
    assert "access denied" in msg and params.user in msg and f"{params.host}:{params.port}" in msg
    assert "not-the-password-xyz" not in msg and "not-the-password-xyz" not in repr(bad)
    scanner = BinlogScanner(bad, facts_now(params).identity)
    with pytest.raises(SourceError, match="access denied"):
        list(scanner.scan_transactions("mysql-bin.000001", 4, None, 0))
    closed = SourceParams(params.host, 1, params.user, params.password, connect_timeout=2)  # nothing listens on port 1
    with pytest.raises(SourceError, match="unreachable"):
        connect(closed)


def test_describe_names_missing_tables_and_what_exists(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE orders (id INT PRIMARY KEY)", "CREATE TABLE items (id INT PRIMARY KEY)")
    conn = connect(params)
    try:
        with pytest.raises(UnknownTable) as e:
            describe_tables(conn, TableFilter((f"{source_db}.order",)), "shop")
        msg = str(e.value)
        assert f"{source_db}.order does not exist" in msg and "items, orders" in msg and "shop" in msg
        with pytest.raises(UnknownTable, match="there is no schema 'no_such_schema_x'"):
            describe_tables(conn, TableFilter(("no_such_schema_x.t",)), "shop")
        found = describe_tables(conn, TableFilter((f"{source_db}.*",), (f"{source_db}.items",)), "shop")
        assert list(found) == [f"{source_db}.orders"]
        assert describe_tables(conn, TableFilter((f"{source_db}.nothing_*",)), "shop") == {}  # a glob may match none
    finally:
        conn.close()


def test_create_table_select_gives_the_ddl_then_its_rows(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE src (id INT PRIMARY KEY, v VARCHAR(10))", "INSERT INTO src VALUES (1, 'a'), (2, 'b')")
    before = facts_now(params)
    run(root, "CREATE TABLE copy (PRIMARY KEY (id)) SELECT id, v FROM src")
    after = facts_now(params)
    plan = whole_window(params, before, after)
    got = list(read_changes(params, after.identity, plan, TableFilter((f"{source_db}.copy",))))
    assert isinstance(got[0], SchemaChangeEvent) and got[0].query.startswith("CREATE TABLE `copy`")  # as logged
    assert [(c.table.table, c.op, c.values) for c in got[1:]] == [
        ("copy", "I", {"id": 1, "v": "a"}), ("copy", "I", {"id": 2, "v": "b"}),
    ]
    assert [c.ordinal for c in got] == [1, 2, 3]


def test_a_window_the_binlog_no_longer_holds_is_an_error(params: SourceParams, root: Any, source_db: str) -> None:
    run(root, "CREATE TABLE t (id INT PRIMARY KEY)")
    before = facts_now(params)
    g = run(root, "INSERT INTO t VALUES (1)")
    after = facts_now(params)
    b = txn(boundaries(params, after, start_of(before), start_of(after)), g)
    # planned with 2 transactions, but only one is there
    wrong_count = WindowPlan("t", 1, b.start_position(), b.end, transactions=2)
    with pytest.raises(SourceError, match="but 2 when it was planned"):
        changes(params, after, wrong_count, source_db)
    # an end past anything the binlog holds (a reset or replaced server)
    beyond = BinlogPosition("mysql-bin.999999", 4, after.identity)
    with pytest.raises(SourceError, match="could not be read to its end"):
        changes(params, after, WindowPlan("t", 1, b.start_position(), beyond), source_db)
