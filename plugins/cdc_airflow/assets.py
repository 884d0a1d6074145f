"""Airflow Assets for the lake tables: one Asset per Delta table of a pipeline, and the alias the ack
emits through.

- `table_asset(pipeline, "shop.orders")`: the Asset of one lake table, for a downstream DAG's
  `schedule` (alone or in asset expressions: `a & b`, `a | b`). Its URI names the Delta table's
  location (`file:///...` for a local lake root, `s3://...` for an object store, as configured in
  `lake_root`); its name is `cdc_<pipeline>/<schema>/<table>` (path-encoded, so always ASCII); its
  group `cdc_<pipeline>` groups a pipeline's tables in the Assets page.
- `tables_alias(pipeline)`: the `AssetAlias` `cdc_<pipeline>_tables`, the outlet (and inlet) of the
  `ack_window` task. The ack adds one event per table the window changed, only those, through the
  alias (`outlet_events[alias].add(asset, extra=...)`), and Airflow records them when the task
  succeeds: a failed try records nothing, and its retry emits again. To emit nothing twice (a cleared
  ack, a replay, a window acked by recovery), the task reads the alias's earlier events
  (`inlet_events[alias]`) and leaves out windows already announced (cdc_core.run.table_events).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.sdk import Asset, AssetAlias

from cdc_core.model.naming import path_component

if TYPE_CHECKING:
    from cdc_core.model.config import PipelineConfig

EVENTS_LOOKBACK = 500  # the alias's newest events read to find the windows already announced


def asset_uri(table_uri: str) -> str:
    """The Asset URI of a Delta table location: a local path becomes file:///abs/path; URLs stay."""
    parsed = urlparse(table_uri)
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and table_uri[1:3] in (":\\", ":/")):
        return Path(table_uri).resolve().as_uri()
    if parsed.scheme == "s3a":  # Hadoop's name for the same bucket
        return "s3" + table_uri[3:]
    return table_uri


def _config(pipeline: str | PipelineConfig) -> PipelineConfig:
    if isinstance(pipeline, str):
        from cdc_airflow.hooks import pipeline_config

        return pipeline_config(pipeline)
    return pipeline


def group(pipeline: str) -> str:
    return f"cdc_{pipeline}"


def asset_for(pipeline: str, lake_root: str, schema: str, table: str) -> Asset:
    location = f"{lake_root.rstrip('/')}/{path_component(schema)}/{path_component(table)}"
    return Asset(
        name=f"cdc_{pipeline}/{path_component(schema)}/{path_component(table)}",
        uri=asset_uri(location),
        group=group(pipeline),
    )


def table_asset(pipeline: str | PipelineConfig, table: str) -> Asset:
    """The Asset of lake table `table` ("schema.table", as in the configuration) of `pipeline`."""
    from cdc_core.model.naming import parse_table_pattern

    pc = _config(pipeline)
    schema, name = parse_table_pattern(table)  # `my.db`.`order items` for names with dots
    return asset_for(pc.name, str(pc.lake_root), schema.text, name.text)


def tables_alias(pipeline: str) -> AssetAlias:
    return AssetAlias(name=f"cdc_{pipeline}_tables", group=group(pipeline))


def emit(pipeline: str, seq: int, context: Any, p: Any) -> tuple[list[dict[str, Any]], int | None]:
    """Add this ack's asset events (windows not announced yet) to the alias; returns what was added and
    the newest window announced before."""
    from cdc_core.model.sources import split_unit
    from cdc_core.run import table_events

    # `pipeline` may be one source of a group pipeline (`shop.eu1`): the alias and the Assets are the
    # pipeline's (one per lake table, routes applied), the windows announced are that source's.
    pipeline_name, _ = split_unit(pipeline)
    alias = tables_alias(pipeline_name)
    earlier = context["inlet_events"][alias].ascending(False).limit(EVENTS_LOOKBACK)
    announced = table_events.announced_seqs(pipeline, [dict(e.extra or {}) for e in earlier])
    added = []
    for ev in table_events.pending_events(p, seq, announced):
        where = p.lineage(ev.schema, ev.table)
        asset = asset_for(pipeline_name, p.lake_root, where.lake_schema, where.lake_table)
        context["outlet_events"][alias].add(asset, extra=ev.extra)
        added.append({"table": ev.name, "window_seq": ev.seq, "delta_version": ev.extra.get("delta_version")})
    return added, max(announced) if announced else None
