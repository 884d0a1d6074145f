"""MERGE one staged window into its Delta tables, exactly once (Spark job; spark-submit'ed per window).

The algorithm, its idempotence (Delta txn app id/version) and its failure modes: docs/merge.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cdc_core.coordination.fence import zk_fence_check
from cdc_core.lake.job_outcome import MERGE_PROG, job_error
from cdc_core.lake.job_specs import SPEC_FLAG, MergeJobSpec
from cdc_core.model.logfmt import one_line

try:
    import cdc_core  # noqa: F401
except ImportError:  # spark-submit of a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import delta.exceptions as delta_exceptions
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from cdc_core.lake import small_writer
from cdc_core.lake.small_writer import needs_column_mapping
from cdc_core.model import faults, merge_semantics
from cdc_core.model.errors import (
    CdcError,
    ConfigError,
    Fenced,
    LakeError,
    SchemaConflict,
    StagingError,
)
from cdc_core.model.lake_writers import WRITER_PROPERTY, foreign_writer_message, writer_pipeline, writer_value
from cdc_core.model.layout import TOMBSTONE_DIR, base_uri, table_uri, tombstone_uri
from cdc_core.model.logfmt import kv
from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_DELETED,
    COL_OP,
    COL_ORDINAL,
    COL_VERSION,
    MANIFEST_NAME,
    OP_DELETE,
    Manifest,
    StagedTable,
)
from cdc_core.model.merge_semantics import (
    DELETE_HARD,
    DELETE_MODES,
    DELETE_SOFT,
    DERIVE_DELETE_TS,
    DERIVE_IS_DELETE,
    DERIVE_WINDOW_SEQ,
    GONE,
    SPARK,
    STATUS_ALREADY,
    STATUS_COMMITTED,
    STATUS_EMPTY,
    derived_columns,
    holds_window,
    insert_condition,
    spark_derive_sql,
    spark_merge_sql,
)
from cdc_core.model.naming import path_component, quote_spark, table_id
from cdc_core.model.schema_changes import CREATE_TABLE, DROP_DATABASE, SchemaChange
from cdc_core.model.schema_evolution import S_COPY, S_REWRITE, PlanContext, SchemaState, Structure
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.schema_values import delta_type_of, exact_cast
from cdc_core.model.schema_window import (
    ROLE_MOVED_IN,
    ROLE_OWN,
    LakeChange,
    Placement,
    WindowChanges,
    plan_change,
)
from cdc_core.model.schema_window import resolve as resolve_window
from cdc_core.model.snapshot_state import ChunkSpec, chunks_of
from cdc_core.model.sources import COL_SOURCE, COL_SOURCE_TABLE, Lineage, Route, lineage, unit_name
from cdc_core.model.window_plan import KIND_SNAPSHOT
from spark_apps import schema_steps

log = logging.getLogger("cdc.merge")


TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
MATERIALIZE_SOURCE_CONF = "spark.databricks.delta.merge.materializeSource"


# zorder_by is read by the maintenance job (spark_apps/maintain_tables.py), not at table creation.
TABLE_OPTION_KEYS = ("partition_by", "change_data_feed", "properties", "zorder_by")

# Every table the job creates, unless --table-options says otherwise. Deletion vectors: a MERGE marks
# the changed rows of a data file deleted instead of rewriting the file, so its cost follows the window,
# not the table (bench/RESULTS.md: "without deletion vectors"). Readers need Delta reader version 3
# (Spark with Delta >= 2.3, delta-rs `DeltaTable.scan`, cdc_core.lake.delta_state.read_rows).
DV_PROPERTY = "delta.enableDeletionVectors"
DEFAULT_TABLE_PROPERTIES = {DV_PROPERTY: "true"}
# Tables of one window merged at the same time (one Spark session each), unless --parallelism says
# otherwise (the pipeline's `spark.merge_parallelism`). On local[2] the per-table cost is mostly
# driver-side (Delta log reads, planning, commits), which overlaps well; 4 keeps the driver's memory
# and the number of open Delta snapshots small.
DEFAULT_PARALLELISM = 4
# How long a run waits for a concurrent run's CREATE TABLE of the same table to commit.
CREATE_RACE_SECONDS = 30.0


_STAGED_META = (
    (COL_OP, StringType()),
    (COL_VERSION, LongType()),
    (COL_ORDINAL, LongType()),
    (COL_COMMIT_TS, TimestampType()),
)
_STAGED_META_NAMES = frozenset(n for n, _ in _STAGED_META)
# A table the window only names in DDL and the lake never had (a truncate or drop of a table never landed).
STATUS_NO_TABLE = "no table"


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

_CONFLICTS = tuple(
    getattr(delta_exceptions, n)
    for n in (
        "DeltaConcurrentModificationException",
        "ConcurrentWriteException",
        "MetadataChangedException",
        "ProtocolChangedException",
        "ConcurrentAppendException",
        "ConcurrentDeleteReadException",
        "ConcurrentDeleteDeleteException",
        "ConcurrentTransactionException",
    )
)
_CONFLICT_MARKERS = (
    "io.delta.exceptions.Concurrent",
    "ConcurrentAppendException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "DELTA_CONCURRENT_",
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
)


# ------------------------------------------------------------------------------------------ layout





def metadata_columns(delete_mode: str) -> list[tuple[str, DataType]]:
    """The lake table's metadata columns as Spark types (cdc_core.model.merge_semantics states them)."""
    return [(name, DataType.fromDDL(ddl)) for name, ddl in merge_semantics.metadata_columns(delete_mode)]


# ------------------------------------------------------------------------------------ type rules

_INT_RANK = {ByteType: 1, ShortType: 2, IntegerType: 3, LongType: 4}
_INT_DIGITS = {ByteType: 3, ShortType: 5, IntegerType: 10, LongType: 20}


def can_widen(frm: DataType, to: DataType) -> bool:
    """True when every value of `frm` fits `to` exactly and Delta's type widening allows frm -> to."""
    if frm == to:
        return True
    f, t = type(frm), type(to)
    if f in _INT_RANK:
        if t in _INT_RANK:
            return _INT_RANK[f] < _INT_RANK[t]
        if t is DoubleType:
            return f is not LongType  # a long does not fit a double's 53-bit mantissa
        if isinstance(to, DecimalType):
            return to.precision - to.scale >= _INT_DIGITS[f]
        return False
    if f is FloatType:
        return t is DoubleType
    if isinstance(frm, DecimalType) and isinstance(to, DecimalType):
        return to.scale >= frm.scale and (to.precision - to.scale) >= (frm.precision - frm.scale)
    if f is DateType:
        return t is TimestampNTZType
    return False


def _parse_type(ddl: str, where: str) -> DataType:
    try:
        return DataType.fromDDL(ddl)
    except Exception as e:
        raise StagingError(
            f"{where}: delta_type {ddl!r} is not a Spark SQL type ({one_line(e)}); fix the type map and re-stage"
        ) from e


# ------------------------------------------------------------------------------------ delta state


def _jvm_last_txn_version(spark: SparkSession, uri: str, app_id: str) -> int | None:
    """The table's last txn version for `app_id` from Delta's own snapshot (None: no table or never written)."""
    jvm = spark._jvm
    assert jvm is not None  # a classic (JVM) session always has its gateway; PySpark asserts the same
    pair = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, uri)
    snapshot = pair._2()
    if snapshot.version() < 0:
        return None
    found = snapshot.transactions().get(app_id)
    return int(found.get()) if found.isDefined() else None


