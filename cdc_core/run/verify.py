"""Compare a Delta table with its source table, value for value (the oracle of tests, demo and `cdc verify`).

Only meaningful when the source is quiet and the cursor is at its end. Values are normalised per
source column type so that the comparison is exact, not textual: BIGINT UNSIGNED lands as
DECIMAL(20,0), TIME as microseconds, BIT as an integer, TIMESTAMP as UTC, FLOAT as float32.
"""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from cdc_core.capture.source import check_system_versioned, connect
from cdc_core.lake.delta_state import read_rows
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model import transforms
from cdc_core.model.changes import TableSchema
from cdc_core.model.manifest import COL_DELETED
from cdc_core.model.naming import quote_mysql, table_id
from cdc_core.model.transforms import TableTransform
from cdc_core.model.types import table_codec

_EPOCH = dt.datetime(1970, 1, 1)


@dataclass
class TableDiff:
    table: str
    source_rows: int
    lake_rows: int
    missing: list[tuple[Any, ...]] = field(default_factory=list)  # keys in source, not in lake
    extra: list[tuple[Any, ...]] = field(default_factory=list)  # keys in lake, not in source
    different: list[tuple[tuple[Any, ...], str, Any, Any]] = field(default_factory=list)  # key, column, source, lake
    duplicates: list[tuple[Any, ...]] = field(default_factory=list)  # keys the lake holds more than once
    schema: list[str] = field(default_factory=list)  # column differences (names, types per the type map)
    lake_table: bool = True  # False: no Delta table yet (read as empty: equal when the source is empty too)

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.different or self.duplicates or self.schema)

    def summary(self, limit: int = 5) -> str:
        if self.equal:
            return f"{self.table}: equal ({self.source_rows} rows{'' if self.lake_table else '; no Delta table yet'})"
        return (
            f"{self.table}: source {self.source_rows} rows, lake {self.lake_rows}"
            f"{'' if self.lake_table else ' (no Delta table)'}; missing {len(self.missing)} "
            f"{self.missing[:limit]}, extra {len(self.extra)} {self.extra[:limit]}, "
            f"different {len(self.different)} {self.different[:limit]}, duplicated {len(self.duplicates)} "
            f"{self.duplicates[:limit]}" + (f"; columns: {'; '.join(self.schema[:limit])}" if self.schema else "")
        )


def _normaliser(column_type: str) -> Any:
    t = column_type.lower()
    base = t.split("(")[0].split()[0]
    if base in ("float",):
        return lambda v: None if v is None else struct.unpack("f", struct.pack("f", float(v)))[0]
    if base in ("double", "real"):
        return lambda v: None if v is None else float(v)
    if base in ("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"):
        return lambda v: None if v is None else int(v)
    if base in ("decimal", "numeric"):
        return lambda v: None if v is None else Decimal(str(v))
    if base == "bit":
        return lambda v: (
            None if v is None else (int.from_bytes(v, "big") if isinstance(v, bytes | bytearray) else int(v))
        )
    if base == "time":

        def time_us(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, dt.timedelta):
                return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
            return int(v)

        return time_us
    if base in ("datetime", "timestamp", "date"):

        def moment(v: Any) -> Any:
            if v is None or isinstance(v, str):  # pymysql returns zero dates as strings: they land as NULL
                return None
            if isinstance(v, dt.datetime) and v.tzinfo is not None:
                return v.astimezone(dt.UTC).replace(tzinfo=None)
            return v

        return moment
    if base in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return lambda v: None if v is None else bytes(v)
    if base == "set":
        return lambda v: None if v is None else (",".join(sorted(v)) if isinstance(v, set) else v)
    return lambda v: v


def _lake_rows(table_uri: str, version: int | None, storage: Storage) -> list[dict[str, Any]] | None:
    """The table's rows; None when there is no Delta table yet (a captured table no window has touched since
    the pipeline's start). A version of a table that does not exist is an error (LakeError)."""
    from cdc_core.lake.delta_state import open_table

    if version is None and open_table(table_uri, storage=storage) is None:
        return None
    return list(read_rows(table_uri, version=version, storage=storage).to_pylist())


