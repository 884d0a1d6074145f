"""MERGE a window's changes into a small Delta table with delta-rs, without Spark (issue 18).

A Spark MERGE costs ~1 s of driver work per table however small the table (docs/performance.md), so a
window touching a hundred small tables spent minutes on them. This writer lands such a table in tens
of milliseconds, from inside the merge job, with the Spark MERGE's exact outcome and commit identity:

- **Only tables it fully supports.** A local lake, or an object store that honours conditional writes
  (`Storage.may_commit`: each log entry is a put-if-absent there, as a link is on disk); a table whose
  protocol and properties hold nothing delta-rs 1.6 cannot write (no deletion vectors, column mapping, change
  data feed, constraints, type widening, generated or identity columns); at most `max_rows` rows once the
  window lands; every column of the window already in the table with the very same Delta type (schema
  evolution goes to Spark); staged files whose physical types are the manifest's. Anything else answers
  `Ineligible` and the caller merges the table with Spark, as before. The merge job creates tables that start
  small without deletion vectors, and the Spark path turns them on once a table outgrows `max_rows`: a table
  never comes back here after that (spark_apps/merge_window.py).
- **Same outcome.** The clauses of `spark_apps.merge_window.merge_sql` (hard and soft deletes, the
  version test against replays), each key's last change in the window, NULL for table columns the window
  does not carry; keys compared NULL-safe like Spark's `<=>`. In hard-delete mode the window's deletes
  are first appended to the table's tombstone table (as the Spark job does, same txn), which this writer
  creates without deletion vectors or appends to when delta-rs may write it; the caller keeps a window
  older than some tombstone (a replay, a backfill: its changes must be checked against them) on Spark.
- **Same identity, checked and committed at one version.** The txn (`app_id`, `seq`) and the commit's
  `userMetadata` are the Spark job's, so `landed`, the ack and replays read them whichever writer
  committed. The txn version, the protocol and the schema are read at one table version V, and the
  commit is made with no retry: it lands as V+1 or fails (`CommitFailedError`), so a writer that checked
  at V can never commit on top of another writer's commit. A conflict re-reads the txn version (the
  window landed: already) or tries once more, then fails the table, retryable.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.lake.delta_rs_rules import refused_property, unsupported, untested_deltalake
from cdc_core.lake.object_store import AMBIENT, Storage, delta_rs_uri
from cdc_core.lake.staging_store import read_staged_file, staged_file_columns, staged_file_disagrees
from cdc_core.model import faults, merge_semantics
from cdc_core.model.errors import LakeError
from cdc_core.model.logfmt import kv, one_line
from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_OP,
    COL_ORDINAL,
    COL_VERSION,
    OP_DELETE,
    StagedTable,
)
from cdc_core.model.merge_semantics import (
    ACTION_DELETE,
    ACTION_UPDATE,
    ACTION_UPDATE_ALL,
    DATAFUSION,
    DERIVE_DELETE_TS,
    DERIVE_IS_DELETE,
    DERIVE_WINDOW_SEQ,
    derived_columns,
    holds_window,
    key_condition,
    merge_clauses,
)

log = logging.getLogger("cdc.merge")

WRITER_NAME = "delta-rs"
# Why an object-store table goes to Spark: delta-rs's commit there is atomic only with conditional writes.
NO_ATOMIC_COMMIT = "an object store without conditional writes (object_store.conditional_puts)"
DEFAULT_MAX_ROWS = 100_000
# The Spark SQL types the manifest uses (cdc_core.model.types), as Delta's schema names them.
_DDL_TO_DELTA = {
    "TINYINT": "byte", "BYTE": "byte", "SMALLINT": "short", "SHORT": "short", "INT": "integer",
    "INTEGER": "integer", "BIGINT": "long", "LONG": "long", "FLOAT": "float", "REAL": "float",
    "DOUBLE": "double", "BOOLEAN": "boolean", "STRING": "string", "BINARY": "binary", "DATE": "date",
    "TIMESTAMP": "timestamp", "TIMESTAMP_NTZ": "timestamp_ntz",
}
_DECIMAL_RE = re.compile(r"^DECIMAL\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")

def delta_type_name(ddl: str) -> str | None:
    """The Delta schema name of a manifest type (`DECIMAL(20,0)` -> `decimal(20,0)`); None if not primitive."""
    text = ddl.strip().upper()
    m = _DECIMAL_RE.match(text)
    if m:
        return f"decimal({int(m.group(1))},{int(m.group(2))})"
    return _DDL_TO_DELTA.get(text)


_DELTA_TO_ARROW = {
    "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL_NAME_RE = re.compile(r"^decimal\((\d+),(\d+)\)$")
# Characters Delta refuses in column names unless column mapping is on (which this writer leaves to Spark).
DELTA_INVALID_NAME_CHARS = frozenset(" ,;{}()\n\t=")


def needs_column_mapping(name: str) -> bool:
    return any(ch in DELTA_INVALID_NAME_CHARS for ch in name)


def arrow_type(ddl: str) -> pa.DataType | None:
    """The arrow type delta-rs maps to the Delta type of a Spark SQL type name (None: not one of ours)."""
    name = delta_type_name(ddl)
    if name is None:
        return None
    m = _DECIMAL_NAME_RE.match(name)
    return pa.decimal128(int(m.group(1)), int(m.group(2))) if m else _DELTA_TO_ARROW.get(name)


@dataclass(frozen=True)
class NewTable:
    """A table that `create` found created afterwards: `table` is its snapshot at version 0 when this call made
    it (the writer record is then this run's, and landing the window needs no second open), None when a
    concurrent run made it first (the caller checks whose it is)."""

    table: Any | None


def create(
    uri: str, columns: Sequence[tuple[str, str]], partition_by: Sequence[str], properties: dict[str, str],
    *, storage: Storage = AMBIENT,
) -> NewTable | str:
    """Create an empty Delta table with delta-rs (one commit, version 0, put-if-absent): the table exists
    afterwards (`NewTable`), else why it must be created by Spark (which then does: a failed create commits
    nothing)."""
    if not storage.may_commit(uri):
        return NO_ATOMIC_COMMIT
    why = untested_deltalake() or refused_property(properties)
    if why is not None:
        return why
    fields = []
    for name, ddl in columns:
        typ = arrow_type(ddl)
        if typ is None or needs_column_mapping(name):
            return f"column {name!r} ({ddl})"
        fields.append(pa.field(name, typ, nullable=True))
    return _create(uri, pa.schema(fields), partition_by, properties, storage)


def _create(
    uri: str, schema: pa.Schema, partition_by: Sequence[str], properties: dict[str, str], storage: Storage
) -> NewTable | str:
    from deltalake import DeltaTable

    try:
        made = DeltaTable.create(
            delta_rs_uri(uri), schema, mode="error", partition_by=list(partition_by) or None,
            configuration=dict(properties), raise_if_key_not_exists=False,
            storage_options=storage.delta_rs_options(uri),
        )
    except Exception as e:
        if open_table(uri, storage) is not None:
            return NewTable(None)  # a concurrent run created it first
        return f"delta-rs could not create it ({one_line(e)})"
    return NewTable(made)


@dataclass(frozen=True)
class Member:
    """One staged table landing in the lake table, with its lineage columns (name, constant value)."""

    staged: StagedTable
    lineage: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Tombstones:
    """The lake table's hard-delete tombstone table (cdc_core.model.layout.tombstone_uri): key columns and
    the change version of each key deleted, appended once per window with the window's txn."""

    uri: str
    label: str
    user_metadata: str
    properties: dict[str, str]  # for a new tombstone table (the merge job's, deletion vectors off)


@dataclass(frozen=True)
class SmallMerge:
    uri: str
    label: str
    window_dir: str  # a local directory
    members: tuple[Member, ...]
    key: tuple[str, ...]
    delete_mode: str
    app_id: str
    seq: int
    user_metadata: str  # the commit's userMetadata (the merge job's commit record)
    max_rows: int
    tombstones: Tombstones | None = None  # hard deletes: where the window's deletes go first (None: not here)
    storage: Storage = AMBIENT  # how to reach the lake and staging (commits need Storage.may_commit)

    @property
    def staged_rows(self) -> int:
        return sum(m.staged.rows for m in self.members)


@dataclass(frozen=True)
class Ineligible:
    """Why the table goes to Spark (logged); `missing`: there is no table yet."""

    reason: str
    missing: bool = False


@dataclass(frozen=True)
class Landed:
    status: str  # "committed" or "already"
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    version: int | None = None


def local_path(uri: str) -> str | None:
    from cdc_core.lake.delta_state import local_dir

    p = local_dir(uri)
    return None if p is None else str(p)


def open_table(uri: str, storage: Storage = AMBIENT) -> Any:
    """The table (None when there is none), opened with the pipeline's `storage`: on an object store, writes
    through it are conditional puts (`_refused_job` checks `Storage.may_commit` before any)."""
    from cdc_core.lake import delta_state

    return delta_state.open_table(uri, storage=storage)


def table_rows_and_properties(uri: str, *, storage: Storage = AMBIENT) -> tuple[int, dict[str, str]] | None:
    """(rows by the log's statistics, table properties), None when there is no table. For the Spark
    path's choice to turn deletion vectors on once a table created small outgrows the limit (any lake,
    so with the pipeline's `storage`)."""
    table = open_table(uri, storage)
    if table is None:
        return None
    return table_rows(table) or 0, dict(table.metadata().configuration or {})


def table_rows(table: Any) -> int | None:
    adds = pa.table(table.get_add_actions(flatten=True))
    if adds.num_rows == 0:
        return 0
    if "num_records" not in adds.column_names or adds["num_records"].null_count:
        return None
    return int(pc.sum(adds["num_records"]).as_py() or 0)


def _too_big(table: Any, m: SmallMerge) -> str | None:
    rows = table_rows(table)
    if rows is None:
        return "files without row counts"
    return f"{rows} rows" if rows + m.staged_rows > m.max_rows else None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _staged_part(m: SmallMerge, member: Member, want: dict[str, tuple[str, pa.DataType]]) -> pa.Table | str:
    """One member's staged changes as the table's arrow types (str: why not)."""
    st = member.staged
    meta_types = {COL_OP: pa.string(), COL_VERSION: pa.int64(), COL_ORDINAL: pa.int64(),
                  COL_COMMIT_TS: pa.timestamp("us", tz="UTC")}
    parts: list[pa.Table] = []
    local = local_path(m.window_dir)
    fs, root = (None, local) if local is not None else m.storage.fs(m.window_dir)
    for f in st.files:
        disagrees = staged_file_disagrees(st, f)
        if disagrees is not None:
            return disagrees
        data = read_staged_file(fs, f"{root.rstrip('/')}/{f.path}", f)
        checked = staged_file_columns(st, f, data, meta_types)
        if isinstance(checked, str):
            return checked
        metadata, read = checked
        n = data.num_rows
        arrays: dict[str, pa.Array | pa.ChunkedArray] = dict(metadata)
        for c in st.columns:
            target_name, target_type = want[c.name.lower()]
            col = read.get(c.name)
            arrays[target_name] = pa.nulls(n, target_type) if col is None else col.cast(target_type)
        for name, value in member.lineage:
            target_name, target_type = want[name.lower()]
            arrays[target_name] = pa.array([value] * n, target_type)
        parts.append(pa.table(arrays))
    if not parts:
        return pa.table({})
    part = pa.concat_tables(parts)
    # Each key's last change (ordinals grow strictly within a staged table; keys never span members:
    # a non-derived routed table's key leads with its lineage).
    key = [want[k.lower()][0] for k in m.key]
    last = part.group_by(key, use_threads=False).aggregate([(COL_ORDINAL, "max")])
    if last.num_rows != part.num_rows:
        part = part.filter(pc.is_in(part[COL_ORDINAL], value_set=last[f"{COL_ORDINAL}_max"]))
    return part


def _wanted(m: SmallMerge, table: Any) -> dict[str, tuple[str, pa.DataType]] | str:  # noqa: PLR0911 (a reason each)
    """{lower name: (the table's column name, its arrow type)} of every column the window writes, or why
    the table is not for this writer (a column it lacks or holds with another type: Spark evolves it)."""
    schema = pa.schema(table.schema())
    delta_types = {f.name.lower(): (f.name, f.type.type if hasattr(f.type, "type") else None)
                   for f in table.schema().fields}
    if len(delta_types) != len(schema):
        return "column names that differ only by case"
    arrow = {f.name.lower(): f.type for f in schema}
    want: dict[str, tuple[str, pa.DataType]] = {}
    needed: dict[str, str] = {}  # lower name -> delta type
    for member in m.members:
        for name, _ in member.lineage:
            needed.setdefault(name.lower(), "string")
        for c in member.staged.columns:
            t = delta_type_name(c.delta_type)
            if t is None:
                return f"column {c.name!r} type {c.delta_type}"
            if needed.setdefault(c.name.lower(), t) != t:
                return f"column {c.name!r} differs between the routed tables"
    meta = {name.lower(): delta_type_name(ddl) for name, ddl in merge_semantics.metadata_columns(m.delete_mode)}
    for lower, t in (*needed.items(), *meta.items()):
        have = delta_types.get(lower)
        if have is None:
            return f"column {lower!r} is not in the table yet"
        if have[1] != t:
            return f"column {lower!r} is {have[1]} in the table, {t} in the window"
        want[lower] = (have[0], arrow[lower])
    if any(k.lower() in meta for k in m.key):
        return "a key column is a metadata column"
    key = {k.lower() for k in m.key}
    if len(m.members) > 1 and not all(member.lineage and {n.lower() for n, _ in member.lineage} <= key
                                      for member in m.members):
        return "routed tables whose keys may meet"  # each key's last change is picked per staged table
    return want


def _source(m: SmallMerge, table: Any) -> pa.Table | str:
    """The MERGE source in the table's schema, or why the table is not for this writer."""
    want = _wanted(m, table)
    if isinstance(want, str):
        return want
    schema = pa.schema(table.schema())
    parts = []
    for member in m.members:
        part = _staged_part(m, member, want)
        if isinstance(part, str):
            return part
        if part.num_rows:
            parts.append(part)
    n = sum(p.num_rows for p in parts)
    out: dict[str, pa.Array | pa.ChunkedArray] = {}
    # Routed members may differ in shape: their union (NULL where a member lacks a column; types are `want`'s).
    source = pa.concat_tables(parts, promote_options="default") if parts else None
    derived = {column.lower(): how for column, how in derived_columns(m.delete_mode)}
    for f in schema:
        lower = f.name.lower()
        if source is not None and f.name in source.column_names:
            out[f.name] = source[f.name]
        elif lower in derived:
            out[f.name] = _derived(derived[lower], source, want, m.seq, n).cast(f.type)
        else:
            out[f.name] = pa.nulls(n, f.type)  # a table column the window does not carry
    return pa.table(out, schema=schema)


def _derived(how: str, source: pa.Table | None, want: dict[str, tuple[str, pa.DataType]], seq: int, n: int) -> Any:
    """A metadata column computed when the window lands (cdc_core.model.merge_semantics.derived_columns)."""
    if how == DERIVE_WINDOW_SEQ:
        return pa.array([seq] * n, pa.int64())
    assert source is not None  # n > 0 rows come from the staged window
    is_delete = pc.equal(source[COL_OP], OP_DELETE)
    if how == DERIVE_IS_DELETE:
        return is_delete
    ts = source[want[COL_COMMIT_TS.lower()][0]]
    assert how == DERIVE_DELETE_TS, how
    return pc.if_else(is_delete, ts, pa.nulls(n, ts.type))


class WindowCommit(Protocol):
    """Whose commit: the window's txn (app id, seq), the table's label and the commit record (SmallMerge is one)."""

    @property
    def label(self) -> str: ...
    @property
    def app_id(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def user_metadata(self) -> str: ...


@dataclass(frozen=True)
class Commit:
    label: str
    app_id: str
    seq: int
    user_metadata: str


def commit_properties(m: WindowCommit, user_metadata: str | None = None) -> Any:
    from deltalake import CommitProperties, Transaction

    return CommitProperties(
        custom_metadata={"userMetadata": m.user_metadata if user_metadata is None else user_metadata},
        # lastUpdated as Spark writes it: readers expire an identifier older than the table's
        # delta.setTransactionRetentionDuration by it (cdc_core.model.retention keeps that above the horizon).
        app_transactions=[Transaction(m.app_id, m.seq, last_updated=int(time.time() * 1000))],
        max_commit_retries=0,  # the checks made at the version this commit follows hold, or it fails
    )


def commit_txn_only_at(table: Any, m: WindowCommit) -> None:
    """A commit of the window's txn alone (delta-rs commits nothing for a MERGE that changes nothing)."""
    table.create_write_transaction(
        [], mode="append", schema=table.schema(), partition_by=table.metadata().partition_columns,
        commit_properties=commit_properties(m),
    )


def _merge(table: Any, source: pa.Table, m: SmallMerge) -> dict[str, Any]:
    """The window's MERGE, rendered from the clause table (cdc_core.model.merge_semantics) for delta-rs."""
    spelled = {f.name.lower(): f.name for f in table.schema().fields}

    def names(column: str) -> str:
        return str(spelled[column.lower()])

    merger = table.merge(
        source,
        key_condition(m.key, DATAFUSION, names),
        source_alias="s",
        target_alias="t",
        commit_properties=commit_properties(m),
    )
    for c in merge_clauses(m.delete_mode, DATAFUSION, names):
        if not c.matched:
            merger = merger.when_not_matched_insert_all(predicate=c.condition)
        elif c.action == ACTION_DELETE:
            merger = merger.when_matched_delete(predicate=c.condition)
        elif c.action == ACTION_UPDATE_ALL:
            merger = merger.when_matched_update_all(predicate=c.condition)
        else:
            assert c.action == ACTION_UPDATE, c.action
            merger = merger.when_matched_update(dict(c.sets), predicate=c.condition)
    return dict(merger.execute())


def _deletes(source: pa.Table, m: SmallMerge) -> pa.Table:
    """The tombstone rows of the window: key and change version of each key whose last change deletes it."""
    rule = merge_semantics.tombstone_rows(m.key)
    spelled = {name.lower(): name for name in source.column_names}
    deleted = source.filter(pc.equal(source[spelled[rule.op_column.lower()]], rule.op))
    return deleted.select([spelled[c.lower()] for c in rule.columns])


def _tombstones_first(m: SmallMerge, source: pa.Table, fence: Callable[[], None]) -> str | None:
    """Hard deletes: the window's deletes into the tombstone table before the MERGE (None: done, or none)."""
    if m.delete_mode != merge_semantics.DELETE_HARD:
        return None
    deletes = _deletes(source, m)
    if deletes.num_rows == 0:
        return None
    if m.tombstones is None:
        return "deletes need the tombstone table"
    why = _append_tombstones(m, deletes, fence)
    if why is None:
        faults.point("mid_merge_table")  # crash suite: tombstones committed, main MERGE not
    return why


def _append_tombstones(  # noqa: PLR0911 - each way out says why
    m: SmallMerge, rows: pa.Table, fence: Callable[[], None]
) -> str | None:
    """Append the window's deletes to the tombstone table once (its txn), creating the table if there is
    none; None when they are there, else why delta-rs may not (nothing written then: Spark takes the table)."""
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    tomb = m.tombstones
    assert tomb is not None
    table = open_table(tomb.uri, m.storage)
    if table is None:
        fence()  # a fenced run creates nothing either
        made = _create(tomb.uri, rows.schema, (), tomb.properties, m.storage)
        if isinstance(made, str):
            return f"tombstone table: {made}"
        table = made.table if made.table is not None else open_table(tomb.uri, m.storage)
        if table is None:
            return "tombstone table: not readable after its creation"
    if holds_window(table.transaction_version(m.app_id), m.seq):
        return None
    why = unsupported(table)
    if why is not None:
        return f"tombstone table: {why}"
    have = {f.name.lower(): f.type for f in pa.schema(table.schema())}
    if have != {f.name.lower(): f.type for f in rows.schema}:
        return "tombstone table: its columns are not the window's key and version"
    spelled = {f.name.lower(): f.name for f in pa.schema(table.schema())}
    rows = rows.rename_columns([spelled[n.lower()] for n in rows.column_names])
    for attempt in (1, 2):
        fence()
        try:
            write_deltalake(table, rows, mode="append", commit_properties=commit_properties(m, tomb.user_metadata))
            return None
        except CommitFailedError as e:
            if lost_race(m, tomb.uri, f"append to {tomb.label}", e, attempt=attempt, attempts=2, storage=m.storage):
                return None  # a concurrent run of this window appended them
        # Another commit took the version (a concurrent run still creating the table, say): read it again.
        table = open_table(tomb.uri, m.storage)
        if table is None or holds_window(table.transaction_version(m.app_id), m.seq):
            return None if table is not None else "tombstone table: not readable after a commit race"
    return None


def lost_race(m: WindowCommit, uri: str, what: str, e: Exception, *, attempt: int, attempts: int,
              storage: Storage) -> bool:
    """After a commit to `uri` lost its race: True when the table holds the window now (a concurrent run of it
    committed it); False to try again; on the last attempt a retryable LakeError."""
    from cdc_core.lake import delta_state

    landed = delta_state.last_txn_version(uri, m.app_id, storage=storage)
    if holds_window(landed, m.seq):
        log.info("%s", kv(event="merge.lost_race", table=m.label, landed=landed, writer=WRITER_NAME))
        return True
    if attempt >= attempts:
        races = "a commit race" if attempts == 1 else f"{attempts} commit races"
        raise LakeError(
            f"{what} ({uri}) lost {races} ({one_line(e)}); another writer is changing the table; the merge is "
            "safe to retry"
        ) from e
    log.info("%s", kv(event="merge.retry", table=m.label, reason=one_line(e), writer=WRITER_NAME))
    return False


def _refused_job(m: SmallMerge) -> str | None:
    if m.max_rows <= 0:
        return "off"
    if not m.storage.may_commit(m.uri):
        return NO_ATOMIC_COMMIT
    if m.staged_rows > m.max_rows:
        return f"{m.staged_rows} staged rows"
    return untested_deltalake()


def in_table_schema(rows: pa.Table, table: Any) -> pa.Table | str:
    """`rows` (the MERGE source as the Spark job computed it: a window with schema changes, translated) in the
    table's schema, or why not."""
    schema = pa.schema(table.schema())
    by_lower = {name.lower(): name for name in rows.column_names}
    if len(by_lower) != len(rows.column_names) or len(schema) != len({f.name.lower() for f in schema}):
        return "column names that differ only by case"
    unknown = set(by_lower) - {f.name.lower() for f in schema}
    if unknown:
        return f"columns {sorted(unknown)} are not in the table"
    out: dict[str, pa.Array | pa.ChunkedArray] = {}
    for f in schema:
        name = by_lower.get(f.name.lower())
        try:
            out[f.name] = pa.nulls(rows.num_rows, f.type) if name is None else rows[name].cast(f.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            return f"column {f.name!r}: {one_line(e)}"
    return pa.table(out, schema=schema)


def land(  # noqa: PLR0911 (guard clauses: each returns why the table goes to Spark)
    m: SmallMerge, fence: Callable[[], None], *, attempts: int = 2, rows: pa.Table | None = None,
    created: Any | None = None,
) -> Landed | Ineligible:
    """MERGE the window's changes of one table with delta-rs, exactly once, or say why not. `rows`: the
    source as given (each key's last change, derived columns set) instead of the one read from staging.
    `created`: the table as this run just created it (`NewTable.table`), read instead of opening it again;
    a commit racing in after it fails the first attempt, and the second opens the table."""
    from deltalake.exceptions import CommitFailedError

    refused = _refused_job(m)
    if refused is not None:
        return Ineligible(refused)
    for attempt in range(1, attempts + 1):
        t0 = time.monotonic()
        # version V: every check below reads this snapshot
        table = created if attempt == 1 and created is not None else open_table(m.uri, m.storage)
        if table is None:
            return Ineligible("no table yet", missing=True)
        landed = table.transaction_version(m.app_id)
        if holds_window(landed, m.seq):
            return Landed("already")
        why = unsupported(table) or _too_big(table, m)
        if why is not None:
            return Ineligible(why)
        source = _source(m, table) if rows is None else in_table_schema(rows, table)
        if isinstance(source, str):
            return Ineligible(source)
        why = _tombstones_first(m, source, fence)
        if why is not None:
            return Ineligible(why)
        read_version = int(table.version())
        fence()
        try:
            metrics = _merge(table, source, m)
            version = int(table.version())
            if version == read_version:
                commit_txn_only_at(table, m)
                version = read_version + 1
        except CommitFailedError as e:
            if lost_race(m, m.uri, f"MERGE into {m.label}", e, attempt=attempt, attempts=attempts, storage=m.storage):
                return Landed("already")
            continue
        log.debug("%s", kv(event="merge.small_table", table=m.label, secs=round(time.monotonic() - t0, 3)))
        return Landed(
            "committed",
            inserted=int(metrics.get("num_target_rows_inserted") or 0),
            updated=int(metrics.get("num_target_rows_updated") or 0),
            deleted=int(metrics.get("num_target_rows_deleted") or 0),
            version=version,
        )
    raise AssertionError("unreachable")


def _metadata_writable(uri: str, storage: Storage) -> tuple[Any, None] | tuple[None, str]:
    """(the table, None) when delta-rs may commit to it here, else (None, why not)."""
    if not storage.may_commit(uri):
        return None, NO_ATOMIC_COMMIT
    untested = untested_deltalake()
    if untested is not None:
        return None, untested
    table = open_table(uri, storage)
    if table is None:
        return None, "no table yet"
    why = unsupported(table)
    return (table, None) if why is None else (None, why)


def commit_txn_only(
    c: WindowCommit, uri: str, fence: Callable[[], None], *, storage: Storage = AMBIENT
) -> Landed | Ineligible:
    """Record the window as landed in a table it changes no row of (nothing staged for it): the txn alone, as
    the MERGE of an empty source would commit it, in milliseconds rather than a Spark job's seconds."""
    from deltalake.exceptions import CommitFailedError

    table, why = _metadata_writable(uri, storage)
    if table is None:
        return Ineligible(str(why))
    if holds_window(table.transaction_version(c.app_id), c.seq):
        return Landed("already")
    read_version = int(table.version())
    fence()
    try:
        commit_txn_only_at(table, c)
    except CommitFailedError as e:
        from cdc_core.lake import delta_state

        if holds_window(delta_state.last_txn_version(uri, c.app_id, storage=storage), c.seq):
            return Landed("already")  # a concurrent run of this window committed it
        return Ineligible(f"a concurrent commit ({one_line(e)})")
    return Landed("committed", version=read_version + 1)


def set_properties(
    uri: str, properties: dict[str, str], user_metadata: str, fence: Callable[[], None], *,
    storage: Storage = AMBIENT,
) -> str | None:
    """Set table properties that are the product's own records (never `delta.*`, which may change the protocol)
    as one commit; None when committed, else why delta-rs did not (nothing written: Spark sets them)."""
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    if any(k.lower().startswith("delta.") for k in properties):
        return "Delta properties"
    table, why = _metadata_writable(uri, storage)
    if table is None:
        return why
    if table.protocol().min_writer_version > 2:
        # deltalake 1.6's set_table_properties rewrites a table-features protocol with features the table does
        # not use (variantType), which readers without them then refuse; legacy protocols it leaves alone.
        return "a table-features protocol"
    fence()
    try:
        table.alter.set_table_properties(
            dict(properties), raise_if_not_exists=False,
            commit_properties=CommitProperties(custom_metadata={"userMetadata": user_metadata}, max_commit_retries=0),
        )
    except CommitFailedError as e:
        return f"a concurrent commit ({one_line(e)})"
    return None


def members_of(pairs: Sequence[tuple[StagedTable, Sequence[tuple[str, str]]]]) -> tuple[Member, ...]:
    return tuple(Member(st, tuple(lineage)) for st, lineage in pairs)