def last_txn_version(spark: SparkSession, uri: str, app_id: str) -> int | None:
    """`app_id`'s last txn version in the table: read with delta-rs (no Spark job), through the JVM's DeltaLog
    when delta-rs cannot read the table (e.g. a table feature it does not know yet)."""
    from cdc_core.lake import delta_state

    try:
        v = delta_state.last_txn_version(uri, app_id)
        return None if v is None else int(v)
    except CdcError:
        raise
    except Exception as e:
        log.warning("%s", kv(event="merge.txn_read_fallback", table=uri, reason=one_line(e)))
    return _jvm_last_txn_version(spark, uri, app_id)


def table_writer_and_txn(
    spark: SparkSession, uri: str, app_id: str, properties: dict[str, dict[str, str]] | None = None
) -> tuple[str | None, int | None] | None:
    """(recorded writer `cdc.writer`, `app_id`'s last txn version) of the table; None when there is no table.
    `properties`: gets the table's properties (uri -> properties) from the same snapshot."""
    from cdc_core.lake import delta_state

    try:
        found = delta_state.writer_txn_properties(uri, app_id)
        if found is None:
            return None
        if properties is not None:
            properties[uri] = found[2]
        return found[0], found[1]
    except CdcError:
        raise
    except Exception as e:  # e.g. a table feature the standalone reader does not know yet
        log.warning("%s", kv(event="merge.txn_read_fallback", table=uri, reason=one_line(e)))
    jvm = spark._jvm
    assert jvm is not None  # a classic (JVM) session always has its gateway; PySpark asserts the same
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(spark._jsparkSession, uri)._2()
    if snapshot.version() < 0:
        return None
    writer = snapshot.metadata().configuration().get(WRITER_PROPERTY)
    found = snapshot.transactions().get(app_id)
    return (str(writer.get()) if writer.isDefined() else None), (int(found.get()) if found.isDefined() else None)


def _is_table_not_found(e: BaseException) -> bool:
    """Spark could not resolve a Delta table path (e.g. [DELTA_TABLE_NOT_FOUND] "... doesn't exist")."""
    text = str(e)
    return any(m in text for m in ("DELTA_TABLE_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE", "doesn't exist"))


def is_commit_conflict(e: BaseException) -> bool:
    if isinstance(e, _CONFLICTS):
        return True
    text = f"{type(e).__name__} {e}"
    return any(m in text for m in _CONFLICT_MARKERS)


# ------------------------------------------------------------------------------- staged window in


def read_manifest(window_dir: str) -> Manifest:
    import fsspec

    uri = f"{window_dir.rstrip('/')}/{MANIFEST_NAME}"
    try:
        with fsspec.open(uri, "rb") as f:
            return Manifest.from_json(f.read())
    except FileNotFoundError as e:
        raise StagingError(
            f"no {MANIFEST_NAME} in {window_dir}: the window is not (completely) staged; run the stage step"
        ) from e


def read_staged_table(spark: SparkSession, window_dir: str, st: StagedTable) -> DataFrame:
    """All staged changes of one table, every manifest column present (NULL where a file lacks it)."""
    import fsspec
    import pyarrow.parquet as pq

    types = {c.name: _parse_type(c.delta_type, f"table {st.name} column {c.name!r}") for c in st.columns}
    out_schema = StructType()
    for name, t in (*_STAGED_META, *types.items()):
        out_schema.add(name, t, True)
    if not st.files:
        return spark.createDataFrame([], out_schema)

    # Group files by their physical schema so one Spark read serves each group (usually one per table).
    fs, root = fsspec.core.url_to_fs(window_dir)
    groups: dict[tuple[Any, ...], list[str]] = {}
    for f in st.files:
        unknown = [c for c in f.columns if c not in types]
        missing_key = [k for k in st.key if k not in f.columns]
        if unknown or missing_key:
            raise StagingError(
                f"table {st.name} file {f.path}: columns {unknown} are not in the manifest's table columns and/or "
                f"key columns {missing_key} are missing; the manifest is inconsistent, re-stage the window"
            )
        with fs.open(f"{root.rstrip('/')}/{f.path}", "rb") as fh:
            arrow_schema = pq.read_schema(fh)
        sig = (f.columns, tuple((fld.name, str(fld.type)) for fld in arrow_schema))
        groups.setdefault(sig, []).append(f"{window_dir.rstrip('/')}/{f.path}")

    parts: list[DataFrame] = []
    for (cols, _), paths in groups.items():
        df = spark.read.parquet(*paths)
        present = {fld.name: fld.dataType for fld in df.schema.fields}
        select = []
        for name, want in (*_STAGED_META, *types.items()):
            if name in types and name not in cols:
                select.append(F.lit(None).cast(want).alias(name))  # not a column when this file was written
                continue
            if name not in present:
                raise StagingError(f"table {st.name} file(s) {paths}: column {name!r} is missing; re-stage the window")
            have = present[name]
            if have != want and not can_widen(have, want):
                raise SchemaConflict(
                    f"table {st.name} column {name!r}: staged file(s) {paths} hold {have.simpleString()} "
                    f"but the window's type is {want.simpleString()}, which is not a widening; the change cannot "
                    "be applied exactly"
                )
            select.append(F.col(quote_spark(name)).cast(want).alias(name))
        parts.append(df.select(*select))
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def latest_per_key(df: DataFrame, key: Sequence[str]) -> DataFrame:
    """The last change of each key in the window (by _cdc_ordinal), without _cdc_ordinal."""
    w = Window.partitionBy(*[F.col(quote_spark(k)) for k in key]).orderBy(F.col(COL_ORDINAL).desc())
    return df.withColumn("__cdc_rn", F.row_number().over(w)).where(F.col("__cdc_rn") == 1).drop("__cdc_rn", COL_ORDINAL)


# ----------------------------------------------------------------------------------- lake targets


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

    @property
    def name(self) -> str:
        return table_id(self.schema, self.table)

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
        return any(_may_have_deletes(st) for st, _ in self.members)

    def columns(self) -> list[tuple[str, DataType]]:
        """Lineage columns, then the source columns merged by name: equal types, or the wider of two types
        one widens to; anything else is a SchemaConflict naming both source tables and the column."""
        merged: dict[str, tuple[str, DataType, str]] = {}  # lower name -> (name, type, the table it came from)
        for st, _ in self.members:
            for c in st.columns:
                t = _parse_type(c.delta_type, f"table {st.name} column {c.name!r}")
                seen = merged.get(c.name.lower())
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

    def read(self, spark: SparkSession, window_dir: str) -> DataFrame:
        """Every staged change of the target: each member's, with its lineage constants."""
        parts = []
        for st, where in self.members:
            df = read_staged_table(spark, window_dir, st)
            for col, value in where.columns:
                df = df.withColumn(col, F.lit(value).cast(StringType()))
            parts.append(df)
        return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)

    def facts(self, window_dir: str) -> StagedFacts:
        if len(self.members) == 1:
            return staged_facts(window_dir, self.members[0][0])
        each = [staged_facts(window_dir, st) for st, _ in self.members]
        versions = [f.min_version for f in each if f.min_version is not None]
        # Members' keys differ by their lineage unless the route keys by the primary key alone (a derived
        # table's base is keyed by lineage too).
        by_lineage = bool(self.members[0][1].key_prefix) or self.derived
        unique = by_lineage and all(f.unique_keys for f in each)
        return StagedFacts(unique, min(versions) if versions else None)


