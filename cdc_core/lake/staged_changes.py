"""Every staged change of one lake table as an Arrow table, read without Spark: what the history and change-log
writers of small tables (cdc_core.lake.history_merge, changelog_append) need, the same rows Spark's read of the
staged files gives (spark_apps/merge/targets.LakeTarget.read): each member's changes with its lineage constants,
each column as the window's type (NULL where a file was written before the column existed), bounded by the
versions that land in this table. A window that changes the table's schema is Spark's (its rows are translated
there); so is anything this reader does not recognise: it says why instead of guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.lake.object_store import Storage
from cdc_core.lake.small_writer import arrow_type, local_path
from cdc_core.lake.staging_store import read_staged_file, staged_file_columns, staged_file_disagrees
from cdc_core.model.manifest import COL_COMMIT_TS, COL_OP, COL_ORDINAL, COL_TXN, COL_VERSION, StagedFile, StagedTable

META_TYPES = {COL_OP: pa.string(), COL_VERSION: pa.int64(), COL_ORDINAL: pa.int64(),
              COL_COMMIT_TS: pa.timestamp("us", tz="UTC"), COL_TXN: pa.int64()}
OPTIONAL_META = frozenset({COL_TXN})  # windows staged before it existed lack it: NULL


@dataclass(frozen=True)
class Member:
    """One staged table landing in the lake table: its lineage constants and the versions [since, until) of
    its rows that land there (None: unbounded)."""

    staged: StagedTable
    lineage: tuple[tuple[str, str], ...] = ()
    since: int | None = None
    until: int | None = None


def read(window_dir: str, members: Sequence[Member], storage: Storage) -> pa.Table | str:
    """The members' changes, metadata columns first, then every member's columns (first seen first), then the
    lineage columns; a str says why Spark must read them."""
    types: dict[str, pa.DataType] = dict(META_TYPES)
    for m in members:
        for c in m.staged.columns:
            t = arrow_type(c.delta_type)
            if t is None:
                return f"column {c.name!r} type {c.delta_type}"
            if types.setdefault(c.name, t) != t:
                return f"column {c.name!r} differs between the routed tables"
        for name, _ in m.lineage:
            types.setdefault(name, pa.string())
    schema = pa.schema(list(types.items()))
    parts = []
    for m in members:
        part = _member(window_dir, m, types, storage)
        if isinstance(part, str):
            return part
        parts.append(part)
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([p.select(schema.names) for p in parts])


def _member(window_dir: str, m: Member, types: dict[str, pa.DataType], storage: Storage) -> pa.Table | str:
    local = local_path(window_dir)
    fs, root = (None, local) if local is not None else storage.fs(window_dir)
    parts = []
    for f in m.staged.files:
        disagrees = staged_file_disagrees(m.staged, f)
        if disagrees is not None:
            return disagrees
        part = _file(m, f, read_staged_file(fs, f"{root.rstrip('/')}/{f.path}", f), types)
        if isinstance(part, str):
            return part
        if m.since is not None:
            part = part.filter(pc.greater_equal(part[COL_VERSION], m.since))
        if m.until is not None:
            part = part.filter(pc.less(part[COL_VERSION], m.until))
        parts.append(part.select(list(types)))
    return pa.concat_tables(parts) if parts else pa.schema(list(types.items())).empty_table()


def _file(m: Member, f: StagedFile, data: pa.Table, types: dict[str, pa.DataType]) -> pa.Table | str:
    """One staged file's rows with every column of `types` (str: why Spark must read it)."""
    checked = staged_file_columns(m.staged, f, data, META_TYPES, OPTIONAL_META)
    if isinstance(checked, str):
        return checked
    metadata, read = checked
    n = data.num_rows
    arrays: dict[str, pa.Array | pa.ChunkedArray] = dict(metadata)
    for name, col in read.items():
        arrays[name] = col.cast(types[name])
    for name, value in m.lineage:
        arrays[name] = pa.array([value] * n, pa.string())
    for name, typ in types.items():  # columns this file does not have: another member's, or added later
        if name not in arrays:
            arrays[name] = pa.nulls(n, typ)
    return pa.table(arrays)
