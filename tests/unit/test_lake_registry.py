"""The lake table registry's rules (cdc_core/model/lake_registry.py): record, detect, repair."""

from __future__ import annotations

import pytest

from cdc_core.model.errors import ConfigError
from cdc_core.model.lake_registry import (
    LakeRegistry,
    LandedTable,
    after_ack,
    check_backfill_start,
    mark_damaged,
    problems,
    repair_hint,
)
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.snapshot_state import ChunkSpec, chunk_plan, chunk_version
from cdc_core.model.window_plan import KIND_BACKFILL, WindowPlan

pytestmark = pytest.mark.unit

SERVER = ServerIdentity(server_id=1, flavor="mariadb")


def pos(offset: int, ts: float | None = None) -> BinlogPosition:
    return BinlogPosition("mysql-bin.000001", offset, SERVER, f"0-1-{offset}", ts)


def plan(seq: int, start: int, end: int, kind: str = "stream") -> WindowPlan:
    return WindowPlan("p", seq, pos(start, 1_700_000_000.0 + start), pos(end), kind=kind)


def chunk(seq: int, at: int, n: int, *, last: bool = False, rnd: int = 1, table: str = "db.t") -> WindowPlan:
    w = pos(at, 1_700_000_000.0 + at)
    spec = ChunkSpec(table, ("id",), n, rnd, None if n == 1 else [n * 10], None if last else [n * 10 + 10], last,
                     version=chunk_version(w))
    return chunk_plan("p", seq, w, spec, now=1.0)


T = {"db.t": ("db", "t", "id-1")}


def landed_in(delta_id: str | None) -> dict[str, tuple[str, str, str | None]]:
    return {"db.t": ("db", "t", delta_id)}


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


# ----------------------------------------------------------------------- snapshot rounds as repairs


def snapshot_loaded() -> LakeRegistry:
    """db.t first landed by a snapshot round (one chunk), then a stream window."""
    reg, _ = after_ack(LakeRegistry(), chunk(1, 100, 1, last=True), landed_in("id-1"))
    reg, _ = after_ack(reg, plan(2, 100, 200), landed_in("id-1"))
    entry = reg.tables["db.t"]
    assert entry.first_kind == "snapshot" and entry.rebuild is None and entry.damaged_at is None
    return reg


def test_a_round_whose_chunks_all_land_in_one_table_clears_the_damage() -> None:
    reg = mark_damaged(snapshot_loaded(), ["db.t"], 3)  # the stream's check found the directory deleted
    hint = repair_hint(reg, "p", ["db.t"])
    assert "`cdc snapshot p --table db.t`" in hint and "cdc_p_snapshot DAG" in hint and "no old binlog" in hint
    assert "cdc backfill" not in hint and "backfill cannot rebuild db.t" in hint  # its rows are not in the binlog
    reg, flagged = after_ack(reg, chunk(4, 300, 1, rnd=2), landed_in("id-2"))  # chunk 1 re-creates the table
    assert flagged == [] and reg.tables["db.t"].damaged_at == 3 and reg.tables["db.t"].delta_id == "id-1"
    # Stream windows between the chunks pass (the round rebuilds the table that is there) ...
    assert problems(reg, {"db.t": "id-2"}, 5, {"db.t": 2}) == {}
    # ... unless no round is active any more (cancelled), or the table changed again since chunk 1.
    assert "not rebuilt" in problems(reg, {"db.t": "id-2"}, 5)["db.t"]
    assert "cannot repair it" in problems(reg, {"db.t": "id-3"}, 5, {"db.t": 2})["db.t"]
    reg, _ = after_ack(reg, plan(5, 200, 300), landed_in("id-2"))  # a stream window lands in the new table
    assert reg.tables["db.t"].damaged_at == 3
    reg, _ = after_ack(reg, chunk(6, 400, 2, rnd=2), landed_in("id-2"))
    assert reg.tables["db.t"].damaged_at == 3 and problems(reg, {"db.t": "id-2"}, 7, {"db.t": 2}) == {}
    reg, flagged = after_ack(reg, chunk(7, 500, 3, last=True, rnd=2), landed_in("id-2"))
    entry = reg.tables["db.t"]
    assert flagged == [] and entry.damaged_at is None and entry.delta_id == "id-2" and entry.rebuild is None
    assert problems(reg, {"db.t": "id-2"}, 8) == {}
    assert LakeRegistry.from_dict(reg.to_dict()) == reg


