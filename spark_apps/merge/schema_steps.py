"""The merge job's schema changes with Spark: carry out a lake table's plan (cdc_core.model.schema_evolution).

What each change does to the lake is decided in cdc_core.model.schema_evolution; this module only renders
its steps as Spark and Delta operations, each preceded by the fence check:

- add columns: `ALTER TABLE ... ADD COLUMNS` (metadata only);
- rewrite (renames, drops, casts): the table read and overwritten with its new columns in one commit, so every
  reader (delta-rs included) reads it without column mapping or type widening (docs/schema-changes.md);
- reset (a re-created table): overwritten with the new columns;
- row steps: `DELETE` / `UPDATE ... WHERE _cdc_version < <change>` (within the source's lineage in a routed
  table), idempotent by construction;
- the mark: the table's schema record (`ALTER TABLE ... SET TBLPROPERTIES`), last.

It also reads a window's staged changes translated through the table's history (renamed, dropped, cast,
filled, and nothing older than the floor).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from cdc_core.lake import small_writer
from cdc_core.lake.object_store import Storage
from cdc_core.model import faults
from cdc_core.model.ddl.conversions import FRACTION, SHORT_BINARY, TRAILING_SPACE, ValueCheck
from cdc_core.model.errors import SchemaConflict, StagingError
from cdc_core.model.logfmt import kv
from cdc_core.model.manifest import COL_DELETED, COL_DELETED_AT, COL_OP, COL_VERSION, StagedFile, StagedTable
from cdc_core.model.merge_semantics import metadata_columns
from cdc_core.model.naming import quote_spark
from cdc_core.model.schema_evolution import (
    D_COPY,
    D_DELETE,
    D_FILL,
    D_TOMBSTONE,
    S_ADD_COLUMNS,
    S_RESET,
    S_REWRITE,
    LakeColumn,
    OpPlan,
    RowStep,
    SchemaState,
    Structure,
    Translation,
    structure_done,
    translate_columns,
    translation_pieces,
)
from cdc_core.model.schema_values import Literal, normalise_delta_type
from spark_apps.merge.tables import has_no_rows

log = logging.getLogger("cdc.merge")

class Runner(Protocol):
    """What the steps need of the merge job's run (spark_apps.merge_window._Run)."""

    @property
    def spark(self) -> SparkSession: ...

    @property
    def fence(self) -> Callable[[], None]: ...

    def log(self, event: str, **fields: Any) -> None: ...

    def commit_metadata(self, label: str) -> str: ...

    @property
    def storage(self) -> Storage: ...

    def delta_rs_commits(self, uri: str) -> bool: ...


USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


# ------------------------------------------------------------------------------------------ state


@dataclass(frozen=True)
class LakeTable:
    """A lake table as the schema steps see it."""

    exists: bool
    columns: tuple[LakeColumn, ...]  # every column, the lake's metadata and lineage columns included
    properties: dict[str, str]
    partition_by: tuple[str, ...]

    def source_columns(self, reserved: Sequence[str]) -> tuple[LakeColumn, ...]:
        low = {r.lower() for r in reserved}
        return tuple(c for c in self.columns if c.name.lower() not in low)


def read_lake_table(spark: SparkSession, uri: str, *, storage: Storage) -> LakeTable:
    """The table's columns, properties and partitioning from its Delta log: with delta-rs (milliseconds; `storage`:
    the job's), with Spark when delta-rs cannot read the table."""
    from cdc_core.lake import delta_state

    try:
        table = delta_state.open_table(uri, storage=storage)
        if table is None:
            return LakeTable(False, (), {}, ())
        meta = table.metadata()
        return LakeTable(
            True,
            tuple(LakeColumn(f.name, str(getattr(f.type, "type", f.type))) for f in table.schema().fields),
            {str(k): str(v) for k, v in (meta.configuration or {}).items()},
            tuple(meta.partition_columns or ()),
        )
    except Exception:  # noqa: S110 (a table feature delta-rs does not read: Spark reads it)
        pass
    if not DeltaTable.isDeltaTable(spark, uri):
        return LakeTable(False, (), {}, ())
    detail = DeltaTable.forPath(spark, uri).detail().collect()[0].asDict()
    schema = spark.read.format("delta").load(uri).schema
    return LakeTable(
        True,
        tuple(LakeColumn(f.name, f.dataType.simpleString()) for f in schema.fields),
        dict(detail.get("properties") or {}),
        tuple(detail.get("partitionColumns") or ()),
    )


