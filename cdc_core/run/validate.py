"""The facts `cdc validate` checks a pipeline's sources against (the rules: cdc_core.model.validation), and the one
place a pipeline's capture filter is built (`capture_filter`: the run uses it too, Pipeline.table_filter).

Offline (plain `cdc validate`) only the connections are read, from the environment as the CLI reads them
(`AIRFLOW_CONN_<ID>`), for each source's host:port; a connection that is not defined there is simply not compared.
With `--check-sources` every source is asked for its identity (MySQL's server_uuid) and describes the tables the
pipeline captures there, as a run would (a literal include that does not exist, a table without a usable key, a
foreign key whose cascades the binlog would not show, a transform rule that cannot apply to its table or whose hash
key is missing, a history tracking a column the table does not land: the run's own errors): no ZooKeeper, no lake,
nothing written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cdc_core.capture.source import (
    SourceParams,
    TableFilter,
    check_binlog_filters,
    check_cascades,
    check_system_versioned,
    connect,
    describe_tables,
    inspect_source,
)
from cdc_core.model import transforms
from cdc_core.model.changes import TableSchema
from cdc_core.model.config import PipelineConfig
from cdc_core.model.connections import lookup_connection
from cdc_core.model.errors import ConfigError
from cdc_core.model.output_modes import OutputModes, tracked_columns
from cdc_core.model.types import table_codec
from cdc_core.model.validation import SourceServer, server_address


def capture_filter(config: PipelineConfig, tables: tuple[str, ...] | None = None) -> TableFilter:
    """The tables a pipeline captures (or `tables` of them, with its excludes)."""
    t = config.tables
    sc = config.schema_changes
    osc = (*sc.ghost_tables, *sc.trash_tables)  # online schema-change tools' tables never land
    return TableFilter(include=tuple(tables or t.include), exclude=tuple(t.exclude), osc_tables=osc)


def configured_servers(config: PipelineConfig, environ: Mapping[str, str] | None = None) -> list[SourceServer]:
    """Each source's connection id and, when its connection is in the environment, its host:port."""
    out = []
    for sid in config.source_ids():
        conn_id = config.source_config(sid).conn_id
        info = lookup_connection(conn_id, environ)
        out.append(SourceServer(sid, conn_id, server_address(info.host, info.port) if info else None))
    return out


def check_transforms(config: PipelineConfig, tables: Iterable[TableSchema]) -> None:
    """Each captured table's transform rule against the table as it is (a key column excluded, a filter over a
    column it lacks, ...: the staging step's own ConfigError), and the hash key in this environment."""
    rules = transforms.resolve(config.transform, config.name)
    for table in tables:
        rule = rules.rule_for(table.name)
        columns = [c.name for c in table_codec(table).columns]
        if rule is not None:
            shaped = transforms.table_transform(rule, rules.key, table.name, table_codec(table).columns, table.key)
            columns = [c.name for c in shaped.columns]
        check_outputs(config, table.name, columns, table.key)


def check_outputs(config: PipelineConfig, table: str, columns: Sequence[str], key: Sequence[str]) -> None:
    """A table's history `track` against the columns it lands with (cdc_core.model.output_modes)."""
    opts = config.table_options.get(table) or {}
    modes = OutputModes.parse(table, opts.get("outputs"), opts.get("track"))
    if modes.history and modes.track:
        try:
            tracked_columns(modes.track, columns, key)
        except ValueError as e:
            raise ConfigError(f"pipeline {config.name!r}: table_options[{table!r}]: {e}") from None


@dataclass(frozen=True)
class SourceView:
    """One source as `cdc validate --check-sources` saw it."""

    server: SourceServer
    tables: tuple[tuple[str, str], ...]  # (schema, table) the pipeline captures there


def read_sources(
    config: PipelineConfig, params_for: Callable[[str | None], SourceParams],
    environ: Mapping[str, str] | None = None,
) -> list[SourceView]:
    """Connect to every source of the pipeline: its identity and the tables it captures there."""
    views = []
    for server in configured_servers(config, environ):
        unit = config.for_source(server.source)
        conn = connect(params_for(server.source))
        try:
            facts = inspect_source(conn)
            identity = facts.identity
            check_binlog_filters(facts, capture_filter(unit), unit.name)
            described = describe_tables(conn, capture_filter(unit), unit.name, tuple(unit.tables.full_row_key))
            check_cascades(conn, capture_filter(unit), unit.name, unit.tables.cascading_foreign_keys)
            check_system_versioned(conn, capture_filter(unit), unit.name)
        finally:
            conn.close()
        check_transforms(unit, described.values())
        tables = tuple(sorted((t.schema, t.table) for t in described.values()))
        views.append(SourceView(SourceServer(server.source, server.conn_id, server.address, identity.server_uuid),
                                tables))
    return views
