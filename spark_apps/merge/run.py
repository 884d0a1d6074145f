"""One merge job run: its identity (pipeline, window, fencing token), the lake tables it creates and evolves,
and its idempotent commits (Delta txn app id/version, docs/merge.md). The window's steps build on it: schema
changes (schema.py), small tables (small.py), derived tables (derive.py), landing a table (land.py).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    LongType,
    StructField,
    StructType,
    TimestampNTZType,
)

from cdc_core.lake import delta_state, small_writer
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.lake.small_writer import needs_column_mapping
from cdc_core.model.errors import (
    LakeError,
    SchemaConflict,
)
from cdc_core.model.lake_writers import WRITER_PROPERTY, foreign_writer_message, writer_pipeline, writer_value
from cdc_core.model.logfmt import kv, one_line
from cdc_core.model.manifest import (
    COL_VERSION,
)
from cdc_core.model.merge_semantics import (
    SPARK,
    STATUS_ALREADY,
    STATUS_COMMITTED,
    holds_window,
    insert_condition,
    tombstone_rows,
)
from cdc_core.model.naming import quote_spark
from cdc_core.model.schema_evolution import S_REWRITE, Structure
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.schema_window import (
    WindowChanges,
)
from cdc_core.model.snapshot_state import ChunkSpec
from cdc_core.model.sources import Route, unit_name
from spark_apps.merge import schema_steps
from spark_apps.merge.staged import can_widen, conform
from spark_apps.merge.tables import (
    CREATE_RACE_SECONDS,
    TableOptions,
    commit_output_rows,
    create_table_sql,
    last_txn_version,
    new_table_properties,
    table_writer_and_txn,
)
from spark_apps.merge.targets import LakeTarget
from spark_apps.spark_job import (
    MATERIALIZE_SOURCE_CONF,
    TXN_APP_ID_CONF,
    TXN_VERSION_CONF,
    USER_METADATA_CONF,
    is_commit_conflict,
    is_table_not_found,
    sql_str,
)

log = logging.getLogger("cdc.merge")


@dataclass
class RunBase:
    """The run's identity and its commits; every step of a window is a method of a class built on it."""

    spark: SparkSession
    window_dir: str
    lake_root: str
    pipeline: str
    seq: int
    token: int
    delete_mode: str
    table_options: dict[str, TableOptions]
    fence: Callable[[], None]
    run_id: str
    # Properties every table this job creates starts with (the pipeline's managed retention
    # properties, cdc_core.model.retention); a table's own `properties` option is applied on top.
    default_properties: dict[str, str] = field(default_factory=dict)
    # Existing tables without a writer record (created before the one-writer rule): this run records
    # itself as their writer in the same ALTER that evolves a schema (cdc_core.model.lake_writers).
    unclaimed: frozenset[str] = frozenset()
    unlanded: frozenset[str] = frozenset()  # tables the job's first read found without the window
    source: str | None = None  # a group pipeline's source whose window this is
    group_sources: tuple[str, ...] = ()  # all its sources, and its routes: recorded in `cdc.writer`
    routes: tuple[Route, ...] = ()
    # Tables holding at most this many rows once the window lands are merged by delta-rs, without a
    # Spark job (cdc_core.lake.small_writer); 0: every table through Spark.
    small_table_rows: int = 0
    # The window's schema changes resolved onto lake tables (cdc_core.model.schema_window), and how each lake
    # table follows them.
    window: WindowChanges = field(default_factory=WindowChanges)
    schema_policy: SchemaPolicy = field(default_factory=SchemaPolicy)
    zero_dates: str = "refuse"
    # Each lake table's properties as read with its txn version before merging (uri -> properties).
    table_props: dict[str, dict[str, str]] = field(default_factory=dict)
    # Schema changes whose rows must be re-read from the source (reported; docs/schema-changes.md).
    rereads: list[dict[str, Any]] = field(default_factory=list)
    # The window's lake targets by (schema, table) while its schema changes apply (SchemaChanges.schema_phase).
    schema_targets: dict[tuple[str, str], LakeTarget] = field(default_factory=dict)
    # A snapshot window's chunks by source table: a re-read's last chunk sweeps what it did not read again.
    chunks: dict[str, ChunkSpec] = field(default_factory=dict)
    snapshot: bool = False  # a snapshot window (its rows are what it read: history and change log op `S`)
    # The driver's way to the staging and the lake (fsspec, delta-rs): the job's object-store credentials,
    # passed down to every read (spark_apps.spark_job.job_storage); Spark itself uses its session's s3a confs.
    storage: Storage = AMBIENT

    def writer_record(self) -> str:
        return writer_value(self.pipeline, self.group_sources, [r.to_dict() for r in self.routes])

    @property
    def app_id(self) -> str:
        """The idempotent-write identity (txnAppId): the pipeline, or `<pipeline>.<source>` per source."""
        return unit_name(self.pipeline, self.source)

    def label(self) -> str:
        return f"pipeline {self.app_id!r} window {self.seq}"

    def commit_metadata(self, label: str) -> str:
        """The commit's userMetadata: which run of which window wrote it (both writers record it)."""
        return json.dumps(
            {"pipeline": self.app_id, "seq": self.seq, "token": self.token, "run": self.run_id, "table": label},
            sort_keys=True,
        )

    def log(self, event: str, **fields: Any) -> None:
        log.info("%s", kv(event=event, pipeline=self.app_id, seq=self.seq, token=f"{self.token:#x}", **fields))

    def table_exists(self, uri: str) -> bool:
        """Whether a Delta table is at `uri`: a listing of its log on a local lake (no Spark call: a few ms where
        Spark's DeltaLog check costs ~20 ms of driver work per table), Spark's check on an object store."""
        if delta_state.local_dir(uri) is not None:
            return delta_state.table_exists(uri)
        return bool(DeltaTable.isDeltaTable(self.spark, uri))

    def ensure_table(
        self,
        uri: str,
        label: str,
        columns: Sequence[tuple[str, DataType]],
        options: TableOptions | None = None,
        *,
        small: bool = False,
    ) -> StructType:
        """Create the Delta table, or align its schema with `columns`; returns the schema to merge into.
        `small`: a new table starts without deletion vectors, so delta-rs can merge it while it stays small."""
        spark = self.spark
        if not self.table_exists(uri):
            self.create_table(uri, label, columns, options or TableOptions(), small=small)
        target = self.lake_schema(uri)
        by_name = {f.name.lower(): f for f in target.fields}
        new_cols = [(n, t) for n, t in columns if n.lower() not in by_name]
        widen: list[tuple[str, DataType, DataType]] = []
        for name, want in columns:
            have_field = by_name.get(name.lower())
            if have_field is None or have_field.dataType == want or can_widen(want, have_field.dataType):
                continue  # absent (schema evolution adds it), equal, or the source is narrower (cast up)
            if can_widen(have_field.dataType, want):
                widen.append((have_field.name, have_field.dataType, want))
                continue
            raise SchemaConflict(
                f"{self.label()}: table {label} column {name!r} is {have_field.dataType.simpleString()} in Delta "
                f"({uri}) but {want.simpleString()} in the source, which is not a widening Delta can apply. "
                "Rebuild the Delta table (drop it, then backfill or re-snapshot) or map the column to a compatible type"
            )
        claim = uri in self.unclaimed
        if not new_cols and not widen and not claim:
            return target

        detail = DeltaTable.forPath(spark, uri).detail().collect()[0].asDict()
        props = dict(detail.get("properties") or {})
        features = set(detail.get("tableFeatures") or [])
        set_props: dict[str, str] = {}
        if (
            any(needs_column_mapping(n) for n, _ in new_cols)
            and props.get("delta.columnMapping.mode", "none") == "none"
        ):
            set_props["delta.columnMapping.mode"] = "name"
        wants_ntz = any(isinstance(t, TimestampNTZType) for _, t in new_cols) or any(
            isinstance(t, TimestampNTZType) for _, _, t in widen
        )
        if wants_ntz and "timestampNtz" not in features:
            set_props["delta.feature.timestampNtz"] = "supported"
        if claim and writer_pipeline(props.get(WRITER_PROPERTY)) is None:
            set_props[WRITER_PROPERTY] = self.writer_record()
        self.fence()
        if set_props:
            spark.sql(
                f"ALTER TABLE delta.{quote_spark(uri)} SET TBLPROPERTIES ("
                + ", ".join(f"{sql_str(k)} = {sql_str(v)}" for k, v in sorted(set_props.items()))
                + ")"
            )
            self.log("merge.table_properties", table=label, properties=",".join(sorted(set_props)))
            if WRITER_PROPERTY in set_props:
                self.log("merge.writer_claimed", table=label, uri=uri)
        if widen:
            # Rewritten with the wider type rather than Delta's type widening feature, which delta-rs (and the
            # readers built on it) cannot read (docs/schema-changes.md).
            schema_steps.rewrite_columns(
                self, uri, label, Structure(S_REWRITE, casts=tuple((c, w.simpleString()) for c, _, w in widen))
            )
            for col, have, want in widen:
                self.log("merge.type_widened", table=label, column=col, old=have.simpleString(),
                         new=want.simpleString())
        return self.lake_schema(uri)

    def lake_schema(self, uri: str) -> StructType:
        """The table's columns as a Spark read of it has them, from its Delta log with delta-rs (milliseconds;
        a Spark read loads a snapshot, a job), or with Spark when delta-rs cannot read the table."""
        from cdc_core.lake import delta_state

        try:
            table = delta_state.open_table(uri, storage=self.storage)
            if table is not None:  # Delta's schema is Spark's StructType JSON; the log's field metadata is not read
                schema = StructType.fromJson(json.loads(table.schema().to_json()))
                return StructType([StructField(f.name, f.dataType, f.nullable) for f in schema.fields])
        except Exception as e:  # a table feature delta-rs does not read: Spark reads it
            log.debug("%s", kv(event="merge.schema_read_fallback", table=uri, reason=one_line(e)))
        return self.spark.read.format("delta").load(uri).schema

    def starts_small(self, st: LakeTarget, uri: str) -> bool:
        """Whether a table this window creates starts without deletion vectors, so that delta-rs may merge it
        while it stays small (SmallTables.deletion_vectors_once_grown turns them on once it outgrows the limit)."""
        return self.small_table_rows > 0 and st.rows <= self.small_table_rows and self.storage.may_commit(uri)

    def create_table(
        self,
        uri: str,
        label: str,
        columns: Sequence[tuple[str, DataType]],
        options: TableOptions,
        *,
        small: bool = False,
    ) -> None:
        if small and self.created_by_delta_rs(uri, label, columns, options) is not None:
            return
        ddl = create_table_sql(
            uri, label, columns, options, self.default_properties, writer=self.writer_record(),
            deletion_vectors=not small,
        )
        self.fence()
        try:
            self.spark.sql(ddl)
        except Exception:
            # A concurrent run creating the same table is fine, also one still writing its first commit
            # (Spark then sees a directory that "is not empty and also not a Delta table").
            deadline = time.monotonic() + CREATE_RACE_SECONDS
            while not DeltaTable.isDeltaTable(self.spark, uri):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.claim_created(uri, label)

    def delta_rs_commits(self, uri: str) -> bool:
        """Whether delta-rs may make this run's commits to `uri` that carry no window rows (a new table, the txn
        of a table the window changes no row of, the schema changes' records): the small-table writer is on and
        the lake is local or on a store with conditional writes (object_store.commit_storage). Milliseconds each,
        not a Spark job's seconds; cdc_core.lake.small_writer still checks each table and leaves to Spark what it
        may not write."""
        return self.small_table_rows > 0 and self.storage.may_commit(uri)

    def created_by_delta_rs(
        self, uri: str, label: str, columns: Sequence[tuple[str, DataType]], options: TableOptions
    ) -> small_writer.NewTable | None:
        """Create a table that starts small (no deletion vectors) with delta-rs, as create_table_sql would;
        None (logged why): Spark creates it."""
        if not self.delta_rs_commits(uri):
            return None
        props = new_table_properties(
            label, {n for n, _ in columns}, options, self.default_properties, writer=self.writer_record(),
            deletion_vectors=False,
        )
        self.fence()
        made = small_writer.create(uri, [(n, t.simpleString()) for n, t in columns], options.partition_by, props,
                                   storage=self.storage)
        if isinstance(made, str):
            self.log("merge.spark_table", table=label, reason=made)
            return None
        self.claim_created(uri, label, ours=made.table is not None, writer=small_writer.WRITER_NAME)
        return made

    def claim_created(self, uri: str, label: str, *, ours: bool = False, **fields: Any) -> None:
        """A create keeps a table another pipeline created meanwhile (IF NOT EXISTS, put-if-absent): its writer
        record decides whose it is. `ours`: this run's put-if-absent made it, with this run's writer record."""
        state = None if ours else table_writer_and_txn(self.spark, uri, self.app_id, storage=self.storage)
        owner = writer_pipeline(state[0]) if state else None
        if owner is not None and owner != self.pipeline:
            raise LakeError(foreign_writer_message(self.pipeline, self.seq, [(label, uri, owner)]))
        self.log("merge.table_created", table=label, uri=uri, **fields)

    def wait_for_table(self, uri: str, cause: BaseException) -> None:
        deadline = time.monotonic() + CREATE_RACE_SECONDS
        while not DeltaTable.isDeltaTable(self.spark, uri):
            if time.monotonic() > deadline:
                raise cause
            time.sleep(0.5)

    def idempotent_merge(
        self, uri: str, label: str, source: DataFrame, sql: Callable[[str], str], *, immutable_source: bool = False
    ) -> tuple[str, dict[str, int], int | None]:
        """Run one MERGE as the commit (pipeline, seq); returns (status, metrics, delta version)."""
        spark = self.spark
        view = f"cdc_src_{uuid.uuid4().hex}"
        source.createOrReplaceTempView(view)
        meta = self.commit_metadata(label)
        try:
            for attempt in (1, 2):
                self.fence()
                try:
                    rows = self._with_txn(meta, lambda: spark.sql(sql(view)).collect(), immutable_source)
                except Exception as e:
                    if attempt == 1 and is_table_not_found(e):
                        # A concurrent run of this window created the table and its first commit was not
                        # visible yet when this MERGE resolved the path: wait for it, then retry once.
                        self.wait_for_table(uri, e)
                        self.log("merge.retry", table=label, reason=one_line(e))
                        continue
                    if not is_commit_conflict(e):
                        raise
                    landed = last_txn_version(spark, uri, self.app_id, storage=self.storage)
                    if holds_window(landed, self.seq):
                        self.log("merge.lost_race", table=label, landed=landed)
                        return STATUS_ALREADY, {}, None
                    if attempt == 2:
                        raise LakeError(
                            f"{self.label()}: MERGE into {label} ({uri}) lost two commit races ({one_line(e)}); "
                            "another writer is changing the table; the merge is safe to retry"
                        ) from e
                    self.log("merge.retry", table=label, reason=one_line(e))
                    continue
                if not rows:  # Delta itself found (pipeline, seq) already committed and skipped the MERGE
                    return STATUS_ALREADY, {}, None
                r = rows[0].asDict()
                metrics = {
                    "inserted": int(r.get("num_inserted_rows") or 0),
                    "updated": int(r.get("num_updated_rows") or 0),
                    "deleted": int(r.get("num_deleted_rows") or 0),
                }
                return STATUS_COMMITTED, metrics, self._commit_version(uri, meta)
            raise AssertionError("unreachable")
        finally:
            spark.catalog.dropTempView(view)

    def _with_txn(self, meta: str, action: Callable[[], Any], immutable_source: bool = False) -> Any:
        conf = self.spark.conf
        conf.set(TXN_APP_ID_CONF, self.app_id)
        conf.set(TXN_VERSION_CONF, str(self.seq))
        conf.set(USER_METADATA_CONF, meta)
        keys = [TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF]
        if immutable_source:
            conf.set(MATERIALIZE_SOURCE_CONF, "none")
            keys.append(MATERIALIZE_SOURCE_CONF)
        try:
            return action()
        finally:
            for k in keys:
                conf.unset(k)

    def _commit_version(self, uri: str, meta: str) -> int | None:
        try:
            from cdc_core.lake import delta_state

            return delta_state.commit_version(uri, meta, storage=self.storage)
        except Exception as e:  # e.g. a table feature delta-rs does not read: ask Spark
            log.warning("%s", kv(event="merge.version_read_fallback", table=uri, reason=one_line(e)))
        rows = (
            DeltaTable.forPath(self.spark, uri)
            .history(20)
            .where(F.col("userMetadata") == meta)
            .select("version")
            .collect()
        )
        return int(rows[0]["version"]) if rows else None

    def idempotent_insert(
        self, uri: str, label: str, source: DataFrame
    ) -> tuple[str, dict[str, int], int | None]:
        """The MERGE into a table without rows, as an append (commit (pipeline, seq), once).

        Equivalent to the MERGE because every row of the source is NOT MATCHED: hard mode inserts the
        non-deletes, soft mode every change (a delete as its tombstone row). Safe against concurrent
        writers: one of the same window carries the same txn (Delta skips or conflicts, then the txn
        version says 'already'); one of a later window can only write once this window landed here."""
        cond = insert_condition(self.delete_mode, SPARK)
        rows = source.alias("s").where(F.expr(cond)) if cond else source
        status, version = self.idempotent_append(uri, label, rows)
        inserted = commit_output_rows(uri, version) if version is not None else 0
        return status, {"inserted": inserted, "updated": 0, "deleted": 0}, version

    def write_tombstones(self, st: LakeTarget, uri: str, source: DataFrame, key: tuple[str, ...]) -> None:
        label = f"tombstones of {st.name}"
        landed = last_txn_version(self.spark, uri, self.app_id, storage=self.storage)
        if holds_window(landed, self.seq):
            return
        src_types = {f.name: f.dataType for f in source.schema.fields}
        # Append-only, so without deletion vectors: whichever writer creates it, delta-rs may append to it.
        rule = tombstone_rows(key)
        target = self.ensure_table(uri, label, [*((k, src_types[k]) for k in key), (COL_VERSION, LongType())],
                                   small=True)
        deletes = conform(
            source.where(F.col(quote_spark(rule.op_column)) == rule.op).select(
                *[F.col(quote_spark(c)) for c in rule.columns]
            ),
            target,
        )
        status, version = self.idempotent_append(uri, label, deletes)
        self.log("merge.tombstones", table=st.name, status=status, delta_version=version)

    def idempotent_append(self, uri: str, label: str, rows: DataFrame) -> tuple[str, int | None]:
        """Append as the commit (pipeline, seq), once: Delta skips an append whose txn it holds."""
        meta = self.commit_metadata(label)
        for attempt in (1, 2):
            self.fence()
            try:
                (
                    rows.write.format("delta")
                    .mode("append")
                    .option("txnAppId", self.app_id)
                    .option("txnVersion", str(self.seq))
                    .option("userMetadata", meta)
                    .option("mergeSchema", "true")
                    .save(uri)
                )
            except Exception as e:
                if not is_commit_conflict(e):
                    raise
                landed = last_txn_version(self.spark, uri, self.app_id, storage=self.storage)
                if holds_window(landed, self.seq):
                    self.log("merge.lost_race", table=label, landed=landed)
                    return STATUS_ALREADY, None
                if attempt == 2:
                    raise LakeError(
                        f"{self.label()}: append to {label} ({uri}) lost two commit races ({one_line(e)}); "
                        "another writer is changing the table; the merge is safe to retry"
                    ) from e
                self.log("merge.retry", table=label, reason=one_line(e))
                continue
            version = self._commit_version(uri, meta)
            return (STATUS_COMMITTED if version is not None else STATUS_ALREADY), version
        raise AssertionError("unreachable")

    def _table_done(self, label: str, result: dict[str, Any], steps: dict[str, float], t0: float) -> dict[str, Any]:
        result["seconds"] = round(time.monotonic() - t0, 3)
        result["steps"] = steps
        self.log(
            "merge.table", table=label, **{k: v for k, v in result.items() if k != "steps"},
            **{f"secs_{k}": v for k, v in steps.items()},
        )
        return result