def holds_converted(
    spark: SparkSession, uri: str, staged: Sequence[str], column: LakeColumn, check: ValueCheck
) -> bool:
    """Whether the lake table, or one of the window's `staged` files written before the change (their rows land
    after the schema phase), holds a value of `column` that the server's conversion `check` changed (a fraction
    beyond the new precision, a trailing space, a value shorter than BINARY(n)); True when a type is not one the
    check knows, or a staged file lacks the column (the table is then re-read)."""
    c = quote_spark(column.name)
    frames = [spark.read.format("delta").load(uri), *(spark.read.parquet(f) for f in staged)]
    for df in frames:
        field = next((f for f in df.schema.fields if f.name.lower() == column.name.lower()), None)
        where = _converted_where(c, field.dataType.simpleString(), check) if field is not None else None
        if where is None or df.where(where).limit(1).count():
            return True
    return False


def _converted_where(c: str, spark_type: str, check: ValueCheck) -> str | None:
    if check.kind == FRACTION and spark_type.startswith("timestamp"):
        return f"(EXTRACT(SECOND FROM {c}) * 1000000) % {10 ** (6 - check.size)} <> 0"
    if check.kind == FRACTION and spark_type == "bigint":  # TIME: signed microseconds
        return f"{c} % {10 ** (6 - check.size)} <> 0"
    if check.kind == TRAILING_SPACE and spark_type == "string":
        return f"RIGHT({c}, 1) = ' '"
    if check.kind == SHORT_BINARY and spark_type == "binary":
        return f"OCTET_LENGTH({c}) < {check.size}"
    return None


# ------------------------------------------------------------------------------------------ steps


def apply_op(run: Runner, uri: str, label: str, op: OpPlan, *, app_id: str, delete_mode: str,
             lineage: Sequence[tuple[str, str]] = (), column_mapping: bool = True) -> None:
    """One schema change's steps on the lake table at `uri`: structure (unless already there), rows, mark."""
    spark = run.spark
    if op.structure is not None:
        table = read_lake_table(spark, uri, storage=run.storage)
        reserved = [*(n for n, _ in metadata_columns(delete_mode)), *(c for c, _ in lineage)]
        if not structure_done(op.structure, table.source_columns(reserved)):
            run.fence()
            _structure(run, uri, label, op.structure, table=table, delete_mode=delete_mode,
                       column_mapping=column_mapping)
    # A table without data files has no row a step could change (a table created by this window): no Spark job.
    steps = op.rows if op.rows and not has_no_rows(uri) else ()
    for step in steps:
        run.fence()
        statement = _row_sql(uri, step, delete_mode, lineage)
        _with_metadata(run, label, functools.partial(_collect, spark, statement))
    faults.point("mid_schema_change")  # crash suite: the change's structure and row steps done, its mark not
    set_properties(run, uri, label, op.state.properties(app_id))
    run.log("merge.schema_change", table=label, change=op.change.kind, version=op.version,
            query=op.change.query[:200] or op.change.describe(), **({"note": op.note} if op.note else {}))


def sweep_after_reread(run: Runner, uri: str, label: str, *, app_id: str, version: int, delete_mode: str,
                       lineage: Sequence[tuple[str, str]] = ()) -> bool:
    """The last chunk of a re-read the schema change at `version` asked for is landing: every row the source still
    has was read again (and carries a newer version), so lake rows older than `version` are gone at the source.
    They go (hard mode) or become tombstones (soft), and the floor moves to `version` (an older change never lands
    again). Idempotent; False when it was done before."""
    table = read_lake_table(run.spark, uri, storage=run.storage)
    if not table.exists:
        return False
    state = SchemaState.from_properties(table.properties, app_id)
    if state.floor >= version:
        return False
    kind = D_DELETE if delete_mode == "hard" else D_TOMBSTONE
    step = RowStep(kind, version, commit_ts=0.0)
    run.fence()
    statement = _row_sql(uri, step, delete_mode, lineage)
    _with_metadata(run, label, functools.partial(_collect, run.spark, statement))
    done = SchemaState(state.version, state.step, state.history, max(state.floor, version), state.dropped,
                       state.pending, 0 if state.reread <= version else state.reread, False)
    set_properties(run, uri, label, done.properties(app_id))
    run.log("merge.reread_swept", table=label, below=version)
    return True


