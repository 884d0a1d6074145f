"""Which Delta table each staged table lands in: one source table, several routed into one (lineage columns), or a
renamed table's rows by version range (cdc_core.model.schema_window).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    StringType,
    StructType,
)

from cdc_core.lake.object_store import Storage
from cdc_core.model.errors import (
    SchemaConflict,
)
from cdc_core.model.lake_writers import writer_pipeline
from cdc_core.model.layout import table_uri
from cdc_core.model.manifest import (
    COL_VERSION,
    Manifest,
    StagedTable,
)
from cdc_core.model.naming import path_component, table_id
from cdc_core.model.schema_changes import DROP_DATABASE, SchemaChange
from cdc_core.model.schema_window import (
    Placement,
)
from cdc_core.model.sources import Lineage, Route, lineage
from spark_apps.merge.staged import (
    STAGED_META,
    StagedFacts,
    can_widen,
    may_have_deletes,
    parse_type,
    read_staged_table,
    staged_facts,
)

log = logging.getLogger("cdc.merge")


@dataclass(frozen=True)
class SchemaMember:
    """One staged table of a lake table read through the table's schema record."""

    staged: StagedTable
    lineage: Lineage
    state_key: str  # whose schema record in the lake table's properties (cdc_core.model.schema_evolution)
    bounds: tuple[int | None, int | None] = (None, None)  # the versions of its rows that land here


def schema_state_key(app_id: str, staged: StagedTable, where: Lineage) -> str:
    """The app id, and in a routed lake table the source table too: each source table has its own DDL."""
    return f"{app_id}.{staged.name}" if where.columns else app_id


