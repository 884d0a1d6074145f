"""The window lineage's naming (cdc_core/run/lineage.py) and its translation into the OpenLineage provider's
objects (plugins/cdc_airflow/lineage.py), serialised as the provider's transports send them."""

from __future__ import annotations

import json

import pytest
from cdc_airflow.lineage import ReportsWindowLineage, operator_lineage
from openlineage.client.serde import Serde

from cdc_core.run.lineage import DatasetName, LakeTableLineage, lake_dataset, source_dataset

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("/lake/shop/orders", DatasetName("file", "/lake/shop/orders")),
        ("file:///lake/shop/orders", DatasetName("file", "/lake/shop/orders")),
        ("s3://bucket/lake/shop/orders", DatasetName("s3://bucket", "lake/shop/orders")),
        ("s3a://bucket/lake/shop/orders", DatasetName("s3://bucket", "lake/shop/orders")),
        ("gs://bucket/lake/t", DatasetName("gs://bucket", "lake/t")),
    ],
)
def test_delta_tables_are_named_by_location_as_openlineage_names_them(uri: str, expected: DatasetName) -> None:
    assert lake_dataset(uri) == expected


def test_source_tables_take_openlineages_mysql_naming() -> None:
    assert source_dataset("db.example", 3306, "shop", "orders") == DatasetName("mysql://db.example:3306", "shop.orders")


def as_json(obj: object) -> dict:
    return json.loads(Serde.to_json(obj))


def test_a_routed_lake_table_names_every_source_table_and_copies_each_column_from_those_that_have_it() -> None:
    eu = source_dataset("eu", 3306, "shop_eu", "orders")
    us = source_dataset("us", 3306, "shop_us", "orders")
    lake = lake_dataset("s3://lake/all/orders")
    routed = LakeTableLineage(
        output=lake,
        inputs=(eu, us),
        columns=(("id", "long"), ("vat", "decimal(8,2)"), ("_cdc_source_table", "string")),
        copied_from={"id": (eu, us), "vat": (eu,)},
        rows_changed=5,
    )
    other = LakeTableLineage(lake_dataset("/l/t"), (eu,), (("k", "integer"),), {"k": (eu,)}, 0)
    got = operator_lineage((routed, other))

    assert [(d.namespace, d.name) for d in got.inputs] == [("mysql://eu:3306", "shop_eu.orders"),
                                                           ("mysql://us:3306", "shop_us.orders")]  # once each
    out = as_json(got.outputs[0])
    assert (out["namespace"], out["name"]) == ("s3://lake", "all/orders")
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [
        ("id", "long"), ("vat", "decimal(8,2)"), ("_cdc_source_table", "string")]
    fields = out["facets"]["columnLineage"]["fields"]
    assert set(fields) == {"id", "vat"}
    assert [(f["namespace"], f["name"], f["field"]) for f in fields["id"]["inputFields"]] == [
        ("mysql://eu:3306", "shop_eu.orders", "id"), ("mysql://us:3306", "shop_us.orders", "id")]
    assert fields["vat"]["inputFields"][0]["transformations"][0]["subtype"] == "IDENTITY"
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 5
    assert as_json(got.outputs[1])["outputFacets"]["outputStatistics"]["rowCount"] == 0


def test_a_step_that_gathered_nothing_reports_no_datasets() -> None:
    got = ReportsWindowLineage().get_openlineage_facets_on_complete(None)
    assert got.inputs == [] and got.outputs == []