def lake_tables_of_schemas(
    lake_root: str, changes: Sequence[SchemaChange], app_id: str
) -> dict[str, list[tuple[str, str]]]:
    """The lake tables of each database the window drops whose writer record names this pipeline (`DROP
    DATABASE` drops each of them)."""
    dropped = sorted({c.schema for c in changes if c.kind == DROP_DATABASE})
    if not dropped:
        return {}
    import fsspec

    from cdc_core.lake import delta_state
    from cdc_core.model.naming import decode_path_component

    out: dict[str, list[tuple[str, str]]] = {}
    fs, root = fsspec.core.url_to_fs(lake_root)
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
            found = delta_state.writer_and_txn(table_uri(lake_root, schema, name), app_id)
            if found is not None and writer_pipeline(found[0]) == pipeline:
                out.setdefault(schema, []).append((schema, name))
    return out


def lake_targets(
    manifest: Manifest, routes: Sequence[Route], source: str | None,
    placements: dict[tuple[str, str], tuple[Placement, ...]] | None = None,
) -> list[LakeTarget]:
    """The window's staged tables grouped by the Delta table they land in, in manifest order. `placements`: a
    renamed table's rows, by version range, in the table they belong to (cdc_core.model.schema_window)."""
    grouped: dict[tuple[str, str], list[tuple[StagedTable, Lineage, tuple[int | None, int | None]]]] = {}
    for st in manifest.tables:
        for place in (placements or {}).get((st.schema, st.table), (Placement((st.schema, st.table)),)):
            where = lineage(routes, source, *place.lake)
            bound = (place.since, place.until)
            grouped.setdefault((where.lake_schema, where.lake_table), []).append((st, where, bound))
    out = []
    for (schema, table), members in grouped.items():
        bounds = tuple(b for _, _, b in members)
        out.append(LakeTarget(schema, table, tuple((st, w) for st, w, _ in members),
                              bounds if any(b != (None, None) for b in bounds) else ()))
    return out


# --------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class TableOptions:
    partition_by: tuple[str, ...] = ()
    change_data_feed: bool = False
    properties: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_dict(cls, name: str, d: dict[str, Any]) -> TableOptions:
        if not isinstance(d, dict):
            raise ConfigError(f"--table-options[{name!r}] must be an object with keys {TABLE_OPTION_KEYS}")
        unknown = sorted(set(d) - set(TABLE_OPTION_KEYS))
        if unknown:
            raise ConfigError(f"--table-options[{name!r}]: unknown keys {unknown}; allowed: {TABLE_OPTION_KEYS}")
        parts = d.get("partition_by") or []
        props = d.get("properties") or {}
        if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
            raise ConfigError(f"--table-options[{name!r}].partition_by must be a list of column names")
        if not isinstance(props, dict):
            raise ConfigError(f"--table-options[{name!r}].properties must be an object of strings")
        return cls(
            tuple(parts),
            bool(d.get("change_data_feed", False)),
            tuple(sorted((str(k), str(v)) for k, v in props.items())),
        )

    def table_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.change_data_feed:
            props["delta.enableChangeDataFeed"] = "true"
        return props


def parse_table_options(raw: str | dict[str, Any] | None) -> dict[str, TableOptions]:
    if not raw:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ConfigError(f'table_options is not valid JSON ({e}); expected {{"schema.table": {{...}}}}') from e
    if not isinstance(raw, dict):
        raise ConfigError('table_options must be a JSON object {"schema.table": {...}}')
    return {name: v if isinstance(v, TableOptions) else TableOptions.from_dict(name, v) for name, v in raw.items()}


# ------------------------------------------------------------------------------------------ merge


def create_table_sql(
    uri: str,
    label: str,
    columns: Sequence[tuple[str, DataType]],
    options: TableOptions,
    default_properties: dict[str, str] | None = None,
    *,
    writer: str | None = None,  # the `cdc.writer` record (lake_writers.writer_value)
    deletion_vectors: bool = True,  # False: without the product's default (a table that starts small)
) -> str:
    """The CREATE TABLE of a lake table (or tombstone table) on first sight (pure: the benchmark builds
    its tables with it too). Properties: the product's defaults, then the pipeline's (`--table-properties`,
    e.g. retention), then the table's own options; last the writer record (`cdc.writer`, the pipeline that
    creates it: cdc_core.model.lake_writers), which no option can override."""
    names = {n for n, _ in columns}
    props = new_table_properties(
        label, names, options, default_properties, writer=writer, deletion_vectors=deletion_vectors
    )
    ddl = (
        f"CREATE TABLE IF NOT EXISTS delta.{quote_spark(uri)} ("
        + ", ".join(f"{quote_spark(n)} {t.simpleString()}" for n, t in columns)
        + ") USING DELTA"
    )
    if options.partition_by:
        ddl += " PARTITIONED BY (" + ", ".join(quote_spark(p) for p in options.partition_by) + ")"
    if props:
        ddl += " TBLPROPERTIES (" + ", ".join(f"{sql_str(k)} = {sql_str(v)}" for k, v in sorted(props.items())) + ")"
    return ddl




def new_table_properties(
    label: str,
    names: set[str],
    options: TableOptions,
    default_properties: dict[str, str] | None = None,
    *,
    writer: str | None = None,
    deletion_vectors: bool = True,
) -> dict[str, str]:
    """The properties a new lake table starts with (create_table_sql's order, whichever writer creates it)."""
    bad = [p for p in options.partition_by if p not in names]
    if bad:
        raise ConfigError(f"--table-options for {label}: partition columns {bad} are not columns of the table")
    defaults = DEFAULT_TABLE_PROPERTIES if deletion_vectors else {}
    props = {**defaults, **(default_properties or {}), **options.table_properties()}
    if writer is not None:
        props[WRITER_PROPERTY] = writer
    if any(needs_column_mapping(n) for n in names):
        props.setdefault("delta.columnMapping.mode", "name")
    return props