@dataclass(frozen=True)
class LakeTarget:
    """One Delta table of the window and the staged tables that land in it: one source table, or several
    routed into it (cdc_core.model.sources). Lineage columns (`_cdc_source`, `_cdc_source_table`) are
    constants per staged table, added when read, and lead the key unless the route trusts global keys."""

    schema: str
    table: str
    members: tuple[tuple[StagedTable, Lineage], ...]
    # Per member: the change versions [since, until) of its rows that land here (a renamed table's rows before
    # the rename land in the table it became: cdc_core.model.schema_window). Empty: every row of every member.
    bounds: tuple[tuple[int | None, int | None], ...] = ()
    # Each member's files whose rows land elsewhere (a rename's source: in the table it became): a table the lake
    # never had takes the shape of its oldest rows when a schema change of the window acts on it before the rename
    # (ADD COLUMN, then RENAME TABLE), so the change has a table to act on and the rename one to carry, even when
    # the name's rows after the rename (another table's, in a swap) are what the target keeps.
    renamed_rows: tuple[StagedTable, ...] = ()
    # The rows its history and change log take: every row written under its name in the window, whichever table
    # held the name then and wherever those rows' state lands (rows of a table dropped or renamed away later in
    # the window). None: its members' rows (a window without renames).
    output_members: tuple[tuple[StagedTable, Lineage], ...] | None = None

    @property
    def name(self) -> str:
        return table_id(self.schema, self.table)

    def for_outputs(self) -> LakeTarget:
        """This target with the rows its history and change log take (`output_members`)."""
        if self.output_members is None:
            return self
        return replace(self, members=self.output_members, bounds=(), renamed_rows=(), output_members=None)

    def with_before_images(self) -> LakeTarget:
        """This target with its members' updates' before images among their changes (the change log's rows)."""
        if not any(st.has_before_images for st, _ in self.members):
            return self
        return replace(self, members=tuple((st.with_before_images(), where) for st, where in self.members))

    def bound(self, i: int) -> tuple[int | None, int | None]:
        return self.bounds[i] if self.bounds else (None, None)

    def sources_label(self) -> str:
        return ", ".join(st.name for st, _ in self.members)

    @property
    def lineage_columns(self) -> list[str]:
        out: list[str] = []
        for _, where in self.members:
            out += [c for c, _ in where.columns if c not in out]
        return out

    @property
    def key(self) -> tuple[str, ...]:
        """The lake table's key: the lineage prefix (unless the route keys by the primary key) and the key."""
        keys = {st.key for st, _ in self.members if st.key or st.files}  # not a table named only in DDL
        if not keys:
            return ()
        if len(keys) > 1:
            raise SchemaConflict(
                f"lake table {self.name}: the routed source tables have different keys "
                + "; ".join(f"{st.name} {list(st.key)}" for st, _ in self.members)
                + ": tables routed into one lake table must share their primary key columns"
            )
        kinds = {(where.key_prefix, where.derived) for _, where in self.members}
        if len(kinds) > 1:
            raise SchemaConflict(
                f"lake table {self.name}: the routes landing {self.sources_label()} in it disagree on its key "
                "(`key: source` and `key: primary_key`): give every route into one lake table the same key"
            )
        return (*self.members[0][1].key_prefix, *next(iter(keys)))

    @property
    def derived(self) -> bool:
        """Keyed by the primary key across a group's sources: landed in a base table, then derived from it."""
        return self.members[0][1].derived

    @property
    def base_key(self) -> tuple[str, ...]:
        """A derived table's base key: every lineage column, then the primary key (exact per source)."""
        return (*self.lineage_columns, *self.key)

    @property
    def rows(self) -> int:
        return sum(st.rows for st, _ in self.members)

    def may_have_deletes(self) -> bool:
        return any(may_have_deletes(st) for st, _ in self.members)

    def columns(self) -> list[tuple[str, DataType]]:
        """Lineage columns, then the source columns merged by name: equal types, or the wider of two types
        one widens to; anything else is a SchemaConflict naming both source tables and the column."""
        merged: dict[str, tuple[str, DataType, str]] = {}  # lower name -> (name, type, the table it came from)
        # A member whose rows here end at a rename has its name's newest types, which may be the next table's of
        # that name (a swap, then a MODIFY): it only adds columns no other member has. Its rows keep their types.
        before_rename = {i for i in range(len(self.members)) if self.bound(i)[1] is not None}
        order = [i for i in range(len(self.members)) if i not in before_rename] + sorted(before_rename)
        for i in order:
            st = self.members[i][0]
            for c in st.columns:
                t = parse_type(c.delta_type, f"table {st.name} column {c.name!r}")
                seen = merged.get(c.name.lower())
                if seen is not None and i in before_rename:
                    continue
                if seen is None or seen[1] == t or can_widen(t, seen[1]):
                    if seen is None:
                        merged[c.name.lower()] = (c.name, t, st.name)
                    continue
                if can_widen(seen[1], t):
                    merged[c.name.lower()] = (seen[0], t, st.name)
                    continue
                raise SchemaConflict(
                    f"lake table {self.name}: column {c.name!r} is {seen[1].simpleString()} in {seen[2]} but "
                    f"{t.simpleString()} in {st.name}, and neither widens to the other; tables routed into one "
                    "lake table need compatible columns: change one source column, or route the two tables apart"
                )
        return [*((c, StringType()) for c in self.lineage_columns), *((n, t) for n, t, _ in merged.values())]

    def read(self, spark: SparkSession, window_dir: str, *, storage: Storage, bounded: bool = False) -> DataFrame:
        """Every staged change of the target: each member's, with its lineage constants. `bounded`: each member's
        rows limited to the versions that land here (`bounds`: a renamed table's rows before the rename belong to
        the table it became)."""
        parts = []
        for i, (st, where) in enumerate(self.members):
            df = read_staged_table(spark, window_dir, st, storage=storage)
            for col, value in where.columns:
                df = df.withColumn(col, F.lit(value).cast(StringType()))
            since, until = self.bound(i) if bounded else (None, None)
            if since is not None:
                df = df.where(F.col(COL_VERSION) >= since)
            if until is not None:
                df = df.where(F.col(COL_VERSION) < until)
            parts.append(df)
        return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)

    def staged_schema(self) -> StructType:
        """The schema `read` gives, from the manifest alone (no file opened, no Spark job)."""
        out = StructType()
        for st, where in self.members:
            have = {f.name for f in out.fields}
            for name, t in (*STAGED_META, *((c.name, parse_type(c.delta_type, f"table {st.name} column {c.name!r}"))
                                            for c in st.columns), *((col, StringType()) for col, _ in where.columns)):
                if name not in have:
                    out.add(name, t, True)
                    have.add(name)
        return out

    def facts(self, window_dir: str, *, storage: Storage) -> StagedFacts:
        if len(self.members) == 1:
            return staged_facts(window_dir, self.members[0][0], storage=storage)
        each = [staged_facts(window_dir, st, storage=storage) for st, _ in self.members]
        versions = [f.min_version for f in each if f.min_version is not None]
        # Members' keys differ by their lineage unless the route keys by the primary key alone (a derived
        # table's base is keyed by lineage too).
        by_lineage = bool(self.members[0][1].key_prefix) or self.derived
        unique = by_lineage and all(f.unique_keys for f in each)
        return StagedFacts(unique, min(versions) if versions else None)