def test_a_table_deleted_mid_round_is_damaged_and_the_round_does_not_clear_it() -> None:
    reg = snapshot_loaded()
    reg, _ = after_ack(reg, chunk(3, 300, 1, rnd=2), landed_in("id-1"))  # a re-snapshot of a healthy table
    assert reg.tables["db.t"].rebuild is not None and reg.tables["db.t"].damaged_at is None
    # The directory is deleted; chunk 2 re-creates the table: chunk 1's rows are gone.
    reg, flagged = after_ack(reg, chunk(4, 400, 2, rnd=2), landed_in("id-2"))
    entry = reg.tables["db.t"]
    assert flagged == ["db.t"] and entry.damaged_at == 4 and entry.rebuild is not None and entry.rebuild.broken
    assert "landed in different Delta tables" in problems(reg, {"db.t": "id-2"}, 5, {"db.t": 2})["db.t"]
    reg, flagged = after_ack(reg, chunk(5, 500, 3, last=True, rnd=2), landed_in("id-2"))
    assert flagged == [] and reg.tables["db.t"].damaged_at == 4  # the last chunk cannot vouch
    assert problems(reg, {"db.t": "id-2"}, 6)
    # A backfill (where the binlog allows one) repairs it too; the broken round is no problem any more.
    repaired, _ = after_ack(reg, plan(6, 100, 600, KIND_BACKFILL), landed_in("id-2"), completes_backfill=True)
    assert problems(repaired, {"db.t": "id-2"}, 7) == {}
    # A new round, all of it in one table, repairs it.
    for seq, n in ((6, 1), (7, 2)):
        reg, _ = after_ack(reg, chunk(seq, 100 * seq, n, last=n == 2, rnd=3), landed_in("id-2"))
    assert reg.tables["db.t"].damaged_at is None and reg.tables["db.t"].delta_id == "id-2"


def test_a_round_whose_chunk_1_was_not_seen_cannot_vouch() -> None:
    reg = mark_damaged(snapshot_loaded(), ["db.t"], 3)
    reg, flagged = after_ack(reg, chunk(4, 400, 2, last=True, rnd=2), landed_in("id-2"))
    assert flagged == ["db.t"] and reg.tables["db.t"].damaged_at == 3
    # An empty chunk of a table whose directory is gone: nothing landed, the round's rows are lost.
    reg = snapshot_loaded()
    reg, _ = after_ack(reg, chunk(3, 300, 1, rnd=2), landed_in("id-1"))
    reg, flagged = after_ack(reg, chunk(4, 400, 2, rnd=2, last=True), landed_in(None))
    assert flagged == ["db.t"] and reg.tables["db.t"].damaged_at == 4


def test_a_requested_round_not_started_yet_lets_the_stream_through() -> None:
    reg = mark_damaged(snapshot_loaded(), ["db.t"], 3)
    assert problems(reg, {"db.t": None}, 4, {"db.t": 2}) == {}  # queued behind another table: no deadlock
    assert problems(reg, {"db.t": None}, 4, {"db.u": 1})


def test_the_hint_offers_both_repairs_for_a_table_the_stream_loaded() -> None:
    reg, _ = after_ack(LakeRegistry(), plan(1, 100, 200), T)
    hint = repair_hint(mark_damaged(reg, ["db.t"], 2), "p", ["db.t"])
    assert "`cdc snapshot p --table db.t`" in hint and "cdc backfill p --from" in hint


def test_records_written_before_rounds_were_tracked_still_read() -> None:
    old = {"format": 1, "tables": {"db.t": {
        "schema": "db", "table": "t", "delta_id": "id-1", "first_seq": 1, "first_position": pos(100).to_dict(),
        "damaged_at": 4,
    }}}
    reg = LakeRegistry.from_dict(old)
    assert reg.tables["db.t"] == LandedTable("db", "t", "id-1", 1, pos(100), 4)
    assert reg.tables["db.t"].first_kind == "" and reg.tables["db.t"].rebuild is None
    hint = repair_hint(reg, "p", ["db.t"])  # first window's kind unknown: both repairs offered
    assert "cdc snapshot p" in hint and "cdc backfill p" in hint
    assert LakeRegistry.from_dict(reg.to_dict()) == reg
