"""Landing one lake table of a window: the txn check, the schema changes' translated read or the plain one, small
tables by delta-rs, hard-delete tombstones, the MERGE (or an append into a table without rows) as the window's
one commit (docs/merge.md).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from delta.tables import DeltaTable

from cdc_core.model import faults
from cdc_core.model.layout import base_uri, table_uri, tombstone_uri
from cdc_core.model.manifest import (
    COL_ORDINAL,
    COL_TXN,
)
from cdc_core.model.merge_semantics import (
    DELETE_HARD,
    STATUS_ALREADY,
    STATUS_COMMITTED,
    STATUS_EMPTY,
    STATUS_NO_TABLE,
    holds_window,
)
from cdc_core.model.sources import COL_SOURCE_TABLE
from spark_apps.merge import schema_steps
from spark_apps.merge.outputs import Outputs
from spark_apps.merge.staged import (
    STAGED_META_NAMES,
    conform,
    drop_superseded,
    latest_per_key,
    metadata_columns,
    tombstones_may_supersede,
    with_derived_columns,
)
from spark_apps.merge.tables import TableOptions, has_no_rows, last_txn_version, merge_sql
from spark_apps.merge.targets import LakeTarget, schema_state_key

log = logging.getLogger("cdc.merge")


class MergeRun(Outputs):
    """One merge job run, every step of it."""

    def merge_table(self, st: LakeTarget) -> dict[str, Any]:
        """Land the window's changes of one lake table; a derived table's land in its base first."""
        uri = table_uri(self.lake_root, st.schema, st.table)
        # The history and change log land first (crash suite: `mid_outputs`): a table's state holding the window
        # then says everything of the table does, which is what the window's first read (and the ack) check.
        outputs = self.land_outputs(st, st.base_key if st.derived else st.key, snapshot=self.snapshot)
        if not st.derived:
            result = self.land(st, uri, st.key, st.name)
        else:
            t0 = time.monotonic()
            base = self.land(st, base_uri(self.lake_root, st.schema, st.table), st.base_key, f"base of {st.name}")
            faults.point("mid_derive")  # crash suite: the base holds the window, the derived table not yet
            result = self.derive(st, uri)
            result["base"] = {k: v for k, v in base.items() if k != "steps"}
            result["seconds"] = round(time.monotonic() - t0, 3)
        result.update(outputs)
        return result

    def land(self, st: LakeTarget, uri: str, key: tuple[str, ...], label: str) -> dict[str, Any]:
        """MERGE the window's changes of `st` into the Delta table `uri` keyed by `key` (once: the txn)."""
        t0 = time.monotonic()
        spark = self.spark
        result: dict[str, Any] = {
            "status": STATUS_ALREADY,
            "inserted": 0,
            "updated": 0,
            "deleted": 0,
            "delta_version": None,
        }
        steps: dict[str, float] = {}
        mark = [t0]

        def step(name: str) -> None:  # where a table's seconds go (report `steps`, docs/performance.md)
            now = time.monotonic()
            steps[name] = round(steps.get(name, 0.0) + now - mark[0], 3)
            mark[0] = now

        landed = None if uri in self.unlanded else last_txn_version(spark, uri, self.app_id, storage=self.storage)
        if holds_window(landed, self.seq):
            result["seconds"] = round(time.monotonic() - t0, 3)
            self.log("merge.table", table=label, status=STATUS_ALREADY, landed=landed)
            return result
        self.fence()
        step("txn_read_fence")
        options = self.table_options.get(st.name, TableOptions())
        facts = st.facts(self.window_dir, storage=self.storage)
        step("staged_facts")
        work = self.schema_work(st, uri, facts)
        sweeps = self.sweeps_due(st)
        if work is None and not sweeps and not st.columns() and not any(m.files for m, _ in st.members) \
                and not DeltaTable.isDeltaTable(spark, uri):
            # Named by a statement that changed nothing of it (a window staged before CREATE TABLE ... LIKE's
            # table stopped being listed): no columns to create it with.
            result.update(status=STATUS_NO_TABLE, writer="spark")
            return self._table_done(label, result, steps, t0)
        small = work is None and not sweeps and self.may_land_small(st, uri, facts)
        done: dict[str, Any] | None = None
        if small:
            done, missing = self.land_small(st, uri, key, label, result)
            step("small_table")
            if done is None and not missing:
                small = False  # not for delta-rs (logged): Spark merges it
            new = self.create_small(st, uri, label, options) if done is None and missing else None
            if new is not None:  # the table delta-rs just created (its version 0 as read back, if ours)
                done, _ = self.land_small(st, uri, key, label, result, created=new.table)
                step("small_table")
        if done is not None:
            return self._table_done(label, result, steps, t0)
        # A routed table's schema conflict names the source tables of this window, not only the lake table.
        routed = COL_SOURCE_TABLE in st.lineage_columns
        described = f"{label} (routed from {st.sources_label()})" if routed else label
        if work is not None:  # its rows as they look after the window's schema changes (applied before)
            if not DeltaTable.isDeltaTable(spark, uri) and not any(m.files for m, _ in st.members):
                result.update(status=STATUS_NO_TABLE, writer="spark")  # DDL on a table the lake never had
                return self._table_done(label, result, steps, t0)
            translated = self.kept_lake_types(st, uri, self.read_translated(st, uri, work))
            step("schema_changes")
            columns = [(f.name, f.dataType) for f in translated.schema.fields if f.name not in STAGED_META_NAMES]
            target = self.ensure_table(
                uri, described, [*columns, *metadata_columns(self.delete_mode)], options,
                small=self.starts_small(st, uri),  # created by the window's DDL: later windows may be delta-rs'
            )
            changes = translated
        else:
            target = self.ensure_table(
                uri, described, [*st.columns(), *metadata_columns(self.delete_mode)], options, small=small
            )
            step("ensure_table")
            if small:  # the table this run just created small: delta-rs lands its first rows
                done, _ = self.land_small(st, uri, key, label, result)
                step("small_table")
                if done is not None:
                    return self._table_done(label, result, steps, t0)
            elif self.small_table_rows > 0:
                self.deletion_vectors_once_grown(uri, label, st.rows)
                step("ensure_table")
            changes = st.read(spark, self.window_dir, storage=self.storage)
        for member, where, below in sweeps:  # a re-read's last chunk: what it did not read again is gone
            schema_steps.sweep_after_reread(
                self, uri, label, app_id=schema_state_key(self.app_id, member, where), version=below,
                delete_mode=self.delete_mode, lineage=tuple(where.columns),
            )
        # A window usually changes each key once: then there is nothing to pick (no shuffle). The transaction
        # of a change is the change log's (outputs), not the state's.
        changes = changes.drop(COL_TXN)
        changes = changes.drop(COL_ORDINAL) if facts.unique_keys else latest_per_key(changes, key)
        changes = with_derived_columns(changes, self.delete_mode, self.seq)
        source = conform(changes, target)
        step("read_staged")
        if work is not None and key and st.rows and self.may_land_small(st, uri, facts):
            # The window's schema changes are applied (Spark, above): its translated rows may land as any
            # small table's do, with delta-rs (milliseconds, not a Spark MERGE's seconds).
            done, _ = self.land_small(st, uri, key, label, result, source=source)
            step("small_table")
            if done is not None:
                return self._table_done(label, result, steps, t0)

        # The source is read from the staged window's files, which never change, so Delta need not copy
        # it before merging (it would: Delta copies any source but a Delta table). Not when it joins the
        # tombstone table, and never cached (Delta refuses a cached source it did not copy itself).
        immutable = True
        if self.delete_mode == DELETE_HARD:
            tomb = tombstone_uri(self.lake_root, st.schema, st.table)
            older = tombstones_may_supersede(tomb, facts.min_version, storage=self.storage)  # before this window's own
            if st.may_have_deletes():
                self.write_tombstones(st, tomb, source, key)
                faults.point("mid_merge_table")  # crash suite: tombstones committed, main MERGE not
            if older:
                source = drop_superseded(source, spark.read.format("delta").load(tomb), key)
                immutable = False
            step("tombstones")
        writer = "spark"
        if not key or st.rows == 0:
            # Nothing staged (a table the window names only in DDL, with or without a key): the MERGE of an
            # empty source changes no row, so the window's txn alone (a MERGE costs Spark seconds even so).
            status, version, writer = self.commit_window_only(uri, label, source.limit(0))
            metrics = {"inserted": 0, "updated": 0, "deleted": 0}
        elif has_no_rows(uri):
            # Nothing to match (a table created by this window, e.g. by a snapshot chunk): the MERGE's
            # outcome is exactly its NOT MATCHED clause, so append those rows as the same idempotent commit.
            status, metrics, version = self.idempotent_insert(uri, label, source)
        else:
            status, metrics, version = self.idempotent_merge(
                uri,
                label,
                source,
                lambda view: merge_sql(uri, view, key, self.delete_mode),
                immutable_source=immutable,
            )
        step("merge_commit")
        if status == STATUS_COMMITTED and st.rows == 0:
            status = STATUS_EMPTY
        result.update(status=status, delta_version=version, writer=writer, **metrics)
        return self._table_done(label, result, steps, t0)