def sql_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class _Run:
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
    # A snapshot window's chunks by source table: a re-read's last chunk sweeps what it did not read again.
    chunks: dict[str, ChunkSpec] = field(default_factory=dict)

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

    # ---------------------------------------------------------------------------- table lifecycle

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
        if not DeltaTable.isDeltaTable(spark, uri):
            self.create_table(uri, label, columns, options or TableOptions(), small=small)
        target = spark.read.format("delta").load(uri).schema
        by_name = {f.name.lower(): f for f in target.fields}
        new_cols = [(n, t) for n, t in columns if n.lower() not in by_name]
        widen: list[tuple[str, DataType, DataType]] = []
        for name, want in columns:
            have_field = by_name.get(name.lower())
            if have_field is None or have_field.dataType == want or can_widen(want, have_field.dataType):
                continue  # absent (schema evolution adds it), equal, or the source is narrower (cast up)
            if exact_cast(want.simpleString(), have_field.dataType.simpleString()):
                continue  # every source value lands exactly in the lake's type (a lenient table kept it): cast
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
        return spark.read.format("delta").load(uri).schema

    def create_table(
        self,
        uri: str,
        label: str,
        columns: Sequence[tuple[str, DataType]],
        options: TableOptions,
        *,
        small: bool = False,
    ) -> None:
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
        # CREATE TABLE IF NOT EXISTS keeps a table another pipeline created meanwhile: its writer decides.
        state = table_writer_and_txn(self.spark, uri, self.app_id)
        owner = writer_pipeline(state[0]) if state else None
        if owner is not None and owner != self.pipeline:
            raise LakeError(foreign_writer_message(self.pipeline, self.seq, [(label, uri, owner)]))
        self.log("merge.table_created", table=label, uri=uri)

    def wait_for_table(self, uri: str, cause: BaseException) -> None:
        deadline = time.monotonic() + CREATE_RACE_SECONDS
        while not DeltaTable.isDeltaTable(self.spark, uri):
            if time.monotonic() > deadline:
                raise cause
            time.sleep(0.5)

    # ------------------------------------------------------------------------------ idempotent MERGE

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
                    if attempt == 1 and _is_table_not_found(e):
                        # A concurrent run of this window created the table and its first commit was not
                        # visible yet when this MERGE resolved the path: wait for it, then retry once.
                        self.wait_for_table(uri, e)
                        self.log("merge.retry", table=label, reason=one_line(e))
                        continue
                    if not is_commit_conflict(e):
                        raise
                    landed = last_txn_version(spark, uri, self.app_id)
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

            return delta_state.commit_version(uri, meta)
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

    # ------------------------------------------------------------------------------------ one table

    def merge_table(self, st: LakeTarget) -> dict[str, Any]:
        """Land the window's changes of one lake table; a derived table's land in its base first."""
        uri = table_uri(self.lake_root, st.schema, st.table)
        if not st.derived:
            return self.land(st, uri, st.key, st.name)
        t0 = time.monotonic()
        base = self.land(st, base_uri(self.lake_root, st.schema, st.table), st.base_key, f"base of {st.name}")
        faults.point("mid_derive")  # crash suite: the base holds the window, the derived table not yet
        result = self.derive(st, uri)
        result["base"] = {k: v for k, v in base.items() if k != "steps"}
        result["seconds"] = round(time.monotonic() - t0, 3)
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

        landed = last_txn_version(spark, uri, self.app_id)
        if holds_window(landed, self.seq):
            result["seconds"] = round(time.monotonic() - t0, 3)
            self.log("merge.table", table=label, status=STATUS_ALREADY, landed=landed)
            return result
        self.fence()
        step("txn_read_fence")
        options = self.table_options.get(st.name, TableOptions())
        facts = st.facts(self.window_dir)
        step("staged_facts")
        work = self.schema_work(st, uri, facts)
        sweeps = self.sweeps_due(st)
        small = work is None and not sweeps and self.may_land_small(st, uri, facts)
        done: dict[str, Any] | None = None
        if small:
            done, missing = self.land_small(st, uri, key, label, result)
            step("small_table")
            if done is None and not missing:
                small = False  # not for delta-rs (logged): Spark merges it
            if done is None and missing and self.create_small(st, uri, label, options):
                done, _ = self.land_small(st, uri, key, label, result)  # the table delta-rs just created
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
            translated = self.read_translated(st, uri, work)
            step("schema_changes")
            columns = [(f.name, f.dataType) for f in translated.schema.fields if f.name not in _STAGED_META_NAMES]
            target = self.ensure_table(uri, described, [*columns, *metadata_columns(self.delete_mode)], options)
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
            changes = st.read(spark, self.window_dir)
        # A window usually changes each key once: then there is nothing to pick (no shuffle).
        for member, where, below in sweeps:
            schema_steps.sweep_after_reread(
                self, uri, label, app_id=schema_state_key(self.app_id, member, where), version=below,
                delete_mode=self.delete_mode, lineage=tuple(where.columns),
            )
        changes = changes.drop(COL_ORDINAL) if facts.unique_keys else latest_per_key(changes, key)
        changes = with_derived_columns(changes, self.delete_mode, self.seq)
        source = conform(changes, target)
        step("read_staged")

        # The source is read from the staged window's files, which never change, so Delta need not copy
        # it before merging (it would: Delta copies any source but a Delta table). Not when it joins the
        # tombstone table, and never cached (Delta refuses a cached source it did not copy itself).
        immutable = True
        if self.delete_mode == DELETE_HARD:
            tomb = tombstone_uri(self.lake_root, st.schema, st.table)
            older = tombstones_may_supersede(tomb, facts.min_version)  # before this window's own
            if st.may_have_deletes():
                self.write_tombstones(st, tomb, source, key)
                faults.point("mid_merge_table")  # crash suite: tombstones committed, main MERGE not
            if older:
                source = drop_superseded(source, spark.read.format("delta").load(tomb), key)
                immutable = False
            step("tombstones")
        if not key:  # a table the window names only in DDL (no row, so no key): its txn commit alone
            status, version = self.idempotent_append(uri, label, source.limit(0))
            metrics = {"inserted": 0, "updated": 0, "deleted": 0}
        elif _has_no_rows(uri):
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
        result.update(status=status, delta_version=version, writer="spark", **metrics)
        return self._table_done(label, result, steps, t0)

    # ------------------------------------------------------------------------------ schema changes

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

    def schema_phase(self, targets: Sequence[LakeTarget]) -> None:
        """Every schema change of the window, one after another in binlog order, on the lake tables that do not
        hold the window yet (cdc_core.model.schema_window resolves them; spark_apps.schema_steps applies them).
        Before any row lands: a rename's target takes its source's rows while the source still has them."""
        if not self.window.changes:
            return
        pending = {(t.schema, t.table): t for t in targets}
        for lc in self.window.changes:
            where = lineage(self.routes, self.source, *lc.lake)
            target = pending.get((where.lake_schema, where.lake_table))
            if target is None:
                continue  # the table already holds the window (or was never part of it)
            # A derived table's rows live in its base (the derived table is recomputed from it after).
            uri = (base_uri if target.derived else table_uri)(self.lake_root, where.lake_schema, where.lake_table)
            label = target.name
            member = next((m for m, w in target.members if (m.schema, m.table) == lc.lake), target.members[0][0])
            key = schema_state_key(self.app_id, member, where)
            table = schema_steps.read_lake_table(self.spark, uri)
            if not table.exists:
                if not self.create_for_schema(target, uri, lc):
                    continue  # DDL on a table the lake never had: nothing to change, nothing to record
                table = schema_steps.read_lake_table(self.spark, uri)
            meta = metadata_columns(self.delete_mode)
            reserved = [*(n for n, _ in meta), *target.lineage_columns]
            ctx = PlanContext(
                table=label, app_id=key, delete_mode=self.delete_mode,
                mode=self.schema_policy.mode_for(table_id(*lc.lake), label), zero_dates=self.zero_dates,
                lineage=tuple(where.columns), routed=bool(where.columns),
            )
            ops, _, rereads = plan_change(
                ctx, table.source_columns(reserved), SchemaState.from_properties(table.properties, key), lc,
                functools.partial(self.moved_from, key=key, reserved=reserved),
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
        options = self.table_options.get(target.name, TableOptions())
        lineage_cols = [(n, StringType()) for n in target.lineage_columns]
        meta = metadata_columns(self.delete_mode)
        if lc.role == ROLE_OWN and c.kind == CREATE_TABLE and not c.as_select:
            cols = [(x.name, _parse_type(delta_type_of(x, target.name), f"table {target.name} column {x.name!r}"))
                    for x in c.columns]
        elif lc.role == ROLE_MOVED_IN and lc.source is not None:
            src = schema_steps.read_lake_table(self.spark, self.lake_uri(lc.source))
            if not src.exists:
                return False
            low = {n.lower() for n, _ in meta} | {n.lower() for n in target.lineage_columns}
            cols = [(x.name, DataType.fromDDL(x.delta_type)) for x in src.columns if x.name.lower() not in low]
        elif any(m.files for m, _ in target.members):
            cols = self.first_shape(target)
        else:
            return False
        self.ensure_table(uri, target.name, [*lineage_cols, *cols, *meta], options)
        return True

    def first_shape(self, target: LakeTarget) -> list[tuple[str, DataType]]:
        """The columns of the window's oldest staged change of the target: a lake table the window creates starts
        with the shape the source table had then, and the window's schema changes take it from there."""
        oldest: tuple[int, StagedTable, tuple[str, ...]] | None = None
        for member, _ in target.members:
            for f, span in zip(member.files, schema_steps.file_versions(self.window_dir, member), strict=True):
                if span is not None and (oldest is None or span[0] < oldest[0]):
                    oldest = (span[0], member, f.columns)
        if oldest is None:
            return target.columns()[len(target.lineage_columns):]
        _, member, names = oldest
        types = {c.name: c.delta_type for c in member.columns}
        return [(n, _parse_type(types[n], f"table {member.name} column {n!r}")) for n in names]

    def lake_uri(self, table: tuple[str, str]) -> str:
        where = lineage(self.routes, self.source, *table)
        return table_uri(self.lake_root, where.lake_schema, where.lake_table)

    def moved_from(self, source: tuple[str, str], key: str, reserved: Sequence[str]) -> Any:
        """A rename's source lake table: (its source columns, its schema record), None when the lake never had it."""
        table = schema_steps.read_lake_table(self.spark, self.lake_uri(source))
        if not table.exists:
            return None
        return table.source_columns(reserved), SchemaState.from_properties(table.properties, key)

    def copy_table(self, source: tuple[str, str], uri: str, label: str) -> None:
        """A rename's target takes its source's rows (one overwrite commit; repeated after a crash before its
        mark, while the source still holds them: the source is emptied only after the target's mark)."""
        self.fence()
        rows = self.spark.read.format("delta").load(self.lake_uri(source))
        (
            rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
            .option("userMetadata", self.commit_metadata(label)).save(uri)
        )
        self.log("merge.table_copied", table=label, source=table_id(*source))

    def read_translated(self, st: LakeTarget, uri: str, work: list[SchemaMember]) -> DataFrame:
        """The window's changes of the target, each member's read through its schema record (after the schema
        phase) and cut to its version range."""
        spark = self.spark
        table = schema_steps.read_lake_table(spark, uri)
        parts = []
        for m in work:
            since, until = m.bounds
            df = schema_steps.read_translated(
                spark, self.window_dir, m.staged, SchemaState.from_properties(table.properties, m.state_key),
                staged_meta=_STAGED_META, parse_type=_parse_type, can_widen=can_widen,
                versions=schema_steps.file_versions(self.window_dir, m.staged), since=since, until=until,
            )
            if df is None:
                continue
            for col, value in m.lineage.columns:
                df = df.withColumn(col, F.lit(value).cast(StringType()))
            parts.append(df)
        if parts:
            return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
        schema = StructType()
        for name, t in _STAGED_META:
            schema.add(name, t, True)
        meta = {n.lower() for n, _ in metadata_columns(self.delete_mode)}
        for c in table.columns:
            if c.name.lower() not in meta:
                schema.add(c.name, DataType.fromDDL(c.delta_type), True)
        return spark.createDataFrame([], schema)

    def _table_done(self, label: str, result: dict[str, Any], steps: dict[str, float], t0: float) -> dict[str, Any]:
        result["seconds"] = round(time.monotonic() - t0, 3)
        result["steps"] = steps
        self.log(
            "merge.table", table=label, **{k: v for k, v in result.items() if k != "steps"},
            **{f"secs_{k}": v for k, v in steps.items()},
        )
        return result

    # ------------------------------------------------------------------- small tables, without Spark

    def may_land_small(self, st: LakeTarget, uri: str, facts: StagedFacts) -> bool:
        """Whether delta-rs may land this table's changes (cdc_core.lake.small_writer decides the rest): a
        local lake, few staged rows, and in hard-delete mode no delete and no tombstone newer than the
        window (both need the tombstone table, which Spark writes)."""
        if self.small_table_rows <= 0 or st.rows == 0 or st.rows > self.small_table_rows:
            return False  # an empty staged table: Spark commits its txn as before
        if small_writer.local_path(uri) is None or small_writer.local_path(self.window_dir) is None:
            return False
        if self.delete_mode == DELETE_SOFT:
            return True
        if st.may_have_deletes():
            return False
        return not tombstones_may_supersede(tombstone_uri(self.lake_root, st.schema, st.table), facts.min_version)

    def create_small(self, st: LakeTarget, uri: str, label: str, options: TableOptions) -> bool:
        """Create a new table with delta-rs (no Spark job), as create_table would with `small`: True when the
        table exists now (this run's, or a concurrent run's of the same pipeline); False: Spark creates it."""
        columns = [*st.columns(), *metadata_columns(self.delete_mode)]
        props = new_table_properties(
            label, {n for n, _ in columns}, options, self.default_properties, writer=self.writer_record(),
            deletion_vectors=False,
        )
        self.fence()
        why = small_writer.create(uri, [(n, t.simpleString()) for n, t in columns], options.partition_by, props)
        if why is not None:
            self.log("merge.spark_table", table=label, reason=why)
            return False
        state = table_writer_and_txn(self.spark, uri, self.app_id)  # a concurrent creator's table is kept
        owner = writer_pipeline(state[0]) if state else None
        if owner is not None and owner != self.pipeline:
            raise LakeError(foreign_writer_message(self.pipeline, self.seq, [(label, uri, owner)]))
        self.log("merge.table_created", table=label, uri=uri, writer=small_writer.WRITER_NAME)
        return True

    def land_small(
        self, st: LakeTarget, uri: str, key: tuple[str, ...], label: str, result: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, bool]:
        """(the result, False) when delta-rs landed the table (or found it landed); (None, whether the
        table is missing) when the table is not one delta-rs may write."""
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
        )
        out = small_writer.land(job, self.fence)
        if isinstance(out, small_writer.Ineligible):
            if not out.missing:
                self.log("merge.spark_table", table=label, reason=out.reason)
            return None, out.missing
        status = STATUS_COMMITTED if out.status == "committed" else STATUS_ALREADY
        result.update(
            status=status, inserted=out.inserted, updated=out.updated, deleted=out.deleted,
            delta_version=out.version, writer=small_writer.WRITER_NAME,
        )
        return result, False

    def deletion_vectors_once_grown(self, uri: str, label: str, window_rows: int) -> None:
        """Turn deletion vectors on for a table created small (without them) once it outgrows the small-table
        limit: from then on its MERGEs touch the window's rows, not whole files, and it stays with Spark."""
        wanted = {**DEFAULT_TABLE_PROPERTIES, **self.default_properties}
        if wanted.get(DV_PROPERTY) != "true":
            return
        try:
            state = small_writer.table_rows_and_properties(uri)
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

    def derive(self, st: LakeTarget, uri: str) -> dict[str, Any]:
        """Recompute the derived table's rows of the keys this window touched from its base, as one
        idempotent commit (pipeline, seq): per primary key the alive base row with the latest commit time
        (ties: the smaller source id, then source table), else the latest tombstone (soft deletes), else
        no row. A pure function of the base, so a replay after a crash between the two commits, or after
        other sources' windows landed meanwhile, writes the same rows as an uninterrupted run would."""
        t0 = time.monotonic()
        spark = self.spark
        landed = last_txn_version(spark, uri, self.app_id)
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
            replace(st, members=tuple(with_rows), bounds=()).read(spark, self.window_dir)
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
        if _has_no_rows(uri):  # nothing to replace or delete: append the winners (same idempotent commit)
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
        inserted = _commit_output_rows(uri, version) if version is not None else 0
        return status, {"inserted": inserted, "updated": 0, "deleted": 0}, version

    def write_tombstones(self, st: LakeTarget, uri: str, source: DataFrame, key: tuple[str, ...]) -> None:
        label = f"tombstones of {st.name}"
        landed = last_txn_version(self.spark, uri, self.app_id)
        if holds_window(landed, self.seq):
            return
        src_types = {f.name: f.dataType for f in source.schema.fields}
        target = self.ensure_table(uri, label, [*((k, src_types[k]) for k in key), (COL_VERSION, LongType())])
        deletes = conform(
            source.where(F.col(COL_OP) == OP_DELETE).select(
                *[F.col(quote_spark(k)) for k in key], F.col(COL_VERSION)
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
                landed = last_txn_version(self.spark, uri, self.app_id)
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


def _has_no_rows(uri: str) -> bool:
    """True only when the Delta log says the table holds no data file (delta-rs, no Spark job); any
    doubt (no table, a reader error) answers False, and the MERGE runs."""
    try:
        from deltalake import DeltaTable as LogReader

        return bool(LogReader(uri).get_add_actions(flatten=True).num_rows == 0)
    except Exception:
        return False


def _commit_output_rows(uri: str, version: int) -> int:
    """Rows an append commit wrote (its commitInfo's numOutputRows; 0 when unknown: informational)."""
    try:
        from deltalake import DeltaTable as LogReader

        for commit in LogReader(uri).history(5):
            if int(commit.get("version", -1)) == version:
                return int((commit.get("operationMetrics") or {}).get("numOutputRows") or 0)
    except Exception as e:
        log.warning("%s", kv(event="merge.metrics_unknown", table=uri, reason=one_line(e)))
    return 0


@dataclass(frozen=True)
class StagedFacts:
    """What the driver reads from a staged table's key and version columns (pyarrow, no Spark job)."""

    unique_keys: bool  # no key changes twice in the window
    min_version: int | None  # the oldest change's `_cdc_version` (None: no rows)


def staged_facts(window_dir: str, st: StagedTable) -> StagedFacts:
    import fsspec
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs, root = fsspec.core.url_to_fs(window_dir)
    parts = []
    for f in st.files:
        with fs.open(f"{root.rstrip('/')}/{f.path}", "rb") as fh:
            parts.append(pq.read_table(fh, columns=[*st.key, COL_VERSION]))
    if not parts:
        return StagedFacts(True, None)
    table = pa.concat_tables(parts, promote_options="permissive")
    if table.num_rows == 0:
        return StagedFacts(True, None)
    distinct = table.group_by(list(st.key)).aggregate([]).num_rows
    return StagedFacts(distinct == table.num_rows, int(pc.min(table[COL_VERSION]).as_py()))


def tombstones_may_supersede(tomb_uri: str, min_version: int | None) -> bool:
    """Whether some tombstone may be newer than a change of the window (so `drop_superseded` must run).

    Delete tombstones matter only for changes older than them: a replayed window or a backfill. In
    the steady stream every change is newer than every tombstone (change versions grow with binlog
    positions), and the Delta log's file statistics say so without reading the table. The window's
    own tombstones never drop one of its changes (only each key's latest change is merged).
    """
    from cdc_core.lake import delta_state

    if min_version is None:
        return False
    try:
        newest = delta_state.column_max(tomb_uri, COL_VERSION)
    except LookupError:
        return True  # no statistics: cannot tell
    return newest is not None and int(newest) >= min_version


def _may_have_deletes(st: StagedTable) -> bool:
    """False only when the manifest's counters are complete and say there is no delete."""
    counted = st.inserts + st.updates + st.deletes
    return st.deletes > 0 or counted != st.rows


def with_derived_columns(changes: DataFrame, delete_mode: str, seq: int) -> DataFrame:
    """The metadata columns computed when a window lands (cdc_core.model.merge_semantics.derived_columns)."""
    is_delete = F.col(COL_OP) == OP_DELETE
    exprs = {
        DERIVE_WINDOW_SEQ: F.lit(seq).cast(LongType()),
        DERIVE_IS_DELETE: is_delete,
        DERIVE_DELETE_TS: F.when(is_delete, F.col(COL_COMMIT_TS)).otherwise(F.lit(None).cast(TimestampType())),
    }
    for column, derivation in derived_columns(delete_mode):
        changes = changes.withColumn(column, exprs[derivation])
    return changes


def conform(df: DataFrame, target: StructType) -> DataFrame:
    """Cast source columns to the (equal or wider) target types; NULL for target columns the source lacks."""
    by_name = {f.name.lower(): f for f in target.fields}
    present = {f.name.lower() for f in df.schema.fields}
    cols = []
    for f in df.schema.fields:
        t = by_name.get(f.name.lower())
        c = F.col(quote_spark(f.name))
        cols.append(c.cast(t.dataType).alias(t.name) if t is not None and t.dataType != f.dataType else c)
    cols += [F.lit(None).cast(t.dataType).alias(t.name) for t in target.fields if t.name.lower() not in present]
    return df.select(*cols)


def drop_superseded(source: DataFrame, tombstones: DataFrame, key: Sequence[str]) -> DataFrame:
    """Drop changes older than their key's tombstone (a replayed insert must not resurrect a deleted row).

    The tombstone table is appended to, so a key deleted in several windows has several rows: the
    newest counts."""
    tomb = tombstones.groupBy(*[F.col(quote_spark(k)) for k in key]).agg(F.max(COL_VERSION).alias(COL_VERSION))
    tomb = tomb.select(
        *[F.col(quote_spark(k)).alias(f"__cdc_tk{i}") for i, k in enumerate(key)], F.col(COL_VERSION).alias("__cdc_tv")
    )
    cond = functools.reduce(
        lambda a, b: a & b, [source[quote_spark(k)].eqNullSafe(tomb[f"__cdc_tk{i}"]) for i, k in enumerate(key)]
    )
    kept = source.join(tomb, cond, "left").where(F.col("__cdc_tv").isNull() | (F.col(COL_VERSION) >= F.col("__cdc_tv")))
    return kept.select(*[source[quote_spark(f.name)] for f in source.schema.fields])


def merge_sql(uri: str, view: str, key: Sequence[str], delete_mode: str) -> str:
    """The window's MERGE into the Delta table at `uri` (clauses: cdc_core.model.merge_semantics)."""
    return spark_merge_sql(f"delta.{quote_spark(uri)}", view, key, delete_mode)


def derive_sql(uri: str, view: str, key: Sequence[str], columns: Sequence[str]) -> str:
    return spark_derive_sql(f"delta.{quote_spark(uri)}", view, key, columns)


def _no_fence() -> None:
    return None


def _land_table(run: _Run, st: LakeTarget) -> dict[str, Any]:
    """One table of the window, with the concurrent-creation retry; errors as LakeError/CdcError."""
    try:
        try:
            return run.merge_table(st)
        except Exception as e:
            if not _is_table_not_found(e):
                raise
            # A concurrent run of this window is creating the table (its first commit not visible
            # yet to one of our reads): wait for it, then merge the table again (idempotent).
            run.wait_for_table(table_uri(run.lake_root, st.schema, st.table), e)
            run.log("merge.retry", table=st.name, reason=one_line(e))
            return run.merge_table(st)
    except CdcError:
        raise
    except Exception as e:
        raise LakeError(
            f"{run.label()}: merging table {st.name} into {table_uri(run.lake_root, st.schema, st.table)} failed: "
            f"{one_line(e)}; tables merged before it stay merged and the merge is safe to retry"
        ) from e


def _merge_tables(run: _Run, targets: Sequence[LakeTarget], parallelism: int) -> dict[str, Any]:
    """Land every table of the window; results in manifest order.

    Tables whose txn version already holds the window are found without Spark (delta-rs reads the
    log) and never reach a writer. The others go to at most `parallelism` writer threads, each with
    its own Spark session (Delta's txnAppId/txnVersion and the commit's userMetadata are session
    confs, so two writers must never share one). The first failure stops new tables from starting;
    tables already merging finish (or fail), then the window fails with that first error: whatever
    committed stays committed, and a retry re-lands only the tables without the window's txn.
    """
    tables: dict[str, Any] = {}
    todo: list[LakeTarget] = []
    foreign: list[tuple[str, str, str]] = []
    unclaimed: set[str] = set()
    landed_by_table: dict[str, int | None] = {}
    for st in targets:  # one log read per table: its writer record and this pipeline's txn version
        uri = table_uri(run.lake_root, st.schema, st.table)
        state = table_writer_and_txn(run.spark, uri, run.app_id, run.table_props)
        owner = writer_pipeline(state[0]) if state else None
        if owner is not None and owner != run.pipeline:
            foreign.append((st.name, uri, owner))
        elif state is not None and owner is None:
            unclaimed.add(uri)
        landed_by_table[st.name] = state[1] if state else None
    if foreign:  # before anything is written: one writer per table (cdc_core.model.lake_writers)
        raise LakeError(foreign_writer_message(run.pipeline, run.seq, foreign))
    if unclaimed:
        run = replace(run, unclaimed=frozenset(unclaimed))
    for st in targets:
        landed = landed_by_table[st.name]
        if holds_window(landed, run.seq):
            tables[st.name] = {
                "status": STATUS_ALREADY, "inserted": 0, "updated": 0, "deleted": 0, "delta_version": None,
                "seconds": 0.0,
            }
            run.log("merge.table", table=st.name, status=STATUS_ALREADY, landed=landed)
        else:
            todo.append(st)
    run.log("merge.plan", tables=len(targets), to_merge=len(todo), parallelism=min(parallelism, len(todo)))
    run.schema_phase(todo)
    crash_after_first = len(targets) > 1
    done: dict[str, Any] = {}
    if parallelism <= 1 or len(todo) <= 1:
        for st in todo:
            done[st.name] = _land_table(run, st)
            if crash_after_first and len(done) == 1:
                faults.point("mid_merge")  # crash suite: some tables committed, others not
    else:
        done = _merge_concurrently(run, todo, parallelism, crash_after_first)
    for st in targets:
        if st.name in done:
            tables[st.name] = done[st.name]
    return tables


def _merge_concurrently(
    run: _Run, todo: Sequence[LakeTarget], parallelism: int, crash_after_first: bool
) -> dict[str, Any]:
    import queue
    import threading

    work: queue.Queue[LakeTarget] = queue.Queue()
    for st in todo:
        work.put(st)
    done: dict[str, Any] = {}
    errors: list[tuple[int, BaseException]] = []
    order = {st.name: i for i, st in enumerate(todo)}
    lock = threading.Lock()
    stop = threading.Event()

    def worker() -> None:
        mine = replace(run, spark=run.spark.newSession())  # own SQL conf: own txn identity
        while not stop.is_set():
            try:
                st = work.get_nowait()
            except queue.Empty:
                return
            try:
                result = _land_table(mine, st)
                with lock:
                    done[st.name] = result
                    first = len(done) == 1
                if crash_after_first and first:
                    # Crash suite: some tables committed, others still merging. An in-process fault (the
                    # suite's merge server) raises here: it stops the whole job as a SIGKILL would.
                    faults.point("mid_merge")
            except BaseException as e:  # re-raised by the caller
                with lock:
                    errors.append((order[st.name], e))
                stop.set()
                return

    threads = [
        threading.Thread(target=worker, name=f"cdc-merge-{i}", daemon=True) for i in range(min(parallelism, len(todo)))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        # Prefer a fencing verdict (exit code 5 tells the caller it is a zombie), else the first table's error.
        fenced = [e for _, e in errors if isinstance(e, Fenced)]
        raise fenced[0] if fenced else min(errors, key=lambda x: x[0])[1]
    return done


def merge_window(  # noqa: PLR0917 (the job's identity: callers pass it positionally)
    spark: SparkSession,
    manifest: Manifest,
    window_dir: str,
    lake_root: str,
    pipeline: str,
    seq: int,
    token: int,
    *,
    delete_mode: str = DELETE_HARD,
    table_options: dict[str, Any] | str | None = None,
    fence_check: Callable[[], None] | None = None,
    table_properties: dict[str, str] | None = None,
    parallelism: int = DEFAULT_PARALLELISM,
    source: str | None = None,
    routes: Sequence[Route] = (),
    group_sources: Sequence[str] = (),
    small_table_rows: int = small_writer.DEFAULT_MAX_ROWS,
    schema_policy: SchemaPolicy | None = None,
    zero_dates: str = "refuse",
) -> dict[str, Any]:
    """MERGE every table of the staged window into the lake, exactly once; returns the report.

    Up to `parallelism` tables land at the same time, each writer thread with a Spark session of
    its own (`spark.newSession()`: the txn identity is a session conf). `source`, `routes`: a group
    pipeline's source and the pipeline's routes (cdc_core.model.sources): which Delta table each staged
    table lands in and the lineage columns its rows carry. `small_table_rows`: tables holding at most this
    many rows once the window lands are merged by delta-rs, without a Spark job (0: none)."""
    t0 = time.monotonic()
    if delete_mode not in DELETE_MODES:
        raise ConfigError(f"delete_mode must be one of {', '.join(DELETE_MODES)}, got {delete_mode!r}")
    app_id = unit_name(pipeline, source)
    if manifest.plan.pipeline != app_id or manifest.plan.seq != seq:
        raise StagingError(
            f"the manifest in {window_dir} is window {manifest.plan.seq} of pipeline {manifest.plan.pipeline!r}, "
            f"not window {seq} of {app_id!r}; check --window-dir"
        )
    policy = schema_policy or SchemaPolicy()
    window = resolve_window(
        manifest.schema_changes, [(t.schema, t.table) for t in manifest.tables], policy,
        lake_tables_of_schemas(lake_root, manifest.schema_changes, unit_name(pipeline, source)),
    )
    staged = {(t.schema, t.table) for t in manifest.tables}
    extra = sorted({c.lake for c in window.changes} - staged)
    if extra:  # a dropped database's lake tables: each is emptied and records the window like the others
        manifest = replace(manifest, tables=(*manifest.tables, *(StagedTable(s, t, (), (), ()) for s, t in extra)))
    try:
        targets = lake_targets(manifest, routes, source, window.placements)
    except ValueError as e:  # a route whose target is not schema.table for this table
        raise ConfigError(str(e)) from None
    for target in targets:
        if path_component(target.schema) == TOMBSTONE_DIR:
            raise ConfigError(
                f"lake schema {target.schema!r} collides with the lake's tombstone directory {TOMBSTONE_DIR!r}"
            )
        target.columns()  # a routed pair of incompatible columns fails the window before anything is written
        target.key  # noqa: B018 (same, for routed tables with different keys)
    run = _Run(
        spark=spark,
        window_dir=window_dir,
        lake_root=lake_root,
        pipeline=pipeline,
        seq=seq,
        token=token,
        delete_mode=delete_mode,
        table_options=parse_table_options(table_options),
        fence=fence_check or _no_fence,
        run_id=uuid.uuid4().hex,
        default_properties=dict(table_properties or {}),
        source=source,
        group_sources=tuple(group_sources),
        routes=tuple(routes),
        small_table_rows=max(0, int(small_table_rows)),
        window=window,
        schema_policy=policy,
        chunks={c.table: c for c in chunks_of(manifest.plan)} if manifest.plan.kind == KIND_SNAPSHOT else {},
        zero_dates=zero_dates,
    )
    tables = _merge_tables(run, targets, max(1, int(parallelism)))
    report = {
        "pipeline": app_id,
        "seq": seq,
        "token": token,
        "tables": tables,
        "seconds": round(time.monotonic() - t0, 3),
    }
    if run.rereads:
        report["rereads"] = run.rereads
    run.log("merge.window", tables=len(tables), secs=report["seconds"])
    return report


# --------------------------------------------------------------------------------------- fencing




# ------------------------------------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None = None) -> MergeJobSpec:
    """The job's one argument, `--spec <json>` (cdc_core.lake.job_specs.MergeJobSpec), checked."""
    p = argparse.ArgumentParser(prog="merge_window.py", description="MERGE one staged window into Delta, exactly once")
    p.add_argument(SPEC_FLAG, dest="spec", required=True, help="the job's spec: a JSON object (MergeJobSpec)")
    spec = MergeJobSpec.from_json(p.parse_args(argv).spec)
    if spec.delete_mode not in DELETE_MODES:
        raise ConfigError(f"spec delete_mode must be one of {', '.join(DELETE_MODES)}, got {spec.delete_mode!r}")
    if spec.zk_hosts and not spec.zk_root:
        raise ConfigError("spec zk_hosts needs zk_root (the pipeline's ZooKeeper root)")
    if spec.parallelism < 1:
        raise ConfigError(f"spec parallelism must be >= 1, got {spec.parallelism}")
    return spec


def parse_table_properties(raw: str | dict[str, Any] | None) -> dict[str, str]:
    if not raw:
        return {}
    try:
        props = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise ConfigError(f'table_properties is not valid JSON ({e}); expected {{"delta.key": "value"}}') from e
    if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise ConfigError('table_properties must be a JSON object of strings {"delta.key": "value"}')
    return props


def build_session(app_name: str) -> SparkSession:
    """The spark-submit session, with the project's defaults for any conf the submitter did not set."""
    from pyspark import SparkConf

    from cdc_core.lake import object_store
    from cdc_core.lake.spark_conf import spark_confs

    submitted = SparkConf()
    try:
        defaults = spark_confs()
    except ConfigError:  # jars supplied another way (e.g. --packages on a cluster)
        defaults = {}
    # The object store's credentials arrive in the environment (never the command line): this process's
    # fsspec and delta-rs use them, and the session's s3a confs carry them to executors on other hosts.
    object_store.activate(object_store.from_env(os.environ))
    defaults.update(object_store.session_confs_from_env(os.environ))
    builder = SparkSession.builder.appName(app_name)
    for k, v in defaults.items():
        if k != "spark.jars" and not submitted.contains(k):
            builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if "DeltaSparkSessionExtension" not in (spark.conf.get("spark.sql.extensions", "") or ""):
        raise ConfigError(
            "the Spark session has no Delta extension: submit with the Delta jars and cdc_core.lake.spark_conf confs"
        )
    return spark


def write_report(target: str, report: dict[str, Any]) -> None:
    import fsspec

    fs, path = fsspec.core.url_to_fs(target)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "w") as f:
        f.write(json.dumps(report, sort_keys=True, indent=1))


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # spark-submit merges the driver's stderr into stdout, and the report must be the last stdout line:
    # keep py4j's shutdown chatter quiet, and print the report only after every client is closed.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    report = None
    try:
        report = _run(argv)
    except Exception as e:  # the exit code and error line the callers decode (cdc_core.lake.job_outcome)
        rc, said = job_error(MERGE_PROG, e)
        print(said, file=sys.stderr, flush=True)
        return rc
    print(json.dumps(report, sort_keys=True), flush=True)
    return 0


def _run(argv: Sequence[str] | None) -> dict[str, Any]:
    """spark-submit's job: a Spark + Delta session of its own, stopped at the end."""
    started: list[SparkSession] = []

    def new_session(args: MergeJobSpec) -> SparkSession:
        spark = build_session(f"cdc-merge-{unit_name(args.pipeline, args.source)}-{args.seq}")
        spark.sparkContext.setLogLevel("WARN")
        started.append(spark)
        return spark

    try:
        return run_job(argv, new_session)
    finally:
        for spark in started:
            spark.stop()


def run_job(argv: Sequence[str] | None, session_for: Callable[[MergeJobSpec], SparkSession]) -> dict[str, Any]:
    """The merge job, on the session `session_for(spec)` gives (a new one for spark-submit, a new session of a
    running application for the warm merge server, spark_apps/merge_server.py): parse the spec, fence before
    anything, MERGE every table (fencing before each commit), write the report; returns the report."""
    close_zk: Callable[[], None] | None = None
    try:
        args = parse_args(argv)
        faults.point("merge_start")  # fault point: the job has its spec, nothing is written yet
        options = parse_table_options(args.table_options)
        properties = parse_table_properties(args.table_properties)
        manifest = read_manifest(args.window_dir)
        fence = None
        if args.zk_hosts and args.zk_root:  # parse_args refused hosts without a root
            fence, close_zk = zk_fence_check(args.zk_hosts, args.zk_root, args.pipeline, args.token)
            fence()  # fail before paying for anything when already fenced
        t_session = time.monotonic()
        spark = session_for(args)
        session_seconds = round(time.monotonic() - t_session, 3)
        report = merge_window(
            spark,
            manifest,
            args.window_dir,
            args.lake_root,
            args.pipeline,
            args.seq,
            args.token,
            delete_mode=args.delete_mode,
            table_options=options,
            fence_check=fence,
            table_properties=properties,
            parallelism=args.parallelism,
            source=args.source,
            routes=[Route.from_dict(r) for r in args.routes],
            group_sources=args.group_sources,
            small_table_rows=args.small_table_rows,
            schema_policy=SchemaPolicy.from_dict(args.schema_changes),
            zero_dates=args.zero_dates,
        )
        report["session_seconds"] = session_seconds  # informational (Spark + Delta session start; ~0 when warm)
        write_report(args.report, report)
        return report
    finally:
        if close_zk is not None:
            close_zk()


if __name__ == "__main__":
    sys.exit(main())
