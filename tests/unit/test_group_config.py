"""Group pipelines' configuration and pure rules: sources, routes, lineage, unit names and paths, and the
static one-writer checks with routes (cdc_core.model.sources, config, layout, lake_writers)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cdc_core.coordination.paths import source_path
from cdc_core.model import layout
from cdc_core.model.config import load_config
from cdc_core.model.errors import ConfigError
from cdc_core.model.lake_writers import overlaps, route_clashes
from cdc_core.model.manifest import is_reserved_column
from cdc_core.model.sources import Route, lineage, split_unit, unit_name

pytestmark = pytest.mark.unit

GROUP = """
pipelines:
  - name: shop
    sources:
      - {id: eu1, conn_id: shard_eu1}
      - {id: eu2, conn_id: shard_eu2, start: {kind: gtid, gtid: "0-1-5"}}
    tables: {include: ["shop_*.orders", "shop_*.items"]}
    routes:
      - {from: 'shop_[0-9]+\\.(orders)', to: 'shop.\\1'}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipelines.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_group_pipeline_has_its_sources_routes_and_per_source_start(tmp_path: Path) -> None:
    pc = load_config(write(tmp_path, GROUP)).pipeline("shop")
    assert pc.is_group
    assert pc.source_ids() == ["eu1", "eu2"]
    assert pc.source_config("eu2").conn_id == "shard_eu2"
    assert pc.for_source("eu1").start.kind == "current"  # the pipeline's start
    assert pc.for_source("eu2").start.kind == "gtid"  # its own
    with pytest.raises(ConfigError, match="has no source 'eu3'; its sources: eu1, eu2"):
        pc.source_config("eu3")
    with pytest.raises(ConfigError, match="group pipeline"):
        pc.source_config(None)


def test_the_one_source_form_is_unchanged(tmp_path: Path) -> None:
    pc = load_config(write(tmp_path, """
        pipelines:
          - name: orders
            source: {conn_id: src}
            tables: {include: ["shop.*"]}
        """)).pipeline("orders")
    assert not pc.is_group
    assert pc.source_ids() == [None]
    assert pc.for_source(None) is pc


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("    source: {conn_id: a}\n    sources: [{id: x, conn_id: b}]\n", "declare either"),
        ("", "declare either"),
        ("    sources: [{id: x, conn_id: a}, {id: x, conn_id: b}]\n", "['x'] appear more than once"),
        ("    sources: [{id: Bad, conn_id: a}]\n", "1-32 characters"),
        ("    sources: [{id: x, conn_id: a}, {id: y, conn_id: b}, {id: z, conn_id: a}]\n",
         "['x', 'z'] use the same connection 'a'"),
        ("    sources: [{id: x, conn_id: a}]\n    routes: [{from: 'a(', to: s.t}]\n", "not a regular expression"),
        ("    sources: [{id: x, conn_id: a}]\n    routes: [{from: 'a.b', to: 's.\\2'}]\n", "refers to a group"),
        ("    sources: [{id: x, conn_id: a}]\n    routes: [{from: 'a.b', to: 'nodot'}]\n", "schema.table"),
        ("    sources: [{id: x, conn_id: a}]\n    routes: [{from: 'a.b', to: s.t, key: bogus}]\n", "primary_key"),
        ("    sources: [{id: x, conn_id: a}]\n    routes: [{from: 'a.b', to: s.t, bogus: 1}]\n", "unknown key"),
    ],
)
def test_bad_group_configuration_is_refused_with_what_to_do(tmp_path: Path, body: str, expected: str) -> None:
    text = "pipelines:\n  - name: shop\n    tables: {include: [\"a.*\"]}\n" + body
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    assert expected in str(e.value), str(e.value)