def lake_tables_of_schemas(
    lake_root: str, changes: Sequence[SchemaChange], app_id: str, *, storage: Storage
) -> dict[str, list[tuple[str, str]]]:
    """The lake tables of each database the window drops whose writer record names this pipeline (`DROP
    DATABASE` drops each of them)."""
    dropped = sorted({c.schema for c in changes if c.kind == DROP_DATABASE})
    if not dropped:
        return {}
    from cdc_core.lake import delta_state
    from cdc_core.model.naming import decode_path_component

    out: dict[str, list[tuple[str, str]]] = {}
    fs, root = storage.fs(lake_root)
    pipeline = app_id.split(".", 1)[0]
    for schema in dropped:
        base = f"{root.rstrip('/')}/{path_component(schema)}"
        try:
            entries = fs.ls(base, detail=False)
        except FileNotFoundError:
            continue
        for entry in sorted(entries):
            name = decode_path_component(str(entry).rstrip("/").rsplit("/", 1)[-1])
            if name is None:
                continue
            found = delta_state.writer_and_txn(table_uri(lake_root, schema, name), app_id, storage=storage)
            if found is not None and writer_pipeline(found[0]) == pipeline:
                out.setdefault(schema, []).append((schema, name))
    return out


def members_by_their_rows(
    targets: Sequence[LakeTarget], spans_of: Callable[[StagedTable], Sequence[tuple[int, int] | None]]
) -> list[LakeTarget]:
    """Each bounded target's members cut to the staged files whose rows land here: a renamed table's rows before
    the rename go to the table it became, and the name's next table (RENAME TABLE a TO c, b TO a) may have
    other columns and another key. Rows that do not land here must not decide this table's columns or key: a
    member keeps the files with rows in its version range, their columns and the key they were written under
    (StagedFile.key); one with none is named only (no files, no key). `spans_of`: each staged file's (min, max)
    change version (None: no rows)."""
    out = []
    for target in targets:
        if not target.bounds:
            out.append(target)
            continue
        members, elsewhere = [], []
        for i, (staged, where) in enumerate(target.members):
            since, until = target.bound(i)
            kept = [
                f for f, span in zip(staged.files, spans_of(staged), strict=True)
                if span is not None and (since is None or span[1] >= since) and (until is None or span[0] < until)
            ]
            members.append((staged.with_files(kept), where))
            if len(kept) < len(staged.files):
                elsewhere.append(staged.with_files([f for f in staged.files if f not in kept]))
        out.append(replace(target, members=tuple(members), renamed_rows=tuple(elsewhere)))
    return out


def lake_targets(
    manifest: Manifest, routes: Sequence[Route], source: str | None,
    placements: dict[tuple[str, str], tuple[Placement, ...]] | None = None,
) -> list[LakeTarget]:
    """The window's staged tables grouped by the Delta table they land in, in manifest order. `placements`: a
    renamed table's rows, by version range, in the table they belong to (cdc_core.model.schema_window)."""
    grouped: dict[tuple[str, str], list[tuple[StagedTable, Lineage, tuple[int | None, int | None]]]] = {}
    by_name: dict[tuple[str, str], list[tuple[StagedTable, Lineage]]] = {}  # the rows written under each name
    for st in manifest.tables:
        if placements:
            named = lineage(routes, source, st.schema, st.table)
            by_name.setdefault((named.lake_schema, named.lake_table), []).append((st, named))
        for place in (placements or {}).get((st.schema, st.table), (Placement((st.schema, st.table)),)):
            where = lineage(routes, source, *place.lake)
            bound = (place.since, place.until)
            # A dropped table's rows: named only (the lake table's DDL steps still see the name).
            member = st.with_files(()) if place.gone else st
            grouped.setdefault((where.lake_schema, where.lake_table), []).append((member, where, bound))
    out = []
    for (schema, table), members in grouped.items():
        bounds = tuple(b for _, _, b in members)
        outputs = None
        if placements:  # none staged under its name: a table named only by the window's DDL
            outputs = tuple(by_name.get((schema, table)) or ((st.with_files(()), w) for st, w, _ in members[:1]))
        out.append(LakeTarget(schema, table, tuple((st, w) for st, w, _ in members),
                              bounds if any(b != (None, None) for b in bounds) else (), output_members=outputs))
    return out
