"""The coordination protocol's pure pieces: persisted values and the rules the coordinator applies."""

from __future__ import annotations

import json

import pytest

from cdc_core.coordination import (
    BackfillState,
    Cursor,
    LeaseGrant,
    LeaseRecord,
    WindowRecord,
    check_backfill_request,
    check_plan,
    cursor_after_ack,
    lease_decision,
)
from cdc_core.model.errors import ConfigError, StateConflict
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, WindowPlan

pytestmark = pytest.mark.unit

SERVER = ServerIdentity("mariadb", 1)
OTHER_SERVER = ServerIdentity("mariadb", 2)


def pos(offset: int, file: str = "mysql-bin.000001", server: ServerIdentity = SERVER, epoch: int = 0) -> BinlogPosition:
    return BinlogPosition(file, offset, server, gtid=f"0-1-{offset}", commit_ts=1_700_000_000.0 + offset, epoch=epoch)


def plan(seq: int, start: int, end: int, kind: str = "stream", tables: tuple[str, ...] | None = None) -> WindowPlan:
    return WindowPlan("orders", seq, pos(start), pos(end), kind=kind, transactions=end - start, tables=tables)


# ------------------------------------------------------------------------------------------ values


def test_values_round_trip_through_json() -> None:
    grant = LeaseGrant("orders", "dag/run-1", 0x1A2B, 1_700_000_600.5, 1_700_000_000.25)
    assert LeaseGrant.from_dict(json.loads(json.dumps(grant.to_dict()))) == grant
    assert grant.expires_at_iso.endswith("Z")

    bf = BackfillState(pos(10), pos(90), ("db.a", "db.b"), "ops@example", 1_700_000_001.0)
    cursor = Cursor(seq=7, position=pos(100), backfill=bf, updated_at=1_700_000_002.0)
    assert Cursor.from_json(cursor.to_json()) == cursor
    assert Cursor.from_dict(Cursor().to_dict()) == Cursor()

    record = WindowRecord(plan(3, 10, 20), "acked", {"changes": 5, "tables": {"db.a": {"changes": 5}}}, 1.5)
    assert WindowRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    assert record.seq == 3

    lease = LeaseRecord("h", 1.0, 2.0, 1.5, "nonce")
    assert LeaseRecord.from_dict(lease.to_dict()) == lease


def test_grant_carries_no_secrets_and_unknown_formats_are_refused() -> None:
    assert set(LeaseGrant("p", "h", 1, 2.0, 1.0).to_dict()) == {
        "format", "pipeline", "holder", "token", "expires_at", "acquired_at",
    }
    with pytest.raises(ConfigError, match="format"):
        Cursor.from_dict({**Cursor().to_dict(), "format": 99})
    with pytest.raises(ConfigError, match="format"):
        LeaseGrant.from_dict({**LeaseGrant("p", "h", 1, 2.0, 1.0).to_dict(), "format": 2})
    with pytest.raises(ConfigError, match="state"):
        WindowRecord.from_dict({**WindowRecord(plan(1, 4, 8)).to_dict(), "state": "merged"})


# ---------------------------------------------------------------------------------------- leases


@pytest.mark.parametrize(
    ("current", "holder", "now", "expected"),
    [
        (None, "a", 100.0, "create"),
        (LeaseRecord("a", 0.0, 200.0, 0.0), "b", 100.0, "held"),
        (LeaseRecord("a", 0.0, 200.0, 0.0), "a", 100.0, "reenter"),
        (LeaseRecord("a", 0.0, 100.0, 0.0), "b", 100.0, "takeover"),  # expiry is inclusive
        (LeaseRecord("a", 0.0, 50.0, 0.0), "a", 100.0, "takeover"),  # even the same holder gets a new token
    ],
)
def test_lease_decision(current: LeaseRecord | None, holder: str, now: float, expected: str) -> None:
    assert lease_decision(current, holder, now) == expected


# ----------------------------------------------------------------------------------------- plans


def test_first_stream_window_may_start_anywhere_then_must_follow_the_cursor() -> None:
    check_plan("orders", Cursor(), None, plan(1, 40, 80))
    cursor = Cursor(seq=1, position=pos(80))
    check_plan("orders", cursor, None, plan(2, 80, 120))
    with pytest.raises(StateConflict, match="must start at the cursor"):
        check_plan("orders", cursor, None, plan(2, 81, 120))
    moved = WindowPlan("orders", 2, pos(80, server=OTHER_SERVER), pos(120, server=OTHER_SERVER))
    with pytest.raises(StateConflict, match="must start at the cursor"):
        check_plan("orders", cursor, None, moved)


