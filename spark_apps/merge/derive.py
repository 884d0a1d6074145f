"""A derived table (a group pipeline's `key: primary_key` route, docs/group-pipelines.md): recomputed from its
base for the keys a window touched, as one idempotent commit.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import replace
from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from cdc_core.model.layout import base_uri
from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_DELETED,
)
from cdc_core.model.merge_semantics import (
    DELETE_SOFT,
    GONE,
    STATUS_ALREADY,
    holds_window,
)
from cdc_core.model.naming import quote_spark
from cdc_core.model.sources import COL_SOURCE, COL_SOURCE_TABLE
from spark_apps.merge.small import SmallTables
from spark_apps.merge.staged import conform
from spark_apps.merge.tables import TableOptions, derive_sql, has_no_rows, last_txn_version
from spark_apps.merge.targets import LakeTarget

log = logging.getLogger("cdc.merge")


class Derived(SmallTables):
    """A run's derived-table step."""

    def derive(self, st: LakeTarget, uri: str) -> dict[str, Any]:
        """Recompute the derived table's rows of the keys this window touched from its base, as one
        idempotent commit (pipeline, seq): per primary key the alive base row with the latest commit time
        (ties: the smaller source id, then source table), else the latest tombstone (soft deletes), else
        no row. A pure function of the base, so a replay after a crash between the two commits, or after
        other sources' windows landed meanwhile, writes the same rows as an uninterrupted run would."""
        t0 = time.monotonic()
        spark = self.spark
        landed = last_txn_version(spark, uri, self.app_id, storage=self.storage)
        if holds_window(landed, self.seq):
            self.log("merge.table", table=st.name, status=STATUS_ALREADY, landed=landed)
            return {"status": STATUS_ALREADY, "inserted": 0, "updated": 0, "deleted": 0, "delta_version": None,
                    "seconds": round(time.monotonic() - t0, 3)}
        self.fence()
        base = spark.read.format("delta").load(base_uri(self.lake_root, st.schema, st.table))
        options = self.table_options.get(st.name, TableOptions())
        target = self.ensure_table(uri, st.name, [(f.name, f.dataType) for f in base.schema.fields], options)
        have = {f.name.lower() for f in target.fields}
        added = [f for f in base.schema.fields if f.name.lower() not in have]
        if added:  # a column one source added (the union shape): the derived table has it before the MERGE
            self.fence()
            spark.sql(f"ALTER TABLE delta.{quote_spark(uri)} ADD COLUMNS ("
                      + ", ".join(f"{quote_spark(f.name)} {f.dataType.simpleString()}" for f in added) + ")")
            target = spark.read.format("delta").load(uri).schema
        key = st.key
        if not key:  # the window names the table only in DDL, and the source no longer tells its key
            status, version = self.idempotent_append(uri, st.name, spark.read.format("delta").load(uri).limit(0))
            return {"status": status, "delta_version": version, "inserted": 0, "updated": 0, "deleted": 0,
                    "seconds": round(time.monotonic() - t0, 3)}
        with_rows = [(m, w) for m, w in st.members if m.files]
        touched = (
            replace(st, members=tuple(with_rows), bounds=()).read(spark, self.window_dir, storage=self.storage)
            if with_rows else spark.read.format("delta").load(uri).limit(0)
        ).select(*[F.col(quote_spark(k)).alias(f"__cdc_k{i}") for i, k in enumerate(key)])
        if (st.schema, st.table) in self.changed_lake_tables():
            # A schema change may have deleted base rows without row events (a truncated or dropped source
            # table): every key the derived table holds is recomputed.
            held = spark.read.format("delta").load(uri).select(
                *[F.col(quote_spark(k)).alias(f"__cdc_k{i}") for i, k in enumerate(key)]
            )
            touched = touched.unionByName(held)
        touched = touched.distinct()
        same_key = functools.reduce(
            lambda a, b: a & b, [base[quote_spark(k)].eqNullSafe(touched[f"__cdc_k{i}"]) for i, k in enumerate(key)]
        )
        rows = base.join(touched, same_key, "left_semi")
        order = [F.col(COL_DELETED).asc()] if self.delete_mode == DELETE_SOFT else []  # alive rows first
        order += [F.col(COL_COMMIT_TS).desc(), F.col(COL_SOURCE).asc(), F.col(COL_SOURCE_TABLE).asc()]
        w = Window.partitionBy(*[F.col(quote_spark(k)) for k in key]).orderBy(*order)
        winners = rows.withColumn("__cdc_rn", F.row_number().over(w)).where(F.col("__cdc_rn") == 1).drop("__cdc_rn")
        winners = conform(winners, target)
        if has_no_rows(uri):  # nothing to replace or delete: append the winners (same idempotent commit)
            status, metrics, version = self.idempotent_insert(uri, st.name, winners)
        else:
            # Touched keys without any base row left (deleted on every source) are deleted here.
            gone = touched.join(
                winners, functools.reduce(
                    lambda a, b: a & b,
                    [winners[quote_spark(k)].eqNullSafe(touched[f"__cdc_k{i}"]) for i, k in enumerate(key)],
                ), "left_anti",
            ).select(*[F.col(f"__cdc_k{i}").alias(k) for i, k in enumerate(key)])
            changes = winners.withColumn(GONE, F.lit(False)).unionByName(
                conform(gone, target).withColumn(GONE, F.lit(True))
            )
            cols = [f.name for f in target.fields]
            status, metrics, version = self.idempotent_merge(
                uri, st.name, changes, lambda view: derive_sql(uri, view, key, cols)
            )
        result: dict[str, Any] = {"status": status, "delta_version": version, **metrics}
        result["seconds"] = round(time.monotonic() - t0, 3)
        self.log("merge.table", table=st.name, derived=True, **result)
        return result
