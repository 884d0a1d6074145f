"""Maintenance of a small Delta table with delta-rs: compaction, VACUUM, a log checkpoint and the log's clean-up,
in milliseconds where the Spark job's steps take seconds each (planning, log replay and a job per step, for a table
of a few files: 20-80 s per table on the long run's 20 tables, bench/RESULTS.md "The long run").

The maintenance job (spark_apps/maintain_tables.py) tries this first for each table and keeps Spark for what
delta-rs may not do or write: a table delta-rs may not commit to (cdc_core.lake.delta_rs_rules: deletion vectors,
column mapping, table features; the tables that grew past the small-table writer have deletion vectors), Z-order or
clustering, retention properties to align (`delta.*` properties change the protocol: Spark's), a lake without
atomic commits, or a commit that lost a race (then Spark runs every step of that table again; each is idempotent).
The result has the shape of the Spark steps' (docs/housekeeping.md), with `writer: delta-rs`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from cdc_core.lake.delta_rs_rules import unsupported, untested_deltalake
from cdc_core.lake.object_store import AMBIENT, Storage, delta_rs_uri
from cdc_core.model.logfmt import one_line

WRITER = "delta-rs"
MAX_BYTES = 1 << 30  # past this the Spark job compacts (its executors, not the driver's process)


def _open(uri: str, storage: Storage) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(delta_rs_uri(uri), storage_options=storage.delta_rs_options(uri))


def _total_size(stats: Any) -> int:
    """`totalSize` of delta-rs' optimize metrics for the files added or removed (a JSON text in deltalake 1.6)."""
    if isinstance(stats, str):
        stats = json.loads(stats or "{}")
    return int((stats or {}).get("totalSize") or 0)


def files_and_bytes(table: Any) -> tuple[int, int]:
    actions = table.get_add_actions(flatten=True)
    sizes = actions.column("size_bytes").to_pylist() if actions.num_rows else []
    return len(sizes), int(sum(sizes))


def eligible(  # noqa: PLR0911 (one answer per rule)
    uri: str, *, storage: Storage = AMBIENT, properties: dict[str, str] | None = None,
    zorder_by: tuple[str, ...] | list[str] = (),
) -> tuple[Any, None] | tuple[None, str]:
    """(the table, None) when delta-rs may maintain it, else (None, why not). `properties`: the managed ones the
    table must carry (any missing or different: Spark sets them)."""
    if zorder_by:
        return None, "Z-order"
    if not storage.may_commit(uri):
        return None, "no atomic commits on this store"
    why = untested_deltalake()
    if why is not None:
        return None, why
    try:
        table = _open(uri, storage)
    except Exception as e:
        return None, f"cannot open with delta-rs ({one_line(e)})"
    why = unsupported(table)
    if why is not None:
        return None, why
    config = dict(table.metadata().configuration or {})
    if config.get("delta.checkpointInterval") is None or any(config.get(k) != v for k, v in (properties or {}).items()):
        return None, "retention properties to align"
    if files_and_bytes(table)[1] > MAX_BYTES:
        return None, f"over {MAX_BYTES >> 20} MiB"
    return table, None


def maintain(
    uri: str,
    table: Any,
    *,
    vacuum_hours: int,
    fence: Callable[[], None],
    user_metadata: Callable[[str], str],
    log_entries: Callable[[], int | None],
    optimize: bool = True,
    vacuum: bool = True,
    storage: Storage = AMBIENT,
) -> dict[str, Any]:
    """Compact (`optimize`), VACUUM files older than `vacuum_hours` (`vacuum`), checkpoint the log and drop entries
    past `delta.logRetentionDuration`; each step fenced first and labelled with `user_metadata(step)`. Raises
    deltalake's CommitFailedError when a commit loses a race (the caller lets Spark redo the table)."""
    from deltalake import CommitProperties

    def props(step: str) -> Any:
        return CommitProperties(custom_metadata={"userMetadata": user_metadata(step)}, max_commit_retries=0)

    out: dict[str, Any] = {"writer": WRITER, "optimize": None, "vacuum": None}
    files, size = files_and_bytes(table)
    out.update(files_before=files, bytes_before=size, version_before=int(table.version()))
    if optimize:
        fence()
        metrics = table.optimize.compact(commit_properties=props("optimize"))
        out["optimize"] = {
            "mode": "compaction", "files_removed": int(metrics.get("numFilesRemoved") or 0),
            "files_added": int(metrics.get("numFilesAdded") or 0),
            "bytes_removed": _total_size(metrics.get("filesRemoved")),
            "bytes_added": _total_size(metrics.get("filesAdded")), "attempts": 1,
            "writer": WRITER,
        }
        table = _open(uri, storage)
    if vacuum:  # `full`: files no version references (an aborted write's) go too, as Spark's VACUUM deletes them
        doomed = table.vacuum(retention_hours=vacuum_hours, enforce_retention_duration=False, dry_run=True, full=True)
        fs, root = storage.fs(uri)
        doomed_bytes = 0
        for path in doomed:
            with contextlib.suppress(OSError, ValueError):
                doomed_bytes += int(fs.size(f"{root.rstrip('/')}/{path}"))
        fence()
        deleted = table.vacuum(retention_hours=vacuum_hours, enforce_retention_duration=False, dry_run=False, full=True,
                               commit_properties=props("vacuum"))
        out["vacuum"] = {"retention_hours": vacuum_hours, "files_deleted": len(deleted),
                         "bytes_deleted": doomed_bytes if len(deleted) == len(doomed) else None, "writer": WRITER}
        table = _open(uri, storage)
    before = log_entries()
    fence()
    table.create_checkpoint()
    table.cleanup_metadata()
    after = log_entries()
    out["log"] = {
        "checkpoint_version": int(table.version()), "mode": "checkpoint+cleanup", "entries_before": before,
        "entries_after": after,
        "entries_deleted": (before - after) if before is not None and after is not None and before > after else 0,
        "writer": WRITER,
    }
    files, size = files_and_bytes(_open(uri, storage))
    out.update(files_after=files, bytes_after=size, version_after=int(table.version()))
    return out
