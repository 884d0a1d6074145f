"""A lake table's history (SCD type 2) and change log, landed before its state, each as one idempotent commit of
the window (the rules: cdc_core.model.output_modes, docs/output-modes.md).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.lake import changelog_append, history_merge, small_writer, staged_changes
from cdc_core.model import faults
from cdc_core.model.errors import ConfigError, SchemaConflict
from cdc_core.model.history_versions import CHANGE, CLOSE, OPEN, RANK_CLOSED, RANK_LAKE, RANK_WINDOW
from cdc_core.model.layout import changelog_uri, history_uri
from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_OP,
    COL_ORDINAL,
    COL_VERSION,
    COL_WINDOW_SEQ,
    OP_DELETE,
)
from cdc_core.model.merge_semantics import SPARK, STATUS_ALREADY, holds_window, key_condition
from cdc_core.model.naming import quote_spark
from cdc_core.model.output_modes import (
    CHANGELOG_COLUMNS,
    CHANGELOG_STATS,
    COL_IS_CURRENT,
    COL_LAST_VERSION,
    COL_VALID_FROM,
    COL_VALID_FROM_VERSION,
    COL_VALID_TO,
    COL_VALID_TO_VERSION,
    HISTORY_COLUMNS,
    OP_CLEARED,
    OP_SNAPSHOT,
    PROP_OUTPUTS_KEY,
    OutputModes,
    clears_rows,
    not_followed,
    tracked_columns,
)
from spark_apps.merge.derive import Derived
from spark_apps.merge.staged import STAGED_META_NAMES, conform, spark_type
from spark_apps.merge.tables import TableOptions, commit_output_rows, has_no_rows, last_txn_version
from spark_apps.merge.targets import LakeTarget

# Scratch columns of the history recompute (the `__cdc_` prefix no source column may have).
_VER, _RANK, _ORD, _KIND, _TS, _OP, _VALVER = (
    "__cdc_ev_version", "__cdc_ev_rank", "__cdc_ev_ordinal", "__cdc_ev_kind", "__cdc_ev_ts", "__cdc_ev_op",
    "__cdc_ev_value_version",
)
_CAP_VER, _CAP_TS, _OPEN, _SEG = "__cdc_cap_version", "__cdc_cap_ts", "__cdc_is_open", "__cdc_segment"
_HASH, _EID = "__cdc_ev_tracked_hash", "__cdc_ev_id"


def _same_key(a: DataFrame, b: DataFrame, key: tuple[str, ...], alias: str) -> Column:
    return functools.reduce(
        lambda x, y: x & y, [a[quote_spark(k)].eqNullSafe(b[f"{alias}{i}"]) for i, k in enumerate(key)]
    )


def _keys(df: DataFrame, key: tuple[str, ...], alias: str, *extra: Column) -> DataFrame:
    return df.select(*[F.col(quote_spark(k)).alias(f"{alias}{i}") for i, k in enumerate(key)], *extra)


class Outputs(Derived):
    """A run's history and change-log steps."""

    def land_outputs(self, st: LakeTarget, key: tuple[str, ...], snapshot: bool) -> dict[str, Any]:
        """The table's history and change log for this window (nothing unless its options ask for them)."""
        options = self.table_options.get(st.name, TableOptions())
        modes: OutputModes = options.outputs
        if not modes.any:
            return {}
        cleared = self.cleared_at(st)
        st = st.for_outputs()  # every row written under its name (a rename's window: before it went away too)
        if not key:  # the window names the table only in DDL (a drop): the key its outputs were created with
            key = self.outputs_key(st) or (st.base_key if st.derived else st.key)
            if not key:
                return {}
        out: dict[str, Any] = {}
        changes, changes_arrow = self._window_readers(st, snapshot)
        if modes.changelog:
            # The change log also lands the updates' before images (op B), staged apart from the changes.
            log_target = st.with_before_images()
            log_changes, log_arrow = (changes, changes_arrow) if log_target is st else self._window_readers(
                log_target, snapshot)
            out["changelog"] = self.land_changelog(log_target, key, log_changes, options, cleared,
                                                    changes_arrow=log_arrow)
        if modes.history:
            out["history"] = self.land_history(st, key, changes, options, cleared, changes_arrow=changes_arrow)
        faults.point("mid_outputs")  # crash suite: the history and change log hold the window, the state not yet
        return out

    def _window_readers(self, st: LakeTarget, snapshot: bool) -> tuple[Callable[[], DataFrame],
                                                                      Callable[[], pa.Table | None]]:
        """The window's changes of `st` read once when first asked for: by Spark, and without a Spark job for the
        delta-rs writers (None: Spark's read serves)."""
        read_by_spark: list[DataFrame] = []
        read_by_arrow: list[pa.Table | None] = []

        def window_changes() -> DataFrame:
            if not read_by_spark:
                read = st.read(self.spark, self.window_dir, storage=self.storage, bounded=True)
                if snapshot:  # a snapshot's rows are what it read, not changes
                    read = read.withColumn(COL_OP, F.when(F.col(COL_OP) == OP_DELETE, F.col(COL_OP))
                                           .otherwise(F.lit(OP_SNAPSHOT)))
                read_by_spark.append(read)
            return read_by_spark[0]

        def window_arrow() -> pa.Table | None:
            if not read_by_arrow:
                read_by_arrow.append(self.changes_by_arrow(st, snapshot))
            return read_by_arrow[0]

        return window_changes, window_arrow

    def changes_by_arrow(self, st: LakeTarget, snapshot: bool) -> pa.Table | None:
        """The window's changes of `st` read from the staged files with Arrow, when the small-table writers will
        take them (few rows, no schema change of the table in the window: Spark translates those); else None."""
        if st.rows > self.small_table_rows or self.window.for_lake((st.schema, st.table)):
            return None
        members = [staged_changes.Member(member, tuple(where.columns), *st.bound(i))
                   for i, (member, where) in enumerate(st.members)]
        rows = staged_changes.read(self.window_dir, members, self.storage)
        if isinstance(rows, str):
            self.log("merge.spark_read", table=st.name, reason=rows)
            return None
        if snapshot:  # a snapshot's rows are what it read, not changes
            op = rows.column_names.index(COL_OP)
            rows = rows.set_column(op, COL_OP, pc.if_else(pc.equal(rows[COL_OP], OP_DELETE), rows[COL_OP],
                                                          pa.scalar(OP_SNAPSHOT)))
        return rows

    def check_outputs_follow(self, targets: Sequence[LakeTarget]) -> None:
        """Before anything of the window is written: every schema change of a table keeping a history or change
        log is one they follow (cdc_core.model.output_modes.followed_change), else a SchemaConflict saying what
        to do."""
        for st in targets:
            if not self.table_options.get(st.name, TableOptions()).outputs.any:
                continue
            for lc in self.window.for_lake((st.schema, st.table)):
                why = not_followed(lc.change.kind, lc.role, replace=lc.change.replace)
                if why is not None:
                    raise SchemaConflict(
                        f"{self.label()}: table {st.name} keeps a history or change log (table_options outputs), "
                        f"which cannot follow `{lc.change.query or lc.change.describe()}`: {why}. Nothing of the "
                        "window landed. To go on: take history and changelog out of the table's outputs (their "
                        "tables stay as they are, the state follows the change), run, then put them back to start "
                        "new ones (move the old ones away first)"
                    )

    def cleared_at(self, st: LakeTarget) -> list[tuple[int, dt.datetime]]:
        """The (version, commit time) of each schema change that removes every row of the table (a TRUNCATE, a
        DROP TABLE, a CREATE OR REPLACE, a rename away)."""
        out = []
        for lc in self.window.for_lake((st.schema, st.table)):
            if clears_rows(lc.change.kind, lc.role, replace=lc.change.replace):
                out.append((lc.change.version, dt.datetime.fromtimestamp(lc.change.commit_ts, dt.UTC)))
        return out

    def outputs_key(self, st: LakeTarget) -> tuple[str, ...]:
        root = self.lake_root
        for uri in (history_uri(root, st.schema, st.table), changelog_uri(root, st.schema, st.table)):
            if DeltaTable.isDeltaTable(self.spark, uri):
                props = DeltaTable.forPath(self.spark, uri).detail().collect()[0]["properties"] or {}
                if PROP_OUTPUTS_KEY in props:
                    return tuple(json.loads(props[PROP_OUTPUTS_KEY]))
        return ()

    def _companion_target(self, uri: str, label: str, window: StructType, meta: tuple[tuple[str, str], ...],
                          options: TableOptions, *, key: tuple[str, ...], small: bool = False,
                          properties: tuple[tuple[str, str], ...] = ()) -> StructType:
        """Create the table (recording its key), or add the window's new columns to it; returns its schema. A
        column the source dropped or renamed stays: the versions that had it keep their values. `small`: a new
        table starts without deletion vectors (an append-only change log needs none), so delta-rs may write it.
        `window`: the window's rows' schema."""
        meta_names = {n for n, _ in meta}
        columns = [(f.name, f.dataType) for f in window.fields if f.name not in meta_names]
        columns += [(n, spark_type(t)) for n, t in meta]
        own = TableOptions(options.partition_by, options.change_data_feed,
                           (*properties, *options.properties, (PROP_OUTPUTS_KEY, json.dumps(list(key)))))
        target = self.ensure_table(uri, label, columns, own, small=small)
        have = {f.name.lower() for f in target.fields}
        added = [(n, t) for n, t in columns if n.lower() not in have]
        if added:
            self.fence()
            self.spark.sql(f"ALTER TABLE delta.{quote_spark(uri)} ADD COLUMNS ("
                           + ", ".join(f"{quote_spark(n)} {t.simpleString()}" for n, t in added) + ")")
            target = self.lake_schema(uri)
        return target

    # ------------------------------------------------------------------------------------------ change log

    def land_changelog(self, st: LakeTarget, key: tuple[str, ...], changes: Callable[[], DataFrame],
                       options: TableOptions, cleared: Sequence[tuple[int, dt.datetime]] = (), *,
                       changes_arrow: Callable[[], pa.Table | None] = lambda: None) -> dict[str, Any]:
        t0 = time.monotonic()
        uri = changelog_uri(self.lake_root, st.schema, st.table)
        label = f"changelog of {st.name}"
        landed = last_txn_version(self.spark, uri, self.app_id, storage=self.storage)
        if holds_window(landed, self.seq):
            return {"status": STATUS_ALREADY, "inserted": 0}
        self.fence()
        delta_rs = self.delta_rs_commits(uri)  # an append-only log never needs deletion vectors: created without
        few = delta_rs and st.rows <= self.small_table_rows  # few rows: they may go through the driver to delta-rs
        arrow = changes_arrow() if few else None  # None when the window changes the table's schema: no `cleared`
        appended = None
        if arrow is not None:
            with_seq = StructType([*st.staged_schema().fields, StructField(COL_WINDOW_SEQ, LongType())])
            self._companion_target(uri, label, with_seq, CHANGELOG_COLUMNS, options, key=key, small=True,
                                   properties=(CHANGELOG_STATS,))
            appended = self.delta_rs_outcome(label, changelog_append.append(
                self.window_commit(label), uri,
                arrow.append_column(COL_WINDOW_SEQ, pa.array([self.seq] * arrow.num_rows, pa.int64())),
                self.fence, storage=self.storage))
        metrics: dict[str, int]
        if appended is not None:
            status, version = appended["status"], appended["delta_version"]
            metrics = {"inserted": appended["inserted"]}
        else:
            status, version, metrics, appended = self._changelog_by_spark(
                uri, label, key, changes(), options=options, cleared=cleared, delta_rs=delta_rs,
                few=few and arrow is None)  # delta-rs refused the window already: no second try
        result = {"status": status, "delta_version": version, **metrics, "seconds": round(time.monotonic() - t0, 3)}
        if appended is not None:
            result["writer"] = small_writer.WRITER_NAME
        self.log("merge.changelog", table=st.name, **result)
        return result

    def _changelog_by_spark(
        self, uri: str, label: str, key: tuple[str, ...], window: DataFrame, *, options: TableOptions,
        cleared: Sequence[tuple[int, dt.datetime]], delta_rs: bool, few: bool,
    ) -> tuple[str, int | None, dict[str, int], dict[str, Any] | None]:
        """(status, version, metrics, the delta-rs outcome or None) of the change log's rows as Spark reads them
        (a window that changes the table's schema: its rows translated), appended by delta-rs when few, else
        MERGEd by Spark."""
        rows = window
        for at, ts in cleared:  # one row per DDL that removed every row: op T, no key, no values
            marker = {COL_OP: F.lit(OP_CLEARED), COL_VERSION: F.lit(at), COL_ORDINAL: F.lit(0),
                      COL_COMMIT_TS: F.lit(ts)}
            rows = rows.unionByName(self.spark.range(1).select(
                *[(marker[f.name] if f.name in marker else F.lit(None)).cast(f.dataType).alias(f.name)
                  for f in rows.schema.fields]))
        rows = rows.withColumn(COL_WINDOW_SEQ, F.lit(self.seq).cast(LongType()))
        rows = conform(rows, self._companion_target(uri, label, rows.schema, CHANGELOG_COLUMNS, options, key=key,
                                                    small=delta_rs, properties=(CHANGELOG_STATS,)))
        if few:
            appended = self.delta_rs_outcome(label, changelog_append.append(
                self.window_commit(label), uri, rows.toArrow(), self.fence, storage=self.storage))
            if appended is not None:
                return appended["status"], appended["delta_version"], {"inserted": appended["inserted"]}, appended
        if has_no_rows(uri):
            status, version = self.idempotent_append(uri, label, rows)
            return status, version, {"inserted": int(commit_output_rows(uri, version) or 0) if version is not None
                                     else 0}, None
        span = rows.agg(F.min(COL_VERSION), F.max(COL_VERSION)).collect()[0]
        if span[0] is None:  # nothing staged: the window's txn alone
            status, version = self.idempotent_append(uri, label, rows.limit(0))
            return status, version, {"inserted": 0}, None
        status, metrics, version = self.idempotent_merge(
            uri, label, rows, lambda view: changelog_merge_sql(uri, view, key, int(span[0]), int(span[1])),
            immutable_source=True,
        )
        return status, version, metrics, None

    # --------------------------------------------------------------------------------------------- history

    def land_history(self, st: LakeTarget, key: tuple[str, ...], changes: Callable[[], DataFrame],
                     options: TableOptions, cleared: Sequence[tuple[int, dt.datetime]] = (), *,
                     changes_arrow: Callable[[], pa.Table | None] = lambda: None) -> dict[str, Any]:
        t0 = time.monotonic()
        spark = self.spark
        uri = history_uri(self.lake_root, st.schema, st.table)
        label = f"history of {st.name}"
        landed = last_txn_version(spark, uri, self.app_id, storage=self.storage)
        if holds_window(landed, self.seq):
            return {"status": STATUS_ALREADY, "inserted": 0, "updated": 0}
        self.fence()
        delta_rs = self.delta_rs_commits(uri)  # a new history starts without deletion vectors: delta-rs may land it
        few = delta_rs and st.rows <= self.small_table_rows
        arrow = changes_arrow() if few else None  # the window's changes without a Spark job (small tables)
        window = changes() if arrow is None else None
        # The target's schema first (the window's new columns added), so the lake's rows and the window's union
        # by type; the values are every column the history has (a dropped column's older values stay).
        schema = st.staged_schema() if window is None else window.schema
        probe = StructType([f for f in schema.fields if f.name not in STAGED_META_NAMES])
        target = self._companion_target(uri, label, probe, HISTORY_COLUMNS, options, key=key, small=delta_rs)
        meta = {n for n, _ in HISTORY_COLUMNS}
        values = [f.name for f in target.fields if f.name not in meta]
        try:
            tracked = tracked_columns(options.outputs.track, values, key)
        except ValueError as e:
            raise ConfigError(f"table_options[{st.name!r}]: {e}") from None

        def changes_now() -> DataFrame:
            read = window if window is not None else changes()
            return conform(read, target).select(*[F.col(quote_spark(c)) for c in values],
                                                COL_OP, COL_VERSION, COL_ORDINAL, COL_COMMIT_TS)

        if delta_rs:
            if few:
                shape = history_merge.HistoryWindow(tuple(key), tuple(values), tuple(tracked), tuple(cleared))
                given = history_changes(arrow, target, values)
                small = self.delta_rs_outcome(label, history_merge.land(
                    self.window_commit(label), uri, changes_now().toArrow() if given is None else given, shape,
                    self.fence, max_rows=self.small_table_rows, storage=self.storage))
                if small is not None:
                    small.pop("deleted")  # a history closes versions, it deletes none
                    small["seconds"] = round(time.monotonic() - t0, 3)
                    self.log("merge.history", table=st.name, **small)
                    return small
            self.deletion_vectors_once_grown(uri, label, st.rows)  # past the limit: Spark's MERGE from now on
        empty = has_no_rows(uri)
        metrics: dict[str, int]
        rows = history_rows(
            changes_now(), None if empty else spark.read.format("delta").load(uri), key, values, tracked, self.seq,
            cleared,
        )
        rows = conform(rows, target)
        if empty:
            status, version = self.idempotent_append(uri, label, rows)
            metrics = {"inserted": int(commit_output_rows(uri, version) or 0) if version is not None else 0}
        else:
            status, metrics, version = self.idempotent_merge(
                uri, label, rows, lambda view: history_merge_sql(uri, view, key))
        result = {"status": status, "delta_version": version, **metrics, "seconds": round(time.monotonic() - t0, 3)}
        self.log("merge.history", table=st.name, **result)
        return result


