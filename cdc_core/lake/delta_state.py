"""Read a Delta table's state without Spark: idempotent-write versions, existence, a summary.

The ack step asks Delta itself whether a window landed: the merge job commits each table with
`txnAppId` = pipeline and `txnVersion` = window seq, so `last_txn_version(table, pipeline) >= seq`
means the window's commit to that table is in the log. The `deltalake` package (delta-rs) replays
`_delta_log` for us: the last checkpoint (classic, multi-part or v2) plus the JSON commits after it,
which is exactly where `txn` actions live once old commits are cleaned up.

An answer is either the truth or a `LakeError`: a table that does not exist reads as None/False,
but an I/O error, a corrupt commit or an unsupported protocol is never taken as "not there".
For local paths, "not there" is decided by the file system (no `_delta_log` with a commit or
checkpoint in it); for object stores it is deltalake's `TableNotFoundError`.

Every function takes the pipeline's `storage` (cdc_core.lake.object_store.Storage: its credentials for
an object store); the default, `AMBIENT`, suits local paths and delta-rs's own default chain.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model.errors import LakeError

# Commit files, checkpoints (classic, multi-part, v2) and compacted commit ranges: any one of them
# means the table has been created. `_last_checkpoint` alone does not.
_LOG_ENTRY_RE = re.compile(r"^\d{20}\.(json|crc|checkpoint\..*|\d{20}\.compacted\.json)$")


def _local_path(table_uri: str) -> Path | None:
    """The local directory of a local table URI (plain path or file://), None for an object store."""
    parsed = urlparse(table_uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and table_uri[1:3] in (":\\", ":/")):  # C:\ on Windows
        return Path(table_uri)
    return None


def _local_log_present(table_uri: str, path: Path) -> bool:
    log_dir = path / "_delta_log"
    try:
        entries = os.scandir(log_dir)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        raise LakeError(
            f"Delta table location {table_uri}: {path} or its _delta_log is a file, not a table directory; "
            "something else occupies the table's path"
        ) from None
    except OSError as e:
        raise LakeError(
            f"cannot list {log_dir} ({type(e).__name__}: {e}); check the lake's permissions and storage"
        ) from None
    # Stops at the first log entry: the log holds `log_retention_hours` of commits (43,200 for a one-minute pipeline
    # at the default 30 days; 10,000 in the long run, where a full listing per open was 10% of the driver's CPU).
    with entries:
        return any(_LOG_ENTRY_RE.match(e.name) for e in entries)


def _open(table_uri: str, storage: Storage) -> DeltaTable | None:
    """The latest snapshot of the table, None when there is no table at `table_uri`."""
    storage_options = storage.delta_rs_options(table_uri)
    local = _local_path(table_uri)
    if local is not None and not _local_log_present(table_uri, local):
        return None
    try:
        return DeltaTable(table_uri, storage_options=storage_options)
    except TableNotFoundError as e:
        if local is None:
            return None
        raise LakeError(
            f"Delta table {table_uri} has a transaction log that cannot be loaded ({e}); "
            "check the files under _delta_log (permissions, truncated or deleted commits)"
        ) from None
    except Exception as e:  # delta-rs raises DeltaError, DeltaProtocolError, OSError, ...
        raise LakeError(
            f"cannot read Delta table {table_uri} ({type(e).__name__}: {e}); the answer is unknown, not "
            "'absent': fix the storage or the log and retry"
        ) from None


# Tables read at once by `per_table`: on an object store each read is a few round trips (list the log, get its
# entries), so a window of 300 tables read one by one waits ~20 s; delta-rs releases the GIL while it reads.
READ_THREADS = 8
_Item = TypeVar("_Item")
_Read = TypeVar("_Read")


def per_table(read: Callable[[_Item], _Read], items: Sequence[_Item], lake_uri: str) -> list[_Read]:
    """`read(item)` for each of `items` (tables of the lake at `lake_uri`), in order, up to READ_THREADS at a
    time on an object store (one at a time on a local lake, where a read takes milliseconds). The first error
    raises, as a loop would."""
    if len(items) <= 1 or _local_path(lake_uri) is not None:
        return [read(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(items)), thread_name_prefix="cdc-delta-read") as pool:
        return list(pool.map(read, items))


def open_table(table_uri: str, *, storage: Storage = AMBIENT) -> DeltaTable | None:
    """The latest snapshot of the table (one pinned version), None when there is no table."""
    return _open(table_uri, storage)


def local_dir(table_uri: str) -> Path | None:
    """The local directory of a local URI (plain path or file://), None for an object store."""
    return _local_path(table_uri)


def table_exists(table_uri: str, *, storage: Storage = AMBIENT) -> bool:
    """True when a Delta table has been created at `table_uri` (its log holds a commit or checkpoint)."""
    local = _local_path(table_uri)
    if local is not None:
        return _local_log_present(table_uri, local)
    return _open(table_uri, storage) is not None


def table_id(table_uri: str, *, storage: Storage = AMBIENT) -> str | None:
    """The Delta table's id (`metaData.id`, fixed when the table is created), None when there is no table.

    A table deleted and re-created at the same location gets a new id: that is how the pipeline tells
    "the table it landed windows into" from "a table that happens to be there" (cdc_core.model.lake_registry).
    """
    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        return str(table.metadata().id)
    except Exception as e:
        raise LakeError(f"cannot read the metadata of Delta table {table_uri} ({type(e).__name__}: {e})") from None


def last_txn_version(table_uri: str, app_id: str, *, storage: Storage = AMBIENT) -> int | None:
    """The latest `txn` version committed by `app_id` (Delta's idempotent-write id), or None when the
    table does not exist or `app_id` never committed to it."""
    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        version = table.transaction_version(app_id)
    except Exception as e:
        raise LakeError(
            f"cannot read the transaction versions of Delta table {table_uri} ({type(e).__name__}: {e})"
        ) from None
    return None if version is None else int(version)


@dataclass(frozen=True)
class TableFacts:
    """What the ack asks of each table, from one snapshot: its id, its version and `app_id`'s last txn."""

    table_id: str
    version: int
    txn: int | None


def table_facts(table_uri: str, app_id: str, *, storage: Storage = AMBIENT) -> TableFacts | None:
    """The table's id, current version and `app_id`'s last txn version from one open; None when there is no
    table. The log only, no file listing: the ack reads every table of its window and of its consistent cut
    once with it (cdc_core.run.lake_tables.LakeReads)."""
    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        txn = table.transaction_version(app_id)
        return TableFacts(str(table.metadata().id), int(table.version()), None if txn is None else int(txn))
    except Exception as e:
        raise LakeError(f"cannot read the log of Delta table {table_uri} ({type(e).__name__}: {e})") from None


def writer_and_txn(
    table_uri: str, app_id: str, *, storage: Storage = AMBIENT
) -> tuple[str | None, int | None] | None:
    """(the table's recorded writer property `cdc.writer`, `app_id`'s last txn version) from one snapshot;
    None when there is no table (cdc_core.model.lake_writers: one writer per table)."""
    from cdc_core.model.lake_writers import WRITER_PROPERTY

    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        writer = table.metadata().configuration.get(WRITER_PROPERTY)
        txn = table.transaction_version(app_id)
    except Exception as e:
        raise LakeError(f"cannot read the metadata of Delta table {table_uri} ({type(e).__name__}: {e})") from None
    return (None if writer is None else str(writer)), (None if txn is None else int(txn))


def writer_txn_properties(
    table_uri: str, app_id: str, *, storage: Storage = AMBIENT
) -> tuple[str | None, int | None, dict[str, str]] | None:
    """`writer_and_txn` and the table's properties, from one snapshot; None when there is no table."""
    from cdc_core.model.lake_writers import WRITER_PROPERTY

    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        props = {str(k): str(v) for k, v in (table.metadata().configuration or {}).items()}
        txn = table.transaction_version(app_id)
    except Exception as e:
        raise LakeError(f"cannot read the metadata of Delta table {table_uri} ({type(e).__name__}: {e})") from None
    writer = props.get(WRITER_PROPERTY)
    return writer, (None if txn is None else int(txn)), props


def window_commit_version(
    table_uri: str, app_id: str, seq: int, *, lookback: int = 100, storage: Storage = AMBIENT
) -> int | None:
    """The table version whose commit landed window `seq` of pipeline `app_id`, found by the commit's
    `userMetadata` (the merge job writes {"pipeline", "seq", ...}) among the last `lookback` commits.
    Informational (the monitor page): None when the table is gone or the commit is older than that."""
    import json

    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        history = table.history(lookback)
    except Exception as e:
        raise LakeError(f"cannot read the history of Delta table {table_uri} ({type(e).__name__}: {e})") from None
    for commit in history:  # newest first
        try:
            meta = json.loads(commit.get("userMetadata") or "{}")
        except ValueError:
            continue
        if isinstance(meta, dict) and meta.get("pipeline") == app_id and meta.get("seq") == seq:
            return int(commit["version"])
    return None


def table_summary(
    table_uri: str, *, app_id: str | None = None, storage: Storage = AMBIENT
) -> dict[str, Any]:
    """Version, live files, bytes and the last commit of a table, for monitoring.

    With `app_id`, also that writer's last txn version. A missing table gives `exists: False`.
    """
    out: dict[str, Any] = {
        "uri": table_uri,
        "exists": False,
        "version": None,
        "files": None,
        "size_bytes": None,
        "last_commit_ms": None,
        "last_commit_at": None,
        "last_operation": None,
    }
    if app_id is not None:
        out["txn_version"] = None
    table = _open(table_uri, storage)
    if table is None:
        return out
    try:
        adds = pa.table(table.get_add_actions(flatten=True))
        history = table.history(1)
        txn = table.transaction_version(app_id) if app_id is not None else None
        version = table.version()
    except Exception as e:
        raise LakeError(f"cannot summarise Delta table {table_uri} ({type(e).__name__}: {e})") from None
    last = history[0] if history else {}
    ts = last.get("timestamp")
    out.update(
        exists=True,
        version=int(version),
        files=adds.num_rows,
        size_bytes=int(pc.sum(adds["size_bytes"]).as_py() or 0) if adds.num_rows else 0,
        last_commit_ms=int(ts) if ts is not None else None,
        last_commit_at=(
            datetime.fromtimestamp(ts / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            if ts is not None else None
        ),
        last_operation=last.get("operation"),
    )
    if app_id is not None:
        out["txn_version"] = None if txn is None else int(txn)
    return out


def commit_version(
    table_uri: str, user_metadata: str, *, limit: int = 20, storage: Storage = AMBIENT
) -> int | None:
    """The version of the commit carrying `commitInfo.userMetadata == user_metadata` among the table's
    last `limit` commits (None when not found). The merge job reports its own commits this way."""
    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        history = table.history(limit)
    except Exception as e:
        raise LakeError(f"cannot read the history of Delta table {table_uri} ({type(e).__name__}: {e})") from None
    for commit in history:
        if commit.get("userMetadata") == user_metadata:
            return int(commit["version"])
    return None


def column_max(table_uri: str, column: str, *, storage: Storage = AMBIENT) -> Any:
    """The largest value of `column` by the files' statistics (None: no table or no rows).

    Raises LookupError when a file has no statistics for the column (the answer is unknown). Rows a
    deletion vector removed still count: the result is an upper bound.
    """
    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        adds = pa.table(table.get_add_actions(flatten=True))
    except Exception as e:
        raise LakeError(f"cannot read the files of Delta table {table_uri} ({type(e).__name__}: {e})") from None
    if adds.num_rows == 0:
        return None
    name = f"max.{column}"
    if name not in adds.column_names or adds[name].null_count:
        raise LookupError(f"{table_uri}: no statistics for {column} in every file")
    return pc.max(adds[name]).as_py()


def read_rows(
    table_uri: str,
    *,
    columns: list[str] | None = None,
    version: int | None = None,
    storage: Storage = AMBIENT,
) -> pa.Table:
    """The table's rows (current, or at `version`) as plain Arrow types with logical column names; for
    verify, tools and tests.

    Lake tables are created with deletion vectors, which `DeltaTable.to_pyarrow_table` refuses, and
    source names with spaces or commas need column mapping, which it reads wrong (all NULL); delta-rs'
    own engine (`scan`) handles both, with view types for strings and binaries (cast back here).
    """
    table = _open(table_uri, storage)
    if table is None:
        raise LakeError(f"no Delta table at {table_uri}")
    if version is not None:
        table.load_as_version(version)
    try:
        data = pa.table(table.scan(columns=columns).read_all())
    except Exception as e:
        raise LakeError(f"cannot read Delta table {table_uri} ({type(e).__name__}: {e})") from None
    plain = {pa.types.is_string_view: pa.string(), pa.types.is_binary_view: pa.binary()}
    fields = [
        next((pa.field(f.name, t, f.nullable) for test, t in plain.items() if test(f.type)), f) for f in data.schema
    ]
    return data.cast(pa.schema(fields)) if fields != list(data.schema) else data


def table_columns(table_uri: str, *, storage: Storage = AMBIENT) -> tuple[tuple[str, str], ...] | None:
    """The table's top-level columns as (name, Delta type name) in table order, None when there is no table."""
    table = _open(table_uri, storage)
    if table is None:
        return None
    try:
        fields = table.schema().fields
    except Exception as e:
        raise LakeError(f"cannot read the schema of Delta table {table_uri} ({type(e).__name__}: {e})") from None
    # A primitive type's name ("long", "decimal(10,2)"); a nested one's kind ("struct", "array", "map").
    return tuple((f.name, str(getattr(f.type, "type", f.type))) for f in fields)
