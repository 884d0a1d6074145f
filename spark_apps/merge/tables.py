"""Lake tables as Delta objects: the options and properties a new table starts with, its CREATE TABLE, the txn
version it holds for a pipeline (delta-rs, or Spark's DeltaLog), and the MERGE statements rendered from
cdc_core.model.merge_semantics.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DataType,
)

from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.lake.small_writer import needs_column_mapping
from cdc_core.model.errors import (
    CdcError,
    ConfigError,
)
from cdc_core.model.lake_writers import WRITER_PROPERTY
from cdc_core.model.logfmt import kv, one_line
from cdc_core.model.merge_semantics import (
    spark_derive_sql,
    spark_merge_sql,
)
from cdc_core.model.naming import quote_spark
from cdc_core.model.output_modes import OutputModes
from cdc_core.model.retention import CHECKPOINT_INTERVAL, PROP_CHECKPOINT_INTERVAL
from spark_apps.spark_job import sql_str

log = logging.getLogger("cdc.merge")


# zorder_by is read by the maintenance job (spark_apps/maintain_tables.py), not at table creation.
TABLE_OPTION_KEYS = ("partition_by", "change_data_feed", "properties", "zorder_by", "outputs", "track")


# Every table the job creates, unless --table-options says otherwise. Deletion vectors: a MERGE marks
# the changed rows of a data file deleted instead of rewriting the file, so its cost follows the window,
# not the table (bench/RESULTS.md: "without deletion vectors"). Readers need Delta reader version 3
# (Spark with Delta >= 2.3, delta-rs `DeltaTable.scan`, cdc_core.lake.delta_state.read_rows).
DV_PROPERTY = "delta.enableDeletionVectors"


DEFAULT_TABLE_PROPERTIES = {DV_PROPERTY: "true"}


# How long a run waits for a concurrent run's CREATE TABLE of the same table to commit.
CREATE_RACE_SECONDS = 30.0


@dataclass(frozen=True)
class TableOptions:
    partition_by: tuple[str, ...] = ()
    change_data_feed: bool = False
    properties: tuple[tuple[str, str], ...] = ()
    # History and change-log tables (cdc_core.model.output_modes).
    outputs: OutputModes = field(default_factory=OutputModes)

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
        try:
            outputs = OutputModes.parse(name, d.get("outputs"), d.get("track"))
        except ValueError as e:
            raise ConfigError(f"--table-options[{name!r}]: {e}") from None
        return cls(
            tuple(parts),
            bool(d.get("change_data_feed", False)),
            tuple(sorted((str(k), str(v)) for k, v in props.items())),
            outputs,
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
    defaults = {PROP_CHECKPOINT_INTERVAL: str(CHECKPOINT_INTERVAL),
                **(DEFAULT_TABLE_PROPERTIES if deletion_vectors else {})}
    props = {**defaults, **(default_properties or {}), **options.table_properties()}
    if writer is not None:
        props[WRITER_PROPERTY] = writer
    if any(needs_column_mapping(n) for n in names):
        props.setdefault("delta.columnMapping.mode", "name")
    return props


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


def last_txn_version(spark: SparkSession, uri: str, app_id: str, *, storage: Storage = AMBIENT) -> int | None:
    """`app_id`'s last txn version in the table: read with delta-rs (no Spark job; `storage`: the job's), through
    the JVM's DeltaLog when delta-rs cannot read the table (e.g. a table feature it does not know yet)."""
    from cdc_core.lake import delta_state

    try:
        v = delta_state.last_txn_version(uri, app_id, storage=storage)
        return None if v is None else int(v)
    except CdcError:
        raise
    except Exception as e:
        log.warning("%s", kv(event="merge.txn_read_fallback", table=uri, reason=one_line(e)))
    return _jvm_last_txn_version(spark, uri, app_id)


def table_writer_and_txn(
    spark: SparkSession, uri: str, app_id: str, properties: dict[str, dict[str, str]] | None = None, *,
    storage: Storage,
) -> tuple[str | None, int | None] | None:
    """(recorded writer `cdc.writer`, `app_id`'s last txn version) of the table; None when there is no table.
    `properties`: gets the table's properties (uri -> properties) from the same snapshot."""
    from cdc_core.lake import delta_state

    try:
        found = delta_state.writer_txn_properties(uri, app_id, storage=storage)
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


def has_no_rows(uri: str) -> bool:
    """True only when the Delta log says the table holds no data file (delta-rs, no Spark job); any
    doubt (no table, a reader error) answers False, and the MERGE runs."""
    try:
        from deltalake import DeltaTable as LogReader

        return bool(LogReader(uri).get_add_actions(flatten=True).num_rows == 0)
    except Exception:
        return False


def commit_output_rows(uri: str, version: int) -> int:
    """Rows an append commit wrote (its commitInfo's numOutputRows; 0 when unknown: informational)."""
    try:
        from deltalake import DeltaTable as LogReader

        for commit in LogReader(uri).history(5):
            if int(commit.get("version", -1)) == version:
                return int((commit.get("operationMetrics") or {}).get("numOutputRows") or 0)
    except Exception as e:
        log.warning("%s", kv(event="merge.metrics_unknown", table=uri, reason=one_line(e)))
    return 0


def merge_sql(uri: str, view: str, key: Sequence[str], delete_mode: str) -> str:
    """The window's MERGE into the Delta table at `uri` (clauses: cdc_core.model.merge_semantics)."""
    return spark_merge_sql(f"delta.{quote_spark(uri)}", view, key, delete_mode)


def derive_sql(uri: str, view: str, key: Sequence[str], columns: Sequence[str]) -> str:
    return spark_derive_sql(f"delta.{quote_spark(uri)}", view, key, columns)
