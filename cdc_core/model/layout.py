"""Where everything lives on storage: the one place that builds staging and lake paths.

    <staging_root>/<pipeline>/w<seq:010d>/                  one staged window (manifest.json last)
    <staging_root>/<pipeline>/w<seq>/tables/<schema>/<table>/   its Parquet files
    <staging_root>/<pipeline>/reports/                      the Spark jobs' JSON reports
    <staging_root>/<pipeline>/sources/<id>/...              the same, per source of a group pipeline
    <lake_root>/<schema>/<table>                            one Delta table per source table
    <lake_root>/_cdc_tombstones/<schema>/<table>            hard-delete tombstones
    <lake_root>/_cdc.base/<schema>/<table>                  a derived lake table's base (group pipelines,
                                                            `key: primary_key` routes)
    <lake_root>/_cdc.meta/<pipeline>/checkpoints            Delta versions per acked window
    <lake_root>/_cdc.history/<schema>/<table>               a table's history (SCD type 2), when it has one
    <lake_root>/_cdc.changelog/<schema>/<table>             a table's change log, when it has one
                                                            (cdc_core.model.output_modes)

Schema, table and pipeline names go through `naming.path_component`, so hostile names cannot leave their
directory; `_cdc_tombstones` and `_cdc.meta` cannot collide with an encoded name. Roots are local paths or
fsspec URLs (`s3://bucket/prefix`); results keep the root's form.
"""

from __future__ import annotations

import re
from pathlib import Path

from cdc_core.model.naming import path_component, window_dir_name
from cdc_core.model.output_modes import CHANGELOG_DIR, HISTORY_DIR, OUTPUT_CHANGELOG, OUTPUT_HISTORY, OUTPUT_STATE
from cdc_core.model.sources import split_unit

# The checkout (this file is cdc_core/model/layout.py): default config, Spark jobs and scripts live under it.
PROJECT_ROOT = Path(__file__).resolve().parents[2]

TOMBSTONE_DIR = "_cdc_tombstones"
META_DIR = "_cdc.meta"  # a dot: no path_component-encoded table name has one
BASE_DIR = "_cdc.base"
REPORTS_DIR = "reports"


def _join(root: str, *parts: str) -> str:
    base = root if root.endswith("://") else root.rstrip("/") + "/"
    return base + "/".join(parts)


def unit_dir(unit: str) -> str:
    """A pipeline's directory, or `<pipeline>/sources/<id>` for one source of a group pipeline
    (`cdc_core.model.sources.unit_name`)."""
    pipeline, source = split_unit(unit)
    if source is None:
        return path_component(pipeline)
    return f"{path_component(pipeline)}/sources/{path_component(source)}"


def table_uri(lake_root: str, schema: str, table: str) -> str:
    return _join(lake_root, path_component(schema), path_component(table))


def tombstone_uri(lake_root: str, schema: str, table: str) -> str:
    return _join(lake_root, TOMBSTONE_DIR, path_component(schema), path_component(table))


def base_uri(lake_root: str, schema: str, table: str) -> str:
    """The base of a derived lake table: every source's rows, keyed by lineage and primary key
    (cdc_core.model.sources.Lineage.derived)."""
    return _join(lake_root, BASE_DIR, path_component(schema), path_component(table))


def history_uri(lake_root: str, schema: str, table: str) -> str:
    return _join(lake_root, HISTORY_DIR, path_component(schema), path_component(table))


def changelog_uri(lake_root: str, schema: str, table: str) -> str:
    return _join(lake_root, CHANGELOG_DIR, path_component(schema), path_component(table))


def output_uri(lake_root: str, output: str, schema: str, table: str) -> str:
    """Where a lake table's output lives: its `state` (the table itself), `history` or `changelog`
    (cdc_core.model.output_modes)."""
    if output == OUTPUT_STATE:
        return table_uri(lake_root, schema, table)
    if output == OUTPUT_HISTORY:
        return history_uri(lake_root, schema, table)
    if output == OUTPUT_CHANGELOG:
        return changelog_uri(lake_root, schema, table)
    raise ValueError(f"no output {output!r} (one of {OUTPUT_STATE}, {OUTPUT_HISTORY}, {OUTPUT_CHANGELOG})")


def checkpoints_uri(lake_root: str, pipeline: str) -> str:
    """`<lake_root>/_cdc.meta/<pipeline>/checkpoints` (pipeline names are `[a-z0-9_-]`)."""
    return _join(lake_root, META_DIR, unit_dir(pipeline), "checkpoints")


def window_dir(staging_root: str, pipeline: str, seq: int) -> str:
    """The window's directory, in the same form as `staging_root` (a path or an fsspec URL)."""
    return _join(staging_root, unit_dir(pipeline), window_dir_name(seq))


def table_dir_rel(schema: str, table: str) -> str:
    """A table's directory relative to the window directory."""
    return f"tables/{path_component(schema)}/{path_component(table)}"


def reports_dir(staging_root: str, pipeline: str) -> str:
    return _join(staging_root, unit_dir(pipeline), REPORTS_DIR)


def merge_report_uri(staging_root: str, pipeline: str, seq: int, token: int) -> str:
    """One merge report per window and fencing token (`merge_report_key` reads the name back)."""
    return f"{reports_dir(staging_root, pipeline)}/{merge_report_name(seq, token)}"


def merge_report_name(seq: int, token: int) -> str:
    return f"w{seq:010d}-{token:x}.json"


_MERGE_REPORT_NAME = re.compile(r"w(\d{10})-([0-9a-f]+)\.json")


def merge_report_key(path: str) -> tuple[int, int] | None:
    """The (window seq, fencing token) of a merge report's path (`merge_report_uri`'s), or None when the name
    is not a merge report's."""
    m = _MERGE_REPORT_NAME.fullmatch(path.rsplit("/", 1)[-1])
    return (int(m.group(1)), int(m.group(2), 16)) if m else None
