"""Small tables land without Spark (cdc_core.lake.small_writer, delta-rs): which tables, creating them, landing
them, and handing a table back to Spark (deletion vectors on) once it outgrows the limit (docs/merge.md).
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame

from cdc_core.lake import small_writer
from cdc_core.model.layout import tombstone_uri
from cdc_core.model.logfmt import one_line
from cdc_core.model.merge_semantics import (
    DELETE_HARD,
    DELETE_SOFT,
    STATUS_ALREADY,
    STATUS_COMMITTED,
)
from cdc_core.model.naming import quote_spark
from spark_apps.merge.schema import SchemaChanges
from spark_apps.merge.staged import StagedFacts, metadata_columns, tombstones_may_supersede
from spark_apps.merge.tables import (
    DEFAULT_TABLE_PROPERTIES,
    DV_PROPERTY,
    TableOptions,
    new_table_properties,
)
from spark_apps.merge.targets import LakeTarget
from spark_apps.spark_job import sql_str

log = logging.getLogger("cdc.merge")


class SmallTables(SchemaChanges):
    """A run's small-table steps."""

    def may_land_small(self, st: LakeTarget, uri: str, facts: StagedFacts) -> bool:
        """Whether delta-rs may land this table's changes (cdc_core.lake.small_writer decides the rest): a
        local lake or one on a store with conditional writes, few staged rows, and in hard-delete mode no
        tombstone newer than the window (a replay or a backfill, whose changes Spark checks against them)."""
        if self.small_table_rows <= 0 or st.rows == 0 or st.rows > self.small_table_rows:
            return False  # an empty staged table: Spark commits its txn as before
        if not self.storage.may_commit(uri):
            return False
        if self.delete_mode == DELETE_SOFT:
            return True
        return not tombstones_may_supersede(
            tombstone_uri(self.lake_root, st.schema, st.table), facts.min_version, storage=self.storage
        )

    def create_small(
        self, st: LakeTarget, uri: str, label: str, options: TableOptions
    ) -> small_writer.NewTable | None:
        """Create a new table with delta-rs (no Spark job), as create_table would with `small`: the table exists
        now (this run's, or a concurrent run's of the same pipeline); None: Spark creates it."""
        return self.created_by_delta_rs(uri, label, [*st.columns(), *metadata_columns(self.delete_mode)], options)

    def commit_window_only(self, uri: str, label: str, empty: DataFrame) -> tuple[str, int | None, str]:
        """(status, version, writer) of the window's txn alone on a table it changes no row of: delta-rs when it
        may write the table, else Spark's append of `empty` (the MERGE of an empty source would commit the same)."""
        if self.delta_rs_commits(uri):
            landed = self.delta_rs_outcome(
                label, small_writer.commit_txn_only(self.window_commit(label), uri, self.fence, storage=self.storage))
            if landed is not None:
                return landed["status"], landed["delta_version"], small_writer.WRITER_NAME
        status, version = self.idempotent_append(uri, label, empty)
        return status, version, "spark"

    def land_small(
        self, st: LakeTarget, uri: str, key: tuple[str, ...], label: str, result: dict[str, Any], *,
        source: DataFrame | None = None, created: Any | None = None,
    ) -> tuple[dict[str, Any] | None, bool]:
        """(the result, False) when delta-rs landed the table (or found it landed); (None, whether the
        table is missing) when the table is not one delta-rs may write. `source`: the MERGE source Spark
        computed (a window with schema changes: its rows translated), collected for delta-rs; None: delta-rs
        reads the staged files itself. `created`: the table as this run just created it (no second open)."""
        job = small_writer.SmallMerge(
            uri=uri,
            label=label,
            window_dir=self.window_dir,
            members=tuple(small_writer.Member(member, tuple(where.columns)) for member, where in st.members),
            key=key,
            delete_mode=self.delete_mode,
            app_id=self.app_id,
            seq=self.seq,
            user_metadata=self.commit_metadata(label),
            max_rows=self.small_table_rows,
            tombstones=self.small_tombstones(st) if self.delete_mode == DELETE_HARD else None,
            storage=self.storage,
        )
        rows = None if source is None else source.toArrow()  # few rows: may_land_small bounds them
        out = small_writer.land(job, self.fence, rows=rows, created=created)
        landed = self.delta_rs_outcome(label, out)
        if landed is None:
            return None, isinstance(out, small_writer.Ineligible) and out.missing
        result.update(landed)
        return result, False

    def window_commit(self, label: str) -> small_writer.Commit:
        """What a delta-rs commit of this window to `label`'s table records (its txn and commit metadata)."""
        return small_writer.Commit(label, self.app_id, self.seq, self.commit_metadata(label))

    def delta_rs_outcome(
        self, label: str, out: small_writer.Landed | small_writer.Ineligible
    ) -> dict[str, Any] | None:
        """The table's result when delta-rs committed the window (or found it committed before); None when Spark
        must land it (logged why, unless there is no table yet)."""
        if isinstance(out, small_writer.Ineligible):
            if not out.missing:
                self.log("merge.spark_table", table=label, reason=out.reason)
            return None
        return {"status": STATUS_COMMITTED if out.status == "committed" else STATUS_ALREADY,
                "delta_version": out.version, "inserted": out.inserted, "updated": out.updated,
                "deleted": out.deleted, "writer": small_writer.WRITER_NAME}

    def small_tombstones(self, st: LakeTarget) -> small_writer.Tombstones:
        """The table's tombstone table as delta-rs appends to it (and creates it, as Spark's write_tombstones
        would, but without deletion vectors: an append-only table)."""
        label = f"tombstones of {st.name}"
        return small_writer.Tombstones(
            uri=tombstone_uri(self.lake_root, st.schema, st.table),
            label=label,
            user_metadata=self.commit_metadata(label),
            properties=new_table_properties(
                label, set(), TableOptions(), self.default_properties, writer=self.writer_record(),
                deletion_vectors=False,
            ),
        )

    def deletion_vectors_once_grown(self, uri: str, label: str, window_rows: int) -> None:
        """Turn deletion vectors on for a table created small (without them) once it outgrows the small-table
        limit: from then on its MERGEs touch the window's rows, not whole files, and it stays with Spark."""
        wanted = {**DEFAULT_TABLE_PROPERTIES, **self.default_properties}
        if wanted.get(DV_PROPERTY) != "true":
            return
        try:
            state = small_writer.table_rows_and_properties(uri, storage=self.storage)
        except Exception as e:  # a table delta-rs cannot read: leave it as it is
            self.log("merge.table_state_unknown", table=label, reason=one_line(e))
            return
        if state is None:
            return
        rows, props = state
        if DV_PROPERTY in props or rows + window_rows <= self.small_table_rows:
            return  # set (by the product, the pipeline or the table's options), or still small
        self.fence()
        self.spark.sql(f"ALTER TABLE delta.{quote_spark(uri)} SET TBLPROPERTIES ({sql_str(DV_PROPERTY)} = 'true')")
        self.log("merge.table_properties", table=label, properties=DV_PROPERTY, rows=rows)
