"""The checkpoints table: which Delta version of each lake table holds each acked window (reader-facing).

How readers use it and the rules: docs/lake-versions.md.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model.errors import CdcError, ConfigError, LakeError, StateConflict
from cdc_core.model.layout import checkpoints_uri
from cdc_core.model.logfmt import iso_ms
from cdc_core.model.output_modes import OUTPUT_STATE, OUTPUTS
from cdc_core.model.retention import CHECKPOINT_INTERVAL, PROP_CHECKPOINT_INTERVAL, PROP_LOG_RETENTION, interval

if TYPE_CHECKING:
    from cdc_core.lake.delta_state import TableFacts

CHECKPOINTS_FORMAT = 1

SCHEMA = pa.schema([
    pa.field("format", pa.int32(), False),
    pa.field("pipeline", pa.string(), False),
    pa.field("seq", pa.int64(), False),
    pa.field("kind", pa.string(), False),
    pa.field("table_name", pa.string(), False),
    pa.field("table_uri", pa.string(), False),
    pa.field("delta_version", pa.int64(), True),
    pa.field("changed", pa.bool_(), False),
    pa.field("inserted", pa.int64(), True),
    pa.field("updated", pa.int64(), True),
    pa.field("deleted", pa.int64(), True),
    pa.field("changes", pa.int64(), True),
    pa.field("cursor", pa.string(), True),
    pa.field("commit_ts", pa.float64(), True),
    pa.field("acked_at", pa.float64(), False),
    pa.field("tables", pa.int32(), False),
    # What the row records of its lake table: `state`, or its `history` or `changelog` (docs/output-modes.md).
    # Added 2026-11-30: rows written before it read as null, i.e. state.
    pa.field("output", pa.string(), True),
])


def app_id(pipeline: str) -> str:
    """The checkpoints table's idempotent-write id (txnAppId); never a data table's (that is the pipeline)."""
    return f"{pipeline}:checkpoints"




# ------------------------------------------------------------------------------------------ writing


@dataclass(frozen=True)
class TableAtWindow:
    """One table's state (or one of its outputs) as of a window: its Delta version, and what the window did."""

    name: str  # schema.table
    uri: str
    delta_version: int | None
    changed: bool
    inserted: int | None = None
    updated: int | None = None
    deleted: int | None = None
    changes: int | None = None
    output: str = OUTPUT_STATE  # or the table's history or changelog (cdc_core.model.output_modes)


def checkpoint_rows(
    pipeline: str, seq: int, kind: str, tables: list[TableAtWindow], *, cursor: str | None,
    commit_ts: float | None, acked_at: float,
) -> pa.Table:
    """Pure: the rows of one window (one per table and output, sorted by name, the state first)."""
    if not tables:
        raise StateConflict(f"pipeline {pipeline!r}: window {seq} has no table to record in the checkpoints table")
    ordered = sorted(tables, key=lambda t: (t.name, OUTPUTS.index(t.output)))
    cols: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    for t in ordered:
        row = {
            "format": CHECKPOINTS_FORMAT, "pipeline": pipeline, "seq": seq, "kind": kind, "table_name": t.name,
            "table_uri": t.uri, "delta_version": t.delta_version, "changed": t.changed, "inserted": t.inserted,
            "updated": t.updated, "deleted": t.deleted, "changes": t.changes, "cursor": cursor,
            "commit_ts": commit_ts, "acked_at": acked_at, "tables": len(ordered), "output": t.output,
        }
        for k, v in row.items():
            cols[k].append(v)
    return pa.table(cols, schema=SCHEMA)


def current_versions(
    pipeline: str, seq: int, uris: dict[str, str], *, read: Callable[[list[str]], list[TableFacts | None]],
) -> dict[str, int | None]:
    """Each table's current Delta version, checked to hold no window after `seq` (else this run is stale).

    None for a table that is not there (a deleted table: a reader of the cut gets an error for it). `read`:
    the tables' facts for a list of URIs (the ack's `LakeReads.facts`, which read most of them already).
    """
    names = list(uris)
    facts = read([uris[n] for n in names])
    out: dict[str, int | None] = {}
    for name, found in zip(names, facts, strict=True):
        uri = uris[name]
        if found is None:
            out[name] = None
            continue
        if found.txn is not None and found.txn > seq:
            raise StateConflict(
                f"pipeline {pipeline!r}: Delta table {name} ({uri}) already holds window {found.txn}, after window "
                f"{seq}; this run is stale (another run acked window "
                f"{seq} and went on): it writes nothing to the checkpoints table"
            )
        out[name] = found.version
    return out