def set_properties(run: Runner, uri: str, label: str, props: dict[str, str]) -> None:
    """One commit of the table properties (a schema change's record: `mark`); delta-rs where it may write the
    table, milliseconds rather than a Spark job's seconds per schema change."""
    if run.delta_rs_commits(uri):
        why = small_writer.set_properties(uri, props, run.commit_metadata(label), run.fence, storage=run.storage)
        if why is None:
            return
        log.debug("%s", kv(event="merge.spark_properties", table=label, reason=why))
    run.fence()
    _with_metadata(run, label, lambda: run.spark.sql(
        f"ALTER TABLE delta.{quote_spark(uri)} SET TBLPROPERTIES ("
        + ", ".join(f"{_sql_str(k)} = {_sql_str(v)}" for k, v in sorted(props.items()))
        + ")"
    ))


def _collect(spark: SparkSession, statement: str) -> Any:
    return spark.sql(statement).collect()


def _with_metadata(run: Runner, label: str, action: Callable[[], Any]) -> Any:
    conf = run.spark.conf
    conf.set(USER_METADATA_CONF, run.commit_metadata(label))
    try:
        return action()
    finally:
        conf.unset(USER_METADATA_CONF)


def _structure(
    run: Runner, uri: str, label: str, s: Structure, *, table: LakeTable, delete_mode: str, column_mapping: bool = True
) -> None:
    spark = run.spark
    q = quote_spark
    timestamp_ntz_supported(run, uri, label, [t for _, t in (*s.columns, *s.casts, *s.adds)], table)
    if s.kind == S_ADD_COLUMNS:
        have = {c.name.lower() for c in table.columns}
        cols = [(n, t) for n, t in s.columns if n.lower() not in have]
        if cols:
            _with_metadata(run, label, lambda: spark.sql(
                f"ALTER TABLE delta.{q(uri)} ADD COLUMNS (" + ", ".join(f"{q(n)} {t}" for n, t in cols) + ")"
            ))
        return
    if s.kind == S_REWRITE and not s.casts and not s.adds and column_mapping and not _renames_partition(s, table):
        _rename_and_drop_in_place(run, uri, label, s, table)
        return
    df, parts = _rewritten(spark.read.format("delta").load(uri), s, list(table.partition_by), delete_mode)
    writer = (
        df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        .option("userMetadata", run.commit_metadata(label))
    )
    if parts:
        writer = writer.partitionBy(*parts)
    writer.save(uri)
    run.log("merge.table_rewritten", table=label, structure=s.kind)


def rewrite_columns(run: Runner, uri: str, label: str, structure: Structure, delete_mode: str = "hard") -> None:
    """A rewrite outside a schema change's plan (a widening the staged types show): fenced, one commit."""
    run.fence()
    _structure(run, uri, label, structure, table=read_lake_table(run.spark, uri, storage=run.storage),
               delete_mode=delete_mode)


COLUMN_MAPPING_PROPS = {
    "delta.columnMapping.mode": "name",
    "delta.minReaderVersion": "2",
    "delta.minWriterVersion": "5",
}


def _renames_partition(s: Structure, table: LakeTable) -> bool:
    parts = {p.lower() for p in table.partition_by}
    return any(old.lower() in parts for old, _ in s.renames) or any(d.lower() in parts for d in s.drops)