def history_changes(changes: pa.Table | None, target: StructType, values: Sequence[str]) -> pa.Table | None:
    """The window's changes read by Arrow as the history recompute takes them (as `conform` gives Spark's): the
    history's value columns in its types (NULL for one the window lacks), then the change metadata; None: a
    type the Arrow read does not map (Spark's read serves)."""
    if changes is None:
        return None
    types = {f.name: small_writer.arrow_type(f.dataType.simpleString()) for f in target.fields}
    have = {c.lower(): c for c in changes.column_names}
    out: dict[str, Any] = {}
    for name in values:
        t = types.get(name)
        if t is None:
            return None
        given = have.get(name.lower())
        out[name] = pa.nulls(changes.num_rows, t) if given is None else changes[given].cast(t)
    for name in (COL_OP, COL_VERSION, COL_ORDINAL, COL_COMMIT_TS):
        out[name] = changes[name]
    return pa.table(out)


def changelog_merge_sql(uri: str, view: str, key: tuple[str, ...], low: int, high: int) -> str:
    """Insert each change the change log does not hold yet, by (key, change version, op): the version range
    prunes the files to read (the log is appended in version order)."""
    v, op = quote_spark(COL_VERSION), quote_spark(COL_OP)
    return (
        f"MERGE WITH SCHEMA EVOLUTION INTO delta.{quote_spark(uri)} AS t USING {view} AS s "
        f"ON {key_condition(key, SPARK)} AND t.{v} = s.{v} AND t.{op} = s.{op} AND t.{v} BETWEEN {low} AND {high} "
        "WHEN NOT MATCHED THEN INSERT *"
    )


