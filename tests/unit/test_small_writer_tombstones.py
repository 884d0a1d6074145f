"""The small-table writer's hard-delete tombstones (cdc_core.lake.small_writer): which rows, appended once per
window with its txn, and nothing at all from a fenced run. delta-rs on a local directory, no services."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from cdc_core.lake import small_writer
from cdc_core.lake.delta_state import last_txn_version, read_rows
from cdc_core.model.errors import Fenced
from cdc_core.model.manifest import COL_OP, COL_VERSION, OP_DELETE

pytestmark = pytest.mark.unit


def _job(tmp_path: Path, seq: int) -> small_writer.SmallMerge:
    return small_writer.SmallMerge(
        uri=str(tmp_path / "lake" / "s" / "t"), label="s.t", window_dir=str(tmp_path / "staging"), members=(),
        key=("id",), delete_mode="hard", app_id="pipe", seq=seq, user_metadata="{}", max_rows=100,
        tombstones=small_writer.Tombstones(uri=str(tmp_path / "lake" / "_cdc_tombstones" / "s" / "t"),
                                           label="tombstones of s.t", user_metadata=f'{{"seq": {seq}}}',
                                           properties={}),
    )


def _source(ops: list[tuple[int, str, int]]) -> pa.Table:
    return pa.table({
        "id": pa.array([i for i, _, _ in ops], pa.int32()), "v": pa.array(["x"] * len(ops)),
        COL_OP: pa.array([o for _, o, _ in ops]), COL_VERSION: pa.array([v for _, _, v in ops], pa.int64()),
    })


def _ok() -> None:
    return None


def test_the_windows_deletes_go_to_the_tombstone_table_once(tmp_path: Path) -> None:
    m = _job(tmp_path, 1)
    source = _source([(1, "I", 10), (2, OP_DELETE, 11), (3, "U", 12), (4, OP_DELETE, 13)])
    assert small_writer._tombstones_first(m, source, _ok) is None
    assert small_writer._tombstones_first(m, source, _ok) is None  # a replay of the window: already there
    assert m.tombstones is not None
    rows = sorted((r["id"], r[COL_VERSION]) for r in read_rows(m.tombstones.uri).to_pylist())
    assert rows == [(2, 11), (4, 13)]
    assert last_txn_version(m.tombstones.uri, "pipe") == 1


def test_a_window_without_deletes_writes_no_tombstone_table(tmp_path: Path) -> None:
    m = _job(tmp_path, 1)
    assert small_writer._tombstones_first(m, _source([(1, "I", 10)]), _ok) is None
    assert m.tombstones is not None and not Path(m.tombstones.uri).exists()


def test_a_fenced_run_creates_and_appends_nothing(tmp_path: Path) -> None:
    def fenced() -> None:
        raise Fenced("lease lost")

    m = _job(tmp_path, 1)
    with pytest.raises(Fenced):
        small_writer._tombstones_first(m, _source([(2, OP_DELETE, 11)]), fenced)
    assert m.tombstones is not None and not Path(m.tombstones.uri).exists()
    small_writer._tombstones_first(m, _source([(2, OP_DELETE, 11)]), _ok)  # the table now exists
    with pytest.raises(Fenced):
        small_writer._tombstones_first(_job(tmp_path, 2), _source([(5, OP_DELETE, 20)]), fenced)
    assert [r["id"] for r in read_rows(m.tombstones.uri).to_pylist()] == [2]