def _rename_and_drop_in_place(run: Runner, uri: str, label: str, s: Structure, table: LakeTable) -> None:
    """Renames and drops as metadata (Delta column mapping, name mode): no data file is rewritten. Spark and
    delta-rs' own engine (`DeltaTable.scan`, QueryBuilder) read such tables; `to_pyarrow_table` does not
    (docs/schema-changes.md: `column_mapping: false` rewrites the table instead)."""
    spark = run.spark
    q = quote_spark
    target = f"delta.{q(uri)}"
    if table.properties.get("delta.columnMapping.mode", "none") == "none":
        _with_metadata(run, label, lambda: spark.sql(
            f"ALTER TABLE {target} SET TBLPROPERTIES ("
            + ", ".join(f"{_sql_str(k)} = {_sql_str(v)}" for k, v in COLUMN_MAPPING_PROPS.items()) + ")"
        ))
        run.log("merge.table_properties", table=label, properties="delta.columnMapping.mode=name")
    names = {c.name.lower(): c.name for c in table.columns}
    for old, new in s.renames:
        have = names.get(old.lower())
        if have is None:
            continue
        run.fence()
        rename = f"ALTER TABLE {target} RENAME COLUMN {q(have)} TO {q(new)}"
        _with_metadata(run, label, functools.partial(spark.sql, rename))
        names.pop(old.lower())
        names[new.lower()] = new
    drops = [names[d.lower()] for d in s.drops if d.lower() in names]
    if drops:
        run.fence()
        _with_metadata(run, label, lambda: spark.sql(
            f"ALTER TABLE {target} DROP COLUMNS (" + ", ".join(q(d) for d in drops) + ")"
        ))


def _rewritten(df: DataFrame, s: Structure, parts: list[str], delete_mode: str) -> tuple[DataFrame, list[str]]:
    """The table's rows with the structure's new columns, and its partition columns after it."""
    q = quote_spark
    if s.kind == S_REWRITE:
        for old, new in s.renames:
            if _has(df, old):
                df = df.withColumnRenamed(_spelled(df, old), new)
                parts = [new if p.lower() == old.lower() else p for p in parts]
        for d in s.drops:
            if _has(df, d):
                df = df.drop(_spelled(df, d))
                parts = [p for p in parts if p.lower() != d.lower()]
        for name, t in s.casts:
            df = df.withColumn(_spelled(df, name), F.col(q(_spelled(df, name))).cast(t))
        for name, t in s.adds:
            if not _has(df, name):
                df = df.withColumn(name, F.lit(None).cast(t))
    else:
        assert s.kind == S_RESET, s.kind
        meta = {n.lower() for n, _ in metadata_columns(delete_mode)}
        keep = [f.name for f in df.schema.fields if f.name.lower() in meta or f.name.lower().startswith("_cdc_")]
        projected = [
            (F.col(q(_spelled(df, n))).cast(t) if _has(df, n) else F.lit(None).cast(t)).alias(n) for n, t in s.columns
        ]
        df = df.select(*projected, *[F.col(q(k)) for k in keep])
        parts = [p for p in parts if any(p.lower() == n.lower() for n, _ in s.columns)]
    return df, parts


NTZ_FEATURE = "delta.feature.timestampNtz"


def timestamp_ntz_supported(run: Runner, uri: str, label: str, new_types: Sequence[str], table: LakeTable) -> None:
    """A DATETIME column (TIMESTAMP_NTZ) needs Delta's timestampNtz table feature before it can be added or cast
    to; a table created without one gets the feature first (one property commit, as schema evolution does)."""
    if not any(normalise_delta_type(t) == "timestamp_ntz" for t in new_types):
        return
    if any(normalise_delta_type(c.delta_type) == "timestamp_ntz" for c in table.columns):
        return  # a table with such a column has the feature
    if table.properties.get(NTZ_FEATURE) == "supported":
        return
    run.fence()
    _with_metadata(run, label, functools.partial(
        run.spark.sql, f"ALTER TABLE delta.{quote_spark(uri)} SET TBLPROPERTIES ('{NTZ_FEATURE}' = 'supported')"
    ))


def _has(df: DataFrame, name: str) -> bool:
    return any(f.name.lower() == name.lower() for f in df.schema.fields)


