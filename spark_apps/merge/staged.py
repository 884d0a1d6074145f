"""A staged window as the merge reads it: the manifest, each table's changes as Spark rows (one read per file
shape, widening casts), each key's last change, the facts the driver reads with pyarrow (unique keys, oldest
change), and the columns the merge computes or conforms (cdc_core.model.merge_semantics).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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

from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model import merge_semantics
from cdc_core.model.errors import (
    SchemaConflict,
    StagingError,
)
from cdc_core.model.logfmt import one_line
from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_OP,
    COL_ORDINAL,
    COL_TXN,
    COL_VERSION,
    MANIFEST_NAME,
    OP_DELETE,
    Manifest,
    StagedTable,
)
from cdc_core.model.merge_semantics import (
    DERIVE_DELETE_TS,
    DERIVE_IS_DELETE,
    DERIVE_WINDOW_SEQ,
    derived_columns,
)
from cdc_core.model.naming import quote_spark

log = logging.getLogger("cdc.merge")


STAGED_META = (
    (COL_OP, StringType()),
    (COL_VERSION, LongType()),
    (COL_ORDINAL, LongType()),
    (COL_COMMIT_TS, TimestampType()),
    (COL_TXN, LongType()),
)
# Staged metadata a window staged before it existed does not have: read as NULL.
OPTIONAL_STAGED_META = frozenset({COL_TXN})


STAGED_META_NAMES = frozenset(n for n, _ in STAGED_META)


@functools.lru_cache(maxsize=4096)
def spark_type(ddl: str) -> DataType:
    """`DataType.fromDDL`, once per type string per process: the parse is a call into the JVM, and a window
    of many tables would make it for every column of every table, from every writer thread."""
    return DataType.fromDDL(ddl)


def metadata_columns(delete_mode: str) -> list[tuple[str, DataType]]:
    """The lake table's metadata columns as Spark types (cdc_core.model.merge_semantics states them)."""
    return [(name, spark_type(ddl)) for name, ddl in merge_semantics.metadata_columns(delete_mode)]


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


def parse_type(ddl: str, where: str) -> DataType:
    try:
        return spark_type(ddl)
    except Exception as e:
        raise StagingError(
            f"{where}: delta_type {ddl!r} is not a Spark SQL type ({one_line(e)}); fix the type map and re-stage"
        ) from e


def read_manifest(window_dir: str, *, storage: Storage = AMBIENT) -> Manifest:
    uri = f"{window_dir.rstrip('/')}/{MANIFEST_NAME}"
    try:
        with storage.open(uri, "rb") as f:
            return Manifest.from_json(f.read())
    except FileNotFoundError as e:
        raise StagingError(
            f"no {MANIFEST_NAME} in {window_dir}: the window is not (completely) staged; run the stage step"
        ) from e


def read_staged_table(spark: SparkSession, window_dir: str, st: StagedTable, *, storage: Storage) -> DataFrame:
    """All staged changes of one table, every manifest column present (NULL where a file lacks it). `storage`:
    the driver's reads of the files' footers (Spark reads the rows through its own s3a confs)."""
    import pyarrow.parquet as pq

    types = {c.name: parse_type(c.delta_type, f"table {st.name} column {c.name!r}") for c in st.columns}
    out_schema = StructType()
    for name, t in (*STAGED_META, *types.items()):
        out_schema.add(name, t, True)
    if not st.files:
        return spark.createDataFrame([], out_schema)

    # Group files by their physical schema so one Spark read serves each group (usually one per table).
    fs, root = storage.fs(window_dir)
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
        for name, want in (*STAGED_META, *types.items()):
            if (name in types and name not in cols) or (name in OPTIONAL_STAGED_META and name not in present):
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


@dataclass(frozen=True)
class StagedFacts:
    """What the driver reads from a staged table's key and version columns (pyarrow, no Spark job)."""

    unique_keys: bool  # no key changes twice in the window
    min_version: int | None  # the oldest change's `_cdc_version` (None: no rows)


def staged_facts(window_dir: str, st: StagedTable, *, storage: Storage) -> StagedFacts:
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdc_core.lake.staging_store import read_staged_file

    fs, root = storage.fs(window_dir)
    # Each file by the key its rows were written under: a key column renamed in the window (CHANGE id id2) is
    # the same key under the table's newest names; a key of another shape makes the keys incomparable.
    keys = [tuple(f.key) if f.key is not None else tuple(st.key) for f in st.files]
    comparable = all(len(k) == len(st.key) for k in keys)
    parts = []
    for f, k in zip(st.files, keys, strict=True):
        read = [*(k if comparable else ()), COL_VERSION]
        data = read_staged_file(fs, f"{root.rstrip('/')}/{f.path}", f, read).select(read)
        parts.append(data.rename_columns([*(st.key if comparable else ()), COL_VERSION]))
    if not parts:
        return StagedFacts(True, None)
    table = pa.concat_tables(parts, promote_options="permissive")
    if table.num_rows == 0:
        return StagedFacts(True, None)
    distinct = table.group_by(list(st.key)).aggregate([]).num_rows if comparable else -1
    return StagedFacts(distinct == table.num_rows, int(pc.min(table[COL_VERSION]).as_py()))


def may_have_deletes(st: StagedTable) -> bool:
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


def tombstones_may_supersede(tomb_uri: str, min_version: int | None, *, storage: Storage) -> bool:
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
        newest = delta_state.column_max(tomb_uri, COL_VERSION, storage=storage)
    except LookupError:
        return True  # no statistics: cannot tell
    return newest is not None and int(newest) >= min_version
