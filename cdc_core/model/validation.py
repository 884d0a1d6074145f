"""The rules `cdc validate` adds to the configuration's own: a group pipeline's sources must be distinct
servers, and every route must take some captured table. Pure, over what the configuration says and, when
the sources are reachable (`cdc validate --check-sources`), what they hold (gathered by cdc_core.run.validate).

Why these two. Two sources of one group pipeline that read the same server land every row twice (under two
`_cdc_source` values; with `key: primary_key` two live rows per id, one hidden by a silent tie-break). A
route whose pattern matches no captured table does nothing, and the tables it was written for then land
unrouted under their own names: both look like success until someone counts rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cdc_core.model.naming import parse_table_pattern
from cdc_core.model.sources import Route, lineage

_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


def server_address(host: str, port: int | None) -> str:
    """`host:port` as two connections to one server would both spell it (loopback names folded, case
    ignored). Only what a connection says: two names of one host are not found this way (`server_uuid` is,
    on MySQL, with --check-sources)."""
    name = host.strip().lower()
    return f"{'127.0.0.1' if name in _LOOPBACK else name}:{port if port is not None else 3306}"


@dataclass(frozen=True)
class SourceServer:
    """What is known of one source of a pipeline: its connection id, and when known its address and the
    server's own identity (MySQL's server_uuid; MariaDB has none)."""

    source: str | None
    conn_id: str
    address: str | None = None
    server_uuid: str | None = None


def shared_servers(pipeline: str, sources: Sequence[SourceServer]) -> list[str]:
    """One message per pair of sources that read the same server: the same connection, the same host:port,
    or the same server_uuid."""
    found: list[str] = []
    for i, a in enumerate(sources):
        for b in sources[i + 1:]:
            if a.conn_id == b.conn_id:
                same = f"the same connection {a.conn_id!r}"
            elif a.address is not None and a.address == b.address:
                same = f"the same server {a.address} (connections {a.conn_id!r} and {b.conn_id!r})"
            elif a.server_uuid and a.server_uuid == b.server_uuid:
                same = f"the same server (server_uuid {a.server_uuid}, connections {a.conn_id!r} and {b.conn_id!r})"
            else:
                continue
            found.append(
                f"pipeline {pipeline!r}: sources {a.source!r} and {b.source!r} read {same}: every row would land "
                "twice (with key: primary_key, two live rows per id and a silent tie-break). Give each source its "
                "own server, or remove one"
            )
    return found


def route_lines(routes: Sequence[Route]) -> list[str]:
    """The routes as `cdc validate` prints them, in the order they are tried (the first match wins)."""
    return [f"route {i + 1}: {r.pattern!r} -> {r.target} (key: {r.key})" for i, r in enumerate(routes)]


def winning_route(routes: Sequence[Route], schema: str, table: str) -> int | None:
    """The index of the route `schema.table` lands by (the first that matches), None when unrouted."""
    for i, r in enumerate(routes):
        if re.fullmatch(r.pattern, f"{schema}.{table}", flags=re.S):
            return i
    return None


@dataclass(frozen=True)
class Landing:
    """One captured source table and the lake table it lands in."""

    source: str | None
    source_table: str  # schema.table
    lake_table: str  # schema.table
    route: int | None  # index of the route it lands by; None: unrouted, under its own name
    derived: bool = False  # a `key: primary_key` route of a group pipeline (docs/group-pipelines.md)

    def line(self) -> str:
        via = f"route {self.route + 1}" if self.route is not None else "unrouted"
        derived = ", derived: one row per primary key" if self.derived else ""
        where = f"source {self.source}: " if self.source is not None else ""
        return f"{where}{self.source_table} -> {self.lake_table} ({via}{derived})"


def landings(routes: Sequence[Route], source: str | None, tables: Iterable[tuple[str, str]]) -> list[Landing]:
    """Where each captured `(schema, table)` of `source` lands (cdc_core.model.sources.lineage)."""
    out = []
    for schema, table in sorted(tables):
        to = lineage(routes, source, schema, table)
        index = winning_route(routes, schema, table)
        out.append(Landing(source, f"{schema}.{table}", f"{to.lake_schema}.{to.lake_table}", index,
                           derived=index is not None and to.derived))
    return out


def idle_routes(routes: Sequence[Route], tables: Iterable[tuple[str, str]]) -> list[int]:
    """Indexes of the routes no captured table lands by (matching nothing, or only tables an earlier route
    already takes)."""
    used = {winning_route(routes, s, t) for s, t in tables}
    return [i for i in range(len(routes)) if i not in used]


def idle_route_message(pipeline: str, route: Route, index: int, where: str) -> str:
    return (
        f"pipeline {pipeline!r}: route {index + 1} ({route.pattern!r} -> {route.target}) takes no {where}: the tables "
        "it was written for land unrouted under their own names. Fix its pattern (a regular expression over the "
        "whole schema.table, case-sensitive) or tables.include, or remove it"
    )


def routes_missing_literal_includes(
    routes: Sequence[Route], include: Sequence[str], exclude: Sequence[str]
) -> list[int] | None:
    """Without the source: when every include pattern is a literal `schema.table`, the captured tables can only
    be those names, so the routes none of them lands by are known (indexes). None when some include is a glob
    (then only the source's tables can tell: --check-sources)."""
    names = []
    for text in include:
        s, t = parse_table_pattern(text)
        if not (s.is_literal and t.is_literal):
            return None
        if not any(es.matches(s.text) and et.matches(t.text) for es, et in map(parse_table_pattern, exclude)):
            names.append((s.text, t.text))
    return idle_routes(routes, names)