def history_merge_sql(uri: str, view: str, key: tuple[str, ...]) -> str:
    """The touched keys' versions as recomputed: new ones inserted, changed ones (closed, or holding newer
    untracked values) updated, the rest untouched."""
    q = quote_spark
    same = " AND ".join(f"t.{q(c)} <=> s.{q(c)}" for c in (COL_VALID_TO_VERSION, COL_LAST_VERSION))
    return (
        f"MERGE WITH SCHEMA EVOLUTION INTO delta.{q(uri)} AS t USING {view} AS s "
        f"ON {key_condition(key, SPARK)} AND t.{q(COL_VALID_FROM_VERSION)} = s.{q(COL_VALID_FROM_VERSION)} "
        f"WHEN MATCHED AND NOT ({same}) THEN UPDATE SET * "
        "WHEN NOT MATCHED THEN INSERT *"
    )


def history_rows(  # noqa: PLR0917
    window: DataFrame, lake: DataFrame | None, key: tuple[str, ...], values: list[str], tracked: list[str], seq: int,
    cleared: Sequence[tuple[int, dt.datetime]] = (),
) -> DataFrame:
    """The history rows of the keys `window` touches, recomputed from the lake's rows of those keys and the
    window's changes (cdc_core.model.output_modes): a pure function of the two, so a replay, or a backfill
    re-delivering changes the lake holds, gives the same rows.

    Events per key, in (version, rank, ordinal) order: the lake's versions (`open`), the deletes the lake's
    closed versions imply (`close`, at their valid_to, unless another version opens there), the window's
    changes (`change`, or `close` for a delete) less those the lake already holds. An open or change event
    opens a version unless the previous event is a change or version with the same tracked values (then it
    folds into that version); a close ends the current version. `cleared`: the (version, commit time) of DDL that
    removed every row: a close of every key the lake holds a current version of, or the window changed, there.

    The versions are worked out on narrow rows (a hash of the tracked values stands in for them; equal hashes are
    checked value by value), and each version's values joined back once: a wide table's values go through no sort
    or window (bench/RESULTS.md "History and change log", by table width)."""
    q = quote_spark
    cols = [q(c) for c in values]
    none_ts = F.lit(None).cast("timestamp")
    none_long = F.lit(None).cast(LongType())
    zero = F.lit(0).cast(LongType())
    new = window.select(
        *cols,
        F.col(COL_VERSION).alias(_VER), F.lit(RANK_WINDOW).alias(_RANK), F.col(COL_ORDINAL).alias(_ORD),
        F.when(F.col(COL_OP) == OP_DELETE, F.lit(CLOSE)).otherwise(F.lit(CHANGE)).alias(_KIND),
        F.col(COL_COMMIT_TS).alias(_TS), F.col(COL_OP).alias(_OP), F.col(COL_VERSION).alias(_VALVER),
        none_long.alias(_CAP_VER), none_ts.alias(_CAP_TS),
    )
    if cleared:
        keys = window.select(*[F.col(q(k)) for k in key])
        if lake is not None:
            keys = keys.unionByName(lake.where(F.col(COL_IS_CURRENT)).select(*[F.col(q(k)) for k in key]))
        marks = window.sparkSession.createDataFrame([(v, ts) for v, ts in cleared], f"{_VER} bigint, {_TS} timestamp")
        drops = keys.distinct().crossJoin(marks).select(
            *[F.col(q(k)) for k in key], F.col(_VER), F.lit(RANK_WINDOW).alias(_RANK), zero.alias(_ORD),
            F.lit(CLOSE).alias(_KIND), F.col(_TS), F.lit(OP_CLEARED).alias(_OP), none_long.alias(_VALVER),
            none_long.alias(_CAP_VER), none_ts.alias(_CAP_TS),
        )
        new = new.unionByName(drops, allowMissingColumns=True)
    events = new
    if lake is not None:
        touched = _keys(new, key, "__cdc_k").distinct()
        held = lake.join(touched, _same_key(lake, touched, key, "__cdc_k"), "left_semi")
        # Versions that ended before the window's first change cannot change, nor decide what its changes do (the
        # one before a change either holds it or ended in a delete, and a missing predecessor means the same).
        low = new.agg(F.min(F.col(_VER))).collect()[0][0]
        if low is not None:
            held = held.where(F.col(COL_VALID_TO_VERSION).isNull() | (F.col(COL_VALID_TO_VERSION) >= int(low)))
        # Read once: the events below use these rows three times (a local checkpoint, not a cache: the MERGE's
        # source must not hold a cached plan of its own target).
        held = held.select(*cols, COL_OP, COL_VALID_FROM, COL_VALID_FROM_VERSION, COL_VALID_TO, COL_VALID_TO_VERSION,
                           COL_LAST_VERSION).localCheckpoint(eager=True)
        opens = held.select(
            *cols,
            F.col(COL_VALID_FROM_VERSION).alias(_VER), F.lit(RANK_LAKE).alias(_RANK), zero.alias(_ORD),
            F.lit(OPEN).alias(_KIND), F.col(COL_VALID_FROM).alias(_TS), F.col(COL_OP).alias(_OP),
            F.col(COL_LAST_VERSION).alias(_VALVER),
            F.col(COL_VALID_TO_VERSION).alias(_CAP_VER), F.col(COL_VALID_TO).alias(_CAP_TS),
        )
        # A closed version whose valid_to no other version opens at was closed by a delete the lake keeps no row of.
        starts = _keys(held, key, "__cdc_s", F.col(COL_VALID_FROM_VERSION).alias("__cdc_sv"))
        capped = held.where(F.col(COL_VALID_TO_VERSION).isNotNull())
        next_open = capped.join(
            starts,
            _same_key(capped, starts, key, "__cdc_s") & (capped[COL_VALID_TO_VERSION] == starts["__cdc_sv"])
            & (capped[COL_VALID_FROM_VERSION] != starts["__cdc_sv"]),
            "left_anti",
        )
        closes = next_open.select(
            *[F.col(q(k)) for k in key],
            F.col(COL_VALID_TO_VERSION).alias(_VER), F.lit(RANK_CLOSED).alias(_RANK), zero.alias(_ORD),
            F.lit(CLOSE).alias(_KIND), F.col(COL_VALID_TO).alias(_TS), F.lit(OP_DELETE).alias(_OP),
            none_long.alias(_VALVER), none_long.alias(_CAP_VER), none_ts.alias(_CAP_TS),
        )
        events = opens.unionByName(closes, allowMissingColumns=True).unionByName(new)

    # The steps below decide versions on narrow rows (key, order, kind, a hash of the tracked values, an event id);
    # the wide values are read once more, at the end, for the one event each version takes its values from.
    # Materialized once with their ids, so that every step sees the same events under the same ids.
    events = events.select(
        "*", _tracked_hash(tracked).alias(_HASH), F.monotonically_increasing_id().alias(_EID),
    ).localCheckpoint(eager=True)
    by_key = [F.col(q(k)) for k in key]
    narrow = events.select(*by_key, _VER, _RANK, _ORD, _KIND, _TS, _OP, _VALVER, _CAP_VER, _CAP_TS, _HASH, _EID)
    order = Window.partitionBy(*by_key).orderBy(F.col(_VER), F.col(_RANK), F.col(_ORD))
    if lake is not None:
        # The window's changes the lake holds already: those at a version where the lake has a version opening or a
        # delete (a replay, a backfill delivering them again). The lake's events sort first at their version.
        from_lake = F.col(_RANK) < RANK_WINDOW
        lake_version = F.last(F.when(from_lake, F.col(_VER)), ignorenulls=True).over(
            order.rowsBetween(Window.unboundedPreceding, 0))
        narrow = narrow.withColumn("__cdc_lake_ver", lake_version)
        narrow = narrow.where(from_lake | ~F.col("__cdc_lake_ver").eqNullSafe(F.col(_VER))).drop("__cdc_lake_ver")
    prev_kind = F.lag(F.col(_KIND)).over(order)
    narrow = narrow.select(
        "*", prev_kind.alias("__cdc_prev_kind"), F.lag(F.col(_EID)).over(order).alias("__cdc_prev_eid"),
        (F.col(_HASH) == F.lag(F.col(_HASH)).over(order)).alias("__cdc_same_hash"),
    )
    # A change folds into the version before it when its tracked values equal that version's newest ones: equal
    # hashes say maybe, and those pairs (few: a change that leaves every tracked column as it was) are compared
    # value by value; different hashes say no.
    prev = F.col("__cdc_prev_kind")
    may_fold = (F.col(_KIND) == CHANGE) & prev.isNotNull() & (prev != CLOSE)
    pairs = narrow.where(may_fold & F.col("__cdc_same_hash")).select(_EID, "__cdc_prev_eid")
    differ = _differ_exactly(pairs, events, tracked)
    narrow = narrow.join(F.broadcast(differ), _EID, "left")
    is_open = (F.col(_KIND) == OPEN) | (
        (F.col(_KIND) == CHANGE) & (~may_fold | ~F.col("__cdc_same_hash") | F.col("__cdc_differs").isNotNull())
    )
    narrow = narrow.withColumn(_OPEN, is_open)
    boundary = F.col(_OPEN) | (F.col(_KIND) == CLOSE)
    after = order.rowsBetween(1, Window.unboundedFollowing)
    narrow = (
        narrow
        .withColumn("__cdc_next_ver", F.first(F.when(boundary, F.col(_VER)), ignorenulls=True).over(after))
        .withColumn("__cdc_next_ts", F.first(F.when(boundary, F.col(_TS)), ignorenulls=True).over(after))
        .withColumn(_SEG, F.sum(F.col(_OPEN).cast("int")).over(order.rowsBetween(Window.unboundedPreceding, 0)))
        .where(F.col(_KIND) != CLOSE)
    )
    # One row per version (segment): its opening event's facts, and the newest event's values (changes folded into
    # it update its untracked columns), joined back by that event's id.
    key_names = {k.lower() for k in key}
    head = F.struct(F.col(_VER).alias("ver"), F.col(_TS).alias("ts"), F.col(_OP).alias("op"),
                    F.col(_CAP_VER).alias("cap_ver"), F.col(_CAP_TS).alias("cap_ts"),
                    F.col("__cdc_next_ver").alias("next_ver"), F.col("__cdc_next_ts").alias("next_ts"))
    versions = narrow.groupBy(*by_key, F.col(_SEG)).agg(
        F.min_by(head, F.struct(F.col(_VER), F.col(_RANK), F.col(_ORD))).alias("__cdc_head"),
        F.max(F.col(_VALVER)).alias(COL_LAST_VERSION),
        F.max_by(F.col(_EID), F.struct(F.col(_VALVER), F.col(_EID))).alias("__cdc_values_of"),
    )
    value_cols = [c for c in values if c.lower() not in key_names]
    versions = versions.join(
        events.select(F.col(_EID).alias("__cdc_values_of"), *[F.col(q(c)) for c in value_cols]), "__cdc_values_of")
    # A version the lake closed keeps its end unless something earlier ends it now (a backfill filling a gap).
    h = "__cdc_head"
    next_ver, next_ts, cap_ver = F.col(f"{h}.next_ver"), F.col(f"{h}.next_ts"), F.col(f"{h}.cap_ver")
    keep_cap = cap_ver.isNotNull() & (next_ver.isNull() | (cap_ver <= next_ver))
    to_version = F.when(keep_cap, cap_ver).otherwise(next_ver)
    to_ts = F.when(keep_cap, F.col(f"{h}.cap_ts")).otherwise(next_ts)
    return versions.select(
        *cols,
        F.col(f"{h}.op").cast(StringType()).alias(COL_OP),
        F.col(f"{h}.ts").alias(COL_VALID_FROM), F.col(f"{h}.ver").alias(COL_VALID_FROM_VERSION),
        to_ts.alias(COL_VALID_TO), to_version.alias(COL_VALID_TO_VERSION), to_version.isNull().alias(COL_IS_CURRENT),
        F.col(COL_LAST_VERSION), F.lit(seq).cast(LongType()).alias(COL_WINDOW_SEQ),
    )


