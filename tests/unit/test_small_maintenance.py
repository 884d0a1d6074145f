"""cdc_core.lake.small_maintenance on local delta-rs tables: which tables it takes, and what its steps leave (the
maintenance job's Spark and delta-rs paths side by side: tests/integration/test_housekeeping_delta.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.lake import small_maintenance
from cdc_core.model import retention

pytestmark = pytest.mark.unit

MANAGED = retention.managed_table_properties(48, 48, 48)


def small_table(path: Path, commits: int, properties: dict[str, str] | None = None) -> str:
    config = {**MANAGED, retention.PROP_CHECKPOINT_INTERVAL: "10"} if properties is None else properties
    for i in range(commits):
        write_deltalake(str(path), pa.table({"id": [i], "note": [f"n{i}"]}), mode="append",
                        configuration=config if i == 0 else None)
    return str(path)


def test_compacts_vacuums_orphans_and_checkpoints_keeping_rows_and_fencing_each_step(tmp_path: Path) -> None:
    uri = small_table(tmp_path / "t", 6)
    rows = sorted(DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    orphan = tmp_path / "t" / "part-orphan.parquet"
    orphan.write_bytes(b"\0" * 4096)
    os.utime(orphan, (time.time() - 10 * 86400,) * 2)
    table, why = small_maintenance.eligible(uri, properties=MANAGED)
    assert why is None and table is not None
    fenced: list[str] = []
    out = small_maintenance.maintain(
        uri, table, vacuum_hours=48, fence=lambda: fenced.append("fence"), user_metadata=lambda step: f"m:{step}",
        log_entries=lambda: len(os.listdir(tmp_path / "t" / "_delta_log")),
    )
    assert (out["files_before"], out["files_after"]) == (6, 1)
    assert out["optimize"]["files_removed"] == 6 and out["optimize"]["bytes_removed"] > out["optimize"]["bytes_added"]
    assert out["vacuum"]["files_deleted"] == 1 and out["vacuum"]["bytes_deleted"] == 4096 and not orphan.exists()
    assert out["log"]["checkpoint_version"] == out["version_after"] and fenced == ["fence"] * 3
    after = DeltaTable(uri)
    assert sorted(after.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == rows
    assert {h.get("userMetadata") for h in after.history()} >= {"m:optimize", "m:vacuum"}  # labelled per step
    # The compacted files are within the retention: an earlier version still reads.
    assert DeltaTable(uri, version=out["version_before"]).to_pyarrow_table().num_rows == len(rows)


def test_a_fence_that_fails_stops_before_anything_is_written(tmp_path: Path) -> None:
    uri = small_table(tmp_path / "t", 3)
    table, _ = small_maintenance.eligible(uri, properties=MANAGED)
    version = DeltaTable(uri).version()

    def fenced() -> None:
        raise RuntimeError("fenced")

    with pytest.raises(RuntimeError, match="fenced"):
        small_maintenance.maintain(uri, table, vacuum_hours=48, fence=fenced, user_metadata=str,
                                   log_entries=lambda: None)
    assert DeltaTable(uri).version() == version and len(DeltaTable(uri).file_uris()) == 3


def test_leaves_to_spark_what_delta_rs_may_not_do(tmp_path: Path) -> None:
    uri = small_table(tmp_path / "t", 2)
    assert small_maintenance.eligible(uri, properties=MANAGED, zorder_by=["id"]) == (None, "Z-order")
    other = {**MANAGED, retention.PROP_LOG_RETENTION: "interval 999 hours"}
    assert small_maintenance.eligible(uri, properties=other)[1] == "retention properties to align"
    bare = small_table(tmp_path / "bare", 1, properties={})
    assert small_maintenance.eligible(bare, properties={})[1] == "retention properties to align"  # no interval
    missing = small_maintenance.eligible(str(tmp_path / "none"), properties=MANAGED)
    assert missing[0] is None and "cannot open" in str(missing[1])
