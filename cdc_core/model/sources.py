"""Group pipelines: several source servers (shards) into one set of Delta tables (docs/group-pipelines.md).

A pipeline declares one `source:` (today's form) or several `sources:`, each with an id. Every source is a
*unit* of the pipeline with state of its own: cursor, window records, snapshot progress, lake registry and
last error under `<root>/pipelines/<pipeline>/sources/<id>/` in ZooKeeper, staged windows under
`<staging_root>/<pipeline>/sources/<id>/`, and its own Delta idempotent-write identity (txnAppId
`<pipeline>.<id>`), so a window of source A is never mistaken for one of source B and recovery reconciles
each source with the Delta log on its own. One lease covers the pipeline: its fencing token fences every
source's writes.

Lineage: a group pipeline's lake rows carry `_cdc_source` (the source id), and rows of a routed table carry
`_cdc_source_table` (the source `schema.table`). These columns lead the lake key, so equal keys on two
shards (or in two schemas routed to one table) never collide, and a row moved from shard A to shard B is a
delete under A and an insert under B.

Routes map many source tables to one lake table: `from` is a regular expression matched against the whole
`schema.table` name (its capture groups usable in `to` as `\\1`), `to` the lake table's `schema.table`.
The first matching route wins; an unrouted table lands under its own name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_core.model.naming import table_id

SOURCE_ID_RE = re.compile(r"^[a-z0-9_-]{1,32}\Z")
COL_SOURCE = "_cdc_source"
COL_SOURCE_TABLE = "_cdc_source_table"
LINEAGE_COLUMNS = (COL_SOURCE, COL_SOURCE_TABLE)
UNIT_SEPARATOR = "."  # never in a pipeline name or a source id

# A route's lake key: "source" prefixes the primary key with the lineage columns (the default);
# "primary_key" trusts the shards to keep keys globally unique. In a group pipeline such a lake table is
# *derived*: each source lands exactly in a lineage-keyed base table, and the pk-keyed table is recomputed
# from the base for the keys each window touched (docs/group-pipelines.md, "Global keys").
KEY_SOURCE = "source"
KEY_PRIMARY = "primary_key"


def unit_name(pipeline: str, source: str | None) -> str:
    """The identity of one source of a pipeline: its windows, staging directory and Delta txnAppId.
    A single-source pipeline's unit is the pipeline itself (today's layout, unchanged)."""
    return pipeline if source is None else f"{pipeline}{UNIT_SEPARATOR}{source}"


def split_unit(name: str) -> tuple[str, str | None]:
    """`unit_name`'s inverse: (pipeline, source or None)."""
    pipeline, _, source = name.partition(UNIT_SEPARATOR)
    return pipeline, (source or None)


def command_target(unit: str) -> str:
    """How the `cdc` command names a unit, for hints in messages: `shop --source eu1`, or the pipeline itself
    (the argument is always the pipeline; a group pipeline's source is `--source`)."""
    pipeline, source = split_unit(unit)
    return pipeline if source is None else f"{pipeline} --source {source}"


@dataclass(frozen=True)
class Route:
    """Source tables whose `schema.table` fully matches `pattern` land in the lake table `target`."""

    pattern: str
    target: str  # "schema.table", may refer to the pattern's groups (\\1)
    key: str = KEY_SOURCE

    def to_dict(self) -> dict[str, str]:
        return {"from": self.pattern, "to": self.target, "key": self.key}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Route:
        return cls(pattern=str(d["from"]), target=str(d["to"]), key=str(d.get("key", KEY_SOURCE)))

    def lake_table(self, schema: str, table: str) -> tuple[str, str] | None:
        m = re.fullmatch(self.pattern, f"{schema}.{table}", flags=re.S)
        if m is None:
            return None
        target = m.expand(self.target)
        lake_schema, dot, lake_table = target.partition(".")
        if not dot or not lake_schema or not lake_table or "." in lake_table:
            raise ValueError(
                f"route {self.pattern!r} -> {self.target!r} gives {target!r} for {schema}.{table}: "
                "the target must be schema.table"
            )
        return lake_schema, lake_table


@dataclass(frozen=True)
class Lineage:
    """Where one source table lands and what its lake rows carry."""

    lake_schema: str
    lake_table: str
    columns: tuple[tuple[str, str], ...]  # (lineage column, its constant value for this source table)
    key_prefix: tuple[str, ...]  # lineage columns leading the lake key
    # A group pipeline's route keyed by the primary key alone: the rows land in a base table keyed by
    # every lineage column, and the lake table is derived from it (one row per primary key).
    derived: bool = False

    @property
    def lake_name(self) -> str:
        """The lake table's name as the merge job reports it (`naming.table_id`)."""
        return table_id(self.lake_schema, self.lake_table)


def lineage(routes: Sequence[Route], source: str | None, schema: str, table: str) -> Lineage:
    """The lake table and lineage columns of `schema.table` read from `source` (None: a single-source
    pipeline). Without a source and a route the table lands as before: its own name, no extra columns."""
    for route in routes:
        target = route.lake_table(schema, table)
        if target is None:
            continue
        cols: tuple[tuple[str, str], ...] = ((COL_SOURCE, source),) if source is not None else ()
        cols += ((COL_SOURCE_TABLE, f"{schema}.{table}"),)
        prefix = tuple(c for c, _ in cols) if route.key == KEY_SOURCE else ()
        return Lineage(target[0], target[1], cols, prefix, derived=source is not None and route.key == KEY_PRIMARY)
    if source is None:
        return Lineage(schema, table, (), ())
    return Lineage(schema, table, ((COL_SOURCE, source),), (COL_SOURCE,))


def parse_routes(raw: Sequence[Mapping[str, Any]] | None) -> tuple[Route, ...]:
    return tuple(Route.from_dict(r) for r in (raw or ()))