def _tracked_hash(tracked: list[str]) -> Column:
    """A hash of the tracked values, equal whenever the values are equal as `<=>` compares them (Spark hashes -0.0
    as 0.0, and NaNs alike); equal hashes of different values are caught by `_differ_exactly`."""
    if not tracked:
        return F.lit(0).cast(LongType())
    return F.xxhash64(*[F.col(quote_spark(c)) for c in tracked])


def _differ_exactly(pairs: DataFrame, events: DataFrame, tracked: list[str]) -> DataFrame:
    """The ids of the events in `pairs` (event id, previous event's id) whose tracked values differ from the previous
    event's although their hashes are equal: `__cdc_differs` set for each."""
    # Each side's values as one struct, compared field by field (nulls equal, as `<=>`). Not one aliased column per
    # value: the optimizer's constraint inference over a join of many aliases runs for minutes.
    values = F.struct(*[F.col(quote_spark(c)) for c in tracked])
    mine = events.select(F.col(_EID), values.alias("__cdc_mine"))
    theirs = events.select(F.col(_EID).alias("__cdc_prev_eid"), values.alias("__cdc_theirs"))
    same = F.col("__cdc_mine") == F.col("__cdc_theirs")
    return (pairs.join(mine, _EID).join(theirs, "__cdc_prev_eid").where(~same)
            .select(F.col(_EID), F.lit(True).alias("__cdc_differs")))
