"""DDL statements in a window: the typed `SchemaChangeEvent`s both readers yield between row changes.

Every query event of a window goes to `cdc_core.capture.ddl_events.typed_statement`, which decides whether
it changes a captured table and how (`cdc_core.model.ddl` parses it); `ddl_typer` adds the key of each
table it changes as the source describes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from cdc_core.capture.binlog.stream import StreamEvent
from cdc_core.capture.binlog.table_maps import SchemaBuilder
from cdc_core.capture.ddl_events import DdlStatement, typed_statement
from cdc_core.capture.source import TableFilter
from cdc_core.model.ddl.conversions import is_strict
from cdc_core.model.schema_changes import SchemaChange
from cdc_core.model.schema_policy import SchemaPolicy


@dataclass(frozen=True)
class SchemaChangeEvent:
    """A DDL statement inside a window (mirrored by `manifest.SchemaEvent`), with its typed changes of the
    captured tables (`cdc_core.capture.ddl_events`).

    `schema` is the statement's default database (may be '' when the statement names its tables fully).
    """

    ordinal: int
    schema: str
    query: str
    version: int
    commit_ts: float = 0.0
    changes: tuple[SchemaChange, ...] = ()
    tables: tuple[tuple[str, str], ...] = ()  # the captured tables whose lake tables it changes
    keys: tuple[tuple[str, ...], ...] = ()  # their keys as the source describes them (() when unknown)

    @classmethod
    def of(cls, ordinal: int, ddl: DdlStatement) -> SchemaChangeEvent:
        return cls(ordinal, ddl.schema, ddl.query, ddl.version, ddl.commit_ts,
                   tuple(replace(c, ordinal=ordinal, version=ddl.version) for c in ddl.changes), ddl.tables,
                   ddl.keys)


def ddl_typer(
    table_filter: TableFilter, policy: SchemaPolicy | None, pipeline: str, builder: SchemaBuilder
) -> Callable[[StreamEvent], DdlStatement | None]:
    """The window's DDL statements of captured tables, typed (cdc_core.capture.ddl_events), with the key of each
    table they change as the source describes it (a table the window changes only by DDL has no row to tell)."""
    active = policy or SchemaPolicy()

    def typed(ev: StreamEvent) -> DdlStatement | None:
        assert ev.query is not None
        found = typed_statement(
            ev.query, ev.schema or "", version=0, commit_ts=float(ev.timestamp or 0), position=f"{ev.file}:{ev.start}",
            captured=table_filter.matches, schema_captured=table_filter.may_match_schema, policy=active,
            pipeline=pipeline, strict=is_strict(getattr(ev.raw, "sql_mode", None)),
        )
        if found is None or not found.tables:
            return found
        keys = []
        for schema, table in found.tables:
            shape = builder.lookup(schema, table)
            keys.append(tuple(shape.key) if shape is not None else ())
        return replace(found, keys=tuple(keys))

    return typed
