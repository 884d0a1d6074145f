"""Property tests for positions and GTID sets: the algebra everything else trusts.

GTID sets are checked against a reference model made of plain Python sets (MySQL: the set of
(uuid, transaction number) pairs; MariaDB: the highest sequence number per domain), so union,
difference and containment are tested for meaning, not just for internal consistency.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cdc_core.model.errors import ConfigError
from cdc_core.model.positions import (
    BinlogPosition,
    MariadbGtidList,
    MysqlGtidSet,
    ServerIdentity,
    binlog_file_index,
    change_version,
    parse_gtid_set,
)

pytestmark = pytest.mark.unit

settings.register_profile("cdc", max_examples=200, deadline=None)
settings.load_profile("cdc")

UUIDS = [
    "3e11fa47-71ca-11e1-9e33-c80aa9429562",
    "9b2a0c4e-0000-4000-8000-000000000001",
    "ffffffff-ffff-4fff-bfff-ffffffffffff",
]

# ------------------------------------------------------------------------------------------- MySQL

intervals = st.lists(
    st.tuples(st.integers(1, 60), st.integers(0, 8)).map(lambda t: (t[0], t[0] + t[1])), min_size=1, max_size=4
)


@st.composite
def mysql_sets(draw: st.DrawFn) -> MysqlGtidSet:
    by_uuid = draw(st.dictionaries(st.sampled_from(UUIDS), intervals, max_size=3))
    text = ",".join(u + "".join(f":{lo}-{hi}" for lo, hi in iv) for u, iv in by_uuid.items())
    return MysqlGtidSet.parse(text)


def members(s: MysqlGtidSet) -> set[tuple[str, int]]:
    return {(u, n) for u, iv in s.intervals for lo, hi in iv for n in range(lo, hi + 1)}


def is_canonical(s: MysqlGtidSet) -> bool:
    uuids = [u for u, _ in s.intervals]
    if uuids != sorted(uuids) or len(set(uuids)) != len(uuids):
        return False
    for _, iv in s.intervals:
        if not iv:
            return False
        for (_, hi1), (lo2, _) in itertools.pairwise(iv):
            if not lo2 > hi1 + 1:  # sorted, disjoint and not adjacent
                return False
        if any(lo > hi or lo < 1 for lo, hi in iv):
            return False
    return True


@given(mysql_sets(), mysql_sets())
def test_mysql_union_difference_contains_match_set_semantics(a: MysqlGtidSet, b: MysqlGtidSet) -> None:
    assert members(a.union(b)) == members(a) | members(b)
    assert members(a.difference(b)) == members(a) - members(b)
    assert a.contains(b) == (members(b) <= members(a))
    for s in (a.union(b), a.difference(b)):
        assert is_canonical(s)


@given(mysql_sets(), mysql_sets(), mysql_sets())
def test_mysql_union_laws(a: MysqlGtidSet, b: MysqlGtidSet, c: MysqlGtidSet) -> None:
    assert a.union(b) == b.union(a)
    assert a.union(b).union(c) == a.union(b.union(c))
    assert a.union(a) == a
    assert a.union(MysqlGtidSet()) == a
    assert a.union(b).contains(a) and a.union(b).contains(b)
    assert a.contains(a) and a.contains(MysqlGtidSet())
    assert not a.difference(a)
    assert a.difference(b).union(b) == a.union(b)
    assert not a.difference(b).difference(a)  # a - b is inside a
    assert members(a.difference(b)) & members(b) == set()
    if a.contains(b) and b.contains(a):
        assert a == b


@given(mysql_sets())
def test_mysql_parse_str_round_trip(a: MysqlGtidSet) -> None:
    assert MysqlGtidSet.parse(str(a)) == a
    assert parse_gtid_set(str(a), "mysql") == a
    if a:
        assert parse_gtid_set(str(a)) == a  # auto-detected by the ':'


@given(mysql_sets(), st.sampled_from(UUIDS), st.integers(1, 80))
def test_mysql_add_is_union_with_one(a: MysqlGtidSet, uuid: str, n: int) -> None:
    added = a.add(f"{uuid}:{n}")
    assert members(added) == members(a) | {(uuid, n)}
    assert added.contains(a)


def test_mysql_parse_normalises_and_rejects() -> None:
    s = MysqlGtidSet.parse("3E11FA47-71CA-11E1-9E33-C80AA9429562:3-5:1-2:7,\n3e11fa47-71ca-11e1-9e33-c80aa9429562:6")
    assert str(s) == "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7"
    for bad in ("nouuid:1-5", f"{UUIDS[0]}", f"{UUIDS[0]}:0", f"{UUIDS[0]}:5-3", f"{UUIDS[0]}:a-b"):
        with pytest.raises(ConfigError):
            MysqlGtidSet.parse(bad)


# ----------------------------------------------------------------------------------------- MariaDB


@st.composite
def mariadb_lists(draw: st.DrawFn) -> MariadbGtidList:
    by_domain = draw(
        st.dictionaries(st.integers(0, 3), st.tuples(st.integers(1, 3), st.integers(1, 50)), max_size=4)
    )
    return MariadbGtidList.parse(",".join(f"{d}-{s}-{q}" for d, (s, q) in by_domain.items()))


@given(mariadb_lists(), mariadb_lists())
def test_mariadb_algebra_matches_per_domain_max(a: MariadbGtidList, b: MariadbGtidList) -> None:
    sa, sb = a.seq_by_domain(), b.seq_by_domain()
    union = a.union(b).seq_by_domain()
    assert union == {d: max(sa.get(d, 0), sb.get(d, 0)) for d in sa.keys() | sb.keys()}
    assert a.contains(b) == all(sa.get(d, 0) >= q for d, q in sb.items())
    assert a.difference(b).seq_by_domain() == {d: q for d, q in sa.items() if q > sb.get(d, 0)}


@given(mariadb_lists(), mariadb_lists(), mariadb_lists())
def test_mariadb_union_laws(a: MariadbGtidList, b: MariadbGtidList, c: MariadbGtidList) -> None:
    # Commutative on what matters (the sequence per domain; the server id of a tie may differ).
    assert a.union(b).seq_by_domain() == b.union(a).seq_by_domain()
    assert a.union(b).union(c).seq_by_domain() == a.union(b.union(c)).seq_by_domain()
    assert a.union(a) == a
    assert a.union(b).contains(a) and a.union(b).contains(b)
    assert a.contains(a) and a.contains(MariadbGtidList())
    assert not a.difference(a)
    assert a.union(b).difference(b).seq_by_domain().items() <= a.seq_by_domain().items()
    assert a.contains(b) == (not b.difference(a))
    domains = [d for d, _, _ in a.union(b).entries]
    assert domains == sorted(set(domains))  # one entry per domain, sorted


@given(mariadb_lists())
def test_mariadb_parse_str_round_trip(a: MariadbGtidList) -> None:
    assert MariadbGtidList.parse(str(a)) == a
    assert parse_gtid_set(str(a), "mariadb") == a
    if a:
        assert parse_gtid_set(str(a)) == a  # auto-detected: no ':'


@given(mariadb_lists(), st.integers(0, 3), st.integers(1, 3), st.integers(1, 60))
def test_mariadb_add(a: MariadbGtidList, domain: int, server: int, seq: int) -> None:
    added = a.add(f"{domain}-{server}-{seq}")
    assert added.contains(a)
    assert added.seq_by_domain()[domain] == max(seq, a.seq_by_domain().get(domain, 0))


def test_mariadb_parse_rejects() -> None:
    for bad in ("0-1", "a-b-c", "0-1-2,0-1-3", "0-1-2-3"):
        with pytest.raises(ConfigError):
            MariadbGtidList.parse(bad)
    with pytest.raises(ConfigError):
        parse_gtid_set("0-1-2", "oracle")


# --------------------------------------------------------------------------------------- positions

MARIADB = ServerIdentity("mariadb", 1)
MYSQL = ServerIdentity("mysql", 7, UUIDS[0])

file_names = st.builds(
    lambda base, idx: f"{base}.{idx:06d}",
    st.sampled_from(["mysql-bin", "binlog", "db1-bin"]),
    st.integers(1, 1_048_575),
)
offsets = st.integers(4, (1 << 32) - 1)
epochs = st.integers(0, 2047)


@st.composite
def positions(draw: st.DrawFn, epoch: st.SearchStrategy[int] = epochs) -> BinlogPosition:
    server = draw(st.sampled_from([MARIADB, MYSQL, ServerIdentity("mariadb", 2)]))
    gtid = draw(st.none() | (mysql_sets() if server.flavor == "mysql" else mariadb_lists()).map(str))
    return BinlogPosition(
        file=draw(file_names),
        offset=draw(offsets),
        server=server,
        gtid=gtid or None,
        commit_ts=draw(st.none() | st.floats(0, 4e9, allow_nan=False)),
        epoch=draw(epoch),
    )


@given(positions(), positions())
def test_ordering_is_total_and_matches_change_version(a: BinlogPosition, b: BinlogPosition) -> None:
    # exactly one of <, same point, >
    assert [a < b, a.same_point(b), a > b].count(True) == 1
    assert (a <= b) == (a < b or a.same_point(b))
    assert (a >= b) == (a > b or a.same_point(b))
    assert (a < b) == (b > a)
    # change_version is a BIGINT that orders exactly as positions do
    assert (a < b) == (a.change_version < b.change_version)
    assert a.same_point(b) == (a.change_version == b.change_version)
    assert 0 <= a.change_version < (1 << 63)


@given(positions(), positions(), positions())
def test_ordering_is_transitive(a: BinlogPosition, b: BinlogPosition, c: BinlogPosition) -> None:
    if a <= b and b <= c:
        assert a <= c
    if a < b and b < c:
        assert a < c
    ordered = sorted([a, b, c], key=BinlogPosition.sort_key)
    assert [p.change_version for p in ordered] == sorted(p.change_version for p in (a, b, c))


@given(positions(epoch=st.just(0)), positions(epoch=st.just(1)))
def test_a_later_epoch_is_newer_whatever_the_file(old: BinlogPosition, new: BinlogPosition) -> None:
    assert new > old
    assert new.change_version > old.change_version


@given(epochs, st.integers(0, 1_048_575), offsets, epochs, st.integers(0, 1_048_575), offsets)
def test_change_version_is_injective(e1: int, i1: int, o1: int, e2: int, i2: int, o2: int) -> None:
    assume((e1, i1, o1) != (e2, i2, o2))
    assert change_version(e1, f"b.{i1:06d}", o1) != change_version(e2, f"b.{i2:06d}", o2)


@given(positions())
def test_json_round_trip(p: BinlogPosition) -> None:
    back = BinlogPosition.from_json(p.to_json())
    assert back == p
    assert back.change_version == p.change_version
    assert back.server.same_server(p.server)
    assert json.loads(p.to_json())["format"] == 1
    if p.gtid is not None:
        gs = p.gtid_set()
        assert gs is not None and str(gs) == p.gtid


def test_position_validation_and_encoding_limits() -> None:
    assert binlog_file_index("mysql-bin.000042") == 42
    with pytest.raises(ConfigError, match="numeric suffix"):
        BinlogPosition("mysql-bin", 4, MARIADB)
    with pytest.raises(ConfigError, match="magic header"):
        BinlogPosition("mysql-bin.000001", 3, MARIADB)
    with pytest.raises(ConfigError, match="change-version"):
        change_version(0, "mysql-bin.000001", 1 << 32)
    with pytest.raises(ConfigError, match="change-version"):
        change_version(2048, "mysql-bin.000001", 4)
    with pytest.raises(ConfigError, match="change-version"):
        change_version(0, "mysql-bin.1048576", 4)
    with pytest.raises(ConfigError, match="format"):
        BinlogPosition.from_dict({"format": 99})


def test_server_identity() -> None:
    assert MARIADB.same_server(ServerIdentity("mariadb", 1))
    assert not MARIADB.same_server(ServerIdentity("mariadb", 2))
    assert not MARIADB.same_server(ServerIdentity("mysql", 1))
    assert not MYSQL.same_server(ServerIdentity("mysql", 7, UUIDS[1]))  # same id, another server
    assert MYSQL.same_server(ServerIdentity("mysql", 7))  # uuid unknown on one side
    assert ServerIdentity.from_dict(MYSQL.to_dict()) == MYSQL