def recorded(lake_root: str, pipeline: str, seq: int, *, storage: Storage = AMBIENT) -> bool:
    """True when the checkpoints table already holds window `seq` (or a later one)."""
    from cdc_core.lake import delta_state

    v = delta_state.last_txn_version(checkpoints_uri(lake_root, pipeline), app_id(pipeline),
                                     storage=storage)
    return v is not None and v >= seq


@dataclass(frozen=True)
class CheckpointsSnapshot:
    """The checkpoints table as one open read it (`table` None: not created yet): whether a window is
    recorded, and the snapshot `write_window` commits against, so an ack opens the table once."""

    table: Any
    done: int | None  # the last window recorded (its idempotent-write version)

    def holds(self, seq: int) -> bool:
        return self.done is not None and self.done >= seq


def checkpoints_snapshot(lake_root: str, pipeline: str, *, storage: Storage = AMBIENT) -> CheckpointsSnapshot:
    from cdc_core.lake import delta_state

    uri = checkpoints_uri(lake_root, pipeline)
    try:
        dt = delta_state.open_table(uri, storage=storage)
        done = dt.transaction_version(app_id(pipeline)) if dt is not None else None
    except Exception as e:
        raise LakeError(
            f"pipeline {pipeline!r}: cannot read the checkpoints table {uri} ({type(e).__name__}: {e})"
        ) from None
    return CheckpointsSnapshot(dt, None if done is None else int(done))


def write_window(
    lake_root: str, pipeline: str, seq: int, build: Any, *, storage: Storage = AMBIENT,
    snapshot: CheckpointsSnapshot | None = None,
) -> bool:
    """Append window `seq`'s rows in one idempotent Delta commit; False when it was already there.

    `build()` returns the rows; it is called after the checkpoints table's snapshot is taken (`snapshot`, the
    caller's, or one read now), so a concurrent writer that commits the same window in between makes our
    commit fail Delta's conflict check (same app id) instead of adding a second copy.
    """
    from deltalake import CommitProperties, Transaction, write_deltalake

    uri = checkpoints_uri(lake_root, pipeline)
    storage_options = storage.delta_rs_options(uri)
    app = app_id(pipeline)
    snap = snapshot if snapshot is not None else checkpoints_snapshot(lake_root, pipeline, storage=storage)
    if snap.holds(seq):
        return False
    # Commit against the snapshot read: a racing commit of the same window conflicts.
    target: Any = snap.table if snap.table is not None else uri
    rows: pa.Table = build()
    try:
        write_deltalake(
            target, rows, mode="append", storage_options=storage_options if target is uri else None,
            schema_mode="merge",  # a checkpoints table created before the `output` column gets it
            configuration={PROP_CHECKPOINT_INTERVAL: str(CHECKPOINT_INTERVAL)} if target is uri else None,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app, seq)],
                custom_metadata={"userMetadata": json.dumps({"pipeline": pipeline, "seq": seq, "what": "checkpoint"})},
            ),
        )
    except Exception as e:
        if recorded(lake_root, pipeline, seq, storage=storage):
            return False  # another writer landed the very same window first
        raise LakeError(
            f"pipeline {pipeline!r}: cannot append window {seq} to the checkpoints table {uri} "
            f"({type(e).__name__}: {e}); nothing was recorded and the cursor did not move: retry the ack"
        ) from None
    return True