def compare_table(
    conn: Any,
    schema: str,
    table: str,
    table_uri: str,
    key: tuple[str, ...] | None = None,
    *,
    version: int | None = None,
    lineage: tuple[tuple[str, str], ...] = (),
    kept_columns: bool = False,
    storage: Storage = AMBIENT,
) -> TableDiff:
    """Source rows (SELECT, session in UTC) against the Delta table's rows (soft-deleted rows excluded): its
    current version, or `version` (a snapshot read together with other facts about the table). `lineage`:
    the lineage columns and values of this source table's rows (`Pipeline.lineage`): a lake table shared by
    several sources or routed tables is compared on this table's rows only. `kept_columns`: the lake may hold
    columns the source dropped (schema_changes: lenient). `storage`: the pipeline's (`Pipeline.storage`)."""
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY, IS_NULLABLE, CHARACTER_SET_NAME "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        cols = cur.fetchall()
        names = [c[0] for c in cols]
        norm = {c[0]: _normaliser(c[1]) for c in cols}
        if key is None:
            key = tuple(c[0] for c in cols if c[2] == "PRI") or tuple(names)
        # FLOAT through DOUBLE: SELECT prints a FLOAT with 6 significant digits (24999.75 -> 24999.8).
        exprs = [
            f"CAST({quote_mysql(c[0])} AS DOUBLE)" if str(c[1]).lower().startswith("float") else quote_mysql(c[0])
            for c in cols
        ]
        cur.execute(f"SELECT {', '.join(exprs)} FROM {quote_mysql(schema)}.{quote_mysql(table)}")
        source = {}
        for row in cur.fetchall():
            rec = {n: norm[n](v) for n, v in zip(names, row, strict=True)}
            source[tuple(rec[k] for k in key)] = rec
    lake: dict[tuple[Any, ...], dict[str, Any]] = {}
    duplicates = []
    lake_rows = _lake_rows(table_uri, version, storage)
    for row in lake_rows or ():
        if row.get(COL_DELETED) or any(row.get(col) != value for col, value in lineage):
            continue
        rec = {n: norm[n](row.get(n)) for n in names}
        k = tuple(rec[k] for k in key)
        if k in lake:
            duplicates.append(k)
        lake[k] = rec
    diff = TableDiff(table_id(schema, table), len(source), len(lake) + len(duplicates),
                     lake_table=lake_rows is not None)
    if lake_rows is not None:  # no table yet: its rows (if any) are the difference, not its columns
        diff.schema = compare_columns(cols, table_uri, version=version, union=bool(lineage) or kept_columns,
                                      storage=storage)
    diff.duplicates = sorted(duplicates, key=repr)
    diff.missing = sorted((k for k in source if k not in lake), key=repr)
    diff.extra = sorted((k for k in lake if k not in source), key=repr)
    for k, rec in source.items():
        other = lake.get(k)
        if other is None:
            continue
        for n in names:
            if rec[n] != other[n]:
                diff.different.append((k, n, rec[n], other[n]))
    return diff


def compare_columns(
    source_cols: Any, table_uri: str, *, version: int | None = None, union: bool = False,
    storage: Storage = AMBIENT,
) -> list[str]:
    """The lake table's columns against the source's (information_schema rows: name, COLUMN_TYPE, key,
    nullable, charset): names case-insensitive and order-insensitive, each with the Delta type the type map
    gives it. The lake's own metadata and lineage columns are not compared; `union`: a lake table shared with
    other source tables (a route) may hold more columns than this one."""
    from cdc_core.capture.source import column_attrs, normalise_column_type
    from cdc_core.lake.delta_state import open_table
    from cdc_core.model.changes import SourceColumn
    from cdc_core.model.errors import UnsupportedType
    from cdc_core.model.manifest import METADATA_COLUMNS
    from cdc_core.model.schema_values import normalise_delta_type
    from cdc_core.model.sources import LINEAGE_COLUMNS
    from cdc_core.model.types import column_types

    table = open_table(table_uri, storage=storage)
    if table is None:
        return ["no lake table"]
    if version is not None:
        table.load_as_version(version)
    skip = {c.lower() for c in (*METADATA_COLUMNS, *LINEAGE_COLUMNS)}
    lake = {f.name.lower(): (f.name, str(getattr(f.type, "type", f.type))) for f in table.schema().fields
            if f.name.lower() not in skip}
    out = []
    for name, column_type, _key, nullable, charset in source_cols:
        mysql_type = normalise_column_type(str(column_type))
        col = SourceColumn(name, mysql_type, str(nullable) == "YES", column_attrs(mysql_type, charset))
        try:
            want = column_types(col)[1]
        except UnsupportedType:
            continue
        have = lake.pop(str(name).lower(), None)
        if have is None:
            out.append(f"{name} ({want}) is missing")
        elif normalise_delta_type(have[1]) != normalise_delta_type(want):
            out.append(f"{name} is {have[1]}, the type map gives {want}")
    if not union:
        out += [f"{n} is not a source column" for n, _ in sorted(lake.values())]
    return out



