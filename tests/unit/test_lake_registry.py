"""The lake table registry's rules (cdc_core/lake_registry.py): record, detect, repair."""

from __future__ import annotations

import pytest

from cdc_core.errors import ConfigError
from cdc_core.lake_registry import (
    LakeRegistry,
    after_ack,
    check_backfill_start,
    mark_damaged,
    problems,
    repair_hint,
)
from cdc_core.positions import BinlogPosition, ServerIdentity
from cdc_core.window_plan import KIND_BACKFILL, WindowPlan

pytestmark = pytest.mark.unit

SERVER = ServerIdentity(server_id=1, flavor="mariadb")


def pos(offset: int, ts: float | None = None) -> BinlogPosition:
    return BinlogPosition("mysql-bin.000001", offset, SERVER, f"0-1-{offset}", ts)


def plan(seq: int, start: int, end: int, kind: str = "stream") -> WindowPlan:
    return WindowPlan("p", seq, pos(start, 1_700_000_000.0 + start), pos(end), kind=kind)


def test_first_ack_registers_and_later_acks_change_nothing() -> None:
    reg, recreated = after_ack(LakeRegistry(), plan(1, 100, 200), {"db.t": ("db", "t", "id-1")})
    assert recreated == [] and reg.tables["db.t"].first_seq == 1 and reg.tables["db.t"].delta_id == "id-1"
    again, recreated = after_ack(reg, plan(2, 200, 300), {"db.t": ("db", "t", "id-1")})
    assert again == reg and recreated == []
    assert LakeRegistry.from_dict(reg.to_dict()) == reg
    assert problems(reg, {"db.t": "id-1"}, 3) == {}


def test_deleted_or_replaced_tables_are_problems_until_a_covering_backfill_completes() -> None:
    reg, _ = after_ack(LakeRegistry(), plan(1, 100, 200), {"db.t": ("db", "t", "id-1"), "db.u": ("db", "u", "u-1")})
    found = problems(reg, {"db.t": None, "db.u": "u-1"}, 5)
    assert list(found) == ["db.t"] and "deleted" in found["db.t"]
    assert "re-created" in problems(reg, {"db.t": "id-2", "db.u": "u-1"}, 5)["db.t"]
    damaged = mark_damaged(reg, ["db.t"], 5)
    hint = repair_hint(damaged, "p", ["db.t"])
    assert "cdc backfill p --from" in hint and "--table db.t" in hint and "2023-11-14T22:15:00Z" in hint
    # A backfill starting after the table's first window cannot rebuild it.
    with pytest.raises(ConfigError, match=r"db\.t"):
        check_backfill_start(damaged, "p", pos(150), ())
    check_backfill_start(damaged, "p", pos(100), ())
    check_backfill_start(damaged, "p", pos(150), ("db.u",))  # does not cover db.t: not this check's business
    # Backfill windows rebuild it (new id, still damaged until the backfill is done) ...
    mid, recreated = after_ack(damaged, plan(6, 100, 150, KIND_BACKFILL), {"db.t": ("db", "t", "id-2")})
    assert recreated == [] and mid.tables["db.t"].delta_id == "id-2" and mid.tables["db.t"].damaged_at == 5
    assert "not rebuilt" in problems(mid, {"db.t": "id-2", "db.u": "u-1"}, 7)["db.t"]
    # ... and its last window clears the damage.
    done, _ = after_ack(mid, plan(7, 150, 200, KIND_BACKFILL), {}, completes_backfill=True)
    assert done.tables["db.t"].damaged_at is None
    assert problems(done, {"db.t": "id-2", "db.u": "u-1"}, 8) == {}


def test_a_stream_window_landing_in_a_recreated_table_marks_it_damaged() -> None:
    reg, _ = after_ack(LakeRegistry(), plan(1, 100, 200), {"db.t": ("db", "t", "id-1")})
    after, recreated = after_ack(reg, plan(2, 200, 300), {"db.t": ("db", "t", "id-2")})
    assert recreated == ["db.t"] and after.tables["db.t"].damaged_at == 2
    assert problems(after, {"db.t": "id-2"}, 3)
    # A backfill of other tables does not repair it.
    other, _ = after_ack(after, plan(3, 100, 300, KIND_BACKFILL), {}, completes_backfill=True,
                         backfill_tables=("db.u",))
    assert other.tables["db.t"].damaged_at == 2


def test_a_newer_format_is_refused() -> None:
    with pytest.raises(ConfigError, match="newer release"):
        LakeRegistry.from_dict({"format": 99, "tables": {}})