def maintain(
    lake_root: str, pipeline: str, *, vacuum_retention_hours: float, min_files: int = 32,
    storage: Storage = AMBIENT, fence: Callable[[], None] = lambda: None, log_retention_hours: float | None = None,
) -> dict[str, Any]:
    """Keep the checkpoints table small (the maintenance run's cleanup, under the pipeline's lease: `fence` checks
    it before each step): compact its one-file-per-window appends once there are `min_files` files, VACUUM files
    older than the pipeline's vacuum retention, write a log checkpoint and drop expired log entries (the steps of
    cdc_core.lake.small_maintenance). The windows' idempotent-write identity survives all of it (no txn retention
    is set on this table). `log_retention_hours`: the pipeline's, set on the table so that its log (one commit per
    window, read by every ack) keeps what the pipeline's tables keep, not Delta's default of 30 days."""
    from deltalake import DeltaTable

    from cdc_core.lake import delta_state, small_maintenance

    uri = checkpoints_uri(lake_root, pipeline)
    storage_options = storage.delta_rs_options(uri)
    if not delta_state.table_exists(uri, storage=storage):
        return {"uri": uri, "exists": False}
    try:
        dt = DeltaTable(uri, storage_options=storage_options)
        conf = dt.metadata().configuration
        wanted = {} if PROP_CHECKPOINT_INTERVAL in conf else {PROP_CHECKPOINT_INTERVAL: str(CHECKPOINT_INTERVAL)}
        log_interval = None if log_retention_hours is None else interval(math.ceil(log_retention_hours))
        if log_interval is not None and conf.get(PROP_LOG_RETENTION) != log_interval:
            wanted[PROP_LOG_RETENTION] = log_interval
        if wanted:  # a table created before these were set, or a changed retention
            fence()
            dt.alter.set_table_properties(wanted)
            dt = DeltaTable(uri, storage_options=storage_options)
        steps = small_maintenance.maintain(
            uri, dt, vacuum_hours=math.ceil(vacuum_retention_hours), fence=fence,
            user_metadata=lambda step: json.dumps({"pipeline": pipeline, "maintenance": "checkpoints", "step": step}),
            log_entries=lambda: None, optimize=len(dt.file_uris()) >= min_files, storage=storage,
        )
    except Exception as e:
        if isinstance(e, CdcError):  # fenced: the lease is someone else's
            raise
        raise LakeError(
            f"pipeline {pipeline!r}: cannot maintain the checkpoints table {uri} ({type(e).__name__}: {e}); "
            "it stays as it is (correct, only larger); maintenance retries next time"
        ) from None
    out: dict[str, Any] = {"uri": uri, "exists": True, "files_before": steps["files_before"]}
    if steps["optimize"] is not None:
        out["files_removed"] = steps["optimize"]["files_removed"]
    out.update(vacuumed=steps["vacuum"]["files_deleted"], files_after=steps["files_after"],
               version=steps["version_after"])
    return out


# ------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class TableVersion:
    name: str
    uri: str
    version: int | None
    changed: bool  # by this window
    output: str = OUTPUT_STATE

    @property
    def label(self) -> str:
        return self.name if self.output == OUTPUT_STATE else f"{self.name} ({self.output})"

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "version": self.version, "changed": self.changed}


@dataclass(frozen=True)
class Cut:
    """Every table of a pipeline at one window boundary: read them all at these versions."""

    pipeline: str
    seq: int
    kind: str
    cursor: str | None
    commit_ts: float | None
    acked_at: float
    tables: dict[str, TableVersion] = field(default_factory=dict)  # each table's state
    outputs: dict[str, dict[str, TableVersion]] = field(default_factory=dict)  # name -> its history, changelog

    def _table_dict(self, name: str) -> dict[str, Any]:
        out = self.tables[name].to_dict()
        if self.outputs.get(name):
            out["outputs"] = {o: t.to_dict() for o, t in sorted(self.outputs[name].items())}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "window": self.seq,
            "kind": self.kind,
            "cursor": self.cursor,
            "commit_ts": self.commit_ts,
            "commit_at": iso_ms(self.commit_ts),
            "acked_at": iso_ms(self.acked_at),
            "tables": {n: self._table_dict(n) for n in sorted(self.tables)},
        }

    def tables_dict(self, tables: list[str] | tuple[str, ...] | None) -> dict[str, Any]:
        """`to_dict()["tables"]` of these tables only (all: None or empty)."""
        return {t.name: self._table_dict(t.name) for t in self.pick(tables)}

    def table(self, name: str, output: str = OUTPUT_STATE) -> TableVersion:
        """Table `name`'s state, or its history or change log, in this cut."""
        (state,) = self.pick([name])
        if output == OUTPUT_STATE:
            return state
        found = self.outputs.get(name, {}).get(output)
        if found is None:
            kept = ", ".join(sorted(self.outputs.get(name, {}))) or "none"
            raise ConfigError(
                f"pipeline {self.pipeline!r}: window {self.seq} records no {output} of {name} (its outputs recorded: "
                f"{kept}); a table's outputs are recorded from the first window that lands them "
                "(table_options[...].outputs, docs/output-modes.md)"
            )
        return found

    def with_outputs(self, tables: list[str] | tuple[str, ...] | None) -> list[TableVersion]:
        """The picked tables' states, each followed by its recorded outputs."""
        out = []
        for t in self.pick(tables):
            out.append(t)
            out += [o for _, o in sorted(self.outputs.get(t.name, {}).items())]
        return out

    def pick(self, tables: list[str] | tuple[str, ...] | None) -> list[TableVersion]:
        if not tables:
            return [self.tables[n] for n in sorted(self.tables)]
        unknown = [t for t in tables if t not in self.tables]
        if unknown:
            raise ConfigError(
                f"pipeline {self.pipeline!r}: window {self.seq} records no table {', '.join(map(repr, unknown))}; "
                f"its tables are {', '.join(sorted(self.tables)) or 'none'}"
            )
        return [self.tables[n] for n in tables]

    def sql(self, tables: list[str] | tuple[str, ...] | None = None) -> list[str]:
        """Spark SQL / Databricks statements reading each table at its version (`VERSION AS OF`)."""
        out = []
        for t in self.with_outputs(tables):
            if t.version is None:
                out.append(f"-- {t.label}: no Delta table at {t.uri} when window {self.seq} was acked")
                continue
            path = t.uri.replace("`", "``")
            out.append(f"SELECT * FROM delta.`{path}` VERSION AS OF {t.version};  -- {t.label}")
        return out


