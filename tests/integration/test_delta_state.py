"""delta_state against tables written by delta-spark (the writer the product uses), checkpoints included.

One Spark session for the module and one table with a handful of commits: Spark is slow here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from cdc_core.lake import delta_state
from cdc_core.model.errors import LakeError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def written(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A table whose log is: v0 create (checkpointInterval=2), v1 orders=1, v2 billing=7 (checkpoint),
    v3 orders=2, v4 orders=3 (checkpoint), v5 orders=4, v6 a MERGE with orders=5 set by session conf
    (how a MERGE carries txnAppId/txnVersion; checkpoint)."""
    path = tmp_path_factory.mktemp("lake") / "db" / "orders"
    uri = str(path)
    spark.sql(
        f"CREATE TABLE delta.`{uri}` (id BIGINT, v STRING) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval' = '2')"
    )

    def append(rows: list[tuple[int, str]], app: str, version: int) -> None:
        (spark.createDataFrame(rows, "id BIGINT, v STRING").write.format("delta").mode("append")
         .option("txnAppId", app).option("txnVersion", version).save(uri))

    append([(1, "a")], "orders", 1)
    append([(2, "b")], "billing", 7)
    append([(3, "c")], "orders", 2)
    append([(4, "d")], "orders", 3)
    append([(5, "e")], "orders", 4)
    spark.createDataFrame([(1, "A"), (6, "f")], "id BIGINT, v STRING").createOrReplaceTempView("src")
    spark.conf.set("spark.databricks.delta.write.txnAppId", "orders")
    spark.conf.set("spark.databricks.delta.write.txnVersion", "5")
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", '{"pipeline": "orders", "seq": 5}')
    try:
        spark.sql(
            f"MERGE INTO delta.`{uri}` t USING src s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
    files = [urlparse(f).path for f in spark.read.format("delta").load(uri).inputFiles()]
    return {"uri": uri, "path": path, "files": files, "rows": spark.read.format("delta").load(uri).count()}


def test_last_txn_version_follows_checkpoints_and_later_commits(written: dict[str, Any]) -> None:
    log = written["path"] / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == [
        f"{v:020d}.checkpoint.parquet" for v in (2, 4, 6)
    ]
    uri = written["uri"]
    assert delta_state.last_txn_version(uri, "orders") == 5  # from the MERGE's commit
    assert delta_state.last_txn_version(uri, "billing") == 7  # only in v2 and the checkpoints
    assert delta_state.last_txn_version(uri, "nobody") is None
    assert delta_state.last_txn_version("file://" + uri, "orders") == 5


def test_txn_versions_come_from_the_checkpoint_once_old_commits_are_gone(
    written: dict[str, Any], tmp_path: Path
) -> None:
    # Log cleanup removes commits older than a checkpoint; txn actions must then come from it.
    copy = tmp_path / "orders"
    shutil.copytree(written["path"], copy)
    for v in range(0, 6):
        (copy / "_delta_log" / f"{v:020d}.json").unlink()
        (copy / "_delta_log" / f"{v:020d}.crc").unlink(missing_ok=True)
    assert delta_state.last_txn_version(str(copy), "billing") == 7
    assert delta_state.last_txn_version(str(copy), "orders") == 5
    assert delta_state.table_summary(str(copy))["version"] == 6


def test_table_exists(written: dict[str, Any], tmp_path: Path) -> None:
    assert delta_state.table_exists(written["uri"])
    assert not delta_state.table_exists(str(tmp_path / "never-created"))
    (tmp_path / "empty").mkdir()
    assert not delta_state.table_exists(str(tmp_path / "empty"))
    (tmp_path / "aborted" / "_delta_log").mkdir(parents=True)  # a create that never committed
    assert not delta_state.table_exists(str(tmp_path / "aborted"))
    assert delta_state.last_txn_version(str(tmp_path / "aborted"), "orders") is None
    assert delta_state.last_txn_version(str(tmp_path / "never-created"), "orders") is None


def test_table_summary(written: dict[str, Any], tmp_path: Path) -> None:
    summary = delta_state.table_summary(written["uri"], app_id="orders")
    assert summary["exists"] and summary["version"] == 6
    assert summary["files"] == len(written["files"])
    assert summary["size_bytes"] == sum(os.path.getsize(f) for f in written["files"])
    assert summary["last_operation"] == "MERGE"
    assert summary["last_commit_at"].endswith("Z") and summary["last_commit_ms"] > 0
    assert summary["txn_version"] == 5
    missing = delta_state.table_summary(str(tmp_path / "nope"))
    assert missing["exists"] is False and missing["version"] is None


def test_unreadable_tables_raise_instead_of_reading_as_absent(written: dict[str, Any], tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt"
    shutil.copytree(written["path"], corrupt)
    (corrupt / "_delta_log" / f"{6:020d}.checkpoint.parquet").unlink()
    (corrupt / "_delta_log" / "_last_checkpoint").unlink()
    (corrupt / "_delta_log" / f"{6:020d}.json").write_text("{not json")
    with pytest.raises(LakeError, match="Delta table"):
        delta_state.last_txn_version(str(corrupt), "orders")
    assert delta_state.table_exists(str(corrupt))  # it exists; reading it is what fails
    with pytest.raises(LakeError):
        delta_state.table_summary(str(corrupt))

    occupied = tmp_path / "occupied"
    occupied.write_text("a file where a table should be")
    with pytest.raises(LakeError, match="not a table directory"):
        delta_state.last_txn_version(str(occupied), "orders")
    with pytest.raises(LakeError):
        delta_state.table_exists(str(occupied))


def test_window_commit_version_finds_the_commit_by_its_metadata(written: dict[str, Any]) -> None:
    # The merge job tags each commit with {"pipeline", "seq"}; v6 is the MERGE of window 5.
    assert delta_state.window_commit_version(written["uri"], "orders", 5) == 6
    assert delta_state.window_commit_version(written["uri"], "orders", 4) is None  # appends carry no tag
    assert delta_state.window_commit_version(written["uri"], "billing", 5) is None
    assert delta_state.window_commit_version(str(written["path"].parent / "absent"), "orders", 5) is None
