"""Housekeeping of a long-running pipeline: staged windows, ZooKeeper window records, Delta table maintenance.

The decisions are pure functions in `cdc_core.model.retention`; this module gathers the facts, applies
them, and logs every action with what it freed. Where each part runs (docs/housekeeping.md):

- **After every ack** (`Pipeline.ack` -> `cleanup_after_ack`), under the run's lease: staged windows
  (and their merge reports and staging leftovers) acked longer ago than `staging_retention_hours`,
  and window records past `maintenance.window_records_retention_hours`. It is cheap by construction:
  one lease check, and only once a staged window is due (a note of when, `clean_staging`), one staging
  listing and ZooKeeper reads for the windows it deletes plus one (windows are acked in order, so it stops
  at the first one still within the retention); both staging and records go in batches, once the oldest is
  older than the retention plus a slack. It never fails
  the ack: a problem is logged, and the next ack or the maintenance run tries again.
- **The maintenance run** (DAG `cdc_<name>_maintenance`, or `cdc maintain <name>`): takes the
  pipeline's own lease (waiting up to `maintenance.lease_wait_seconds` for a running pipeline run),
  does a full cleanup pass without batching, then runs the Spark job spark_apps/maintain_tables.py
  over every table of the pipeline (OPTIMIZE, VACUUM, log tidiness, retention properties) while a
  `LeaseKeeper` renews the lease, and records the result in ZooKeeper (`<pipeline>/maintenance`,
  fenced) for the monitor and `cdc status`.

Safety: a staged window is deleted only when ZooKeeper proves it acked (the cursor passed it and its
record, when still there, says acked) and the ack is older than the retention; the pending window
and anything after the cursor are never touched; a ZooKeeper error aborts the pass (an unknown answer
is never "acked"). Acked is final, so even a zombie's cleanup could only delete what the holder
would; the lease check at the start just keeps zombies from doing work. Record pruning goes through
`PipelineCoordinator.prune_windows` (fenced multi-ops; never the cursor, the pending window or the
last acked one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from cdc_core.coordination import STATE_ACKED, LeaseGrant, PipelineCoordinator
from cdc_core.coordination.lease_keeper import LeaseKeeper
from cdc_core.lake import delta_state
from cdc_core.lake.job_outcome import JobRef
from cdc_core.lake.job_runner import JobRunner, SparkSubmitRunner, SubprocessRun
from cdc_core.lake.job_specs import MaintenanceJobSpec
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.lake.spark_conf import SparkJob
from cdc_core.model import layout, retention
from cdc_core.model.errors import CdcError, Fenced, LakeError, LeaseHeld
from cdc_core.model.layout import BASE_DIR, PROJECT_ROOT, TOMBSTONE_DIR
from cdc_core.model.logfmt import kv
from cdc_core.model.naming import path_component
from cdc_core.model.output_modes import CHANGELOG_DIR, HISTORY_DIR
from cdc_core.run import spark_jobs
from cdc_core.run.context import PipelineContext
from cdc_core.run.staging_cleanup import clean_staging, log_event

if TYPE_CHECKING:
    from cdc_core.capture.source import TableFilter
    from cdc_core.model.config import MaintenanceConfig
    from cdc_core.run.pipeline import Pipeline

log = logging.getLogger("cdc.housekeeping")

MAINTENANCE_JOB = PROJECT_ROOT / "spark_apps" / "maintain_tables.py"
# At most this many staged windows per after-ack pass (a backlog goes over the next runs).
AFTER_ACK_MAX_WINDOWS = 100


# ------------------------------------------------------------------------------ ZooKeeper records


def prune_records(
    coordinator: PipelineCoordinator,
    grant: LeaseGrant,
    settings: MaintenanceConfig,
    *,
    now: float | None = None,
    slack_seconds: float = 0.0,
    staging_retention_seconds: float = retention.DEFAULT_MARKS_HORIZON,
) -> dict[str, Any]:
    """Remove acked window records past the retention (and beyond the hard bound), fenced on the lease; the marks
    they leave (retention.marks_after_prune) cover `staging_retention_seconds`."""
    pipeline = coordinator.unit
    now = time.time() if now is None else now
    retention_seconds = settings.window_records_retention_hours * retention.HOUR
    seqs = coordinator.window_record_seqs()
    oldest = coordinator.get_window(seqs[0]) if seqs else None
    oldest_acked = oldest.acked_at if oldest is not None and oldest.state == STATE_ACKED else None
    plan = retention.record_prune_plan(
        records=len(seqs), oldest_acked_at=oldest_acked, now=now, retention_seconds=retention_seconds,
        keep=settings.window_records_keep, max_records=settings.window_records_max, slack_seconds=slack_seconds,
    )
    deleted = 0
    if plan.by_count:
        deleted += coordinator.prune_windows(grant, keep_last=settings.window_records_max, older_than_seconds=0,
                                             marks_horizon_seconds=staging_retention_seconds)
    if plan.by_age:
        deleted += coordinator.prune_windows(
            grant, keep_last=settings.window_records_keep, older_than_seconds=retention_seconds,
            marks_horizon_seconds=staging_retention_seconds,
        )
    out = {"records_before": len(seqs), "records_deleted": deleted, "records_after": len(seqs) - deleted,
           "by_age": plan.by_age, "by_count": plan.by_count}
    if plan.any or slack_seconds == 0:
        log_event("zk.records_pruned", pipeline, grant, nodes_freed=deleted, before=len(seqs),
                  after=len(seqs) - deleted, by_age=plan.by_age, by_count=plan.by_count)
    return out


# ---------------------------------------------------------------------------------------- cleanup


def cleanup(p: PipelineContext, grant: LeaseGrant, *, batched: bool) -> dict[str, Any]:
    """Staged windows, then window records. `batched` (the after-ack path) keeps it cheap."""
    m = p.config.maintenance
    staging_seconds = p.config.staging_retention_hours * retention.HOUR
    staged = clean_staging(
        p.coordinator, grant, p.staging_root, staging_seconds,
        stop_at_first_kept=batched, max_windows=AFTER_ACK_MAX_WINDOWS if batched else None, storage=p.storage,
        due_slack_seconds=retention.staging_pass_slack_seconds(staging_seconds, p.config.lease_seconds)
        if batched else None,
    )
    slack = retention.after_ack_slack_seconds(m.window_records_retention_hours * retention.HOUR) if batched else 0.0
    records = prune_records(p.coordinator, grant, m, slack_seconds=slack,
                            staging_retention_seconds=p.config.staging_retention_hours * retention.HOUR)
    if batched:
        return {"staging": staged, "records": records}
    return {"staging": staged, "records": records, "checkpoints": _maintain_checkpoints(p, grant)}


def _maintain_checkpoints(p: PipelineContext, grant: LeaseGrant) -> dict[str, Any]:
    """The full pass compacts and vacuums the lake's checkpoints table (cdc_core.lake.lake_versions); a failure
    is logged and reported, never fatal (the table stays correct, only larger)."""
    from cdc_core.lake import lake_versions

    def fence() -> None:  # before each commit to the table: the lease is still this run's
        p.coordinator.verify(grant)

    try:
        fence()
        m = p.config.maintenance
        out = lake_versions.maintain(p.lake_root, p.name, storage=p.storage, fence=fence,
                                     vacuum_retention_hours=m.vacuum_retention_hours,
                                     log_retention_hours=m.log_retention_hours)
    except LakeError as e:
        log_event("checkpoints.maintenance_failed", p.name, grant, reason=str(e))
        return {"error": str(e)}
    log_event("checkpoints.maintained", p.name, grant, **{k: v for k, v in out.items() if k != "uri"})
    return out


def cleanup_after_ack(p: PipelineContext, grant: LeaseGrant) -> dict[str, Any] | None:
    """The after-ack pass. Never raises: the ack already happened; the next pass catches up."""
    if not p.config.maintenance.cleanup_after_ack:
        return None
    try:
        return cleanup(p, grant, batched=True)
    except (CdcError, OSError) as e:
        log.warning("%s", kv(event="housekeeping.skipped", pipeline=p.name, token=f"{grant.token:#x}",
                              reason=f"{type(e).__name__}: {e}"))
        return None


# ------------------------------------------------------------------------------------ the tables


@dataclass(frozen=True)
class LakeTable:
    """A Delta table of the pipeline: a lake table, its hard-delete tombstones, or a derived table's base."""

    name: str  # schema.table of the source table
    schema: str
    table: str
    uri: str
    kind: str  # "table" | "tombstones" | "base"
    zorder_by: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "uri": self.uri, "kind": self.kind, "zorder_by": list(self.zorder_by)}