def _spelled(df: DataFrame, name: str) -> str:
    return next(f.name for f in df.schema.fields if f.name.lower() == name.lower())


def _row_sql(uri: str, step: RowStep, delete_mode: str, lineage: Sequence[tuple[str, str]]) -> str:
    q = quote_spark
    where = f"{q(COL_VERSION)} < {int(step.version)}"
    for col, value in lineage:
        where += f" AND {q(col)} = {_sql_str(value)}"
    target = f"delta.{q(uri)}"
    if step.kind == D_DELETE:
        return f"DELETE FROM {target} WHERE {where}"
    if step.kind == D_TOMBSTONE:
        ts = dt.datetime.fromtimestamp(step.commit_ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        return (
            f"UPDATE {target} SET {q(COL_DELETED)} = true, {q(COL_DELETED_AT)} = TIMESTAMP '{ts} UTC', "
            f"{q(COL_OP)} = 'D' WHERE {where} AND NOT coalesce({q(COL_DELETED)}, false)"
        )
    if step.kind == D_FILL:
        assert step.fill is not None
        return f"UPDATE {target} SET {q(step.column)} = {spark_literal(step.fill)} WHERE {where}"
    assert step.kind == D_COPY, step.kind
    return f"UPDATE {target} SET {q(step.column)} = {q(step.source_column)} WHERE {where}"


def _sql_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def spark_literal(lit: Literal) -> str:
    """A Spark SQL literal of `lit`'s Delta type."""
    v, t = lit.value, lit.delta_type
    if v is None:
        return f"CAST(NULL AS {t})"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, bytes):
        return f"X'{v.hex()}'"
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            return f"TIMESTAMP '{v.astimezone(dt.UTC).strftime('%Y-%m-%d %H:%M:%S.%f')} UTC'"
        return f"CAST('{v.isoformat(sep=' ')}' AS {t})"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, (int, decimal.Decimal)):
        return f"CAST('{v}' AS {t})"
    if isinstance(v, float):
        return f"CAST('{v!r}' AS {t})"
    return f"CAST({_sql_str(str(v))} AS {t})"


# ------------------------------------------------------------------------------ translated read


def read_translated(
    spark: SparkSession,
    window_dir: str,
    st: StagedTable,
    state: SchemaState,
    *,
    staged_meta: Sequence[tuple[str, DataType]],
    parse_type: Callable[[str, str], DataType],
    can_widen: Callable[[DataType, DataType], bool],
    versions: Sequence[tuple[int, int] | None],
    since: int | None = None,
    until: int | None = None,
) -> DataFrame | None:
    """The staged changes of `st`, each file translated through the table's history (state.history) as of
    its newest change, without changes older than the floor; `since`/`until`: only changes in that version
    range (a renamed table's rows before and after the rename). `versions`: each file's (min, max) change
    version (None: no rows). None when nothing remains."""
    # The manifest has the name's newest types. Rows from before a rename (`until`) keep the types they hold: the
    # name's newest may be another table's (RENAME TABLE a TO tmp, b TO a, tmp TO b, then a MODIFY of the new a).
    manifest_types = {} if until is not None else {
        c.name.lower(): parse_type(c.delta_type, f"table {st.name} column {c.name!r}") for c in st.columns}
    parts: list[DataFrame] = []
    for f, span in zip(st.files, versions, strict=True):
        if span is None:
            continue
        lo, hi = span
        if hi < state.floor or (since is not None and hi < since) or (until is not None and lo >= until):
            continue
        df = spark.read.parquet(f"{window_dir.rstrip('/')}/{f.path}")
        pieces = translation_pieces(lo, hi, state.history)
        for piece_lo, piece_hi in pieces:
            if (since is not None and piece_hi < since) or (until is not None and piece_lo >= until):
                continue  # none of its rows land here, and its columns (another table's after a swap) must not
            part = _translated_part(df, st, f, translate_columns(f.columns, piece_hi, state.history), state,
                                    staged_meta=staged_meta, manifest_types=manifest_types, can_widen=can_widen)
            if len(pieces) > 1:
                part = part.where(F.col(COL_VERSION).between(piece_lo, piece_hi))
            if state.floor > piece_lo:
                part = part.where(F.col(COL_VERSION) >= state.floor)
            if since is not None and piece_lo < since:
                part = part.where(F.col(COL_VERSION) >= since)
            if until is not None and piece_hi >= until:
                part = part.where(F.col(COL_VERSION) < until)
            parts.append(part)
    if not parts:
        return None
    return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)


