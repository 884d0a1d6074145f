"""The snapshot's pure pieces: keyset predicates (partition, NULL safety), bound encoding, the chunk
version against binlog change versions, the progress rules, interleaving, and the coordination rules
for snapshot windows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.capture import snapshot_reads
from cdc_core.coordination import Cursor, check_plan, cursor_after_ack
from cdc_core.model import snapshot_state as snap
from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import ConfigError, StateConflict
from cdc_core.model.positions import BinlogPosition, ServerIdentity, change_version
from cdc_core.model.types import conv_time
from cdc_core.model.window_plan import KIND_SNAPSHOT, WindowPlan

pytestmark = pytest.mark.unit

SERVER = ServerIdentity("mariadb", 1)
OTHER = ServerIdentity("mariadb", 2)


def pos(offset: int, file: str = "mysql-bin.000003", epoch: int = 0, server: ServerIdentity = SERVER) -> BinlogPosition:
    return BinlogPosition(file, offset, server, epoch=epoch)


# ------------------------------------------------------------------------------------ predicates

COLS2 = (snap.KeyColumn("a", nullable=True), snap.KeyColumn("b", nullable=True))


def sort_key(t: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is not None, v if v is not None else 0) for v in t)  # NULL first, as ORDER BY ASC


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.none() | st.integers(-3, 3), st.none() | st.integers(-3, 3)), min_size=1, max_size=40
    ),
    cuts=st.lists(st.integers(0, 39), max_size=6),
)
def test_chunks_partition_the_key_space_and_never_null(rows, cuts) -> None:  # type: ignore[no-untyped-def]
    ordered = sorted(set(rows), key=sort_key)
    bounds = sorted({ordered[c % len(ordered)] for c in cuts}, key=sort_key)
    ranges = list(zip([None, *bounds], [*bounds, None], strict=True))
    for row in rows:
        values = dict(zip(("a", "b"), row, strict=True))
        hits = []
        for lower, upper in ranges:
            result = snap.evaluate(snap.chunk_predicate(COLS2, lower, upper), values)
            assert result is not None, f"NULL from {lower}..{upper} for {row}"
            if result:
                hits.append((lower, upper))
        assert len(hits) == 1, f"{row} in {hits}"
        lower, upper = hits[0]
        # ... and in the chunk that ORDER BY puts it in
        assert lower is None or sort_key(row) > sort_key(lower)
        assert upper is None or sort_key(row) <= sort_key(upper)


def test_after_is_expanded_for_index_ranges_and_rendered_with_placeholders() -> None:
    cols = (snap.KeyColumn("k1"), snap.KeyColumn("k`2"))
    sql, params = snap.render(snap.after(cols, (5, "x")))
    assert sql == "(`k1` > %s OR (`k1` = %s AND `k``2` > %s))"
    assert params == [5, 5, "x"]
    sql, params = snap.render(snap.chunk_predicate(cols, None, (7, "y")))
    assert sql == "(`k1` < %s OR (`k1` = %s AND `k``2` <= %s))" and params == [7, 7, "y"]
    assert snap.render(snap.chunk_predicate(cols, None, None)) == ("1=1", [])


def test_nullable_columns_compare_null_safely() -> None:
    c = (snap.KeyColumn("a", nullable=True),)
    assert snap.render(snap.after(c, (None,))) == ("`a` IS NOT NULL", [])
    assert snap.render(snap.at_or_before(c, (None,))) == ("`a` IS NULL", [])
    assert snap.render(snap.after(c, (3,))) == ("(`a` IS NOT NULL AND `a` > %s)", [3])
    two = (snap.KeyColumn("a", nullable=True), snap.KeyColumn("b"))
    sql, _ = snap.render(snap.after(two, (None, 1)))
    assert "`a` IS NULL AND `b` > %s" in sql


def test_enum_key_columns_use_the_index_number() -> None:
    columns = (SourceColumn("e", "enum('z','a')", nullable=False), SourceColumn("n", "int"))
    t = TableSchema("s", "t", columns, ("e", "n"))
    cols = snap.key_columns(t)
    assert cols[0].by_index and not cols[1].by_index
    assert snap.key_select(cols) == "`e`+0, `n`"
    assert snap.order_by(cols, desc=True) == "`e` DESC, `n` DESC"


# -------------------------------------------------------------------------------------- encoding


def test_bounds_round_trip_through_json() -> None:
    import json

    values = (
        18446744073709551615, -5, "ü 'x'", 1.5, None, Decimal("-12.500"), b"\x00\xff",
        dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.date(2024, 2, 29), dt.timedelta(hours=-838, microseconds=-1),
    )
    encoded = json.loads(json.dumps(snap.encode_key(values)))
    assert snap.decode_key(encoded) == values
    with pytest.raises(ConfigError):
        snap.encode_value(object())


# -------------------------------------------------------------------------------------- versions


@given(offset=st.integers(5, 2**32 - 20_000), gap=st.integers(1, 10_000))
def test_chunk_version_sits_between_the_changes_before_and_after_the_watermark(offset: int, gap: int) -> None:
    w = pos(offset)
    v = snap.chunk_version(w)
    # A transaction after W starts at W at the earliest; its row events start strictly later.
    assert change_version(0, w.file, offset + gap) > v
    assert change_version(0, "mysql-bin.000004", 4) > v  # rotated into the next file
    assert change_version(1, "mysql-bin.000001", 4) > v  # a later epoch (after a failover)
    # Row events of transactions before W start before it.
    assert change_version(0, w.file, offset - 1) < v


def test_snapshot_rows_lose_to_later_changes_and_beat_earlier_ones_in_the_merge_rule() -> None:
    """The merge applies a change when s._cdc_version >= t._cdc_version (spark_apps/merge_window.py)."""
    w = pos(1000)
    chunk = snap.chunk_version(w)
    update_after = change_version(0, w.file, 1000 + 40)  # row event after W's GTID event
    update_before = change_version(0, w.file, 900)

    def applies(source: int, target: int) -> bool:
        return source >= target

    assert applies(update_after, chunk) and not applies(chunk, update_after)  # either order: the update wins
    assert applies(chunk, update_before) and not applies(update_before, chunk)  # the chunk wins over older
    # a tombstone newer than the chunk drops it (drop_superseded keeps version >= tombstone)
    assert not chunk >= update_after


# ----------------------------------------------------------------------------------- chunk plans


def spec(table: str = "s.t", chunk: int = 1, lower: Any = None, upper: Any = ([10],), last: bool = False,
         round_: int = 1, w: BinlogPosition | None = None) -> snap.ChunkSpec:
    w = w or pos(500)
    return snap.ChunkSpec(
        table=table, key=("id",), chunk=chunk, round=round_, lower=lower, upper=upper[0] if upper else None,
        last=last, version=snap.chunk_version(w), chunk_rows=10,
    )


def chunk(seq: int, s: snap.ChunkSpec, w: BinlogPosition | None = None) -> WindowPlan:
    return snap.chunk_plan("p", seq, w or pos(500), s, now=1.0)


def test_a_chunk_plan_is_an_empty_binlog_range_at_its_watermark_and_round_trips() -> None:
    plan = chunk(3, spec())
    assert plan.kind == KIND_SNAPSHOT and plan.start == plan.end and plan.tables == ("s.t",)
    assert not plan.is_empty  # a chunk always has work (and run_cycle must not stop at it)
    again = WindowPlan.from_json(plan.to_json())
    assert snap.chunk_of(again) == spec()
    with pytest.raises(ValueError):
        snap.chunk_plan("p", 3, pos(501), spec(), now=1.0)  # version must be the watermark's


# -------------------------------------------------------------------------------------- progress


def requested(*tables: str, rows: int = 10, estimate: int | None = 25) -> snap.SnapshotState:
    return snap.with_requests(
        snap.SnapshotState(), [snap.TableRequest(t, estimate, rows) for t in tables], now=1.0, by="me"
    )


def test_progress_moves_chunk_by_chunk_and_tables_one_after_another() -> None:
    state = requested("s.a", "s.b")
    assert state.active and state.current().table == "s.a"  # type: ignore[union-attr]
    p1 = chunk(1, spec("s.a", 1, None, ([10],)))
    snap.check_chunk("p", state, p1)
    state = snap.after_ack(state, p1, rows=10, now=2.0)
    a = state.table("s.a")
    assert a is not None and (a.status, a.chunks, a.rows, a.after, a.last_seq) == ("running", 1, 10, [10], 1)
    assert state.last_chunk_seq == 1
    with pytest.raises(StateConflict):  # same chunk again: progress moved on
        snap.check_chunk("p", state, chunk(2, spec("s.a", 1, None, ([10],))))
    with pytest.raises(StateConflict):  # a gap
        snap.check_chunk("p", state, chunk(2, spec("s.a", 2, [11], ([20],))))
    with pytest.raises(StateConflict):  # not the current table
        snap.check_chunk("p", state, chunk(2, spec("s.b", 1)))
    p2 = chunk(3, spec("s.a", 2, [10], ([25],), last=True))
    snap.check_chunk("p", state, p2)
    state = snap.after_ack(state, p2, rows=15, now=3.0)
    a = state.table("s.a")
    assert a is not None and a.status == "done" and a.rows == 25 and a.finished_at == 3.0
    assert state.current().table == "s.b"  # type: ignore[union-attr]
    view = snap.progress_view(state)
    assert view["tables"][0]["chunks_done"] == view["tables"][0]["chunks_total"] == 2
    assert view["tables"][0]["percent"] == 100.0
    assert view["tables"][1]["chunks_total"] == 3  # ceil(25 / 10) estimated


def test_a_window_of_several_tables_finishes_them_in_order_with_rows_per_table() -> None:
    state = requested("s.a", "s.b", "s.c", "s.d")
    a = spec("s.a", 1, None, ([4],), last=True)
    b = spec("s.b", 1, None, ([3],), last=True)
    c = spec("s.c", 1, None, None, last=True)  # empty table: no bound
    plan = snap.chunk_plan("p", 1, pos(500), a, now=1.0, more=[b, c])
    assert plan.tables == ("s.a", "s.b", "s.c")
    again = WindowPlan.from_json(plan.to_json())
    assert snap.chunks_of(again) == (a, b, c) and snap.chunk_of(again) == a
    assert snap.chunk_label(again)["tables"] == 3
    snap.check_chunk("p", state, plan)
    state = snap.after_ack(state, plan, rows=7, now=2.0, table_rows={"s.a": 4, "s.b": 3})
    done = {t.table: (t.status, t.chunks, t.rows, t.last_seq) for t in state.tables}
    assert done == {
        "s.a": ("done", 1, 4, 1), "s.b": ("done", 1, 3, 1), "s.c": ("done", 1, 0, 1), "s.d": ("pending", 0, 0, None)
    }
    assert state.current().table == "s.d" and state.last_chunk_seq == 1  # type: ignore[union-attr]


def test_a_window_of_several_tables_must_follow_the_snapshot_order_and_finish_all_but_the_last() -> None:
    state = requested("s.a", "s.b", "s.c")
    a = spec("s.a", 1, None, ([4],), last=True)
    with pytest.raises(StateConflict, match=r"s\.b"):  # skips s.b
        snap.check_chunk("p", state, snap.chunk_plan("p", 1, pos(500), a, now=1.0, more=[spec("s.c", last=True)]))
    with pytest.raises(ValueError):  # a table left unfinished before the next one
        snap.chunk_plan("p", 1, pos(500), spec("s.a", 1, None, ([4],)), now=1.0, more=[spec("s.b", last=True)])
    with pytest.raises(StateConflict, match="only 3 tables"):
        snap.check_chunk(
            "p", state,
            snap.chunk_plan("p", 1, pos(500), a, now=1.0, more=[spec(t, last=True) for t in ("s.b", "s.c", "s.x")]),
        )
    # The last table of the window may stop mid-table (then it is the next window's current table).
    ok = snap.chunk_plan("p", 1, pos(500), a, now=1.0, more=[spec("s.b", 1, None, ([3],), last=True)])
    snap.check_chunk("p", state, ok)
    with pytest.raises(ValueError):  # every chunk of a window is read at the window's watermark
        snap.chunk_plan("p", 1, pos(500), a, now=1.0, more=[spec("s.b", last=True, w=pos(600))])


def test_a_stale_chunk_is_acked_without_moving_progress() -> None:
    state = requested("s.a")
    p1 = chunk(1, spec("s.a", 1, None, ([10],)))
    state = snap.with_requests(state, [snap.TableRequest("s.a", 25, 10)], now=5.0, by="again")  # restart: round 2
    after = snap.after_ack(state, p1, rows=10, now=6.0)
    a = after.table("s.a")
    assert a is not None and a.round == 2 and a.chunks == 0 and a.after is None
    assert after.last_chunk_seq == 1


def test_requests_restart_unfinished_tables_in_place_and_append_finished_ones() -> None:
    state = requested("s.a", "s.b")
    state = snap.after_ack(state, chunk(1, spec("s.a", 1, None, ([9],), last=True)), rows=9, now=2.0)
    state = snap.with_requests(state, [snap.TableRequest("s.a"), snap.TableRequest("s.b")], now=3.0, by="x")
    assert [(t.table, t.round, t.status) for t in state.tables] == [("s.b", 2, "pending"), ("s.a", 2, "pending")]
    with pytest.raises(ConfigError):
        snap.with_requests(state, [], now=1.0, by="x")
    state = snap.cancelled(state, ["s.b"], now=4.0)
    assert state.current().table == "s.a"  # type: ignore[union-attr]
    assert not snap.cancelled(state, None, now=5.0).active


def test_state_round_trips_and_an_empty_node_is_no_snapshot() -> None:
    state = requested("s.a")
    assert snap.SnapshotState.from_bytes(state.to_json()) == state
    assert snap.SnapshotState.from_bytes(b"") == snap.SnapshotState()
    with pytest.raises(ConfigError):
        snap.SnapshotState.from_dict({"format": 99})


def test_chunks_and_binlog_windows_take_turns() -> None:
    state = requested("s.a")
    assert snap.chunk_turn(state, cursor_seq=4)
    state = snap.after_ack(state, chunk(5, spec("s.a", 1, None, ([10],))), rows=10, now=2.0)
    assert not snap.chunk_turn(state, cursor_seq=5)  # the last acked window was a chunk: the stream's turn
    assert snap.chunk_turn(state, cursor_seq=6)
    assert not snap.chunk_turn(snap.SnapshotState(), cursor_seq=6)


# ------------------------------------------------------------------------------ coordination rules


def test_check_plan_requires_the_watermark_at_or_after_the_stream_cursor() -> None:
    plan = chunk(4, spec(w=pos(500)), w=pos(500))
    check_plan("p", Cursor(seq=3, position=pos(400)), None, plan)
    check_plan("p", Cursor(seq=3, position=pos(500)), None, plan)
    with pytest.raises(StateConflict, match="at or after the stream cursor"):
        check_plan("p", Cursor(seq=3, position=pos(600)), None, plan)
    with pytest.raises(StateConflict, match="at or after the stream cursor"):
        check_plan("p", Cursor(seq=3, position=pos(400, server=OTHER)), None, plan)
    with pytest.raises(StateConflict, match="start position"):
        check_plan("p", Cursor(seq=3), None, plan)
    with pytest.raises(StateConflict, match="must be 5"):
        check_plan("p", Cursor(seq=4, position=pos(400)), None, plan)


def test_acking_a_chunk_moves_the_seq_but_never_the_stream_position() -> None:
    cursor = Cursor(seq=3, position=pos(400))
    after = cursor_after_ack("p", cursor, chunk(4, spec()), now=9.0)
    assert after.seq == 4 and after.position == pos(400) and after.backfill is None


# ------------------------------------------------------------------------------ values and config


@given(us=st.integers(-838 * 3_600_000_000 - 59_999_999, 838 * 3_600_000_000 + 59_999_999))
def test_select_time_values_land_like_the_binlog_reader_s(us: int) -> None:
    col = SourceColumn("t", "time(6)")
    norm = snapshot_reads.select_normaliser(col)
    assert norm is not None
    assert conv_time(norm(dt.timedelta(microseconds=us))) == us


def test_zero_dates_from_select_land_as_null() -> None:
    norm = snapshot_reads.select_normaliser(SourceColumn("d", "datetime"))
    assert norm is not None and norm("0000-00-00 00:00:00") is None
    assert norm(dt.datetime(2024, 1, 1)) == dt.datetime(2024, 1, 1)
    assert snapshot_reads.select_normaliser(SourceColumn("i", "int")) is None
    t = TableSchema("s", "t", (SourceColumn("f", "float"), SourceColumn("d", "double")), ("d",))
    assert snapshot_reads.select_list(t) == "`f` + 0e0 AS `f`, `d`"


def config(**extra: Any) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {"name": "p", "source": {"conn_id": "c"}, "tables": {"include": ["s.*"]}, **extra}, context={"base_dir": "/tmp"}
    )


def test_snapshot_on_start_defaults_to_the_start_kind() -> None:
    assert config().snapshot_on_start()  # start current: rows before it are in no binlog we read
    assert not config(start={"kind": "file", "file": "mysql-bin.000001"}).snapshot_on_start()
    assert config(start={"kind": "file", "file": "mysql-bin.000001"}, snapshot={"on_start": True}).snapshot_on_start()
    assert not config(snapshot={"on_start": False}).snapshot_on_start()
    assert config().snapshot.chunk_rows == 100_000
    with pytest.raises(Exception, match="chunk_rows"):
        config(snapshot={"chunk_rows": 0})


def test_a_request_puts_a_chunk_first() -> None:
    state = snap.after_ack(requested("s.a"), chunk(5, spec("s.a", 1, None, ([10],))), rows=10, now=2.0)
    assert not snap.chunk_turn(state, cursor_seq=5)
    again = snap.with_requests(state, [snap.TableRequest("s.b")], now=3.0, by="cli")
    assert snap.chunk_turn(again, cursor_seq=5)


def test_zero_dates_from_select_are_refused_when_the_pipeline_refuses_them() -> None:
    from cdc_core.model.errors import UnsupportedType

    norm = snapshot_reads.select_normaliser(SourceColumn("d", "date"), "refuse", "shop.t", "pipeline 'p': ")
    assert norm is not None and norm(dt.date(2024, 1, 1)) == dt.date(2024, 1, 1) and norm(None) is None
    with pytest.raises(UnsupportedType) as err:
        norm("2024-00-10")
    msg = str(err.value)
    assert "pipeline 'p'" in msg and "shop.t" in msg and "'d'" in msg and "2024-00-10" in msg
    assert "zero_dates: null" in msg