def compare_shaped_table(
    conn: Any,
    shape: TableSchema,
    transform: TableTransform,
    table_uri: str,
    *,
    lineage: tuple[tuple[str, str], ...] = (),
    zero_dates: str = "null",
    storage: Storage = AMBIENT,
) -> TableDiff:
    """A table a transform rule shapes (docs/transforms.md): the source's rows read as the snapshot reads them,
    staged as the staging writer stages them and shaped by the same transform (rows the filter leaves out
    dropped), against the lake's rows (soft-deleted rows excluded), value for value on the columns that land."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdc_core.capture.snapshot_reads import select_list, select_normaliser
    from cdc_core.model.manifest import COL_OP, OP_DELETE, OP_INSERT, STAGED_META_COLUMNS
    from cdc_core.model.types import table_codec

    codec = table_codec(shape)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT {select_list(shape)} FROM {quote_mysql(shape.schema)}.{quote_mysql(shape.table)}")
        rows = cur.fetchall()
    n = len(rows)
    meta = codec.arrow_schema
    arrays = [pa.array([OP_INSERT] * n, meta.field(0).type), pa.array([0] * n, meta.field(1).type),
              pa.array(range(1, n + 1), meta.field(2).type), pa.array([0] * n, meta.field(3).type),
              pa.nulls(n, meta.field(4).type)]
    for i, (src, col) in enumerate(zip(shape.columns, codec.columns, strict=True)):
        norm = select_normaliser(src, zero_dates, shape.name)
        values = [r[i] if norm is None or r[i] is None else norm(r[i]) for r in rows]
        arrays.append(pa.array(col.convert_values(values), col.arrow_type))
    shaped, _ = transform.apply(pa.Table.from_arrays(arrays, schema=meta), STAGED_META_COLUMNS)
    shaped = shaped.filter(pc.not_equal(shaped.column(COL_OP), OP_DELETE))
    names = [c.name for c in transform.columns]
    key = transform.key
    source = {tuple(r[k] for k in key): r for r in shaped.select(names).to_pylist()}
    lake: dict[tuple[Any, ...], dict[str, Any]] = {}
    duplicates = []
    lake_rows = _lake_rows(table_uri, None, storage)
    for row in lake_rows or ():
        if row.get(COL_DELETED) or any(row.get(col) != value for col, value in lineage):
            continue
        k = tuple(row.get(c) for c in key)
        if k in lake:
            duplicates.append(k)
        lake[k] = row
    diff = TableDiff(table_id(shape.schema, shape.table), len(source), len(lake) + len(duplicates),
                     lake_table=lake_rows is not None)
    held = set(next(iter(lake.values()), {}))
    diff.schema = [f"{n} is missing" for n in names if lake and n not in held]
    diff.duplicates = sorted(duplicates, key=repr)
    diff.missing = sorted((k for k in source if k not in lake), key=repr)
    diff.extra = sorted((k for k in lake if k not in source), key=repr)
    for k, rec in source.items():
        other = lake.get(k)
        if other is not None:
            diff.different += [(k, c, rec[c], other.get(c)) for c in names if rec[c] != other.get(c)]
    return diff


def verify_pipeline(p: Any) -> list[TableDiff]:
    """Every captured table of pipeline `p` (a `Pipeline`) against its Delta table, value for value: a table a
    transform rule shapes as the rule shapes its source rows, a lenient table on the columns the source still has.
    Captured system-versioned tables are refused as the run refuses them: they are not base tables, so they
    would otherwise not be compared at all and the lake would look equal."""
    tables = p.describe()
    policy = p.config.schema_changes.policy()
    rules = p.config.transform.tables
    conn = connect(p.source)
    try:
        check_system_versioned(conn, p.table_filter(), p.name)
        diffs = []
        for t in tables.values():
            common = {"lineage": p.lineage(t.schema, t.table).columns, "storage": p.storage}
            uri = p.table_uri(t.schema, t.table)
            rule = next((r for r in rules if r.matches(t.name)), None)
            if rule is not None:  # compared as the rule shapes it (docs/transforms.md)
                key = p.transform_key() if rule.hash else None
                shaped = transforms.table_transform(rule, key, t.name, table_codec(t).columns, t.key)
                diffs.append(compare_shaped_table(conn, t, shaped, uri, zero_dates=p.config.zero_dates, **common))
                continue
            diffs.append(compare_table(conn, t.schema, t.table, uri, t.key,
                                       kept_columns=policy.mode_for(t.name) == "lenient", **common))
        return diffs
    finally:
        conn.close()
