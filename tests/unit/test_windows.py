"""Window cutting: whole transactions only, caps respected (except a lone first transaction), consecutive
windows cover the stream exactly, and planning stops pulling boundaries once the window is full."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.model.errors import ConfigError
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.window_plan import KIND_BACKFILL, WindowCaps
from cdc_core.model.windows import TxnBoundary, plan_window

pytestmark = pytest.mark.unit

settings.register_profile("cdc", max_examples=200, deadline=None)
settings.load_profile("cdc")

SERVER = ServerIdentity("mariadb", 1)


def make_stream(
    sizes: list[tuple[int, int]], rotate_every: int = 0, first_offset: int = 256
) -> tuple[BinlogPosition, list[TxnBoundary]]:
    """Transactions of (events, bytes), laid out back to back; a rotation every `rotate_every` transactions."""
    file_idx, offset = 1, first_offset
    start = BinlogPosition(f"mysql-bin.{file_idx:06d}", offset, SERVER, "0-1-0", None)
    out = []
    prev_gtid, prev_ts = "0-1-0", None
    for i, (events, size) in enumerate(sizes):
        if rotate_every and i and i % rotate_every == 0:
            file_idx += 1
            offset = 256  # after the new file's header events
        seq = i + 1
        commit = 1_700_000_000.0 + seq
        end = BinlogPosition(f"mysql-bin.{file_idx:06d}", offset + size, SERVER, f"0-1-{seq}", commit)
        out.append(
            TxnBoundary(f"mysql-bin.{file_idx:06d}", offset, end, f"0-1-{seq}", events, size, False, prev_gtid, prev_ts)
        )
        offset += size
        prev_gtid, prev_ts = end.gtid, commit
    return start, out


class Counting:
    """An iterator that counts how many boundaries were pulled."""

    def __init__(self, items: list[TxnBoundary]) -> None:
        self.items = items
        self.pulled = 0

    def __iter__(self) -> Iterator[TxnBoundary]:
        for b in self.items:
            self.pulled += 1
            yield b


def test_no_transactions_is_an_empty_window_ending_at_its_start() -> None:
    start, _ = make_stream([])
    plan = plan_window("p", 1, start, [], WindowCaps(), now=5.0)
    assert plan.is_empty and plan.end == start and plan.events == plan.bytes == 0
    assert plan.planned_at == 5.0


def test_caps_cut_at_the_last_whole_transaction() -> None:
    start, txns = make_stream([(3, 100)] * 10)
    plan = plan_window("p", 1, start, txns, WindowCaps(max_events=10, max_bytes=10_000, max_transactions=100))
    assert plan.transactions == 3 and plan.events == 9 and plan.bytes == 300
    assert plan.end == txns[2].end
    plan = plan_window("p", 1, start, txns, WindowCaps(max_events=1000, max_bytes=250, max_transactions=100))
    assert plan.transactions == 2 and plan.end == txns[1].end
    plan = plan_window("p", 1, start, txns, WindowCaps(max_events=1000, max_bytes=10_000, max_transactions=4))
    assert plan.transactions == 4 and plan.end == txns[3].end


def test_a_first_transaction_bigger_than_every_cap_is_taken_whole_and_alone() -> None:
    start, txns = make_stream([(5000, 10_000_000), (1, 10)])
    plan = plan_window("p", 7, start, txns, WindowCaps(max_events=10, max_bytes=1000, max_transactions=5))
    assert plan.transactions == 1 and plan.events == 5000 and plan.end == txns[0].end


def test_planning_stops_pulling_when_the_window_is_full() -> None:
    start, txns = make_stream([(1, 10)] * 1000)
    it = Counting(txns)
    plan = plan_window("p", 1, start, it, WindowCaps(max_events=1000, max_bytes=10**9, max_transactions=5))
    assert plan.transactions == 5 and it.pulled == 5  # full exactly: the 6th is never scanned
    it = Counting(txns)
    plan = plan_window("p", 1, start, it, WindowCaps(max_events=1000, max_bytes=25, max_transactions=100))
    assert plan.transactions == 2 and it.pulled == 3  # one extra pull to learn it does not fit


def test_window_fields_and_end_position_across_a_rotation() -> None:
    start, txns = make_stream([(2, 50)] * 6, rotate_every=4)
    plan = plan_window(
        "orders", 3, start, txns, WindowCaps(), kind=KIND_BACKFILL, tables=("db.t",), info={"rule": "x"}, now=1.0
    )
    assert plan.end.file == "mysql-bin.000002" and plan.end == txns[-1].end
    fields = (plan.pipeline, plan.seq, plan.kind, plan.tables, plan.info)
    assert fields == ("orders", 3, KIND_BACKFILL, ("db.t",), {"rule": "x"})


def test_boundaries_before_the_start_are_refused() -> None:
    _, txns = make_stream([(1, 10)] * 3)
    later = txns[1].end
    with pytest.raises(ConfigError, match="starts before the window start"):
        plan_window("p", 2, later, txns, WindowCaps())


def test_end_takes_the_start_epoch() -> None:
    start, txns = make_stream([(1, 10)] * 3)
    start = BinlogPosition(start.file, start.offset, SERVER, start.gtid, None, epoch=2)
    plan = plan_window("p", 1, start, txns, WindowCaps())
    last = txns[-1].end
    assert plan.end.epoch == 2 and plan.end.same_point(BinlogPosition(last.file, last.offset, SERVER, epoch=2))


def test_caps_must_be_positive() -> None:
    start, txns = make_stream([(1, 10)])
    with pytest.raises(ConfigError, match="max_events"):
        plan_window("p", 1, start, txns, WindowCaps(max_events=0))


sizes_st = st.lists(st.tuples(st.integers(1, 50), st.integers(20, 5000)), max_size=60)
caps_st = st.builds(
    WindowCaps,
    max_events=st.integers(1, 120),
    max_bytes=st.integers(20, 12_000),
    max_transactions=st.integers(1, 12),
)


@given(sizes=sizes_st, caps=caps_st, rotate_every=st.integers(0, 7))
def test_consecutive_windows_cover_the_stream_exactly(
    sizes: list[tuple[int, int]], caps: WindowCaps, rotate_every: int
) -> None:
    start, txns = make_stream(sizes, rotate_every)
    ends = {(b.end.file, b.end.offset) for b in txns}
    taken: list[TxnBoundary] = []
    pos, seq = start, 1
    while True:
        remaining = txns[len(taken):]  # what a scan from `pos` yields
        it = Counting(remaining)
        plan = plan_window("p", seq, pos, it, caps)
        assert plan.start == pos
        if plan.is_empty:
            assert plan.end == pos and not remaining
            break
        window = remaining[: plan.transactions]
        # never splits a transaction: the end is a transaction end, the last one taken
        assert (plan.end.file, plan.end.offset) in ends and plan.end == window[-1].end
        assert plan.events == sum(b.events for b in window) and plan.bytes == sum(b.bytes for b in window)
        # respects the caps, except a lone first transaction
        if plan.transactions > 1:
            assert plan.events <= caps.max_events and plan.bytes <= caps.max_bytes
        assert plan.transactions <= caps.max_transactions
        # maximal: the next transaction would not have fitted
        if len(remaining) > plan.transactions:
            nxt = remaining[plan.transactions]
            assert (
                plan.transactions + 1 > caps.max_transactions
                or plan.events + nxt.events > caps.max_events
                or plan.bytes + nxt.bytes > caps.max_bytes
            )
        assert it.pulled <= plan.transactions + 1
        # a window that left transactions behind says which cap cut it; one without a cap took them all
        if len(remaining) > plan.transactions:
            assert plan.info["capped"] in ("max_transactions", "max_events", "max_bytes")
        if "capped" not in plan.info:
            assert plan.transactions == len(remaining)
        taken += window
        pos, seq = plan.end, seq + 1
    assert taken == txns  # concatenated windows are the stream, in order, nothing twice


def test_a_plan_keeps_its_capture_settings_through_json() -> None:
    from dataclasses import replace

    from cdc_core.model.window_plan import WindowPlan

    start, boundaries = make_stream([(2, 100)])
    plan = plan_window("orders", 1, start, boundaries, WindowCaps())
    with_capture = replace(plan, capture={"include": ("shop.*",), "exclude": ("shop.tmp_*",), "full_row_key": ()})
    assert WindowPlan.from_json(with_capture.to_json()) == with_capture
    assert WindowPlan.from_json(plan.to_json()).capture is None  # plans stored before the field existed


# ------------------------------------------------------------------------------ more work after an ack


def test_the_cap_that_cut_a_window_is_recorded() -> None:
    start, txns = make_stream([(3, 100)] * 10)
    assert plan_window("p", 1, start, txns, WindowCaps(max_events=10)).info == {"capped": "max_events"}
    assert plan_window("p", 1, start, txns, WindowCaps(max_bytes=250)).info == {"capped": "max_bytes"}
    assert plan_window("p", 1, start, txns, WindowCaps(max_transactions=4)).info == {"capped": "max_transactions"}
    full = plan_window("p", 1, start, txns, WindowCaps(max_transactions=10))  # full exactly: cannot tell, says so
    assert full.transactions == 10 and full.info == {"capped": "max_transactions"}
    assert "capped" not in plan_window("p", 1, start, txns, WindowCaps(max_transactions=11)).info
    assert "capped" not in plan_window("p", 1, start, [], WindowCaps(max_transactions=1)).info
    big = plan_window("p", 1, start, make_stream([(50, 10_000)] * 2)[1], WindowCaps(max_events=10))
    assert big.transactions == 1 and big.info == {"capped": "max_events"}  # a lone oversized transaction


def _plan(kind: str = "stream", txns: int = 3, **info: object):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from cdc_core.model.window_plan import KIND_SNAPSHOT

    start, boundaries = make_stream([(1, 10)] * txns)
    plan = plan_window("p", 4, start, boundaries, WindowCaps(), kind=kind if kind != KIND_SNAPSHOT else "stream")
    plan = replace(plan, info=dict(info))
    return replace(plan, kind=kind) if kind == KIND_SNAPSHOT else plan


def test_more_work_decision() -> None:
    from cdc_core.model import windows as w

    end = _plan().end
    behind = {"file": end.file, "offset": end.offset + 1}
    at_end = {"file": end.file, "offset": end.offset}

    def ask(plan, acked=True, **kw):  # type: ignore[no-untyped-def]
        answer = w.more_work(plan, acked=acked, **kw)
        assert set(answer) == {"more", "reason", "detail"} and answer["detail"]
        return answer["more"], answer["reason"]

    capped = _plan(capped="max_events", source_end=behind)
    assert ask(capped) == (True, w.MORE_CAPPED)
    assert ask(_plan(capped="max_events", source_end=at_end)) == (False, w.MORE_CAUGHT_UP)  # full, but at the end
    assert ask(_plan(capped="max_events", source_end={"file": "mysql-bin.000002", "offset": 4})) == (True, "capped")
    assert ask(_plan(capped="max_events")) == (True, w.MORE_CAPPED)  # no source end recorded: trust the cap
    assert ask(_plan(source_end=behind)) == (False, w.MORE_CAUGHT_UP)  # not capped: the scan reached the end
    assert ask(_plan()) == (False, w.MORE_CAUGHT_UP)  # plans written before `capped` existed
    assert ask(_plan(kind=KIND_BACKFILL), backfill_active=True) == (True, w.MORE_BACKFILL)
    assert ask(_plan(kind=KIND_BACKFILL)) == (False, w.MORE_CAUGHT_UP)  # the backfill's last window
    assert ask(_plan(), snapshot_active=True) == (True, w.MORE_SNAPSHOT)
    assert ask(_plan(kind="snapshot"), snapshot_active=True) == (True, w.MORE_SNAPSHOT)
    assert ask(_plan(kind="snapshot")) == (False, w.MORE_CAUGHT_UP)  # the last chunk
    # never continue: turned off, a window not acked (failed run), an empty window (no progress: no loop)
    assert ask(capped, enabled=False, backfill_active=True) == (False, w.MORE_DISABLED)
    assert ask(capped, acked=False, snapshot_active=True) == (False, w.MORE_NOT_ACKED)
    assert ask(None, acked=False) == (False, w.MORE_NOT_ACKED)
    empty = _plan(txns=0)
    assert empty.is_empty
    assert ask(empty, backfill_active=True, snapshot_active=True) == (False, w.MORE_EMPTY)
    chunk = _plan(kind="snapshot", txns=0)  # a chunk reads rows, not binlog: never empty
    assert ask(chunk, snapshot_active=True) == (True, w.MORE_SNAPSHOT)


def test_more_work_survives_odd_recorded_source_ends() -> None:
    from cdc_core.model import windows as w

    for odd in ({"file": "binlog", "offset": 9}, {"file": "mysql-bin.000001"}, "mysql-bin.000001:9", None):
        assert w.more_work(_plan(capped="max_bytes", source_end=odd), acked=True)["more"] is True


# ------------------------------------------------------------------- a quiet tail (issue 15 §2)


def test_a_quiet_tail_moves_an_uncapped_window_to_the_source_end() -> None:
    from cdc_core.model.windows import QuietTail

    start, txns = make_stream([(3, 100), (3, 100)])
    # A rotation after the last transaction: the new file's header events carry no row change.
    tail = QuietTail(BinlogPosition("mysql-bin.000002", 385, SERVER, "0-1-2", None))
    plan = plan_window("p", 1, start, [*txns, tail], WindowCaps())
    assert plan.transactions == 2 and (plan.end.file, plan.end.offset) == ("mysql-bin.000002", 385)
    assert plan.end.gtid == "0-1-2" and plan.end.commit_ts == txns[-1].end.commit_ts  # the last commit's
    assert plan.bytes == 200  # sizes transactions only


def test_an_empty_window_over_a_quiet_tail_keeps_the_state_and_commit_time() -> None:
    from cdc_core.model.windows import QuietTail

    start = BinlogPosition("mysql-bin.000001", 900, SERVER, "0-1-7", 1_700_000_000.0)
    plan = plan_window("p", 3, start, [QuietTail(BinlogPosition("mysql-bin.000002", 342, SERVER, None, None))],
                       WindowCaps())
    assert plan.is_empty and plan.transactions == 0
    assert (plan.end.file, plan.end.offset, plan.end.gtid, plan.end.commit_ts) == (
        "mysql-bin.000002", 342, "0-1-7", 1_700_000_000.0)


def test_a_capped_window_never_takes_the_tail() -> None:
    from cdc_core.model.windows import QuietTail

    start, txns = make_stream([(3, 100), (3, 100)])
    tail = QuietTail(BinlogPosition("mysql-bin.000002", 385, SERVER, "0-1-2", None))
    plan = plan_window("p", 1, start, [*txns, tail], WindowCaps(max_transactions=1))
    assert plan.transactions == 1 and plan.end == txns[0].end and plan.info["capped"] == "max_transactions"
