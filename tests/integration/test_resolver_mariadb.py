"""Start resolution against the real MariaDB: facts, timestamp search, GTID location, failover, purge.

The server is shared with other tests running at the same time, so assertions are about *this* test's
transactions (found by their GTIDs) and about invariants that hold whatever else was committed
between them (e.g. "every transaction between the resolved start and mine committed at or after the
timestamp").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from typing import Any

import pytest

from cdc_core.capture.binlog import BinlogScanner, read_changes
from cdc_core.capture.resolver import resolve_start
from cdc_core.capture.source import (
    SourceFacts,
    SourceParams,
    TableFilter,
    check_cdc_ready,
    check_privileges,
    connect,
    inspect_source,
)
from cdc_core.model.errors import ConfigError, PositionPurged, SourceError
from cdc_core.model.positions import BinlogPosition, MariadbGtidList, StartSpec, binlog_file_index
from cdc_core.model.window_plan import WindowPlan
from cdc_core.model.windows import TxnBoundary
from tests.support.source_facts import facts_now

pytestmark = pytest.mark.integration


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def root(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
    yield conn
    conn.close()



def run(conn: Any, *statements: str, txn: bool = False) -> str:
    with conn.cursor() as cur:
        if txn:
            cur.execute("BEGIN")
        for s in statements:
            cur.execute(s)
        if txn:
            cur.execute("COMMIT")
        cur.execute("SELECT @@last_gtid")
        return str(cur.fetchone()[0])


def key(file: str, offset: int) -> tuple[int, int]:
    return (binlog_file_index(file), offset)


def scan(params: SourceParams, facts: SourceFacts, start: BinlogPosition) -> list[TxnBoundary]:
    scanner = BinlogScanner(params, facts.identity)
    with closing(scanner.scan_transactions(start.file, start.offset, start.gtid, 0)) as it:
        return list(it)


def start_of(facts: SourceFacts) -> BinlogPosition:
    assert facts.end is not None
    return BinlogPosition(facts.end.file, facts.end.offset, facts.identity, facts.gtid_executed)


def mine(found: list[TxnBoundary], gtid: str) -> TxnBoundary:
    return next(b for b in found if b.gtid == gtid)


def wait_for_next_second(conn: Any, after: float, deadline_s: float = 10.0) -> None:
    """Wait until the server clock is past `after` (commit times have whole-second resolution)."""
    deadline = time.monotonic() + deadline_s
    with conn.cursor() as cur:
        while True:
            cur.execute("SELECT UNIX_TIMESTAMP()")
            if int(cur.fetchone()[0]) > after:
                return
            assert time.monotonic() < deadline, "server clock did not advance"
            time.sleep(0.1)


def resolve(params: SourceParams, saved: BinlogPosition | None, spec: StartSpec | None, **kw: Any) -> Any:
    facts = kw.pop("facts", None) or facts_now(params)
    return resolve_start(saved, spec, facts, BinlogScanner(params, facts.identity), pipeline="orders", **kw)


# ------------------------------------------------------------------------------------------- facts


def test_inspect_source_reads_consistent_facts(params: SourceParams, root: Any) -> None:
    before = facts_now(params)
    assert before.flavor == "mariadb" and before.identity.server_id == 1 and before.identity.server_uuid is None
    assert (before.binlog_format, before.binlog_row_image, before.binlog_row_metadata) == ("ROW", "FULL", "FULL")
    assert (before.binlog_do_db, before.binlog_ignore_db) == ((), ())  # SHOW MASTER STATUS's filter columns
    assert before.log_bin and before.binlogs and before.end is not None
    assert before.end.file == before.binlogs[-1].name and before.binlogs[-1].size >= before.end.offset
    check_cdc_ready(before, "orders")
    g = run(root, "INSERT INTO t VALUES (1, 'a')")
    after = facts_now(params)
    # The end's GTID state is the state *at* that offset: scanning up to it ends in exactly that state.
    found = scan(params, after, start_of(before))
    upto = [b for b in found if key(b.end.file, b.end.offset) <= key(after.end.file, after.end.offset)]  # type: ignore[union-attr]
    assert upto and upto[-1].end.offset == after.end.offset and upto[-1].end.gtid == after.gtid_executed  # type: ignore[union-attr]
    assert MariadbGtidList.parse(after.gtid_executed or "").contains(MariadbGtidList.parse(g))
    assert "password" not in repr(after.to_dict()).lower()


def test_privileges_are_checked_by_name(services: Any, params: SourceParams, source_db: str) -> None:
    conn = connect(params)
    try:
        check_privileges(conn, "orders", [source_db])  # the capture user has what it needs
    finally:
        conn.close()
    user, pw = "lim_" + uuid.uuid4().hex[:8], "lim-pw-" + uuid.uuid4().hex[:8]
    admin = services.root_connect()
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{pw}'")
            cur.execute(f"GRANT SELECT ON `{source_db}`.* TO '{user}'@'127.0.0.1'")
        limited = SourceParams(params.host, params.port, user, pw)
        conn = connect(limited)
        try:
            with pytest.raises(SourceError) as e:
                check_privileges(conn, "orders", [source_db])
            msg = str(e.value)
            assert "REPLICATION SLAVE" in msg and "BINLOG MONITOR" in msg and "SELECT on" not in msg
            assert user in msg and pw not in msg
            with pytest.raises(SourceError, match=r"SELECT on 'other_schema'"):
                check_privileges(conn, "orders", [source_db, "other_schema"])
            with pytest.raises(SourceError, match="BINLOG MONITOR"):
                inspect_source(conn)
        finally:
            conn.close()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
        admin.close()


# ------------------------------------------------------------------------------------ configured start


def test_timestamp_search_picks_the_first_transaction_committed_at_or_after(
    params: SourceParams, root: Any, source_db: str
) -> None:
    before = facts_now(params)
    g1 = [run(root, "INSERT INTO t VALUES (1, 'g1')"), run(root, "INSERT INTO t VALUES (2, 'g1')")]
    t1 = mine(scan(params, facts_now(params), start_of(before)), g1[-1]).commit_ts
    wait_for_next_second(root, t1)  # type: ignore[arg-type]
    run(root, "FLUSH BINARY LOGS")  # the search has to pick the right file too
    g2 = [run(root, "INSERT INTO t VALUES (3, 'g2')"), run(root, "INSERT INTO t VALUES (4, 'g2')")]
    t2 = mine(scan(params, facts_now(params), start_of(before)), g2[-1]).commit_ts
    wait_for_next_second(root, t2)  # type: ignore[arg-type]
    g3 = run(root, "INSERT INTO t VALUES (5, 'g3')")
    after = facts_now(params)
    found = scan(params, after, start_of(before))
    b1, b2a, b3 = mine(found, g1[-1]), mine(found, g2[0]), mine(found, g3)
    at = b2a.commit_ts
    assert at is not None and b1.commit_ts is not None and b1.commit_ts < at

    r = resolve(params, None, StartSpec(kind="timestamp", at=at), facts=after)
    assert r.rule == "start_timestamp"
    p = key(r.position.file, r.position.offset)
    assert key(b1.end.file, b1.end.offset) <= p <= key(b2a.start_file, b2a.start_offset)
    for b in found:  # nothing committed at or after `at` is skipped, nothing earlier is included
        s = key(b.start_file, b.start_offset)
        if key(b1.end.file, b1.end.offset) <= s < p:
            assert b.commit_ts is not None and b.commit_ts < at
        if p <= s < key(b2a.start_file, b2a.start_offset):
            assert b.commit_ts is not None and b.commit_ts >= at
    # reading from there gets group 2 and 3, not group 1
    plan = WindowPlan("orders", 1, r.position, start_of(after))
    got = [c.values["v"] for c in read_changes(params, after.identity, plan, TableFilter((f"{source_db}.t",)))]
    assert got == ["g2", "g2", "g3"]

    spec = StartSpec(kind="file_timestamp", file=b1.start_file, at=float(b3.commit_ts or 0))
    r3 = resolve(params, None, spec, facts=after)
    b2b = mine(found, g2[-1])
    assert r3.rule == "start_file_timestamp"
    assert key(b2b.end.file, b2b.end.offset) <= key(r3.position.file, r3.position.offset)
    assert key(r3.position.file, r3.position.offset) <= key(b3.start_file, b3.start_offset)

    with pytest.raises(ConfigError, match="in the future"):
        resolve(params, None, StartSpec(kind="timestamp", at=(after.server_time or time.time()) + 3600), facts=after)


def test_file_start_inside_a_transaction_moves_back_to_its_start(params: SourceParams, root: Any) -> None:
    before = facts_now(params)
    g = run(root, "INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')", txn=True)
    after = facts_now(params)
    b = mine(scan(params, after, start_of(before)), g)
    r = resolve(params, None, StartSpec(kind="file", file=b.start_file, offset=b.start_offset + 50), facts=after)
    assert r.rule == "start_file" and "moved back" in r.detail
    assert (r.position.file, r.position.offset, r.position.gtid) == (b.start_file, b.start_offset, b.start_gtid)
    r = resolve(params, None, StartSpec(kind="file", file=b.end.file, offset=b.end.offset), facts=after)
    assert (r.position.offset, r.position.gtid, r.position.commit_ts) == (b.end.offset, b.end.gtid, b.commit_ts)


def test_current_and_gtid_starts(params: SourceParams, root: Any) -> None:
    before = facts_now(params)
    g = run(root, "INSERT INTO t VALUES (1, 'a')")
    after = facts_now(params)
    r = resolve(params, None, StartSpec(), facts=after)
    assert r.rule == "start_current" and r.position == start_of(after)
    b = mine(scan(params, after, start_of(before)), g)
    r = resolve(params, None, StartSpec(kind="gtid", gtid=b.end.gtid), facts=after)  # type: ignore[arg-type]
    assert r.rule == "start_gtid" and r.position.gtid == b.end.gtid
    # right after my transaction: its end, or the start of whatever follows it (the same point for reading)
    following = [x for x in scan(params, after, b.end) if x.start_gtid == b.end.gtid]
    assert (r.position.file, r.position.offset) in {(b.end.file, b.end.offset)} | {
        (x.start_file, x.start_offset) for x in following[:1]
    }
    with pytest.raises(ConfigError, match=r"start\.gtid"):
        resolve(params, None, StartSpec(kind="gtid", gtid="0-1-two"), facts=after)
    with pytest.raises(SourceError, match="never executed"):
        resolve(params, None, StartSpec(kind="gtid", gtid="0-1-999999999"), facts=after)


# ---------------------------------------------------------------------------------------- cursors


def test_saved_cursor_same_server_and_from_another_server(params: SourceParams, root: Any) -> None:
    before = facts_now(params)
    g = run(root, "INSERT INTO t VALUES (1, 'a')")
    after = facts_now(params)
    b = mine(scan(params, after, start_of(before)), g)
    saved = replace(b.end, epoch=2)
    r = resolve(params, saved, StartSpec(kind="current"), facts=after)
    assert r.rule == "cursor" and r.position == saved

    # The same logical point saved on another server (a failover): never reuse file+offset.
    other_server = replace(saved.server, server_id=saved.server.server_id + 77)
    elsewhere = replace(saved, server=other_server, file="mysql-bin.000999", offset=4242)
    r = resolve(params, elsewhere, None, facts=after)
    assert r.rule == "failover_gtid" and r.position.epoch == 3 and r.position.server == after.identity
    assert r.position.gtid == b.end.gtid and r.position.commit_ts == b.commit_ts
    assert key(b.end.file, b.end.offset) <= key(r.position.file, r.position.offset)
    nxt = [x for x in scan(params, after, b.end)]
    if nxt:  # nothing between my transaction's end and the resolved point
        assert key(r.position.file, r.position.offset) <= key(nxt[0].start_file, nxt[0].start_offset)

    # Without GTIDs: commit time minus the fallback interval, searched on the new server.
    no_gtid = replace(elsewhere, gtid=None)
    r0 = resolve(params, no_gtid, None, facts=after, fallback_seconds=0)
    assert r0.rule == "failover_timestamp" and r0.position.epoch == 3
    assert key(r0.position.file, r0.position.offset) <= key(b.start_file, b.start_offset)
    try:
        r60 = resolve(params, no_gtid, None, facts=after, fallback_seconds=60)
    except PositionPurged as e:  # the binlogs may not reach back a minute (another test purges old ones)
        assert "before the oldest binlog" in str(e)
    else:
        assert key(r60.position.file, r60.position.offset) <= key(r0.position.file, r0.position.offset)


def test_purged_cursor_is_an_actionable_error(private_services: Any) -> None:
    """One real PURGE, on the session's private MariaDB (tests/faults/services.py): never the shared binlog."""
    params = SourceParams(**private_services.source_params)
    db = "purge_" + uuid.uuid4().hex[:8]
    admin = private_services.root_connect()
    with admin.cursor() as cur:  # a binlog older than the current one, holding a transaction of ours
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO `{db}`.t VALUES (1)")
        cur.execute("FLUSH BINARY LOGS")
    start = facts_now(params)
    assert start.end is not None
    older = [f for f in start.binlogs if f.index < binlog_file_index(start.end.file)]
    assert older, start.binlogs
    victim = older[-1]  # the file just rotated away from: it holds our transactions
    scanner = BinlogScanner(params, start.identity)
    with closing(scanner.file_transactions(victim.name)) as txns:
        first = next(iter(txns), None)
    assert first is not None, f"{victim.name} holds no transaction"
    saved = first.end  # a real cursor from the past, in a file about to be purged
    try:
        with admin.cursor() as cur:
            # MariaDB keeps a file until InnoDB's binlog checkpoint moved past it (a fraction of a second
            # after the rotation); PURGE skips such a file silently, so repeat until it is gone.
            deadline = time.monotonic() + 60
            while True:
                cur.execute(f"PURGE BINARY LOGS TO '{start.end.file}'")
                after = facts_now(params)
                if after.binlog(victim.name) is None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            cur.execute(f"DROP DATABASE `{db}`")
    finally:
        admin.close()
    assert after.binlog(victim.name) is None, f"{victim.name} was not purged"
    with pytest.raises(PositionPurged) as e:
        resolve(params, saved, None, facts=after)
    msg = str(e.value)
    assert f"{saved.file}:{saved.offset}" in msg and after.binlogs[0].name in msg
    assert "backfill" in msg and "snapshot" in msg and "orders" in msg
    assert after.gtid_purged is not None
    assert MariadbGtidList.parse(after.gtid_purged).contains(MariadbGtidList.parse(saved.gtid or ""))
    with pytest.raises(PositionPurged, match="before the oldest binlog"):
        resolve(params, None, StartSpec(kind="timestamp", at=float(saved.commit_ts or 0) - 1), facts=after)
    plan = WindowPlan("orders", 1, first.start_position(), first.end, transactions=1)
    with pytest.raises(PositionPurged, match=victim.name):
        list(read_changes(params, after.identity, plan, TableFilter(("x.*",))))