def test_lineage_routes_and_keys() -> None:
    routes = (Route(r"shop_[0-9]+\.(orders)", r"shop.\1"),)
    routed = lineage(routes, "eu1", "shop_07", "orders")
    assert (routed.lake_schema, routed.lake_table) == ("shop", "orders")
    assert routed.columns == (("_cdc_source", "eu1"), ("_cdc_source_table", "shop_07.orders"))
    assert routed.key_prefix == ("_cdc_source", "_cdc_source_table")
    unrouted = lineage(routes, "eu1", "shop_07", "items")
    assert (unrouted.lake_name, unrouted.columns, unrouted.key_prefix) == (
        "shop_07.items", (("_cdc_source", "eu1"),), ("_cdc_source",)
    )
    # A single-source pipeline: unrouted tables land as before; a routed one carries its source table.
    assert lineage(routes, None, "shop_07", "items").columns == ()
    assert lineage(routes, None, "shop_07", "orders").key_prefix == ("_cdc_source_table",)
    global_keys = (Route(r"shop_[0-9]+\.orders", "shop.orders", key="primary_key"),)
    single = lineage(global_keys, None, "shop_1", "orders")
    assert single.key_prefix == () and not single.derived  # one server: the primary key is the lake key
    # A group pipeline: keyed by the primary key, derived from a base keyed by every lineage column.
    grouped = lineage(global_keys, "eu1", "shop_1", "orders")
    assert grouped.key_prefix == () and grouped.derived
    assert grouped.columns == (("_cdc_source", "eu1"), ("_cdc_source_table", "shop_1.orders"))
    assert not routed.derived and not unrouted.derived
    assert layout.base_uri("/lake", "shop", "orders") == "/lake/_cdc.base/shop/orders"
    assert lineage(routes, "eu1", "shop_x", "orders").lake_name == "shop_x.orders"  # the pattern wants digits


def test_units_paths_and_reserved_columns() -> None:
    assert unit_name("shop", None) == "shop"
    assert unit_name("shop", "eu1") == "shop.eu1"
    assert split_unit("shop.eu1") == ("shop", "eu1")
    assert split_unit("shop") == ("shop", None)
    assert source_path("/cdc", "shop", None) == "/cdc/pipelines/shop"
    assert source_path("/cdc", "shop", "eu1") == "/cdc/pipelines/shop/sources/eu1"
    assert layout.window_dir("/st", "shop", 3) == "/st/shop/w0000000003"
    assert layout.window_dir("/st", "shop.eu1", 3) == "/st/shop/sources/eu1/w0000000003"
    assert layout.window_dir("/st", "shop.eu2", 3) != layout.window_dir("/st", "shop.eu1", 3)
    assert layout.checkpoints_uri("/lake", "shop.eu1") == "/lake/_cdc.meta/shop/sources/eu1/checkpoints"
    assert is_reserved_column("_cdc_source") and is_reserved_column("_CDC_SOURCE_TABLE")


def test_validate_sees_route_targets_and_clashes(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, """
        pipelines:
          - name: shop
            sources: [{id: a, conn_id: a}, {id: b, conn_id: b}]
            tables: {include: ["shop_*.orders", "shop.*"]}
            routes: [{from: 'shop_[0-9]+\\.orders', to: shop.orders}]
          - name: legacy
            source: {conn_id: c}
            tables: {include: ["shop.orders"]}
        """))
    found = overlaps(cfg.pipelines)
    assert {(o.first, o.second) for o in found} == {("shop", "legacy")}
    clashes = route_clashes(cfg.pipeline("shop"))
    assert [(c.target, c.include, c.example) for c in clashes] == [("shop.orders", "shop.*", "shop.orders")]
    assert "captured unrouted" in clashes[0].message()
    apart = load_config(write(tmp_path, """
        pipelines:
          - name: shop
            sources: [{id: a, conn_id: a}]
            tables: {include: ["shop_*.orders"]}
            routes: [{from: 'shop_[0-9]+\\.orders', to: shop.orders}]
        """))
    assert route_clashes(apart.pipeline("shop")) == [] and overlaps(apart.pipelines) == []
