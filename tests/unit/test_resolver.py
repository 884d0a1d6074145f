"""The start-position chain as a table of cases over an in-memory binlog (no server).

`FakeBinlog` lays out transactions in files the way the scanner reports them (GTID states, commit
times, a header region before the first transaction and a Rotate event after the last one), and
implements the resolver's `BinlogScan` protocol, counting reads so the binary search can be checked.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.capture.resolver import find_by_timestamp, resolve_start
from cdc_core.capture.source import SourceFacts
from cdc_core.model.errors import ConfigError, PositionPurged, SourceError
from cdc_core.model.positions import BinlogFile, BinlogPosition, ServerIdentity, SourceEnd, StartSpec
from cdc_core.model.windows import TxnBoundary

pytestmark = pytest.mark.unit

settings.register_profile("cdc", max_examples=200, deadline=None)
settings.load_profile("cdc")

MARIA = ServerIdentity("mariadb", 1)
MARIA_2 = ServerIdentity("mariadb", 2)
MYSQL = ServerIdentity("mysql", 7, "3e11fa47-71ca-11e1-9e33-c80aa9429562")
MYSQL_2 = ServerIdentity("mysql", 8, "9b2a0c4e-0000-4000-8000-000000000001")

HEADER_END = 256  # Format_description + Gtid_list
FIRST_TXN = 300  # a Binlog_checkpoint sits between the header and the first transaction
TXN_BYTES = 100
ROTATE_BYTES = 44
NOW = 1_800_000_000.0


class FakeBinlog:
    """Files of transactions given by their commit times. MariaDB GTIDs 0-<server>-<n>, or none."""

    def __init__(
        self,
        files: list[list[float]],
        identity: ServerIdentity = MARIA,
        first_index: int = 1,
        first_seq: int = 0,
        gtids: bool = True,
    ) -> None:
        self.identity = identity
        self.gtids = gtids
        self.names = [f"mysql-bin.{first_index + i:06d}" for i in range(len(files))]
        self.txns: dict[str, list[TxnBoundary]] = {}
        self.headers: dict[str, str | None] = {}
        self.sizes: dict[str, int] = {}
        self.reads: list[tuple[str, str]] = []
        seq, prev_ts = first_seq, None
        for i, (name, times) in enumerate(zip(self.names, files, strict=True)):
            self.headers[name] = self._state(seq)
            offset = FIRST_TXN
            out = []
            for t in times:
                before = self._state(seq)
                seq += 1
                end = BinlogPosition(name, offset + TXN_BYTES, identity, self._state(seq), t)
                gtid = f"0-{identity.server_id}-{seq}" if gtids else None
                out.append(TxnBoundary(name, offset, end, gtid, 4, TXN_BYTES, False, before, prev_ts))
                offset += TXN_BYTES
                prev_ts = t
            self.txns[name] = out
            last = i == len(files) - 1
            self.sizes[name] = offset if last else offset + ROTATE_BYTES
        self.seq = seq

    def _state(self, seq: int) -> str | None:
        if not self.gtids:
            return None
        return f"0-{self.identity.server_id}-{seq}" if seq else ""

    # BinlogScan protocol
    def first_event_time(self, file: str) -> float | None:
        self.reads.append(("first", file))
        txns = self.txns[file]
        return txns[0].commit_ts if txns else None

    def file_transactions(self, file: str) -> Iterator[TxnBoundary]:
        self.reads.append(("scan", file))
        yield from self.txns[file]

    def file_start_gtid(self, file: str) -> str | None:
        self.reads.append(("head", file))
        return self.headers[file]

    def facts(self, purged: str | None = "auto") -> SourceFacts:
        last = self.names[-1]
        executed = self._state(self.seq) if self.gtids else None
        if purged == "auto":
            purged = self.headers[self.names[0]] if self.gtids else None
        return SourceFacts(
            identity=self.identity,
            version="10.11.19-MariaDB-log" if self.identity.flavor == "mariadb" else "8.0.36",
            binlogs=tuple(BinlogFile(n, self.sizes[n]) for n in self.names),
            end=SourceEnd(last, self.sizes[last], executed),
            gtid_executed=executed,
            gtid_purged=purged,
            log_bin=True,
            binlog_format="ROW",
            binlog_row_image="FULL",
            binlog_row_metadata="FULL",
            address="db1:3306",
        )

    def all(self) -> list[TxnBoundary]:
        return [b for n in self.names for b in self.txns[n]]


def resolve(fake: FakeBinlog, saved: BinlogPosition | None = None, spec: StartSpec | None = None, **kw):  # type: ignore[no-untyped-def]
    return resolve_start(saved, spec, kw.pop("facts", None) or fake.facts(), fake, now=NOW, pipeline="orders", **kw)


T0 = 1_700_000_000.0


def standard() -> FakeBinlog:
    # 3 files, transactions one second apart except a 10 s gap in the middle file
    return FakeBinlog([[T0, T0 + 1, T0 + 2], [T0 + 3, T0 + 4, T0 + 14, T0 + 15], [T0 + 16, T0 + 17]], first_index=40)


# ------------------------------------------------------------------------------- rule 1: same server


def test_saved_cursor_on_the_same_server_resumes_exactly() -> None:
    fake = standard()
    saved = fake.txns["mysql-bin.000041"][1].end
    r = resolve(fake, saved, StartSpec(kind="timestamp", at=T0))  # a saved cursor always beats the config
    assert r.rule == "cursor" and r.position == saved
    assert fake.reads == []  # no scan needed


def test_saved_cursor_whose_file_was_purged_names_position_oldest_file_and_ways_out() -> None:
    fake = standard()
    saved = BinlogPosition("mysql-bin.000039", 1337, MARIA, "0-1-0", T0 - 5)
    with pytest.raises(PositionPurged) as e:
        resolve(fake, saved)
    msg = str(e.value)
    assert "mysql-bin.000039:1337" in msg and "mysql-bin.000040" in msg and "orders" in msg
    assert "backfill" in msg and "snapshot" in msg


def test_saved_cursor_purged_per_synthetic_facts_that_omit_the_file() -> None:
    fake = standard()
    saved = fake.txns["mysql-bin.000040"][2].end
    facts = fake.facts()
    facts = replace(facts, binlogs=facts.binlogs[1:], gtid_purged=fake.headers["mysql-bin.000041"])
    with pytest.raises(PositionPurged, match=r"mysql-bin\.000040.*oldest binlog on db1:3306 is mysql-bin\.000041"):
        resolve(fake, saved, facts=facts)


def test_saved_cursor_beyond_the_file_end_or_on_an_unknown_newer_file() -> None:
    fake = standard()
    with pytest.raises(SourceError, match="beyond the end"):
        resolve(fake, BinlogPosition("mysql-bin.000042", 10_000, MARIA, None))
    with pytest.raises(SourceError, match="RESET MASTER") as e:
        resolve(fake, BinlogPosition("mysql-bin.000050", 400, MARIA, None))
    assert not isinstance(e.value, PositionPurged)


def test_saved_gtid_set_must_be_executed_and_not_purged() -> None:
    fake = standard()
    saved = replace(fake.txns["mysql-bin.000041"][0].end, gtid="0-1-99")
    with pytest.raises(SourceError, match="never executed"):
        resolve(fake, saved)
    facts = replace(fake.facts(), gtid_purged="0-1-5")
    saved = fake.txns["mysql-bin.000041"][0].end  # 0-1-4
    with pytest.raises(PositionPurged, match="purged"):
        resolve(fake, saved, facts=facts)


# ------------------------------------------------------------------------------ rule 2: other server


def test_cursor_from_another_server_continues_by_gtid_in_a_new_epoch() -> None:
    fake = standard()
    # The pipeline had landed up to 0-1-5 on a server with id 2 (its files and offsets differ).
    saved = BinlogPosition("mysql-bin.000007", 123_456, MARIA_2, "0-1-5", T0 + 4, epoch=3)
    r = resolve(fake, saved)
    assert r.rule == "failover_gtid"
    expected = fake.txns["mysql-bin.000041"][2]  # the transaction after 0-1-5
    assert (r.position.file, r.position.offset) == (expected.start_file, expected.start_offset)
    assert r.position.gtid == "0-1-5" and r.position.epoch == 4 and r.position.server == MARIA
    assert r.position.commit_ts == T0 + 4


def test_failover_gtid_at_the_very_end_gives_the_current_end() -> None:
    fake = standard()
    saved = BinlogPosition("mysql-bin.000003", 999, MARIA_2, f"0-1-{fake.seq}", T0 + 17, epoch=0)
    r = resolve(fake, saved)
    assert r.rule == "failover_gtid"
    assert (r.position.file, r.position.offset) == ("mysql-bin.000042", fake.sizes["mysql-bin.000042"])
    assert r.position.epoch == 1


def test_failover_gtid_ahead_of_the_new_server_is_refused() -> None:
    fake = standard()
    saved = BinlogPosition("mysql-bin.000003", 999, MARIA_2, "0-1-50", T0 + 17)
    with pytest.raises(SourceError, match="never executed"):
        resolve(fake, saved)


def test_failover_without_gtids_searches_by_commit_time_minus_fallback() -> None:
    fake = FakeBinlog([[T0, T0 + 1, T0 + 2], [T0 + 3, T0 + 4, T0 + 14, T0 + 15]], identity=MYSQL, gtids=False)
    saved = BinlogPosition("mysql-bin.000900", 4242, MYSQL_2, None, T0 + 15, epoch=0)
    r = resolve(fake, saved, fallback_seconds=5)
    assert r.rule == "failover_timestamp" and r.position.epoch == 1
    expected = fake.txns["mysql-bin.000002"][2]  # first commit >= T0+10 is T0+14
    assert (r.position.file, r.position.offset) == (expected.start_file, expected.start_offset)
    assert r.position.server == MYSQL and r.position.gtid is None
    r = resolve(fake, saved, fallback_seconds=60)  # before everything, and mysql-bin.000001 exists: its start
    assert (r.position.file, r.position.offset) == ("mysql-bin.000001", FIRST_TXN)


def test_failover_without_gtid_or_commit_time_is_an_error() -> None:
    fake = FakeBinlog([[T0]], identity=MYSQL, gtids=False)
    saved = BinlogPosition("mysql-bin.000900", 4242, MYSQL_2, None, None)
    with pytest.raises(SourceError, match="neither a GTID set nor a commit time"):
        resolve(fake, saved)


def test_same_server_id_but_different_uuid_is_another_server() -> None:
    fake = FakeBinlog([[T0, T0 + 1]], identity=MYSQL, gtids=False)
    other = ServerIdentity("mysql", MYSQL.server_id, MYSQL_2.server_uuid)
    saved = BinlogPosition("mysql-bin.000001", FIRST_TXN + TXN_BYTES, other, None, T0 + 1)
    assert resolve(fake, saved, fallback_seconds=0).rule == "failover_timestamp"


# --------------------------------------------------------------------------- rule 3: configured start


def test_current_is_the_servers_end() -> None:
    fake = standard()
    r = resolve(fake, None, StartSpec())
    assert r.rule == "start_current"
    expected = ("mysql-bin.000042", fake.sizes["mysql-bin.000042"], "0-1-9")
    assert (r.position.file, r.position.offset, r.position.gtid) == expected
    assert resolve(fake, None, None).rule == "start_current"


@pytest.mark.parametrize(
    ("offset", "expected", "moved"),
    [
        (FIRST_TXN, FIRST_TXN, False),  # a transaction start
        (FIRST_TXN + 2 * TXN_BYTES, FIRST_TXN + 2 * TXN_BYTES, False),  # a transaction end
        (FIRST_TXN + TXN_BYTES + 37, FIRST_TXN + TXN_BYTES, True),  # inside the 2nd transaction: its start
        (280, 4, True),  # inside the header region: the file start
        (4, 4, False),
    ],
)
def test_file_position_is_moved_back_to_a_transaction_boundary(offset: int, expected: int, moved: bool) -> None:
    fake = standard()
    r = resolve(fake, None, StartSpec(kind="file", file="mysql-bin.000041", offset=offset))
    assert r.rule == "start_file" and r.position.offset == expected
    assert ("moved back" in r.detail) == moved
    # the GTID state and commit time match the boundary
    if expected == FIRST_TXN + TXN_BYTES:
        b = fake.txns["mysql-bin.000041"][1]
        assert r.position.gtid == b.start_gtid == "0-1-4" and r.position.commit_ts == T0 + 3
    if expected == 4:
        assert r.position.gtid == fake.headers["mysql-bin.000041"] == "0-1-3"


def test_file_position_errors() -> None:
    fake = standard()
    with pytest.raises(PositionPurged, match=r"oldest binlog on db1:3306 is mysql-bin\.000040"):
        resolve(fake, None, StartSpec(kind="file", file="mysql-bin.000012", offset=4))
    with pytest.raises(SourceError, match=r"mysql-bin\.000040 \.\. mysql-bin\.000042"):
        resolve(fake, None, StartSpec(kind="file", file="mysql-bin.000099", offset=4))
    with pytest.raises(ConfigError, match="beyond the end"):
        resolve(fake, None, StartSpec(kind="file", file="mysql-bin.000041", offset=99_999))


# ---------------------------------------------------------------------------- rule 4: timestamp search


@pytest.mark.parametrize(
    ("at", "file", "index"),
    [
        (T0 + 4, "mysql-bin.000041", 1),  # exactly a commit time
        (T0 + 5, "mysql-bin.000041", 2),  # in the gap: the next commit
        (T0 + 14.5, "mysql-bin.000041", 3),
        (T0 + 15.5, "mysql-bin.000042", 0),  # between files
        (T0, "mysql-bin.000040", 0),  # the oldest binlog's first commit itself
    ],
)
def test_timestamp_starts_at_the_first_transaction_committed_at_or_after_it(at: float, file: str, index: int) -> None:
    fake = standard()
    r = resolve(fake, None, StartSpec(kind="timestamp", at=at))
    b = fake.txns[file][index]
    assert r.rule == "start_timestamp"
    assert r.position == replace(b.start_position(), epoch=0)


def test_timestamp_after_the_last_commit_is_the_end() -> None:
    fake = standard()
    r = resolve(fake, None, StartSpec(kind="timestamp", at=T0 + 100))
    assert (r.position.file, r.position.offset) == ("mysql-bin.000042", FIRST_TXN + 2 * TXN_BYTES)
    assert r.position.gtid == "0-1-9"


def test_timestamp_in_the_future_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="in the future"):
        resolve(standard(), None, StartSpec(kind="timestamp", at=NOW + 60))


def test_timestamp_before_the_oldest_binlog_is_purged_with_the_oldest_time() -> None:
    fake = standard()
    with pytest.raises(PositionPurged) as e:
        resolve(fake, None, StartSpec(kind="timestamp", at=T0 - 3600))
    msg = str(e.value)
    assert "mysql-bin.000040" in msg and "2023-11-14T22:13:20Z" in msg  # T0 in UTC


def test_timestamp_before_everything_starts_at_the_first_binlog_ever() -> None:
    fake = FakeBinlog([[T0, T0 + 1], [T0 + 2]], first_index=1)
    r = resolve(fake, None, StartSpec(kind="timestamp", at=T0 - 3600))
    assert (r.position.file, r.position.offset) == ("mysql-bin.000001", FIRST_TXN)


def test_file_timestamp_searches_from_that_file() -> None:
    fake = standard()
    r = resolve(fake, None, StartSpec(kind="file_timestamp", file="mysql-bin.000041", at=T0 + 10))
    assert r.rule == "start_file_timestamp"
    assert (r.position.file, r.position.offset) == ("mysql-bin.000041", FIRST_TXN + 2 * TXN_BYTES)
    r = resolve(fake, None, StartSpec(kind="file_timestamp", file="mysql-bin.000041", at=T0 + 16))  # continues on
    assert (r.position.file, r.position.offset) == ("mysql-bin.000042", FIRST_TXN)
    assert ("first", "mysql-bin.000040") not in fake.reads


def test_empty_binlog_files_are_skipped_by_the_search() -> None:
    fake = FakeBinlog([[T0], [], [], [T0 + 10, T0 + 11], []], first_index=5)
    r = resolve(fake, None, StartSpec(kind="timestamp", at=T0 + 5))
    assert (r.position.file, r.position.offset) == ("mysql-bin.000008", FIRST_TXN)


def test_binary_search_reads_few_files() -> None:
    files = [[T0 + 10 * i + j for j in range(3)] for i in range(64)]
    fake = FakeBinlog(files, first_index=100)
    r = resolve(fake, None, StartSpec(kind="timestamp", at=T0 + 10 * 37 + 1.5))
    assert (r.position.file, r.position.offset) == ("mysql-bin.000137", FIRST_TXN + 2 * TXN_BYTES)
    firsts = [f for kind, f in fake.reads if kind == "first"]
    scans = [f for kind, f in fake.reads if kind == "scan"]
    assert len(firsts) <= 8 and scans == ["mysql-bin.000137"]


@given(
    gaps=st.lists(st.lists(st.integers(0, 5), max_size=5), min_size=1, max_size=8),
    at_offset=st.integers(-5, 120),
)
def test_timestamp_search_equals_a_linear_scan(gaps: list[list[int]], at_offset: int) -> None:
    t, files = T0, []
    for file_gaps in gaps:
        times = []
        for g in file_gaps:
            t += g
            times.append(t)
        files.append(times)
    fake = FakeBinlog(files, first_index=1)
    at = T0 + at_offset
    if at > NOW:
        return
    facts = fake.facts()
    pos, _ = find_by_timestamp(at, facts, fake, epoch=0)
    every = fake.all()
    hit = next((b for b in every if b.commit_ts is not None and b.commit_ts >= at), None)
    if hit is not None:
        assert (pos.file, pos.offset) == (hit.start_file, hit.start_offset)
    elif every:
        assert (pos.file, pos.offset) == (every[-1].end.file, every[-1].end.offset)
    else:
        assert (pos.file, pos.offset) == (facts.end.file, facts.end.offset)  # type: ignore[union-attr]


# ----------------------------------------------------------------------------------- GTID configured


def test_configured_gtid_is_located() -> None:
    fake = standard()
    r = resolve(fake, None, StartSpec(kind="gtid", gtid="0-1-7"))
    b = fake.txns["mysql-bin.000042"][0]  # the 8th transaction
    assert r.rule == "start_gtid" and (r.position.file, r.position.offset) == (b.start_file, b.start_offset)
    assert r.position.gtid == "0-1-7" and r.position.epoch == 0


def test_configured_gtid_at_a_file_start_uses_the_header_state() -> None:
    fake = standard()
    r = resolve(fake, None, StartSpec(kind="gtid", gtid="0-1-3"))
    assert (r.position.file, r.position.offset, r.position.gtid) == ("mysql-bin.000041", FIRST_TXN, "0-1-3")
    assert ("head", "mysql-bin.000042") in fake.reads and ("scan", "mysql-bin.000040") not in fake.reads


def test_configured_gtid_older_than_the_oldest_binlog_is_purged() -> None:
    fake = FakeBinlog([[T0, T0 + 1], [T0 + 2]], first_index=40, first_seq=10)
    with pytest.raises(PositionPurged, match="purged"):
        resolve(fake, None, StartSpec(kind="gtid", gtid="0-1-5"))
    with pytest.raises(PositionPurged, match="older than the oldest binlog"):
        resolve(fake, None, StartSpec(kind="gtid", gtid="0-1-5"), facts=replace(fake.facts(), gtid_purged=None))


@pytest.mark.parametrize("bad", ["0-1", "zero-1-2", "0-1-2-3", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"])
def test_malformed_gtid_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"start\.gtid"):
        resolve(standard(), None, StartSpec(kind="gtid", gtid=bad))


def test_gtid_start_needs_a_gtid_server() -> None:
    fake = FakeBinlog([[T0]], identity=MYSQL, gtids=False)
    with pytest.raises(ConfigError, match="no GTIDs"):
        resolve(fake, None, StartSpec(kind="gtid", gtid="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"))


# ------------------------------------------------------------------------------------ StartSpec checks


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "sometime"}, "not one of"),
        ({"kind": "gtid"}, "needs gtid"),
        ({"kind": "timestamp"}, "needs at"),
        ({"kind": "file_timestamp", "file": "mysql-bin.000001"}, "needs at"),
        ({"kind": "current", "file": "mysql-bin.000001"}, "remove file"),
        ({"kind": "timestamp", "at": 1.0, "gtid": "0-1-1"}, "remove gtid"),
        ({"kind": "file", "file": "mysql-bin"}, "numeric suffix"),
        ({"kind": "file", "file": "mysql-bin.000001", "offset": 2}, "4-byte"),
        ({"kind": "timestamp", "at": math.nan}, "unix seconds"),
        ({"kind": "gtid", "gtid": "  "}, "empty"),
    ],
)
def test_start_spec_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StartSpec(**kwargs)  # type: ignore[arg-type]


def test_start_spec_accepts_an_aware_datetime() -> None:
    spec = StartSpec(kind="timestamp", at=datetime(2026, 11, 20, 8, tzinfo=UTC))  # type: ignore[arg-type]
    assert spec.at == 1795161600.0
