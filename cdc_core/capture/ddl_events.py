"""Which DDL statements of the binlog a pipeline stages, typed, and which it refuses (docs/schema-changes.md).

The binlog reader hands every query event here. A statement that names no captured table (nor a schema that
may hold one, nor an online schema-change tool's table for a captured one) is none of the pipeline's business.
One that does is parsed (`cdc_core.model.ddl`) into typed changes placed at the statement's position, or
refused before anything is staged:

- a statement the parser cannot understand (its effect on the lake would be a guess);
- any change to a table whose `schema_changes` mode is `refuse`.

Both errors quote the statement and its position, and say how to get past it: change the mode, or apply the
statement's effect by hand and list its position under `schema_changes.skip`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from cdc_core.model.errors import SchemaConflict
from cdc_core.model.logfmt import kv
from cdc_core.model.naming import table_id
from cdc_core.model.schema_changes import CREATE_TABLE_LIKE, DROP_DATABASE, SchemaChange
from cdc_core.model.schema_policy import MODE_REFUSE, OSC_GHOST, SchemaPolicy
from cdc_core.model.sources import command_target

log = logging.getLogger("cdc.binlog")


class UnsupportedDdl(SchemaConflict):
    """A DDL statement on a captured table that the pipeline cannot apply exactly (or was told to refuse)."""


@dataclass(frozen=True)
class DdlStatement:
    """A DDL statement a window stages: where it is and what it does, typed."""

    schema: str  # the statement's default database
    query: str
    version: int
    commit_ts: float
    changes: tuple[SchemaChange, ...]
    # The captured tables whose lake tables the statement changes (an online schema-change tool's table stands
    # for its real one): each is in the window's manifest, also without row changes.
    tables: tuple[tuple[str, str], ...] = ()
    keys: tuple[tuple[str, ...], ...] = ()  # per table: its key as the source describes it (() when unknown)


def _quoted(query: str, limit: int = 400) -> str:
    text = " ".join(query.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def typed_statement(
    query: str,
    default_schema: str,
    *,
    version: int,
    commit_ts: float,
    position: str,
    captured: Callable[[str, str], bool],
    schema_captured: Callable[[str], bool],
    policy: SchemaPolicy,
    pipeline: str,
    server_version: int | None = None,
    strict: bool = True,
) -> DdlStatement | None:
    """The statement's typed changes of captured tables, placed at `version`; None when it concerns no captured
    table. `position` (`file:offset`) names the statement in errors and in `schema_changes.skip`; `strict`: it ran
    under a strict sql_mode (`cdc_core.model.ddl.conversions`)."""
    from cdc_core.model.ddl import parse_statement

    parsed = parse_statement(query, default_schema, server_version=server_version, strict=strict)

    def relevant(schema: str, table: str) -> bool:
        if captured(schema, table):
            return True
        role = policy.osc_role(table)
        return role is not None and captured(schema, role[1])

    tables = [(s, t) for s, t in parsed.tables if relevant(s, t)]
    schemas = [s for s in parsed.schemas if schema_captured(s)]
    changes = [c for c in parsed.changes if _concerns(c, relevant, schema_captured)]
    if not tables and not schemas and not changes:
        unnamed = parsed.error is not None and not parsed.tables and not parsed.schemas
        # Nothing tells which table it names: refused when it may be a captured one (its default database may
        # hold captured tables, or it has none), since its effect on them would be lost.
        if not (unnamed and _looks_like_table_ddl(query) and (not default_schema or schema_captured(default_schema))):
            return None
    names = ", ".join(table_id(s, t) for s, t in tables) or ", ".join(schemas) or "a table it could not name"
    if position in policy.skip:
        log.warning("%s", kv(event="ddl.skipped", pipeline=pipeline, at=position, tables=names,
                             query=_quoted(query, 200)))
        return None
    if parsed.error is not None:
        raise UnsupportedDdl(
            f"pipeline {pipeline!r}: the statement at {position} touches {names} but cannot be applied to the lake "
            f"exactly ({parsed.error}): {_quoted(query)!r}. Nothing of this window was merged. To go on, apply its "
            "effect to the lake tables yourself (or re-snapshot them: "
            f"cdc snapshot {command_target(pipeline)} --table <table>) and add '{position}' to schema_changes.skip "
            f"of pipeline {pipeline!r}, then run again"
        )
    refused = [c for c in changes if policy.mode_for(c.table_name) == MODE_REFUSE]
    if refused:
        raise UnsupportedDdl(
            f"pipeline {pipeline!r}: {refused[0].table_name} has schema_changes mode refuse, and the statement at "
            f"{position} changes it ({refused[0].describe()}): {_quoted(query)!r}. Nothing of this window was merged. "
            f"To go on, set its mode to follow or lenient (schema_changes.tables), or apply the change to the lake "
            f"yourself and add '{position}' to schema_changes.skip"
        )
    placed = tuple(
        c.placed(version=version, ordinal=0, commit_ts=commit_ts, query=query) for c in changes
    )
    lake_tables: list[tuple[str, str]] = []
    for c in placed:
        # CREATE TABLE a LIKE b reads b and changes nothing of it: b's lake table is not the statement's (listed,
        # a b the lake never had was created with no columns).
        other = None if c.kind == CREATE_TABLE_LIKE else c.to_table
        for schema, table in ((c.schema, c.table), (c.to_schema or c.schema, other)):
            if table is None or not table:
                continue
            role = policy.osc_role(table)
            real = (schema, role[1]) if role is not None and captured(schema, role[1]) else (schema, table)
            if captured(*real) and real not in lake_tables:
                lake_tables.append(real)
    return DdlStatement(default_schema, query, version, commit_ts, placed, tuple(lake_tables))


def _concerns(
    c: SchemaChange, relevant: Callable[[str, str], bool], schema_captured: Callable[[str], bool]
) -> bool:
    if c.kind == DROP_DATABASE:
        return schema_captured(c.schema)
    if relevant(c.schema, c.table):
        return True
    return c.kind != CREATE_TABLE_LIKE and c.to_table is not None and relevant(c.to_schema or c.schema, c.to_table)


def _looks_like_table_ddl(query: str) -> bool:
    words = query.lstrip().split(None, 2)
    return len(words) >= 2 and words[0].upper() in ("ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE")


def is_ghost_of_captured(policy: SchemaPolicy, captured: Callable[[str, str], bool], schema: str, table: str) -> bool:
    role = policy.osc_role(table)
    return role is not None and role[0] == OSC_GHOST and captured(schema, role[1])
