"""A change log's window appended with delta-rs (cdc_core.lake.changelog_append): only when the log's file
statistics prove that no row of the window can be one the log holds, as the window's commit, exactly once. Real
delta-rs on a temporary directory (no Spark, no service)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.lake import changelog_append
from cdc_core.lake.small_writer import Commit, Ineligible, Landed
from tests.support.delta_rs import open_stale_first

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([pa.field("id", pa.int32()), pa.field("_cdc_op", pa.string()), pa.field("_cdc_version", pa.int64())])


def _rows(*changes: tuple[int, str, int]) -> pa.Table:
    ids, ops, versions = zip(*changes, strict=True) if changes else ((), (), ())
    return pa.table({"id": pa.array(ids, pa.int32()), "_cdc_op": pa.array(ops, pa.string()),
                     "_cdc_version": pa.array(versions, pa.int64())})


def _log(path: Path, *changes: tuple[int, str, int], properties: dict[str, str] | None = None) -> str:
    DeltaTable.create(str(path), SCHEMA, configuration=properties or {})
    if changes:
        write_deltalake(str(path), _rows(*changes), mode="append")
    return str(path)


def _held(uri: str) -> list[tuple[int, str, int]]:
    t = DeltaTable(uri).to_pyarrow_table()
    return sorted(zip(t["id"].to_pylist(), t["_cdc_op"].to_pylist(), t["_cdc_version"].to_pylist(), strict=True))


def _commit(seq: int) -> Commit:
    return Commit("changelog of s.t", "cdc-test", seq, f'{{"window": {seq}}}')


def test_a_window_newer_than_the_log_is_appended_once_as_its_commit(tmp_path: Path) -> None:
    uri = _log(tmp_path / "log", (1, "I", 10), (1, "U", 11))
    fenced: list[int] = []
    out = changelog_append.append(_commit(2), uri, _rows((1, "U", 12), (2, "I", 13)), lambda: fenced.append(1))
    assert out == Landed("committed", inserted=2, version=2) and fenced == [1]
    assert _held(uri) == [(1, "I", 10), (1, "U", 11), (1, "U", 12), (2, "I", 13)]
    table = DeltaTable(uri)
    assert table.transaction_version("cdc-test") == 2
    assert table.history(1)[0]["userMetadata"] == '{"window": 2}'
    # The same window again (a replay), or an older one: the log holds it, nothing is written.
    assert changelog_append.append(_commit(2), uri, _rows((1, "U", 12)), lambda: None) == Landed("already")
    assert changelog_append.append(_commit(1), uri, _rows((1, "U", 12)), lambda: None) == Landed("already")
    assert DeltaTable(uri).version() == 2


def test_a_window_that_may_re_deliver_changes_goes_to_the_merge(tmp_path: Path) -> None:
    """A backfill's window reaching back into what the log holds: only the MERGE can skip what is there."""
    uri = _log(tmp_path / "log", (1, "I", 10), (1, "U", 11))
    for rows in (_rows((1, "U", 11), (1, "U", 12)), _rows((1, "I", 10)), _rows((7, "I", 5))):
        out = changelog_append.append(_commit(5), uri, rows, lambda: None)
        assert isinstance(out, Ineligible) and "backfill" in out.reason
    assert DeltaTable(uri).version() == 1 and len(_held(uri)) == 2


def test_a_log_without_version_statistics_goes_to_the_merge(tmp_path: Path) -> None:
    uri = _log(tmp_path / "log", (1, "I", 10), properties={"delta.dataSkippingNumIndexedCols": "1"})
    out = changelog_append.append(_commit(2), uri, _rows((1, "U", 12)), lambda: None)
    assert isinstance(out, Ineligible) and "statistics" in out.reason
    assert DeltaTable(uri).version() == 1


def test_an_empty_log_and_an_empty_window(tmp_path: Path) -> None:
    uri = _log(tmp_path / "log")
    assert changelog_append.append(_commit(1), uri, _rows(), lambda: None) == Landed("committed", version=1)
    assert DeltaTable(uri).transaction_version("cdc-test") == 1 and _held(uri) == []
    assert changelog_append.append(_commit(2), uri, _rows((3, "I", 1)), lambda: None).status == "committed"
    assert _held(uri) == [(3, "I", 1)]


def test_a_fenced_run_writes_nothing_and_no_table_is_no_append(tmp_path: Path) -> None:
    uri = _log(tmp_path / "log", (1, "I", 10))

    def fence() -> None:
        raise RuntimeError("fenced")

    with pytest.raises(RuntimeError, match="fenced"):
        changelog_append.append(_commit(2), uri, _rows((1, "U", 12)), fence)
    assert DeltaTable(uri).version() == 1
    out = changelog_append.append(_commit(2), str(tmp_path / "none"), _rows((1, "U", 12)), lambda: None)
    assert out == Ineligible("no table yet", missing=True)


def test_a_commit_after_the_checks_fails_the_append_which_checks_again(tmp_path: Path, monkeypatch: Any) -> None:
    """Checked at version V, committed as V+1 or not at all: a commit racing in between (here a concurrent run
    of the same window) makes the append look again, and find the window landed."""
    uri = _log(tmp_path / "log", (1, "I", 10))
    stale = DeltaTable(uri)  # version 1
    changelog_append.append(_commit(2), uri, _rows((1, "U", 12)), lambda: None)  # the other run: version 2
    opened = open_stale_first(monkeypatch, stale)
    assert changelog_append.append(_commit(2), uri, _rows((1, "U", 12)), lambda: None) == Landed("already")
    assert _held(uri) == [(1, "I", 10), (1, "U", 12)]
    # Another window's commit in between: the second attempt, at the new version, appends.
    stale = DeltaTable(uri)
    write_deltalake(uri, _rows((5, "I", 20)), mode="append")
    opened["n"] = 0
    out = changelog_append.append(_commit(3), uri, _rows((1, "D", 21)), lambda: None)
    assert out == Landed("committed", inserted=1, version=4) and opened["n"] == 2
    assert _held(uri) == [(1, "D", 21), (1, "I", 10), (1, "U", 12), (5, "I", 20)]
