"""Example downstream DAGs scheduled on the lake tables' Airflow Assets (docs/downstream.md).

Copy this file into your DAGs folder and change the pipeline and table names. `table_asset` builds the
same Asset (name, URI, group) the pipeline's `ack_window` task emits events for, from the pipeline's
configuration ($CDC_CONFIG), so the two always agree.

- `cdc_downstream_orders` runs after every window that changed `shop.orders`;
- `cdc_downstream_orders_and_items` runs once both `shop.orders` and `shop.order_items` changed since
  its last run (`&`; `|` would mean "either"). It reads both tables at one consistent cut (the Delta
  versions of the newest acked window, `cdc_core.lake.lake_versions`), so it never sees an order without
  its items, whatever is merging meanwhile.

Every asset event carries the window's facts in its extra: pipeline, window_seq, kind, table,
delta_version, inserted / updated / deleted, changes, newest_commit_ts / newest_commit_at, cursor,
acked_at.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, task
from cdc_airflow.assets import table_asset

PIPELINE = os.environ.get("CDC_EXAMPLE_PIPELINE", "demo")
ORDERS = os.environ.get("CDC_EXAMPLE_ORDERS", "shop.orders")
ITEMS = os.environ.get("CDC_EXAMPLE_ITEMS", "shop.order_items")

orders = table_asset(PIPELINE, ORDERS)
items = table_asset(PIPELINE, ITEMS)


with DAG(dag_id="cdc_downstream_orders", schedule=orders, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["cdc-example"]):

    @task(inlets=[orders])
    def report_orders(*, inlet_events=None):  # type: ignore[no-untyped-def]
        """What landed: the asset events that triggered this run, with the window's facts."""
        for event in inlet_events[orders][-5:]:
            e = event.extra
            print(f"window {e['window_seq']}: {e['table']} at Delta version {e['delta_version']}, "
                  f"+{e['inserted']} ~{e['updated']} -{e['deleted']}, commits up to {e['newest_commit_at']}")

    report_orders()


with DAG(dag_id="cdc_downstream_orders_and_items", schedule=(orders & items), start_date=datetime(2024, 1, 1),
         catchup=False, tags=["cdc-example"]):

    @task
    def consistent_read():  # type: ignore[no-untyped-def]
        """Both tables at one window boundary (delta-rs here; with Spark use lake_versions.spark_dataframes)."""
        from cdc_airflow.hooks import pipeline_config

        from cdc_core.lake import lake_versions

        lake_root = str(pipeline_config(PIPELINE).lake_root)
        cut = lake_versions.load_cut(lake_root, PIPELINE)
        order_rows = lake_versions.read_table(cut, ORDERS)
        item_rows = lake_versions.read_table(cut, ITEMS)
        print(f"window {cut.seq}: {order_rows.num_rows} orders, {item_rows.num_rows} items")
        print("\n".join(cut.sql([ORDERS, ITEMS])))

    consistent_read()
