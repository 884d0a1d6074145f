"""Contract between staging and the Spark merge: Spark reads every staged column with exactly the Delta type
the manifest records (`StagedColumn.delta_type`), and the values it sees are the exact ones staged."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pytest

from cdc_core.lake import staging
from cdc_core.model import layout
from cdc_core.model.manifest import STAGED_META_COLUMNS
from tests.support.all_types import EMOJI, ROWS, changes_for, make_plan  # the unit tests' every-type rows, reused

pytestmark = pytest.mark.integration


def test_spark_reads_staged_columns_with_the_manifest_delta_types(spark, staging_dir: Path) -> None:  # type: ignore[no-untyped-def]
    root = str(staging_dir)
    m = staging.stage_window(make_plan(), iter(changes_for([r for r, _ in ROWS])), root)
    t = m.table("shop.all_types")
    df = spark.read.parquet(f"{layout.window_dir(root, 'demo', 1)}/{t.files[0].path}")
    spark_types = {f.name: f.dataType.simpleString().upper() for f in df.schema.fields}
    assert [spark_types[c] for c in STAGED_META_COLUMNS] == ["STRING", "BIGINT", "BIGINT", "TIMESTAMP", "BIGINT"]
    assert {c.name: spark_types[c.name] for c in t.columns} == {c.name: c.delta_type for c in t.columns}

    rows = [r.asDict() for r in df.orderBy("_cdc_ordinal").collect()]
    first = rows[0]
    assert first["biu"] == decimal.Decimal(18446744073709551615)
    assert first["b64"] == decimal.Decimal(2**64 - 1)
    assert first["dtm6"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999)  # TIMESTAMP_NTZ: wall clock, no shift
    assert first["tm"] == -3_020_399_000_000
    assert first["d65"] == ROWS[0][1]["d65"]
    assert first["bl"] == bytes(range(256))
    assert first["vc"] == EMOJI
    # TIMESTAMP is an instant: compare epoch microseconds, whatever the session time zone.
    micros = [r[0] for r in df.orderBy("_cdc_ordinal").selectExpr("unix_micros(ts6)").collect()]
    assert micros == [1_000_001, 2147483647_999999, None]
    assert rows[2]["ts"] is None and rows[2]["yr"] == 0 and rows[2]["stn"] == ""
