"""The merge job's commits that carry no window rows, made with delta-rs on local tables
(cdc_core.lake.small_writer `commit_txn_only`, `set_properties`): the same identity Spark's would carry, once,
and never on a table delta-rs might damage. Real delta-rs on a temporary directory (no Spark, no service)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.lake import small_writer
from cdc_core.lake.small_writer import Commit, Ineligible, Landed

pytestmark = pytest.mark.unit


def _table(path: Path, *, ntz: bool = False, properties: dict[str, str] | None = None) -> str:
    fields = [pa.field("id", pa.int32()), pa.field("v", pa.string())]
    if ntz:  # a table-features protocol (3, 7), as a DATETIME column gives a table
        fields.append(pa.field("t", pa.timestamp("us")))
    DeltaTable.create(str(path), pa.schema(fields), configuration=properties or {}, raise_if_key_not_exists=False)
    return str(path)


def _commit_infos(uri: str) -> list[dict[str, object]]:
    out = []
    for f in sorted((Path(uri) / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                out.append(action["commitInfo"])
    return out


def _fences() -> tuple[list[int], object]:
    calls: list[int] = []
    return calls, lambda: calls.append(1)


def test_the_txn_alone_records_the_window_once_with_the_commit_record(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t")
    c = Commit("shop.t", "pipe", 7, '{"pipeline": "pipe", "seq": 7}')
    calls, fence = _fences()
    first = small_writer.commit_txn_only(c, uri, fence)  # type: ignore[arg-type]
    assert first == Landed("committed", version=1) and calls == [1]
    table = DeltaTable(uri)
    assert table.version() == 1 and table.transaction_version("pipe") == 7
    assert _commit_infos(uri)[-1].get("userMetadata") == c.user_metadata
    again = small_writer.commit_txn_only(c, uri, fence)  # type: ignore[arg-type]
    assert again == Landed("already") and DeltaTable(uri).version() == 1 and calls == [1]  # nothing written


def test_the_txn_alone_leaves_tables_delta_rs_may_not_write_to_spark(tmp_path: Path) -> None:
    c = Commit("shop.t", "pipe", 1, "{}")
    dv = _table(tmp_path / "dv", properties={"delta.enableDeletionVectors": "true"})
    out = small_writer.commit_txn_only(c, dv, lambda: None)
    assert isinstance(out, Ineligible) and DeltaTable(dv).version() == 0
    missing = small_writer.commit_txn_only(c, str(tmp_path / "none"), lambda: None)
    assert isinstance(missing, Ineligible)
    remote = small_writer.commit_txn_only(c, "s3://bucket/lake/t", lambda: None)
    assert remote == Ineligible(small_writer.NO_ATOMIC_COMMIT)  # an object store not probed for conditional puts


def test_a_fenced_run_commits_nothing(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t")

    def fenced() -> None:
        raise RuntimeError("lease lost")

    with pytest.raises(RuntimeError, match="lease lost"):
        small_writer.commit_txn_only(Commit("shop.t", "pipe", 1, "{}"), uri, fenced)
    with pytest.raises(RuntimeError, match="lease lost"):
        small_writer.set_properties(uri, {"cdc.x": "1"}, "{}", fenced)
    assert DeltaTable(uri).version() == 0


def test_properties_commit_once_and_keep_the_protocol(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t")
    before = DeltaTable(uri).protocol()
    assert small_writer.set_properties(uri, {"cdc.schema.p.version": "42:0"}, '{"seq": 3}', lambda: None) is None
    table = DeltaTable(uri)
    assert table.metadata().configuration["cdc.schema.p.version"] == "42:0"
    assert table.protocol() == before
    assert _commit_infos(uri)[-1].get("userMetadata") == '{"seq": 3}'


def test_properties_stay_with_spark_where_delta_rs_would_change_the_protocol(tmp_path: Path) -> None:
    # deltalake 1.6 adds variantType to a table-features protocol when it sets properties: Spark sets them.
    ntz = _table(tmp_path / "ntz", ntz=True)
    assert small_writer.set_properties(ntz, {"cdc.x": "1"}, "{}", lambda: None) == "a table-features protocol"
    # delta.* properties may turn on a feature (and change the protocol): Spark's ALTER does that right.
    legacy = _table(tmp_path / "legacy")
    assert small_writer.set_properties(legacy, {"delta.appendOnly": "true"}, "{}", lambda: None) == "Delta properties"
    assert DeltaTable(ntz).version() == 0 and DeltaTable(legacy).version() == 0