def _child_dirs(fs: Any, path: str) -> list[str]:
    try:
        listing = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    return sorted(str(i["name"]).rstrip("/").rpartition("/")[2] for i in listing if i.get("type") == "directory")


def discover_tables(
    lake_root: str, table_filter: TableFilter, table_options: dict[str, Any] | None = None, *,
    storage: Storage = AMBIENT,
) -> list[LakeTable]:
    """The pipeline's Delta tables under `lake_root`: every `<schema>/<table>` holding a Delta log whose
    name matches the pipeline's table filter, plus its tombstone table, its base (a derived table of a
    group pipeline, docs/group-pipelines.md), its history and its change log (docs/output-modes.md) when there
    are.

    The filter, not the lake, decides ownership: several pipelines may share a lake root, each with its
    own tables (two pipelines writing one table is not supported anyway).
    """
    fs, root = storage.fs(lake_root)
    root = root.rstrip("/")
    prefix = lake_root.rstrip("/")
    options = table_options or {}
    candidates: list[tuple[str, str, str, str]] = []
    for schema_dir in _child_dirs(fs, root):
        if schema_dir == TOMBSTONE_DIR or schema_dir.startswith("."):
            continue
        schema = unquote(schema_dir)
        for table_dir in _child_dirs(fs, f"{root}/{schema_dir}"):
            table = unquote(table_dir)
            if path_component(schema) != schema_dir or path_component(table) != table_dir:
                continue  # not a name the merge job would write
            if table_filter.matches(schema, table):
                candidates.append((schema, table, schema_dir, table_dir))

    def found(candidate: tuple[str, str, str, str]) -> list[LakeTable]:
        schema, table, schema_dir, table_dir = candidate
        uri = f"{prefix}/{schema_dir}/{table_dir}"
        if not delta_state.table_exists(uri, storage=storage):
            return []
        name = f"{schema}.{table}"
        zorder = tuple((options.get(name) or {}).get("zorder_by") or ())
        tables = [LakeTable(name, schema, table, uri, "table", zorder)]
        for kind, top in (("tombstones", TOMBSTONE_DIR), ("base", BASE_DIR), ("history", HISTORY_DIR),
                          ("changelog", CHANGELOG_DIR)):
            uri = f"{prefix}/{top}/{schema_dir}/{table_dir}"
            if delta_state.table_exists(uri, storage=storage):
                tables.append(LakeTable(name, schema, table, uri, kind))
        return tables

    # Each candidate's logs: on an object store several tables at a time.
    return [t for tables in delta_state.per_table(found, candidates, lake_root) for t in tables]


