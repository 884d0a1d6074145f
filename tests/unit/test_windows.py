"""Window cutting: whole transactions only, caps respected (except a lone first transaction), consecutive
windows cover the stream exactly, and planning stops pulling boundaries once the window is full."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.binlog import TxnBoundary
from cdc_core.errors import ConfigError
from cdc_core.positions import BinlogPosition, ServerIdentity
from cdc_core.window_plan import KIND_BACKFILL, WindowCaps
from cdc_core.windows import plan_window

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
        taken += window
        pos, seq = plan.end, seq + 1
    assert taken == txns  # concatenated windows are the stream, in order, nothing twice


def test_a_plan_keeps_its_capture_settings_through_json() -> None:
    from dataclasses import replace

    from cdc_core.window_plan import WindowPlan

    start, boundaries = make_stream([(2, 100)])
    plan = plan_window("orders", 1, start, boundaries, WindowCaps())
    with_capture = replace(plan, capture={"include": ("shop.*",), "exclude": ("shop.tmp_*",), "full_row_key": ()})
    assert WindowPlan.from_json(with_capture.to_json()) == with_capture
    assert WindowPlan.from_json(plan.to_json()).capture is None  # plans stored before the field existed
