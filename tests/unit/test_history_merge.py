"""A small history's window landed by delta-rs (cdc_core.lake.history_merge): the versions recomputed from the
table as read at one version, MERGEd as the window's commit, once; a commit racing in between makes it look again;
a table past the limit, or a fenced run, writes nothing. Real delta-rs on a temporary directory (no Spark)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.lake import history_merge
from cdc_core.lake.small_writer import Commit, Ineligible, Landed
from tests.support.delta_rs import open_stale_first

pytestmark = pytest.mark.unit

TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([
    ("id", pa.int32()), ("tier", pa.string()), ("_cdc_op", pa.string()), ("_cdc_valid_from", TS),
    ("_cdc_valid_from_version", pa.int64()), ("_cdc_valid_to", TS), ("_cdc_valid_to_version", pa.int64()),
    ("_cdc_is_current", pa.bool_()), ("_cdc_last_version", pa.int64()), ("_cdc_window_seq", pa.int64()),
])
SHAPE = history_merge.HistoryWindow(key=("ID",), values=("id", "tier"), tracked=("tier",))  # the key in any case
T0 = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def _changes(*changes: tuple[str, int, str | None, int]) -> pa.Table:
    return pa.table({
        "id": pa.array([c[1] for c in changes], pa.int32()), "tier": pa.array([c[2] for c in changes], pa.string()),
        "_cdc_op": [c[0] for c in changes], "_cdc_version": pa.array([c[3] for c in changes], pa.int64()),
        "_cdc_ordinal": pa.array(range(len(changes)), pa.int64()),
        "_cdc_commit_ts": pa.array([T0 + dt.timedelta(seconds=c[3]) for c in changes], TS),
    })


def _history(path: Path) -> str:
    DeltaTable.create(str(path), SCHEMA)
    return str(path)


def _versions(uri: str) -> list[tuple[Any, ...]]:
    t = DeltaTable(uri).to_pyarrow_table()
    return sorted(zip(t["id"].to_pylist(), t["tier"].to_pylist(), t["_cdc_valid_from_version"].to_pylist(),
                      t["_cdc_valid_to_version"].to_pylist(), strict=True))


def _land(uri: str, seq: int, changes: pa.Table, fence: Any = lambda: None, max_rows: int = 100) -> Any:
    return history_merge.land(Commit("history of s.t", "cdc-test", seq, f"w{seq}"), uri, changes, SHAPE, fence,
                              max_rows=max_rows)


def test_windows_land_once_as_their_commits(tmp_path: Path) -> None:
    uri = _history(tmp_path / "h")
    assert _land(uri, 1, _changes(("I", 1, "a", 10), ("I", 2, "b", 11))) == Landed("committed", inserted=2,
                                                                                      version=1)
    out = _land(uri, 2, _changes(("U", 1, "c", 20), ("U", 2, "b", 21), ("D", 2, "b", 22)))
    assert out == Landed("committed", inserted=1, updated=2, version=2)
    assert _versions(uri) == [(1, "a", 10, 20), (1, "c", 20, None), (2, "b", 11, 22)]
    assert DeltaTable(uri).transaction_version("cdc-test") == 2
    assert _land(uri, 2, _changes(("U", 1, "z", 20))) == Landed("already")
    # A window whose versions the history holds as they are (a backfill re-delivering them): the txn alone.
    assert _land(uri, 3, _changes(("U", 1, "c", 20))) == Landed("committed", version=3)
    assert _versions(uri) == [(1, "a", 10, 20), (1, "c", 20, None), (2, "b", 11, 22)]


def test_a_fenced_run_or_a_history_past_the_limit_writes_nothing(tmp_path: Path) -> None:
    uri = _history(tmp_path / "h")
    _land(uri, 1, _changes(("I", 1, "a", 10), ("I", 2, "b", 11)))

    def fence() -> None:
        raise RuntimeError("fenced")

    with pytest.raises(RuntimeError, match="fenced"):
        _land(uri, 2, _changes(("U", 1, "c", 20)), fence)
    out = _land(uri, 2, _changes(("U", 1, "c", 20)), max_rows=1)
    assert isinstance(out, Ineligible) and "2 rows" in out.reason
    assert DeltaTable(uri).version() == 1


def test_a_commit_after_the_read_makes_the_merge_look_again(tmp_path: Path, monkeypatch: Any) -> None:
    uri = _history(tmp_path / "h")
    _land(uri, 1, _changes(("I", 1, "a", 10)))
    stale = DeltaTable(uri)
    _land(uri, 2, _changes(("U", 1, "b", 20)))  # a concurrent run of window 2 landed it first
    opened = open_stale_first(monkeypatch, stale)
    assert _land(uri, 2, _changes(("U", 1, "b", 20))) == Landed("already") and opened["n"] == 1
    assert _versions(uri) == [(1, "a", 10, 20), (1, "b", 20, None)]
