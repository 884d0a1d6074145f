"""Airflow Assets for the lake tables: one Asset per Delta table of a pipeline, and the alias the ack
emits through.

- `table_asset(pipeline, "shop.orders")`: the Asset of one lake table, for a downstream DAG's
  `schedule` (alone or in asset expressions: `a & b`, `a | b`). Its URI names the Delta table's
  location (`file:///...` for a local lake root, `s3://...` for an object store, as configured in
  `lake_root`); its name is `cdc_<pipeline>/<schema>/<table>` (path-encoded, so always ASCII); its
  group `cdc_<pipeline>` groups a pipeline's tables in the Assets page. A table's history and change log
  (docs/output-modes.md) are Assets too: `table_asset(pipeline, "shop.orders", output="history")`.
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

from cdc_core.model import layout
from cdc_core.model.naming import table_id
from cdc_core.model.output_modes import OUTPUT_STATE

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


def asset_for(pipeline: str, lake_root: str, schema: str, table: str, output: str = OUTPUT_STATE) -> Asset:
    """A lake table's Asset, or (`output`) its history's or change log's: named like its location under the
    lake root (`cdc_<pipeline>/_cdc.history/<schema>/<table>` for a history)."""
    location = layout.output_uri(lake_root, output, schema, table)
    relative = location[len(lake_root.rstrip("/")) + 1:]
    return Asset(name=f"cdc_{pipeline}/{relative}", uri=asset_uri(location), group=group(pipeline))


def table_asset(pipeline: str | PipelineConfig, table: str, output: str = OUTPUT_STATE) -> Asset:
    """The Asset of lake table `table` ("schema.table", as in the configuration) of `pipeline`, or with
    `output="history"` / `"changelog"` the Asset of its history or change log (docs/output-modes.md)."""
    from cdc_core.model.naming import parse_table_pattern

    pc = _config(pipeline)
    schema, name = parse_table_pattern(table)  # `my.db`.`order items` for names with dots
    if output != OUTPUT_STATE and output not in pc.outputs_of(table_id(schema.text, name.text)).names():
        raise ValueError(
            f"pipeline {pc.name!r}: table {table} keeps no {output} (add it to table_options[...].outputs, "
            "docs/output-modes.md)"
        )
    return asset_for(pc.name, str(pc.lake_root), schema.text, name.text, output)


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
        asset = asset_for(pipeline_name, p.lake_root, where.lake_schema, where.lake_table, ev.output)
        context["outlet_events"][alias].add(asset, extra=ev.extra)
        added.append({"table": ev.name, "window_seq": ev.seq, "delta_version": ev.extra.get("delta_version"),
                      **({"output": ev.output} if ev.output != OUTPUT_STATE else {})})
    return added, max(announced) if announced else None