def _translated_part(
    df: DataFrame, st: StagedTable, f: StagedFile, tr: Translation, state: SchemaState, *,
    staged_meta: Sequence[tuple[str, DataType]], manifest_types: dict[str, DataType],
    can_widen: Callable[[DataType, DataType], bool],
) -> DataFrame:
    """One staged file's rows as the translation `tr` says (renamed, dropped, cast, filled, copied)."""
    q = quote_spark
    present = {fld.name.lower(): fld for fld in df.schema.fields}
    # Staged metadata newer than the file (`_cdc_txn`) reads as NULL.
    select = [(F.col(q(n)) if n.lower() in present else F.lit(None)).cast(t).alias(n) for n, t in staged_meta]
    casts = {n.lower(): t for n, t in tr.casts}
    for name in f.columns:
        low = name.lower()
        out = tr.output_of(name)  # every rename and drop since the file was written, composed
        if out is None:
            continue
        fld = present.get(low)
        if fld is None:
            raise StagingError(f"table {st.name} file {f.path}: column {name!r} is missing; re-stage the window")
        col = F.col(q(fld.name))
        if out.lower() in casts:
            col = col.cast(casts[out.lower()])
        else:
            want = manifest_types.get(out.lower())
            if want is not None and fld.dataType != want:
                if not can_widen(fld.dataType, want):
                    raise SchemaConflict(
                        f"table {st.name} column {name!r}: staged file {f.path} holds "
                        f"{fld.dataType.simpleString()} but the window's type is {want.simpleString()}, which "
                        "is not a widening, and no schema change of the window says how the values converted"
                    )
                col = col.cast(want)
        select.append(col.alias(out))
    for name, source, t in tr.copies:
        fld = present.get(source.lower())
        select.append((F.col(q(fld.name)).cast(t) if fld is not None else F.lit(None).cast(t)).alias(name))
    for name, fill in tr.fills:
        t = fill.delta_type if fill is not None else _history_type(state, name)
        value = F.lit(None).cast(t) if fill is None or fill.value is None else F.expr(spark_literal(fill))
        select.append(value.alias(name))
    return df.select(*select)


def _history_type(state: SchemaState, name: str) -> str:
    for op in reversed(state.history):
        if op.column.lower() == name.lower() and op.delta_type:
            return op.delta_type
    return "STRING"


def file_versions(window_dir: str, st: StagedTable, *, storage: Storage) -> list[tuple[int, int] | None]:
    """Each staged file's (min, max) `_cdc_version`, from its Parquet footer (read with pyarrow, no Spark)."""
    import pyarrow.parquet as pq

    fs, root = storage.fs(window_dir)
    out: list[tuple[int, int] | None] = []
    for f in st.files:
        if f.rows == 0:
            out.append(None)
            continue
        with fs.open(f"{root.rstrip('/')}/{f.path}", "rb") as fh:
            meta = pq.ParquetFile(fh).metadata
        idx = meta.schema.to_arrow_schema().get_field_index(COL_VERSION)
        lo: int | None = None
        hi: int | None = None
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(idx).statistics
            if stats is None or not stats.has_min_max:
                with fs.open(f"{root.rstrip('/')}/{f.path}", "rb") as fh2:
                    col = pq.read_table(fh2, columns=[COL_VERSION])[COL_VERSION]
                import pyarrow.compute as pc

                mm = pc.min_max(col).as_py()
                lo, hi = int(mm["min"]), int(mm["max"])
                break
            lo = int(stats.min) if lo is None else min(lo, int(stats.min))
            hi = int(stats.max) if hi is None else max(hi, int(stats.max))
        out.append(None if lo is None or hi is None else (lo, hi))
    return out


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    return spark.createDataFrame([], schema)

