"""The merge job's schema changes: the window's changes applied in binlog order across its lake tables before any
row lands (cdc_core.model.schema_window resolves them, cdc_core.model.schema_evolution plans each, schema_steps
carries the steps out), and each table's rows read through its recorded history.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    StringType,
    StructType,
)

from cdc_core.model.ddl.conversions import ValueCheck
from cdc_core.model.layout import base_uri, table_uri
from cdc_core.model.manifest import (
    StagedTable,
)
from cdc_core.model.naming import quote_spark, table_id
from cdc_core.model.schema_changes import CREATE_TABLE, CREATE_TABLE_LIKE, SchemaChange
from cdc_core.model.schema_evolution import S_COPY, LakeColumn, PlanContext, SchemaState
from cdc_core.model.schema_policy import MODE_LENIENT
from cdc_core.model.schema_values import delta_type_of, exact_cast, normalise_delta_type
from cdc_core.model.schema_window import (
    ROLE_MOVED_IN,
    ROLE_OWN,
    LakeChange,
    plan_change,
)
from cdc_core.model.sources import Lineage, lineage
from spark_apps.merge import schema_steps
from spark_apps.merge.run import RunBase
from spark_apps.merge.staged import STAGED_META, StagedFacts, can_widen, metadata_columns, parse_type, spark_type
from spark_apps.merge.tables import TableOptions
from spark_apps.merge.targets import LakeTarget, SchemaMember, schema_state_key
from spark_apps.writer_threads import in_threads

log = logging.getLogger("cdc.merge")


class SchemaChanges(RunBase):
    """A run's schema-change steps."""

    def schema_work(self, st: LakeTarget, uri: str, facts: StagedFacts) -> list[SchemaMember] | None:
        """The target's members when its rows must be read through its schema record (it changed in this window,
        takes a renamed table's rows, or the window's changes are older than a change the table recorded);
        None: the plain read."""
        busy = bool(st.bounds) or (st.schema, st.table) in self.changed_lake_tables()
        props = self.table_props.get(uri) or {}
        members = []
        for i, (member, where) in enumerate(st.members):
            key = schema_state_key(self.app_id, member, where)
            state = SchemaState.from_properties(props, key)
            if facts.min_version is not None and (
                state.floor > facts.min_version or any(op.version > facts.min_version for op in state.history)
            ):
                busy = True
            members.append(SchemaMember(member, where, key, st.bound(i)))
        return members if busy else None

    def sweeps_due(self, st: LakeTarget) -> list[tuple[StagedTable, Lineage, int]]:
        """The members whose snapshot chunk is the last of a re-read a schema change asked for."""
        out = []
        for member, where in st.members:
            chunk = self.chunks.get(member.name)
            if chunk is not None and chunk.last and chunk.sweep_below:
                out.append((member, where, chunk.sweep_below))
        return out

    def changed_lake_tables(self) -> set[tuple[str, str]]:
        """The lake tables (schema, table) the window's schema changes act on."""
        out = set()
        for c in self.window.changes:
            where = lineage(self.routes, self.source, *c.lake)
            out.add((where.lake_schema, where.lake_table))
        return out

    def schema_phase(self, targets: Sequence[LakeTarget], parallelism: int = 1) -> None:
        """Every schema change of the window, in binlog order, on the lake tables that do not hold the window yet
        (cdc_core.model.schema_window resolves them; spark_apps.schema_steps applies them). Before any row lands:
        a rename's target takes its source's rows while the source still has them. Changes of tables that share
        nothing (independent_changes) go on up to `parallelism` writer threads, each group in binlog order."""
        if not self.window.changes:
            return
        pending = {(t.schema, t.table): t for t in targets}
        self.schema_targets = pending
        groups = self.independent_changes()
        if parallelism <= 1 or len(groups) <= 1:
            for lc in self.window.changes:
                self.apply_schema_change(pending, lc)
            return

        def apply_group(run: SchemaChanges, group: list[LakeChange]) -> None:
            for lc in group:
                run.apply_schema_change(pending, lc)

        in_threads(self, groups, parallelism, apply_group)

    def independent_changes(self) -> list[list[LakeChange]]:
        """The window's schema changes in groups that share no lake table, each in binlog order: the tables a
        change names (its own, a rename's or LIKE's other table, a swap's ghost, the table a moved-in table comes
        from) and every source table routed into one lake table fall in one group."""
        parent: dict[tuple[str, str], tuple[str, str]] = {}

        def find(x: tuple[str, str]) -> tuple[str, str]:
            parent.setdefault(x, x)
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def lake(table: tuple[str, str]) -> tuple[str, str]:
            where = lineage(self.routes, self.source, *table)
            return (where.lake_schema, where.lake_table)

        def named(lc: LakeChange) -> list[tuple[str, str]]:
            c = lc.change
            out = [lc.lake, (c.schema, c.table)]
            if lc.source is not None:
                out.append(lc.source)
            if c.to_table:
                out.append((c.to_schema or c.schema, c.to_table))
            if lc.ghost:
                out.append((lc.lake[0], lc.ghost))
            return out

        for lc in self.window.changes:
            first, *rest = [lake(t) for t in named(lc)]
            for other in rest:
                parent[find(other)] = find(first)
        groups: dict[tuple[str, str], list[LakeChange]] = {}
        for lc in self.window.changes:
            groups.setdefault(find(lake(lc.lake)), []).append(lc)
        return list(groups.values())

    def apply_schema_change(self, pending: dict[tuple[str, str], LakeTarget], lc: LakeChange) -> None:
        """One schema change on its lake table, if that table is one this run lands."""
        where = lineage(self.routes, self.source, *lc.lake)
        target = pending.get((where.lake_schema, where.lake_table))
        if target is not None:  # else the table already holds the window (or was never part of it)
            self._apply(target, where, lc)

    def _apply(self, target: LakeTarget, where: Lineage, lc: LakeChange) -> None:
        """Plan the change against the table's schema record and apply its steps (structure, rows, mark)."""
        # A derived table's rows live in its base (the derived table is recomputed from it after).
        uri = (base_uri if target.derived else table_uri)(self.lake_root, where.lake_schema, where.lake_table)
        label = target.name
        member = next((m for m, w in target.members if (m.schema, m.table) == lc.lake), target.members[0][0])
        key = schema_state_key(self.app_id, member, where)
        table = schema_steps.read_lake_table(self.spark, uri, storage=self.storage)
        if not table.exists:
            if not self.create_for_schema(target, uri, lc):
                return  # DDL on a table the lake never had: nothing to change, nothing to record
            table = schema_steps.read_lake_table(self.spark, uri, storage=self.storage)
        meta = metadata_columns(self.delete_mode)
        reserved = [*(n for n, _ in meta), *target.lineage_columns]
        ctx = PlanContext(
            table=label, app_id=key, delete_mode=self.delete_mode,
            mode=self.schema_policy.mode_for(table_id(*lc.lake), label), zero_dates=self.zero_dates,
            lineage=tuple(where.columns), routed=bool(where.columns),
            lake_holds=functools.partial(self.holds_converted, uri, target, lc.change.version),
        )
        ops, _, rereads = plan_change(
            ctx, table.source_columns(reserved), SchemaState.from_properties(table.properties, key), lc,
            functools.partial(self.moved_from, key=key, reserved=reserved),
            created_columns=functools.partial(self.created_columns, target, reserved),
        )
        for planned in ops:
            op = planned
            if op.structure is not None and op.structure.kind == S_COPY:
                assert op.structure.source is not None
                self.copy_table(op.structure.source, uri, label)
                op = replace(op, structure=None)
            schema_steps.apply_op(self, uri, label, op, app_id=key, delete_mode=self.delete_mode,
                                  lineage=tuple(where.columns), column_mapping=self.schema_policy.column_mapping)
        for change, why in rereads:
            self.log("merge.schema_reread", table=label, change=change.kind, version=change.version, reason=why)
            self.rereads.append({"table": label, "source": table_id(*lc.lake), "version": change.version,
                                 "change": change.kind, "reason": why})

    def create_for_schema(self, target: LakeTarget, uri: str, lc: LakeChange) -> bool:
        """Create a lake table a schema change needs: from a CREATE TABLE's columns, from a renamed table's, or
        from the window's staged columns. False when nothing says what its columns are."""
        c = lc.change
        meta = metadata_columns(self.delete_mode)
        if lc.role == ROLE_OWN and c.kind == CREATE_TABLE and not c.as_select:
            cols = [(x.name, parse_type(delta_type_of(x, target.name), f"table {target.name} column {x.name!r}"))
                    for x in c.columns]
        elif lc.role == ROLE_MOVED_IN and lc.source is not None:
            src = schema_steps.read_lake_table(self.spark, self.lake_uri(lc.source), storage=self.storage)
            if not src.exists:
                if not self.create_renamed_away(lc.source):
                    return False
                src = schema_steps.read_lake_table(self.spark, self.lake_uri(lc.source), storage=self.storage)
            low = {n.lower() for n, _ in meta} | {n.lower() for n in target.lineage_columns}
            cols = [(x.name, spark_type(x.delta_type)) for x in src.columns if x.name.lower() not in low]
        elif own_rows := [m for m in target.renamed_rows if (m.schema, m.table) == lc.lake]:
            # The table as its oldest rows had it: some of them the rename took, the rest may be another table's.
            kept = [m for m, _ in target.members if (m.schema, m.table) == lc.lake and m.files]
            cols = self.first_shape(target, [*own_rows, *kept])
        elif any(m.files for m, _ in target.members):
            cols = self.first_shape(target)
        else:
            return False
        self.create_lake_table(target, uri, cols)
        return True

    def create_lake_table(self, target: LakeTarget, uri: str, cols: Sequence[tuple[str, DataType]]) -> None:
        """Create the target's lake table with these source columns (and its lineage and metadata columns)."""
        options = self.table_options.get(target.name, TableOptions())
        lineage_cols = [(n, StringType()) for n in target.lineage_columns]
        # Created small (no deletion vectors) when the window is: later windows may then be delta-rs'.
        self.ensure_table(uri, target.name, [*lineage_cols, *cols, *metadata_columns(self.delete_mode)], options,
                          small=self.starts_small(target, uri))

    def create_renamed_away(self, source: tuple[str, str]) -> bool:
        """Create the lake table of a rename's source the lake never had, whose rows of this window land in the
        table it became: with the shape of those rows, so that the rename carries a table (its columns and schema
        record) and not nothing. (RENAME TABLE a TO tmp, b TO a, tmp TO b, b's first rows in this window: a took
        none of them.) False when the window has no such rows."""
        where = lineage(self.routes, self.source, *source)
        target = self.schema_targets.get((where.lake_schema, where.lake_table))
        if target is None:
            return False
        own = [m for m in target.renamed_rows if (m.schema, m.table) == source]
        # A file with rows on both sides of the rename (the same columns before and after it) is no renamed_rows
        # of any target: it is a member of each target its rows land in, cut to the versions before the rename in
        # the table it became.
        own += [m for t in self.schema_targets.values() for i, (m, _) in enumerate(t.members)
                if (m.schema, m.table) == source and m.files and t.bound(i)[1] is not None]
        if not own:
            return False
        # As held: the manifest's newest types of the name may be a later table's (a widening after the swap).
        self.create_lake_table(target, self.lake_uri(source), self.first_shape(target, own, as_held=True))
        return True

    def holds_converted(
        self, uri: str, target: LakeTarget, version: int, column: LakeColumn, check: ValueCheck
    ) -> bool:
        """Whether the lake table or the window's rows from before the change at `version` hold a value the
        server's conversion `check` of `column` changed (schema_steps.holds_converted)."""
        staged = self.staged_before(target, version)
        return schema_steps.holds_converted(self.spark, uri, staged, column, check)

    def staged_before(self, target: LakeTarget, version: int) -> list[str]:
        """The window's staged files of the target with changes older than `version`: rows of the table as it was
        before a schema change at `version`, which land after the schema phase."""
        out = []
        for member in [*(m for m, _ in target.members), *target.renamed_rows]:  # renamed: they land in its new name
            spans = schema_steps.file_versions(self.window_dir, member, storage=self.storage)
            out += [f"{self.window_dir.rstrip('/')}/{f.path}" for f, span in zip(member.files, spans, strict=True)
                    if span is not None and span[0] < version]
        return out

    def first_shape(
        self, target: LakeTarget, members: Sequence[StagedTable] = (), as_held: bool = False
    ) -> list[tuple[str, DataType]]:
        """The columns of the window's oldest staged change of the target (or of `members`): a lake table the window
        creates starts with the shape the source table had then, and the window's schema changes take it from
        there. `as_held`: every column with the type the oldest file holds, not the name's newest type."""
        oldest: tuple[int, StagedTable, Any] | None = None
        for member in members or [m for m, _ in target.members]:
            spans = schema_steps.file_versions(self.window_dir, member, storage=self.storage)
            for f, span in zip(member.files, spans, strict=True):
                if span is not None and (oldest is None or span[0] < oldest[0]):
                    oldest = (span[0], member, f)
        if oldest is None:
            return target.columns()[len(target.lineage_columns):]
        _, member, first = oldest
        types = {c.name: c.delta_type for c in member.columns}
        shape = [(n, parse_type(types[n], f"table {member.name} column {n!r}")) for n in first.columns]
        # The manifest has each column's newest type; a column whose type a schema change of the window made
        # incompatible (VARCHAR -> INT) holds the older type in the older file, which the change then takes on.
        held = {x.name.lower(): x.dataType for x in
                self.spark.read.parquet(f"{self.window_dir.rstrip('/')}/{first.path}").schema.fields}
        # A staged file holds each column with its type map's Delta type, so `as_held` is the type of then.
        return [(n, t if n.lower() not in held or (can_widen(held[n.lower()], t) and not as_held) else held[n.lower()])
                for n, t in shape]

    def created_columns(self, target: LakeTarget, reserved: Sequence[str], change: SchemaChange) -> Any:
        """The columns of a table created LIKE another (that table's lake columns, when the lake has it) or AS
        SELECT (the columns of the window's first rows after the statement); None when nothing tells."""
        if change.kind == CREATE_TABLE_LIKE and change.to_table:
            like_uri = self.lake_uri((change.to_schema or change.schema, change.to_table))
            like = schema_steps.read_lake_table(self.spark, like_uri, storage=self.storage)
            if like.exists:
                return list(like.source_columns(reserved))
        after: tuple[int, StagedTable, tuple[str, ...]] | None = None
        for member, _ in target.members:
            spans = schema_steps.file_versions(self.window_dir, member, storage=self.storage)
            for f, span in zip(member.files, spans, strict=True):
                if span is not None and span[0] > change.version and (after is None or span[0] < after[0]):
                    after = (span[0], member, f.columns)
        if after is None:
            return None
        _, member, names = after
        types = {c.name: c.delta_type for c in member.columns}
        return [LakeColumn(n, types[n]) for n in names]

    def lake_uri(self, table: tuple[str, str]) -> str:
        where = lineage(self.routes, self.source, *table)
        return table_uri(self.lake_root, where.lake_schema, where.lake_table)

    def moved_from(self, source: tuple[str, str], key: str, reserved: Sequence[str]) -> Any:
        """A rename's source lake table: (its source columns, its schema record), None when the lake never had it
        and the window has no rows of it."""
        table = schema_steps.read_lake_table(self.spark, self.lake_uri(source), storage=self.storage)
        if not table.exists:
            if not self.create_renamed_away(source):
                return None
            table = schema_steps.read_lake_table(self.spark, self.lake_uri(source), storage=self.storage)
        return table.source_columns(reserved), SchemaState.from_properties(table.properties, key)

    def copy_table(self, source: tuple[str, str], uri: str, label: str) -> None:
        """A rename's target takes its source's rows (one overwrite commit; repeated after a crash before its
        mark, while the source still holds them: the source is emptied only after the target's mark)."""
        src = schema_steps.read_lake_table(self.spark, self.lake_uri(source), storage=self.storage)
        schema_steps.timestamp_ntz_supported(self, uri, label, [c.delta_type for c in src.columns],
                                             schema_steps.read_lake_table(self.spark, uri, storage=self.storage))
        self.fence()
        rows = self.spark.read.format("delta").load(self.lake_uri(source))
        (
            rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
            .option("userMetadata", self.commit_metadata(label)).save(uri)
        )
        self.log("merge.table_copied", table=label, source=table_id(*source))

    def kept_lake_types(self, st: LakeTarget, uri: str, changes: DataFrame) -> DataFrame:
        """A lenient table keeps a column's lake type when the source's changed to one whose every value it holds
        exactly (INT values in a STRING column): the window's values are cast to it. Follow never gets here with
        such a column (its type follows the source)."""
        if self.schema_policy.mode_for(st.name) != MODE_LENIENT:
            return changes
        table = schema_steps.read_lake_table(self.spark, uri, storage=self.storage)
        lake = {c.name.lower(): c.delta_type for c in table.columns}
        for f in changes.schema.fields:
            have = lake.get(f.name.lower())
            if have is not None and normalise_delta_type(have) != normalise_delta_type(f.dataType.simpleString()) \
                    and exact_cast(f.dataType.simpleString(), have):
                changes = changes.withColumn(f.name, F.col(quote_spark(f.name)).cast(have))
        return changes

    def read_translated(self, st: LakeTarget, uri: str, work: list[SchemaMember]) -> DataFrame:
        """The window's changes of the target, each member's read through its schema record (after the schema
        phase) and cut to its version range."""
        spark = self.spark
        table = schema_steps.read_lake_table(spark, uri, storage=self.storage)
        parts = []
        for m in work:
            since, until = m.bounds
            df = schema_steps.read_translated(
                spark, self.window_dir, m.staged, SchemaState.from_properties(table.properties, m.state_key),
                staged_meta=STAGED_META, parse_type=parse_type, can_widen=can_widen,
                versions=schema_steps.file_versions(self.window_dir, m.staged, storage=self.storage), since=since,
                until=until,
            )
            if df is None:
                continue
            for col, value in m.lineage.columns:
                df = df.withColumn(col, F.lit(value).cast(StringType()))
            parts.append(df)
        if parts:
            return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
        schema = StructType()
        for name, t in STAGED_META:
            schema.add(name, t, True)
        meta = {n.lower() for n, _ in metadata_columns(self.delete_mode)}
        for c in table.columns:
            if c.name.lower() not in meta:
                schema.add(c.name, spark_type(c.delta_type), True)
        return spark.createDataFrame([], schema)