def table_status(p: PipelineContext, maintenance: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per table of the pipeline: files, size, version, txn version, and its last maintenance."""
    maintained = {}
    for t in (maintenance or {}).get("tables") or []:
        maintained[(t.get("name"), t.get("kind"))] = t
    last_at = (maintenance or {}).get("finished_at")
    rows = []
    tables = discover_tables(p.lake_root, p.lake_table_filter(), p.config.table_options, storage=p.storage)

    def summary(uri: str) -> dict[str, Any] | str:
        try:
            return delta_state.table_summary(uri, app_id=p.name, storage=p.storage)
        except LakeError as e:
            return str(e)

    # Every table of the lake: on an object store several at a time (`cdc status`, the monitor page).
    summaries = delta_state.per_table(summary, [t.uri for t in tables], p.lake_root)
    for t, s in zip(tables, summaries, strict=True):
        row: dict[str, Any] = {"name": t.name, "kind": t.kind}
        if isinstance(s, str):
            row["error"] = s
        else:
            row.update(files=s["files"], size_bytes=s["size_bytes"], version=s["version"],
                       txn_version=s.get("txn_version"), last_commit_at=s["last_commit_at"],
                       last_operation=s["last_operation"])
        m = maintained.get((t.name, t.kind))
        if m is not None:
            row["last_maintenance"] = {
                "at": last_at, "status": m.get("status"), "files_before": m.get("files_before"),
                "files_after": m.get("files_after"),
                "vacuum_files": (m.get("vacuum") or {}).get("files_deleted"),
                "vacuum_bytes": (m.get("vacuum") or {}).get("bytes_deleted"),
            }
        else:
            row["last_maintenance"] = None
        rows.append(row)
    return rows


def maintenance_status(p: PipelineContext) -> dict[str, Any]:
    """What `status.pipeline_status` shows about housekeeping: the last maintenance run and every table."""
    record = p.coordinator.read_maintenance()
    last = None
    if record is not None:
        last = {k: record.get(k) for k in ("started_at", "finished_at", "holder", "token", "status", "totals",
                                           "cleanup", "errors")}
    return {"last": last, "tables": table_status(p, record)}


# --------------------------------------------------------------------------------- lease handling


def acquire_waiting(
    p: Pipeline,
    holder: str,
    wait_seconds: float,
    *,
    poll_seconds: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> LeaseGrant:
    """The pipeline's lease for maintenance; while a pipeline run holds it, retry for up to `wait_seconds`
    (that run ends soon), then give up with its LeaseHeld (the caller skips)."""
    deadline = clock() + max(0.0, wait_seconds)
    while True:
        try:
            return p.acquire(holder)
        except LeaseHeld as e:
            left = deadline - clock()
            if left <= 0:
                raise
            log.info("%s", kv(event="maintenance.waiting_for_lease", pipeline=p.name, left=f"{left:.0f}s",
                               reason=str(e)[:200]))
            sleep(min(poll_seconds, left))




# --------------------------------------------------------------------------- the maintenance job


def report_uri(p: Pipeline, grant: LeaseGrant, started_at: float) -> str:
    return f"{layout.reports_dir(p.staging_root, p.name)}/{retention.maintenance_report_name(grant.token, started_at)}"


def maintenance_application_args(
    p: Pipeline, grant: LeaseGrant, tables: list[LakeTable], report: str, *, optimize: bool = True,
    vacuum: bool = True,
) -> list[str]:
    """Arguments of spark_apps/maintain_tables.py: its `--spec` (pure given its inputs; no secrets)."""
    m = p.config.maintenance
    return MaintenanceJobSpec(
        pipeline=p.name,
        token=grant.token,
        tables=[t.to_dict() for t in tables],
        report=report,
        vacuum_retention_hours=m.vacuum_retention_hours,
        log_retention_hours=m.log_retention_hours,
        txn_retention_hours=m.txn_retention_hours,
        min_retention_hours=retention.replay_horizon_hours(p.config.staging_retention_hours, p.config.lease_seconds),
        optimize=optimize,
        vacuum=vacuum,
        zk_hosts=p.config.zookeeper.hosts,
        zk_root=p.config.zookeeper.root,
        parallelism=p.config.spark.merge_parallelism,
    ).args()


def maintenance_job(p: Pipeline, args: list[str]) -> SparkJob:
    """The maintenance job with these arguments: the pipeline's jars, confs and environment (`Pipeline.spark_job`)."""
    return p.spark_job(MAINTENANCE_JOB, args, f"cdc-maintain-{p.name}")


def maintenance_submit_command(p: Pipeline, args: list[str], master: str | None = None) -> list[str]:
    """The same command the maintenance operator builds, for the CLI (a test can assert it); the master is
    the pipeline's Spark connection (`spark.conn_id`) unless given."""
    return maintenance_job(p, args).command(master or p.spark_master())


def maintenance_record(
    *, grant: LeaseGrant, started_at: float, finished_at: float, cleanup_result: dict[str, Any] | None,
    report: dict[str, Any] | None, error: str | None = None,
) -> dict[str, Any]:
    """Pure: the ZooKeeper record of one maintenance run (compact: what the monitor shows)."""
    tables = []
    for t in (report or {}).get("tables") or []:
        tables.append({
            "name": t.get("name"), "kind": t.get("kind"), "status": t.get("status"), "error": t.get("error"),
            "files_before": t.get("files_before"), "files_after": t.get("files_after"),
            "bytes_before": t.get("bytes_before"), "bytes_after": t.get("bytes_after"),
            "optimize": {k: (t.get("optimize") or {}).get(k) for k in ("mode", "files_removed", "files_added")},
            "vacuum": {k: (t.get("vacuum") or {}).get(k) for k in ("files_deleted", "bytes_deleted")},
            "log": {k: (t.get("log") or {}).get(k) for k in ("checkpoint_version", "entries_deleted")},
        })
    errors = list((report or {}).get("errors") or [])
    if error:
        errors.append(error)
    status = "ok" if report is not None and not errors else "failed"
    return {
        "holder": grant.holder, "token": grant.token, "started_at": started_at, "finished_at": finished_at,
        "status": status, "errors": errors, "cleanup": cleanup_result,
        "totals": (report or {}).get("totals"), "tables": tables,
    }


MAX_RECORDED_ERROR = 4000  # characters of a job's error kept in the maintenance record (ZooKeeper)


def maintain(
    p: Pipeline, grant: LeaseGrant, *, started_at: float, cleaned: dict[str, Any] | None,
    runner: JobRunner | None = None, optimize: bool = True, vacuum: bool = True, tables: bool = True,
) -> tuple[dict[str, Any], CdcError | None]:
    """The maintenance run after its cleanup, written once for the CLI (`MaintenanceRun`) and the DAG
    (`CdcMaintenanceOperator`): the Spark job spark_apps/maintain_tables.py over the pipeline's tables, found
    now (`runner`: default spark-submit in a subprocess; `tables=False`: no job), then the run's record in
    ZooKeeper, fenced, with `cleaned` (the cleanup's result) and the job's report. Returns the record and the
    job's error (cdc_core.lake.job_outcome), for the caller to raise once it has let go of what it holds. A
    fenced job raises `Fenced` at once: nothing can be recorded under a lost lease."""
    report: dict[str, Any] | None = None
    error: CdcError | None = None
    if tables:
        report, error = _maintain_tables(p, grant, started_at, runner, optimize=optimize, vacuum=vacuum)
    record = maintenance_record(
        grant=grant, started_at=started_at, finished_at=time.time(), cleanup_result=cleaned, report=report,
        error=None if error is None else f"{type(error).__name__}: {error}"[:MAX_RECORDED_ERROR],
    )
    p.coordinator.record_maintenance(grant, record)
    p.log_event("maintenance.recorded", grant, status=record["status"], tables=len(record["tables"]),
                failed=int(record["status"] != "ok"))  # the metrics' maintenance outcome
    return record, error


def _maintain_tables(
    p: Pipeline, grant: LeaseGrant, started_at: float, runner: JobRunner | None, *, optimize: bool, vacuum: bool
) -> tuple[dict[str, Any] | None, CdcError | None]:
    """The maintenance job over the pipeline's tables: its report (None when it wrote none) and its error."""
    found = discover_tables(p.lake_root, p.lake_table_filter(), p.config.table_options, storage=p.storage)
    if not found:
        log_event("maintenance.no_tables", p.name, grant, lake=p.lake_root)
        return {"tables": [], "totals": {}, "errors": []}, None
    uri = report_uri(p, grant, started_at)
    job = maintenance_job(p, maintenance_application_args(p, grant, found, uri, optimize=optimize, vacuum=vacuum))
    log_event("maintenance.submitting", p.name, grant, tables=len(found))
    t0 = time.time()
    outcome = spark_jobs.run_job(p, grant, job, JobRef.maintenance(p.name, grant.holder, grant.token),
                                 runner or SparkSubmitRunner(p.spark_master()), report=uri, storage=p.storage)
    if isinstance(outcome.error, Fenced):
        raise outcome.error
    log_event("maintenance.job_done", p.name, grant, status="ok" if outcome.ok else "failed", rc=outcome.rc,
         secs=f"{time.time() - t0:.1f}")
    return (None if outcome.report is None else dict(outcome.report)), outcome.error


@dataclass
class MaintenanceRun:
    """The CLI's maintenance (the DAG runs the same steps as tasks): lease, cleanup, then `maintain` (the Spark
    job and the record), release. `runner`: how spark-submit's command is run (a test runs the job in its own
    Spark session)."""

    p: Pipeline
    holder: str
    wait_seconds: float | None = None
    optimize: bool = True
    vacuum: bool = True
    tables: bool = True
    runner: SubprocessRun | None = None

    def run(self) -> dict[str, Any]:
        p = self.p
        wait = p.config.maintenance.lease_wait_seconds if self.wait_seconds is None else self.wait_seconds
        grant = acquire_waiting(p, self.holder, wait)
        started = time.time()
        try:
            cleaned = cleanup(p, grant, batched=False)
            runner = SparkSubmitRunner(p.spark_master(), self.runner) if self.runner else None
            record, error = maintain(p, grant, started_at=started, cleaned=cleaned, runner=runner,
                                     optimize=self.optimize, vacuum=self.vacuum, tables=self.tables)
        finally:
            p.release(grant)
        if error is not None:
            raise error
        return record


__all__ = [
    "LakeTable", "LeaseKeeper", "MaintenanceRun", "acquire_waiting", "clean_staging", "cleanup", "cleanup_after_ack",
    "discover_tables", "maintain", "maintenance_application_args", "maintenance_job", "maintenance_record",
    "maintenance_status", "maintenance_submit_command", "prune_records", "report_uri", "table_status",
]