@pytest.mark.parametrize(
    ("cursor", "pending", "candidate", "message"),
    [
        (Cursor(seq=1, position=pos(80)), WindowRecord(plan(2, 80, 90)), plan(2, 80, 99), "planned and not acked"),
        (Cursor(seq=1, position=pos(80)), None, plan(3, 80, 99), "must be 2"),
        (Cursor(seq=1, position=pos(80)), None, plan(1, 80, 99), "must be 2"),
        (Cursor(seq=1, position=pos(80)), None, plan(2, 80, 99, kind=KIND_SNAPSHOT), "one point in the binlog"),
        (Cursor(seq=1, position=pos(80)), None, plan(2, 50, 50, kind=KIND_SNAPSHOT), "at or after the stream cursor"),
        (Cursor(seq=1, position=pos(80)), None, plan(2, 10, 20, kind=KIND_BACKFILL), "no backfill is active"),
        (
            Cursor(seq=1, position=pos(80), backfill=BackfillState(pos(10), pos(80))),
            None, plan(2, 80, 99), "backfill is active",
        ),
        (
            Cursor(seq=1, position=pos(80), backfill=BackfillState(pos(10), pos(80))),
            None, plan(2, 11, 20, kind=KIND_BACKFILL), "where the backfill stands",
        ),
        (
            Cursor(seq=1, position=pos(80), backfill=BackfillState(pos(10), pos(80), ("db.a",))),
            None, plan(2, 10, 20, kind=KIND_BACKFILL, tables=("db.b",)), "covers tables",
        ),
    ],
)
def test_plan_rules(cursor: Cursor, pending: WindowRecord | None, candidate: WindowPlan, message: str) -> None:
    with pytest.raises(StateConflict, match=message):
        check_plan("orders", cursor, pending, candidate)


def test_plan_of_another_pipeline_is_refused() -> None:
    other = WindowPlan("billing", 1, pos(4), pos(8))
    with pytest.raises(StateConflict, match="belongs to pipeline 'billing'"):
        check_plan("orders", Cursor(), None, other)


# ------------------------------------------------------------------------------------------ acks


def test_stream_ack_moves_the_cursor_exactly_to_the_plan_end() -> None:
    after = cursor_after_ack("orders", Cursor(seq=1, position=pos(80)), plan(2, 80, 120), now=5.0)
    assert after == Cursor(seq=2, position=pos(120), backfill=None, updated_at=5.0)
    first = cursor_after_ack("orders", Cursor(), plan(1, 40, 80), now=6.0)
    assert first.seq == 1 and first.position == pos(80)


def test_ack_that_does_not_follow_the_cursor_is_refused() -> None:
    with pytest.raises(StateConflict, match="only window 2"):
        cursor_after_ack("orders", Cursor(seq=1, position=pos(80)), plan(3, 80, 120), now=1.0)
    with pytest.raises(StateConflict, match="cursor stands at"):
        cursor_after_ack("orders", Cursor(seq=1, position=pos(80)), plan(2, 70, 120), now=1.0)


def test_backfill_ack_moves_only_the_backfill_and_finishes_at_until() -> None:
    bf = BackfillState(pos(10), pos(80), ("db.a",), "ops")
    cursor = Cursor(seq=4, position=pos(200), backfill=bf)
    mid = cursor_after_ack("orders", cursor, plan(5, 10, 50, kind=KIND_BACKFILL), now=1.0)
    assert mid.position == pos(200) and mid.seq == 5
    assert mid.backfill == BackfillState(pos(50), pos(80), ("db.a",), "ops")
    done = cursor_after_ack("orders", mid, plan(6, 50, 80, kind=KIND_BACKFILL), now=2.0)
    assert done.backfill is None and done.position == pos(200) and done.seq == 6
    with pytest.raises(StateConflict, match="backfill stands at"):
        cursor_after_ack("orders", mid, plan(6, 10, 80, kind=KIND_BACKFILL), now=2.0)


def test_backfill_requests() -> None:
    cursor = Cursor(seq=3, position=pos(100))
    check_backfill_request("orders", cursor, pos(10), pos(100))
    with pytest.raises(ConfigError, match="before it starts"):
        check_backfill_request("orders", cursor, pos(50), pos(10))
    with pytest.raises(StateConflict, match="at or before the cursor"):
        check_backfill_request("orders", cursor, pos(10), pos(101))
    with pytest.raises(StateConflict, match="at or before the cursor"):
        check_backfill_request("orders", cursor, pos(10, server=OTHER_SERVER), pos(50, server=OTHER_SERVER))
    active = Cursor(seq=3, position=pos(100), backfill=BackfillState(pos(10), pos(100), (), "ops"))
    with pytest.raises(StateConflict, match="already active"):
        check_backfill_request("orders", active, pos(10), pos(100))