def resolve_cut(
    rows: list[dict[str, Any]], pipeline: str, *, window: int | None = None, as_of: float | None = None
) -> Cut:
    """Pure: the cut of the newest complete window (or window `window`, or the newest whose covered
    commit time is at or before `as_of`) among the checkpoints table's rows."""
    if window is not None and as_of is not None:
        raise ConfigError("give either a window or a time (--window or --as-of), not both")
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("pipeline") == pipeline:
            by_seq.setdefault(int(r["seq"]), []).append(r)
    # One commit per window makes a partial window impossible; still, never hand one out.
    complete = {s: rs for s, rs in by_seq.items()
                if len({(r["table_name"], _output(r)) for r in rs}) == int(rs[0]["tables"])}
    where = f"pipeline {pipeline!r}"
    if not complete:
        raise LakeError(
            f"{where}: the checkpoints table records no window yet; run the pipeline (every non-empty acked window "
            "is recorded)"
        )
    if window is not None:
        if window not in complete:
            near = sorted(complete)
            raise LakeError(
                f"{where}: window {window} is not recorded (empty windows are not, nor windows acked before this "
                f"feature); recorded windows: {near[0]}..{near[-1]} ({len(near)}); choose one of them"
            )
        chosen = window
    elif as_of is not None:
        eligible = [s for s, rs in complete.items() if rs[0]["commit_ts"] is not None and rs[0]["commit_ts"] <= as_of]
        if not eligible:
            oldest = min(complete)
            raise LakeError(
                f"{where}: no recorded window covers only changes committed at or before {iso_ms(as_of)}; the oldest "
                f"recorded one is window {oldest} (newest commit {iso_ms(complete[oldest][0]['commit_ts'])})"
            )
        chosen = max(eligible)
    else:
        chosen = max(complete)
    rs = complete[chosen]
    first = rs[0]
    versions = [
        TableVersion(r["table_name"], r["table_uri"],
                     None if r.get("delta_version") is None else int(r["delta_version"]), bool(r["changed"]),
                     _output(r))
        for r in rs
    ]
    outputs: dict[str, dict[str, TableVersion]] = {}
    for t in versions:
        if t.output != OUTPUT_STATE:
            outputs.setdefault(t.name, {})[t.output] = t
    return Cut(
        pipeline=pipeline,
        seq=chosen,
        kind=str(first["kind"]),
        cursor=first.get("cursor"),
        commit_ts=first.get("commit_ts"),
        acked_at=float(first["acked_at"]),
        tables={t.name: t for t in versions if t.output == OUTPUT_STATE},
        outputs=outputs,
    )


def _output(row: dict[str, Any]) -> str:
    return str(row.get("output") or OUTPUT_STATE)  # rows written before the column: the state


def read_checkpoints(
    lake_root: str, pipeline: str, *, storage: Storage = AMBIENT
) -> list[dict[str, Any]]:
    """The checkpoints table's rows (empty when it does not exist yet)."""
    from cdc_core.lake import delta_state

    uri = checkpoints_uri(lake_root, pipeline)
    if not delta_state.table_exists(uri, storage=storage):
        return []
    rows: list[dict[str, Any]] = delta_state.read_rows(uri, storage=storage).to_pylist()
    return rows


def load_cut(
    lake_root: str, pipeline: str, *, window: int | None = None, as_of: float | None = None,
    storage: Storage = AMBIENT,
) -> Cut:
    """The cut for the newest recorded window (or `window`, or at/before `as_of`), read from the lake."""
    return resolve_cut(
        read_checkpoints(lake_root, pipeline, storage=storage), pipeline, window=window, as_of=as_of
    )


def retention_hint(cut: Cut, table: TableVersion, problem: str) -> str:
    """The message for a version that cannot be read any more, naming the retention to raise."""
    age_h = max(0.0, (time.time() - cut.acked_at) / 3600)
    if problem == "log":
        what = (
            "its Delta log no longer reaches back to that version (log entries older than "
            "delta.logRetentionDuration are removed at checkpoints): raise maintenance.log_retention_hours"
        )
    else:
        what = (
            "its data files were removed by VACUUM (older than delta.deletedFileRetentionDuration): raise "
            "maintenance.vacuum_retention_hours"
        )
    return (
        f"pipeline {cut.pipeline!r}: cannot read {table.label} at version {table.version} (window {cut.seq}, acked "
        f"{age_h:.1f} h ago): {what} above {math.ceil(age_h)} h to keep cuts this old readable "
        "(docs/housekeeping.md), or read a newer cut (cdc versions <pipeline>)"
    )


def _classify(error: BaseException) -> str | None:
    text = f"{type(error).__name__}: {error}".lower()
    if any(s in text for s in ("filenotfound", "file not found", "no such file", "does not exist", "not found")):
        return "log" if ("_delta_log" in text or ("version" in text and "log" in text)) else "files"
    if "cannot time travel" in text or "versionnotfound" in text or "invalid version" in text:
        return "log"
    return None


def check_version(cut: Cut, name: str, *, output: str = OUTPUT_STATE, storage: Storage = AMBIENT) -> None:
    """Open table `name` (or its history or change log) at the cut's version (its log must still reach back
    to it), else a LakeError naming the retention to raise. Data files removed by VACUUM show only when the
    rows are read."""
    from deltalake import DeltaTable

    t = cut.table(name, output)
    if t.version is None:
        raise LakeError(
            f"pipeline {cut.pipeline!r}: {t.label} had no Delta table at {t.uri} when window {cut.seq} was acked"
        )
    try:
        DeltaTable(t.uri, version=t.version, storage_options=storage.delta_rs_options(t.uri))
    except Exception as e:
        raise LakeError(retention_hint(cut, t, _classify(e) or "log") + f" [{type(e).__name__}: {e}]") from None


def read_table(
    cut: Cut, name: str, *, columns: list[str] | None = None, output: str = OUTPUT_STATE,
    storage: Storage = AMBIENT,
) -> pa.Table:
    """One table of the cut (or its history or change log), at exactly its version, with delta-rs (no Spark)."""
    from cdc_core.lake import delta_state

    t = cut.table(name, output)
    check_version(cut, name, output=output, storage=storage)
    try:
        return delta_state.read_rows(t.uri, columns=columns, version=t.version, storage=storage)
    except LakeError as e:
        if _classify(e) is not None:
            raise LakeError(retention_hint(cut, t, "files") + f" [{e}]") from None
        raise


def spark_dataframes(
    spark: Any, cut: Cut, tables: list[str] | tuple[str, ...] | None = None, *, output: str = OUTPUT_STATE,
) -> dict[str, Any]:
    """{table name: DataFrame at the cut's version} for a SparkSession with Delta (duck-typed: this module
    imports no pyspark); with `output`, the tables' history or change log instead. Evaluation is lazy: a
    vacuumed version fails on the first action, with Spark's own error (`retention_hint` explains it); the log
    side is checked here, at once."""
    out: dict[str, Any] = {}
    for t in (cut.table(s.name, output) for s in cut.pick(tables)):
        if t.version is None:
            raise LakeError(
                f"pipeline {cut.pipeline!r}: {t.label} had no Delta table at {t.uri} when window {cut.seq} was acked"
            )
        try:
            out[t.name] = spark.read.format("delta").option("versionAsOf", t.version).load(t.uri)
        except Exception as e:
            kind = _classify(e)
            if kind is None:
                raise
            raise LakeError(retention_hint(cut, t, kind) + f" [{type(e).__name__}: {str(e)[:300]}]") from None
    return out
