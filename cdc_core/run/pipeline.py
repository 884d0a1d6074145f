"""The pipeline cycle: the steps one run performs, shared by the CLI and the Airflow tasks.

    acquire -> plan (recover first) -> stage -> merge (Spark) -> ack -> release

Every step is idempotent and fenced, so any step can be retried (an Airflow "clear") and a crash at
any point converges on the next run:

- `plan` first reconciles ZooKeeper with the lakehouse (BookKeeper's recovery): a planned window whose
  Delta commits all landed is acked now; a planned window not (fully) merged is returned unchanged, to
  be replayed exactly. Only then is a new window planned from the cursor.
- `stage` re-stages the stored plan from the source when the staged copy is missing or corrupt; the
  result is byte-identical, so a zombie and its successor stage the same thing.
- `ack` checks, in Delta itself, that every table of the window holds the window (txn version >= seq)
  before moving the cursor: the cursor can never get ahead of the lake, whatever a task claimed.

State between steps lives in ZooKeeper and the staging area, not in the caller: Airflow clears XComs
on retry, and the CLI may be killed between steps.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from cdc_core.capture.binlog import BinlogScanner, read_change_batches, read_changes
from cdc_core.capture.resolver import Resolution, resolve_start
from cdc_core.capture.source import (
    SourceFacts,
    SourceParams,
    TableFilter,
    check_cdc_ready,
    check_privileges,
    connect,
    describe_tables,
    inspect_source,
)
from cdc_core.coordination import LeaseGrant, LeaseKeeper, PipelineCoordinator, WindowRecord, make_zk_client
from cdc_core.lake import delta_state, merge_client, object_store, staging
from cdc_core.lake.job_outcome import JobRef
from cdc_core.lake.job_runner import JobRunner, MergeServerRunner, SparkSubmitRunner
from cdc_core.lake.job_specs import MergeJobSpec
from cdc_core.lake.spark_conf import (
    SparkJob,
    delta_jars,
    jar_list,
    job_confs,
    resolve_spark_master,
    s3a_jars,
    spark_env,
)
from cdc_core.model import faults, holders, lake_registry, layout, retention, snapshot_state, sources, windows
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import ConfigError, LakeError, LeaseHeld, StagingError, StateConflict
from cdc_core.model.lake_writers import route_target_pattern
from cdc_core.model.layout import PROJECT_ROOT
from cdc_core.model.logfmt import iso_seconds, kv
from cdc_core.model.manifest import Manifest
from cdc_core.model.naming import table_id
from cdc_core.model.positions import BinlogPosition, StartSpec
from cdc_core.model.schema_changes import DROP_DATABASE, RENAME_TABLE
from cdc_core.model.snapshot_state import TableRequest
from cdc_core.model.sources import unit_name
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, KIND_STREAM, WindowCaps, WindowPlan
from cdc_core.model.windows import plan_window
from cdc_core.run import snapshot_steps, spark_jobs
from cdc_core.run.validate import capture_filter

log = logging.getLogger("cdc.pipeline")

_FROM_CONFIG: Any = object()  # `Pipeline.from_config`'s default: read the credential from the configuration

MERGE_JOB = PROJECT_ROOT / "spark_apps" / "merge_window.py"
MERGE_SERVER_APP = PROJECT_ROOT / "spark_apps" / "merge_server.py"


@dataclass
class Pipeline:
    """One configured pipeline bound to its source, its ZooKeeper subtree and its storage roots."""

    config: PipelineConfig
    source: SourceParams
    coordinator: PipelineCoordinator
    _owns_client: bool = False
    _client: Any = None
    _facts: SourceFacts | None = field(default=None, repr=False)
    _privileges_checked: bool = field(default=False, repr=False)
    # The object store's credentials (`object_store.conn_id`), None for local roots or ambient credentials.
    store: object_store.S3Credentials | None = field(default=None, repr=False)
    # ZooKeeper's digest identity as the caller resolved it (the Airflow glue, through Airflow); unset: read
    # from the configuration's `zookeeper.auth_env` / `conn_id` as the CLI does (`ZooKeeperConfig.digest`).
    _zk_digest: Any = field(default=_FROM_CONFIG, repr=False)
    # One source of a group pipeline (cdc_core.model.sources); None: the pipeline's one source.
    source_id: str | None = None

    # ---------------------------------------------------------------------------------- lifecycle

    @classmethod
    def from_config(
        cls,
        config: PipelineConfig,
        source: SourceParams,
        zk_client: Any = None,
        *,
        store: object_store.S3Credentials | None = None,
        zk_digest: Any = _FROM_CONFIG,
        clock: Callable[[], float] | None = None,
        before_commit: Callable[[str], None] | None = None,
        source_id: str | None = None,
    ) -> Pipeline:
        """`store`, `zk_digest`: the object store's credentials and ZooKeeper's digest identity as the caller
        resolved them (the Airflow glue, through Airflow); by default `object_store.conn_id` is looked up in
        the environment, as the source's is, and ZooKeeper's identity by `ZooKeeperConfig.digest`.
        `clock`, `before_commit`: the coordinator's (`PipelineCoordinator`; tests and tools).
        `source_id`: which source of a group pipeline this object runs (its state, windows and Delta
        writes are that source's; `source` must be its connection); None for a single-source pipeline."""
        config = config.for_source(source_id)
        if store is None:
            store = object_store.for_pipeline(config)
        if zk_digest is _FROM_CONFIG:
            zk_digest = config.zookeeper.digest(pipeline=config.name)
        owns = zk_client is None
        if owns:
            zk_client = zk_client_for(config, zk_digest)
        coordinator = PipelineCoordinator(
            zk_client, config.zookeeper.root, config.name, before_commit=before_commit, source=source_id,
            **({"clock": clock} if clock is not None else {}),
        )
        return cls(
            config=config, source=source, coordinator=coordinator, _owns_client=owns, _client=zk_client, store=store,
            _zk_digest=zk_digest, source_id=source_id,
        )

    def close(self) -> None:
        self.coordinator.close()  # stop listening first: closing our own session is not a lost session
        if self._owns_client and self._client is not None:
            self._client.stop()
            self._client.close()
            self._client = None

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def name(self) -> str:
        """The identity of this pipeline's windows, staging and Delta writes: the pipeline's name, or
        `<pipeline>.<source>` for one source of a group pipeline (cdc_core.model.sources.unit_name)."""
        return unit_name(self.config.name, self.source_id)

    @property
    def pipeline_name(self) -> str:
        """The configured pipeline: its lease, DAGs and writer record (one for all its sources)."""
        return self.config.name

    @property
    def staging_root(self) -> str:
        return str(self.config.staging_root)

    @property
    def lake_root(self) -> str:
        return str(self.config.lake_root)

    @property
    def storage(self) -> object_store.Storage:
        """How this process reaches the pipeline's staging and lake (its own credentials), for every fsspec
        and delta-rs call on them: passed down, never set process-wide."""
        return object_store.Storage(self.store)

    def log_event(self, event: str, grant: LeaseGrant | None = None, **fields: Any) -> None:
        """One structured log line, with the pipeline and the fencing token (`-` without a lease)."""
        token = f"{grant.token:#x}" if grant else "-"
        log.info("%s %s", event, kv(pipeline=self.name, token=token, **fields))

    # ------------------------------------------------------------------------------------- source

    def table_filter(self, tables: tuple[str, ...] | None = None) -> TableFilter:
        return capture_filter(self.config, tables)

    def lake_table_filter(self) -> TableFilter:
        """The lake tables this pipeline writes: its captured names and its routes' targets (housekeeping
        and the monitor find its Delta tables with it)."""
        t = self.config.tables
        targets = tuple(route_target_pattern(r.to) for r in self.config.routes)
        return TableFilter(include=(*t.include, *targets), exclude=tuple(t.exclude))

    def capture_settings(self, tables: tuple[str, ...] | None = None) -> dict[str, tuple[str, ...]]:
        """What a new window captures, recorded in its plan (see `WindowPlan.capture`)."""
        f = self.table_filter(tables)
        return {"include": f.include, "exclude": f.exclude, "full_row_key": tuple(self.config.tables.full_row_key)}

    def plan_capture(self, plan: WindowPlan) -> tuple[TableFilter, tuple[str, ...]]:
        """The table filter and full-row-key patterns a stored plan was planned with."""
        c = plan.capture or self.capture_settings(plan.tables)
        sc = self.config.schema_changes
        osc = (*sc.ghost_tables, *sc.trash_tables)
        found = TableFilter(include=tuple(c["include"]), exclude=tuple(c["exclude"]), osc_tables=osc)
        return found, tuple(c.get("full_row_key", ()))

    def source_facts(self, refresh: bool = False) -> SourceFacts:
        if self._facts is None or refresh:
            conn = connect(self.source)
            try:
                if not self._privileges_checked:
                    # First contact: name a missing grant (and the GRANT to run) before some statement
                    # fails with a bare "access denied", or information_schema silently hides a table.
                    check_privileges(conn, self.name, self.table_filter().literal_schemas() or ())
                    self._privileges_checked = True
                facts = inspect_source(conn)
                check_cdc_ready(facts, self.name)
            finally:
                conn.close()
            self._facts = facts
        return self._facts

    def describe(self, tables: tuple[str, ...] | None = None) -> dict[str, Any]:
        conn = connect(self.source)
        try:
            return describe_tables(conn, self.table_filter(tables), self.name, tuple(self.config.tables.full_row_key))
        finally:
            conn.close()

    def scanner(self, facts: SourceFacts | None = None) -> BinlogScanner:
        facts = facts or self.source_facts()
        return BinlogScanner(self.source, facts.identity)

    def resolve(self, saved: BinlogPosition | None, spec: StartSpec | None = None) -> Resolution:
        facts = self.source_facts(refresh=True)
        return resolve_start(
            saved,
            spec or self.config.start_spec(),
            facts,
            self.scanner(facts),
            fallback_seconds=self.config.timestamp_fallback_seconds,
        )

    # ---------------------------------------------------------------------------------- the steps

    def acquire(
        self, holder: str, *, process: holders.ProcessIdentity | None = None, break_dead: bool = False
    ) -> LeaseGrant:
        """Take the lease for `holder`. With `break_dead` (the CLI), a lease held by a process on this host
        that no longer exists (`cdc_core.model.holders.judge`: PID gone, PID reused, host rebooted) is broken the
        documented way (`cdc lease break`: the epoch moves on, fencing the holder should it be alive after
        all), logged as `lease.dead_holder`, and taken. Any other holder raises LeaseHeld as before."""
        ident = process.to_dict() if process is not None else None
        try:
            grant = self.coordinator.acquire(holder, self.config.lease_seconds, process=ident)
        except LeaseHeld:
            if not break_dead:
                raise
            self._break_dead_holder()
            grant = self.coordinator.acquire(holder, self.config.lease_seconds, process=ident)
        self.log_event("lease.acquired", grant, holder=holder, expires_at=grant.expires_at)
        faults.point("after_acquire")
        return grant

    def _break_dead_holder(self) -> None:
        """Break the current lease if its holder is a dead process on this host; otherwise re-raise LeaseHeld."""
        info = self.coordinator.read_lease()
        if info is None:
            return  # released meanwhile: the next acquire takes it
        verdict, reason = holders.judge_holder(holders.ProcessIdentity.from_dict(info.process))
        if verdict != "dead":
            self.log_event("lease.holder_kept", None, holder=info.holder, verdict=verdict, reason=reason)
            raise LeaseHeld(
                f"pipeline {self.name!r}: the lease is held by {info.holder!r} until {iso_seconds(info.expires_at)} "
                f"(token {info.token:#x}); {reason}: skip this run (the next run picks up where it stops)",
                holder=info.holder,
                expires_at=info.expires_at,
                token=info.token,
            )
        self.log_event(
            "lease.dead_holder", None, holder=info.holder, previous_token=f"{info.token:#x}", reason=reason,
            action="break",
        )
        # StateConflict: someone else broke, released or took it meanwhile; the next acquire decides.
        with contextlib.suppress(StateConflict):
            self.coordinator.break_lease(info.holder)

    def renew(self, grant: LeaseGrant) -> LeaseGrant:
        return self.coordinator.renew(grant, self.config.lease_seconds)

    @contextlib.contextmanager
    def keep_lease(self, grant: LeaseGrant) -> Iterator[LeaseKeeper]:
        """Renew `grant` every third of the lease while a Spark job runs, so a long merge or maintenance job
        never outlives the lease it writes under; a lost lease stops the renewals (the job's fence stops it)."""
        with LeaseKeeper(lambda: self.renew(grant), self.config.lease_seconds / 3, self.name) as keeper:
            yield keeper

    def release(self, grant: LeaseGrant) -> None:
        self.coordinator.release(grant)
        self.log_event("lease.released", grant)

    def plan(self, grant: LeaseGrant) -> dict[str, Any]:
        """Recover, then return the window to work on: a pending one (replayed exactly) or a new one.

        While a snapshot is active, chunks and binlog windows alternate (`snapshot_state.chunk_turn`); a
        binlog window with nothing in it gives its turn to the next chunk.
        """
        grant = self.renew(grant)
        recovered = self.recover(grant)
        pending = self.coordinator.pending_window()
        if pending is not None:
            self.log_event("window.replay", grant, seq=pending.plan.seq, kind=pending.plan.kind)
            faults.point("after_plan")  # the plan to work on is known, replayed or new (crash suite)
            return self._plan_info(pending.plan, recovered=recovered or "replay")
        cursor = self.coordinator.read_cursor()
        first_rule = None
        if cursor.position is None and cursor.backfill is None:
            first_rule = self._first_start(grant)
            cursor = self.coordinator.read_cursor()
        snap = self.coordinator.read_snapshot()
        if snapshot_state.chunk_turn(snap, cursor.seq):
            chunk = snapshot_steps.plan_chunk(self, grant, cursor, snap)
            if chunk is not None:
                return self._store_plan(grant, chunk, recovered, snap)
        if cursor.backfill is None:
            self.check_lake(grant, cursor.seq + 1)  # a deleted/re-created Delta table stops stream windows
        plan = self._binlog_plan(grant, cursor, first_rule)
        if plan.is_empty and snap.active:
            chunk = snapshot_steps.plan_chunk(self, grant, cursor, self.coordinator.read_snapshot())
            if chunk is not None:
                return self._store_plan(grant, chunk, recovered, snap)
        return self._store_plan(grant, plan, recovered, snap)

    def _first_start(self, grant: LeaseGrant) -> str:
        """A new pipeline: request the initial snapshot (when configured), then set the stream's start.

        In this order, so that the start is at or before every chunk's watermark (see docs/snapshot.md).
        """
        snapshot_steps.on_first_start(self, grant)
        resolution = self.resolve(None)
        self.coordinator.set_start(grant, resolution.position)
        self.log_event("cursor.initialised", grant, rule=resolution.rule, position=resolution.position.label())
        return resolution.rule

    def _binlog_plan(self, grant: LeaseGrant, cursor: Any, first_rule: str | None = None) -> WindowPlan:
        """The next stream or backfill window from the cursor (not stored yet)."""
        facts = self.source_facts(refresh=True)
        caps = WindowCaps(**self.config.caps.model_dump())
        seq = cursor.seq + 1
        if cursor.backfill is not None:
            bf = cursor.backfill
            start = bf.position
            kind = KIND_BACKFILL
            stop: tuple[str, int] | None = (bf.until.file, bf.until.offset)
            tables = tuple(bf.tables) if bf.tables else None
            info: dict[str, Any] = {"backfill_until": bf.until.label()}
        else:
            resolution = self.resolve(cursor.position)
            start = resolution.position
            if not start.same_point(cursor.position) or start.server != cursor.position.server:
                # Failover: the same logical point expressed on the new server.
                self.coordinator.rebase_cursor(grant, start, reason=resolution.rule)
                self.log_event("cursor.rebased", grant, rule=resolution.rule, position=start.label())
            kind = KIND_STREAM
            stop = None
            tables = None
            info = {"rule": first_rule or resolution.rule}
        scanner = self.scanner(facts)
        # A window that reaches the source's end (a backfill: its `until`) also takes the events after its
        # last transaction that carry no row change (rotate, headers, checkpoints): the cursor of a quiet
        # source reaches the end, so its lag returns to zero, and a backfill whose `until` follows such
        # events still ends (cdc_core.model.windows).
        boundaries = scanner.scan_to_end(
            start.file, start.offset, start.gtid, start.epoch, stop=stop, start_commit_ts=start.commit_ts,
        )
        plan = plan_window(self.name, seq, start, boundaries, caps, kind=kind, now=time.time(), tables=tables)
        if plan.info.get("capped") and facts.end is not None:
            # What "behind" meant when the cap cut the window (see `more_work`).
            info["source_end"] = {"file": facts.end.file, "offset": facts.end.offset}
        return WindowPlan(
            **{**plan.__dict__, "info": {**plan.info, **info, "holder": grant.holder},
               "capture": self.capture_settings(tables)}
        )

    def _store_plan(
        self, grant: LeaseGrant, plan: WindowPlan, recovered: str | None, snap: snapshot_state.SnapshotState
    ) -> dict[str, Any]:
        self.coordinator.store_plan(grant, plan)
        if plan.kind == KIND_SNAPSHOT:
            snapshot_steps.log_planned(self, grant, plan, snap)
        else:
            self.log_event(
                "window.planned", grant, seq=plan.seq, kind=plan.kind, start=plan.start.label(), end=plan.end.label(),
                transactions=plan.transactions, events=plan.events, bytes=plan.bytes,
            )
        faults.point("after_plan")
        return self._plan_info(plan, recovered=recovered)

    def _plan_info(self, plan: WindowPlan, recovered: str | None) -> dict[str, Any]:
        return {
            "seq": plan.seq,
            "kind": plan.kind,
            "empty": plan.is_empty,
            "start": plan.start.label(),
            "end": plan.end.label(),
            "transactions": plan.transactions,
            "recovered": recovered,
            **({"snapshot": snapshot_state.chunk_label(plan)} if plan.kind == KIND_SNAPSHOT else {}),
        }

    def _window(self, seq: int) -> WindowRecord:
        record = self.coordinator.get_window(seq)
        if record is None:
            raise StateConflict(
                f"pipeline {self.name!r}: window {seq} is not planned in ZooKeeper; re-run from the plan step"
            )
        return record

    def stage(self, grant: LeaseGrant, seq: int) -> dict[str, Any]:
        """Stage the stored plan (or verify an existing staged copy). Never re-plans."""
        grant = self.renew(grant)
        record = self._window(seq)
        plan = record.plan
        manifest = self._staged_manifest(plan)
        if manifest is None and plan.kind == KIND_SNAPSHOT:
            manifest = snapshot_steps.stage_chunk(self, grant, plan)
        elif manifest is None:
            t0 = time.time()
            table_filter, full_row_key = self.plan_capture(plan)
            schemas = self.schema_lookup(full_row_key)
            read = read_change_batches if self.config.decoder == "columnar" else read_changes
            changes: Iterator[Any] = read(
                self.source, plan.start.server, plan, table_filter, schemas, zero_dates=self.config.zero_dates,
                schema_policy=self.config.schema_changes.policy(),
            )
            faults.point("mid_stage_before")
            if faults.armed("mid_stage"):
                changes = faults.midway(changes, plan.events, "mid_stage")
            manifest = staging.stage_window(
                plan, changes, self.staging_root, progress=self._stage_progress(grant, plan), storage=self.storage
            )
            self.log_event(
                "window.staged", grant, seq=seq, tables=len(manifest.tables), changes=manifest.changes,
                secs=f"{time.time() - t0:.2f}",
            )
        else:
            self.log_event(
                "window.already_staged", grant, seq=seq, tables=len(manifest.tables), changes=manifest.changes
            )
        faults.point("after_stage")
        return {
            "seq": seq,
            "tables": [t.name for t in manifest.tables],
            "changes": manifest.changes,
            "window_dir": layout.window_dir(self.staging_root, self.name, seq),
            "empty": not manifest.tables,
        }

    def _stage_progress(self, grant: LeaseGrant, plan: WindowPlan) -> Callable[..., None]:
        last = [time.time()]

        def progress(rows: int, **extra: Any) -> None:
            now = time.time()
            if now - last[0] >= 10:
                last[0] = now
                self.log_event("window.staging", grant, seq=plan.seq, rows=rows, **extra)
                self.renew(grant)  # a long staging keeps the lease alive (and notices a lost one)

        return progress

    def schema_lookup(self, full_row_key: tuple[str, ...]) -> Callable[[str, str], Any]:
        cache: dict[str, Any] = {}

        def lookup(schema: str, table: str) -> Any:
            name = table_id(schema, table)
            if name not in cache:
                conn = connect(self.source)
                try:
                    cache.update(
                        describe_tables(conn, TableFilter(include=(name,), exclude=()), self.name, full_row_key)
                    )
                finally:
                    conn.close()
            return cache.get(name)

        return lookup

    def _staged_manifest(self, plan: WindowPlan) -> Manifest | None:
        manifest = staging.read_manifest(self.staging_root, self.name, plan.seq, storage=self.storage)
        if manifest is None:
            return None
        if manifest.plan.to_dict() != plan.to_dict():
            raise StagingError(
                f"pipeline {self.name!r}: staged window {plan.seq} does not match its stored plan; "
                f"delete {layout.window_dir(self.staging_root, self.name, plan.seq)} and re-run the stage step"
            )
        try:
            staging.verify_window(self.staging_root, manifest, storage=self.storage)
        except StagingError as e:
            log.warning("%s", kv(event="window.restage", pipeline=self.name, seq=plan.seq, reason=str(e)))
            return None
        return manifest

    def manifest(self, seq: int) -> Manifest:
        manifest = self._staged_manifest(self._window(seq).plan)
        if manifest is None:
            raise StagingError(
                f"pipeline {self.name!r}: window {seq} is not staged; run the stage step (it re-stages the stored plan)"
            )
        return manifest

    # ---------------------------------------------------------------------------------------- merge

    def lineage(self, schema: str, table: str) -> sources.Lineage:
        """Where the source table `schema.table` lands (routes) and the lineage columns its rows carry."""
        return sources.lineage(self.config.route_list(), self.source_id, schema, table)

    def table_uri(self, schema: str, table: str) -> str:
        """The Delta table the source table `schema.table` lands in (after the pipeline's routes)."""
        where = self.lineage(schema, table)
        return layout.table_uri(self.lake_root, where.lake_schema, where.lake_table)

    def reports_dir(self) -> str:
        """Where merge jobs write their reports: one per window and fencing token."""
        return layout.reports_dir(self.staging_root, self.name)

    def report_uri(self, seq: int, token: int) -> str:
        return layout.merge_report_uri(self.staging_root, self.name, seq, token)

    def merge_spec(self, grant: LeaseGrant, seq: int) -> MergeJobSpec:
        """What spark_apps/merge_window.py does for this window (its one `--spec` argument). No secrets:
        ZooKeeper auth and object-store credentials go by env."""
        m = self.config.maintenance
        return MergeJobSpec(
            window_dir=layout.window_dir(self.staging_root, self.name, seq),
            lake_root=self.lake_root,
            pipeline=self.pipeline_name,
            source=self.source_id,
            routes=[r.to_dict() for r in self.config.route_list()],
            group_sources=[str(s) for s in self.config.source_ids() if s is not None],
            seq=seq,
            token=grant.token,
            report=self.report_uri(seq, grant.token),
            delete_mode=self.config.delete_mode,
            zk_hosts=self.config.zookeeper.hosts,
            zk_root=self.config.zookeeper.root,
            table_options=dict(self.config.table_options or {}),
            # Tables start with the managed retention properties (cdc_core.model.retention; maintenance aligns
            # old ones).
            table_properties=retention.managed_table_properties(
                m.vacuum_retention_hours, m.log_retention_hours, m.txn_retention_hours
            ),
            parallelism=self.config.spark.merge_parallelism,
            small_table_rows=self.config.spark.small_table_rows,
            schema_changes=self.config.schema_changes.policy().to_dict(),
            zero_dates=self.config.zero_dates,
        )

    def merge_application_args(self, grant: LeaseGrant, seq: int) -> list[str]:
        """The merge job's application arguments for this window: `--spec <json>`."""
        return self.merge_spec(grant, seq).args()

    def zk_auth(self) -> str | None:
        """The ZooKeeper digest credential (user:password): as resolved by `from_config`'s caller, else from
        the configuration (`zookeeper.auth_env` or `zookeeper.conn_id`)."""
        digest = self._zk_digest
        if digest is _FROM_CONFIG:
            digest = self.config.zookeeper.digest(pipeline=self.name)
        return ":".join(cast("tuple[str, str]", digest)) if digest else None

    def merge_secret_env(self) -> dict[str, str]:
        """Credentials the Spark jobs need, for their environment (never their command line): the ZooKeeper
        digest identity as CDC_ZK_AUTH, which the job's fence check reads (the lease node is ACL'd)."""
        value = self.zk_auth()
        return {"CDC_ZK_AUTH": f"digest:{value}"} if value else {}

    def spark_job_env(self) -> dict[str, str]:
        """The environment of this pipeline's Spark jobs (merge and maintenance): one function, credentials
        included when configured (cdc_core.lake.spark_conf.spark_env)."""
        return {**os.environ, **spark_env(self.zk_auth(), store=self.store)}

    def uses_object_store(self) -> bool:
        return object_store.is_s3(self.staging_root) or object_store.is_s3(self.lake_root)

    def spark_master(self) -> str:
        """The --master of this pipeline's Spark connection (`spark.conn_id`), as the DAG's operator uses."""
        return resolve_spark_master(self.config.spark.conn_id, pipeline=self.name)

    def spark_conf(self) -> dict[str, str]:
        store = object_store.spark_confs(self.store) if self.uses_object_store() else None
        return job_confs(self.config.spark, store)

    def spark_jars(self) -> str:
        return jar_list(delta_jars() + (s3a_jars() if self.uses_object_store() else []), self.spark_master())

    def spark_job(self, application: object, args: list[str], name: str) -> SparkJob:
        """One of this pipeline's Spark jobs: its jars, confs and environment (cdc_core.lake.spark_conf.SparkJob)."""
        return SparkJob(application=str(application), args=[str(a) for a in args], name=name,
                        jars=self.spark_jars(), conf=self.spark_conf(), env=spark_env(self.zk_auth(), store=self.store))

    def merge_job(self, grant: LeaseGrant, seq: int) -> SparkJob:
        return self.spark_job(MERGE_JOB, self.merge_application_args(grant, seq), f"cdc-merge-{self.name}-{seq}")

    def spark_submit_command(self, grant: LeaseGrant, seq: int, master: str | None = None) -> list[str]:
        """The same command SparkSubmitOperator builds, for the CLI (a test can assert it); the master is the
        pipeline's Spark connection unless given."""
        return self.merge_job(grant, seq).command(master or self.spark_master())

    def merge_server_address(self) -> str | None:
        """The warm option's merge server (env CDC_MERGE_SERVER, else `spark.merge_server.address`), or None:
        spark-submit per window."""
        server = self.config.spark.merge_server
        return os.environ.get(merge_client.ADDRESS_ENV) or (server.address if server else None)

    def merge_server_launch(self, listen: str) -> tuple[list[str], dict[str, str]]:
        """The command and environment of this pipeline's merge server (`cdc merge-server`): the Python
        driver `spark_apps/merge_server.py`, whose Spark application gets the merge job's master, jars, confs
        and environment (credentials included) through PYSPARK_SUBMIT_ARGS, as spark-submit would give them."""
        merge_client.parse_address(listen)
        job = self.spark_job(MERGE_SERVER_APP, ["--listen", listen, "--pipeline", self.pipeline_name],
                             f"cdc-merge-server-{self.pipeline_name}")
        argv, job_env = job.python_driver(self.spark_master())
        env = {**self.spark_job_env(), **job_env}
        env.pop(merge_client.ADDRESS_ENV, None)
        return argv, env

    def merge_runner(self, seq: int, submit: JobRunner | None = None) -> JobRunner:
        """Who runs window `seq`'s merge job: the pipeline's merge server when one is configured (the warm
        option, `merge_server_address`), else `submit` (default: spark-submit in a subprocess, the CLI's; the
        DAG's operator passes its SparkSubmitHook's)."""
        address = self.merge_server_address()
        if address:
            server = self.config.spark.merge_server
            return MergeServerRunner(address, server.timeout_seconds if server else None,
                                     f"pipeline {self.name!r}: merge of window {seq}")
        return submit or SparkSubmitRunner(self.spark_master())

    def merge_needed(self, manifest: Manifest) -> bool:
        """Whether the window gives the merge job anything to do: staged rows, or schema changes of a table the
        lake has (a CREATE TABLE of a new table, or any DDL of a table the lake never had, waits for its first
        rows: the ack counts such a table as landed). Saves a Spark job per window of DDL on new tables."""
        if any(t.files for t in manifest.tables):
            return True
        if any(c.kind == DROP_DATABASE for c in manifest.schema_changes):
            return True  # its lake tables are found by the merge job
        return any(delta_state.table_exists(self.table_uri(t.schema, t.table), storage=self.storage)
                   for t in manifest.tables)

    def merge_locally(self, grant: LeaseGrant, seq: int, submit: JobRunner | None = None) -> dict[str, Any]:
        """The merge step (CLI and DAG alike): run window `seq`'s merge job (`merge_runner`: the merge server
        when one is configured, else `submit`, default spark-submit in a subprocess) under the run's lease, and
        raise what a failed job came to (cdc_core.lake.job_outcome: `Fenced` for a job that found the lease
        lost, `ConfigError` / `SchemaConflict` that no retry can fix, else a retryable error)."""
        manifest = self.manifest(seq)
        if not manifest.tables:
            self.log_event("window.merge_skipped", grant, seq=seq, reason="empty")
            return {"seq": seq, "skipped": "empty"}
        if not self.merge_needed(manifest):
            self.log_event("window.merge_skipped", grant, seq=seq, reason="ddl_only",
                           tables=len(manifest.tables))
            return {"seq": seq, "skipped": "ddl_only"}
        server = self.merge_server_address()
        runner = self.merge_runner(seq, submit)
        self.log_event("window.merging", grant, seq=seq, tables=len(manifest.tables), changes=manifest.changes,
                       **({"merge_server": server} if server else {}))
        t0 = time.time()
        if server:  # started with the pipeline's jars, confs and credentials: a request carries the arguments
            job = SparkJob(application=str(MERGE_JOB), args=self.merge_application_args(grant, seq),
                           name=f"cdc-merge-{self.name}-{seq}", jars="", conf={}, env={})
        else:
            job = self.merge_job(grant, seq)
        ref = JobRef.merge(self.name, seq, grant.holder, grant.token)
        spark_jobs.run_job(self, grant, job, ref, runner).raise_error()
        self.log_event("window.merged", grant, seq=seq, secs=f"{time.time() - t0:.1f}")
        faults.point("after_merge")
        return {"seq": seq, "merged": True, "secs": round(time.time() - t0, 2)}

    # ------------------------------------------------------------------------------------------ ack

    def landed(self, manifest: Manifest) -> dict[str, int | None]:
        """Each staged table's last idempotent-write version for this pipeline, read from Delta's log. A table
        the window names only in DDL and the lake never had holds nothing: it counts as landed."""
        out: dict[str, int | None] = {}
        for t in manifest.tables:
            uri = self.table_uri(t.schema, t.table)
            version = delta_state.last_txn_version(uri, self.name, storage=self.storage)
            if version is None and not t.files and not t.columns and not delta_state.table_exists(
                uri, storage=self.storage
            ):
                version = manifest.plan.seq
            out[t.name] = version
        return out

    def ack(self, grant: LeaseGrant, seq: int) -> dict[str, Any]:
        grant = self.renew(grant)
        record = self._window(seq)
        if record.state == "acked":
            return {"seq": seq, "acked": True, "already": True}
        manifest = self.manifest(seq)
        landed = self.landed(manifest)
        missing = {name: v for name, v in landed.items() if v is None or v < seq}
        if missing:
            raise LakeError(
                f"pipeline {self.name!r}: cannot ack window {seq}: Delta does not hold it for "
                + ", ".join(f"{n} (last version {v})" for n, v in sorted(missing.items()))
                + "; re-run the merge step (it is idempotent)"
            )
        self._record_lake(grant, record.plan, manifest)
        faults.point("before_ack")
        result = self._ack_result(seq, manifest)
        self._record_checkpoint(grant, record.plan, manifest, result)
        rereads = self.schema_rereads(manifest)
        renames = [(c.table_name, c.target_name, c.version) for c in manifest.schema_changes
                   if c.kind == RENAME_TABLE and c.target_name is not None]
        cursor = self.coordinator.ack_window(grant, seq, result, rereads, renames)
        for r in rereads:
            self.log_event("window.schema_reread", grant, seq=seq, table=r.table, change_version=r.sweep_below)
        self.log_event("window.acked", grant, seq=seq, cursor=cursor.position.label() if cursor.position else None)
        if record.plan.kind == KIND_SNAPSHOT:
            snapshot_steps.log_acked(self, grant, record.plan)
        faults.point("after_ack")
        from cdc_core.run import housekeeping  # staged windows and window records past their retention; never raises

        housekeeping.cleanup_after_ack(self, grant)
        return {"seq": seq, "acked": True, "cursor": cursor.position.label() if cursor.position else None}

    def schema_rereads(self, manifest: Manifest) -> list[TableRequest]:
        """Tables whose rows a schema change of the window left to be re-read from the source (recorded by the
        merge in each lake table's schema record, cdc_core.model.schema_evolution): one snapshot request each,
        made with the ack (cdc_core.coordination.coordinator.ack_window skips those already requested)."""
        if not manifest.schema_changes:
            return []
        out: dict[str, int] = {}
        prefix = f"cdc.schema.{self.name}"
        for t in manifest.tables:
            found = delta_state.writer_txn_properties(
                self.table_uri(t.schema, t.table), self.name, storage=self.storage
            )
            if found is None:
                continue
            for key, value in found[2].items():
                # cdc.schema.<app id>.reread (a table of its own) or cdc.schema.<app id>.<source table>.reread
                if not (key.startswith(prefix) and key.endswith(".reread")):
                    continue
                version = int(value.partition(":")[0] or 0) if value.partition(":")[0].isdigit() else 0
                middle = key[len(prefix):-len(".reread")]
                if middle and not middle.startswith("."):
                    continue  # another app id that starts with this one's name
                source = middle[1:] if middle else t.name
                if version > out.get(source, 0):
                    out[source] = version
        rows = self.config.snapshot.chunk_rows
        return [TableRequest(name, None, rows, sweep_below=v) for name, v in sorted(out.items())]

    def _ack_result(self, seq: int, manifest: Manifest) -> dict[str, Any]:
        """What the ack records for the window: per table its changes, Delta version and merge counts."""
        tables: dict[str, dict[str, Any]] = {t.name: {"changes": t.rows} for t in manifest.tables}
        result: dict[str, Any] = {"tables": tables, "changes": manifest.changes}
        merged = self.merge_report(seq)
        if merged:
            reported = merged.get("tables") or {}
            for t in manifest.tables:  # the report is per lake table (routes may land several tables in one)
                info = reported.get(self.lineage(t.schema, t.table).lake_name)
                if isinstance(info, dict):
                    tables[t.name].update(
                        {k: info[k] for k in ("delta_version", "status", "inserted", "updated", "deleted") if k in info}
                    )
            result["durations"] = {"merge": merged.get("seconds")}
        for name, entry in tables.items():
            if entry.get("delta_version") is None:  # landed by an earlier attempt: find its commit in Delta
                t = manifest.table(name)
                entry["delta_version"] = delta_state.window_commit_version(
                    self.table_uri(t.schema, t.table), self.name, seq, storage=self.storage
                )
        return result

    def _record_checkpoint(
        self, grant: LeaseGrant, plan: WindowPlan, manifest: Manifest, result: dict[str, Any]
    ) -> None:
        """Record the window in the lake's checkpoints table (cdc_core.lake.lake_versions) before the cursor
        moves: every table of the pipeline at its Delta version as of this window, in one idempotent
        commit. Fenced: the lease is checked first, and a stale run finds the window recorded (or a
        table already past it) and writes nothing. Empty windows record nothing."""
        if not manifest.tables:
            return
        from cdc_core import coordination
        from cdc_core.lake import lake_versions

        if lake_versions.recorded(self.lake_root, self.name, plan.seq, storage=self.storage):
            return
        reg = lake_registry.LakeRegistry.from_dict(self.coordinator.read_lake())
        uris = {n: self.table_uri(e.schema, e.table) for n, e in reg.tables.items()}
        for t in manifest.tables:  # a table named only by DDL that the lake does not have: not in the cut
            uri = self.table_uri(t.schema, t.table)
            if t.files or t.name in uris or delta_state.table_exists(uri, storage=self.storage):
                uris[t.name] = uri
        if not uris:  # only DDL of tables the lake does not have yet: no version to record
            return
        now = time.time()
        after = coordination.cursor_after_ack(self.name, self.coordinator.read_cursor(), plan, now)
        position = after.position  # the stream cursor after this window (a backfill or a chunk keeps it)
        covered = position.commit_ts if position else None

        def build() -> Any:
            versions = lake_versions.current_versions(self.name, plan.seq, uris, storage=self.storage)
            changed = result.get("tables") or {}
            rows = []
            for name, uri in sorted(uris.items()):
                info = changed.get(name) or {}
                rows.append(lake_versions.TableAtWindow(
                    name, uri, versions[name], name in changed,
                    inserted=info.get("inserted"), updated=info.get("updated"), deleted=info.get("deleted"),
                    changes=info.get("changes"),
                ))
            return lake_versions.checkpoint_rows(
                self.name, plan.seq, plan.kind, rows, cursor=position.label() if position else None,
                commit_ts=covered, acked_at=now,
            )

        self.coordinator.verify(grant)  # fenced like every other write: a run that lost its lease stops here
        wrote = lake_versions.write_window(self.lake_root, self.name, plan.seq, build, storage=self.storage)
        self.log_event("window.checkpointed", grant, seq=plan.seq, tables=len(uris), written=wrote)
        faults.point("after_checkpoint")

    def more_work(self, seq: int) -> dict[str, Any]:
        """Right after window `seq` was acked: is more work waiting now, and why?

        {"more": bool, "reason": one of `windows.MORE_*`, "detail": text, "seq": seq}. More is waiting
        while a backfill or a snapshot is in progress, or when the window was cut short by a cap before
        the source's end (see `windows.more_work`); the DAGs then trigger the next run at once instead
        of waiting for the schedule (`continue_while_behind`). Reads ZooKeeper only.
        """
        record = self.coordinator.get_window(seq)
        cursor = self.coordinator.read_cursor()
        answer = windows.more_work(
            record.plan if record is not None else None,
            acked=record is not None and record.state == "acked",
            enabled=self.config.continue_while_behind,
            backfill_active=cursor.backfill is not None,
            snapshot_active=self.coordinator.read_snapshot().active,
        )
        answer["seq"] = seq
        self.log_event("window.more_work", None, seq=seq, more=answer["more"], reason=answer["reason"])
        return answer

    def merge_report(self, seq: int) -> dict[str, Any] | None:
        """The newest merge job report for window `seq` (informational: Delta versions, timings), if any."""
        try:
            fs, root = self.storage.fs(self.reports_dir())
            # One report per fencing token (layout.merge_report_uri): the newest token is the run that last
            # merged the window.
            found = {f: layout.merge_report_key(f) for f in fs.glob(f"{root}/w{seq:010d}-*.json")}
            tokens = {f: key[1] for f, key in found.items() if key is not None and key[0] == seq}
            if not tokens:
                return None
            newest = max(tokens, key=tokens.__getitem__)
            with fs.open(newest, "r") as f:
                report: dict[str, Any] = json.load(f)
            return report
        except (OSError, ValueError) as e:
            log.warning("%s", kv(event="merge.report_unreadable", pipeline=self.name, seq=seq, reason=str(e)))
            return None

    def note_failure(self, step: str, error: BaseException, *, seq: int | None = None, holder: str = "") -> None:
        """Record a failed step for the monitor page (`status()["last_error"]`)."""
        message = f"{type(error).__name__}: {error}"
        self.log_event("step.failed", None, step=step, seq=seq, error=message[:500])
        self.coordinator.record_error(holder, step, seq, message)

    def recover(self, grant: LeaseGrant) -> str | None:
        """Ack a pending window whose Delta commits all landed; never ack one that did not."""
        pending = self.coordinator.pending_window()
        if pending is None:
            return None
        manifest = self._staged_manifest(pending.plan)
        if manifest is None:
            return None  # not (validly) staged, so it cannot have been merged: replay it
        landed = self.landed(manifest)
        if all(v is not None and v >= pending.plan.seq for v in landed.values()):
            self._record_lake(grant, pending.plan, manifest)
            result = {**self._ack_result(pending.plan.seq, manifest), "recovered": True}
            self._record_checkpoint(grant, pending.plan, manifest, result)
            self.coordinator.ack_window(grant, pending.plan.seq, result)
            self.log_event("window.recovered_ack", grant, seq=pending.plan.seq)
            return f"acked landed window {pending.plan.seq}"
        return None

    # --------------------------------------------------------------------- lake table registry

    def check_lake(self, grant: LeaseGrant, next_seq: int) -> None:
        """Before a new stream window: every Delta table the pipeline landed windows into is still there,
        and is the same table (cdc_core.model.lake_registry). A deleted or re-created one stops the run with a
        LakeError naming it and the repairs (snapshot, backfill); nothing is planned. A table a snapshot
        round is rebuilding does not stop the stream (chunks and stream windows alternate)."""
        reg = lake_registry.LakeRegistry.from_dict(self.coordinator.read_lake())
        if not reg.tables:
            return
        ids = {n: delta_state.table_id(self.table_uri(e.schema, e.table), storage=self.storage)
               for n, e in reg.tables.items()}
        rounds = {t.table: t.round for t in self.coordinator.read_snapshot().tables if not t.done}
        bad = lake_registry.problems(reg, ids, next_seq, rounds)
        if not bad:
            return
        names = sorted(bad)
        reg = lake_registry.LakeRegistry.from_dict(self.coordinator.update_lake(
            grant, lambda cur: lake_registry.mark_damaged(
                lake_registry.LakeRegistry.from_dict(cur), names, next_seq).to_dict(),
        ))
        for n in names:
            self.log_event("lake.table_damaged", grant, table=n, reason=repr(bad[n]))
        raise LakeError(
            f"pipeline {self.name!r}: "
            + "; ".join(f"Delta table {n} ({self.table_uri(reg.tables[n].schema, reg.tables[n].table)}) {bad[n]}"
                        for n in names)
            + ". Nothing was planned or changed. " + lake_registry.repair_hint(reg, self.name, names)
        )

    def _record_lake(self, grant: LeaseGrant, plan: WindowPlan, manifest: Manifest) -> None:
        """Register the window's tables (with their Delta ids) before it is acked."""
        cursor = self.coordinator.read_cursor()
        bf = cursor.backfill
        completes = plan.kind == KIND_BACKFILL and bf is not None and plan.end >= bf.until
        landed = {
            t.name: (t.schema, t.table, delta_state.table_id(self.table_uri(t.schema, t.table), storage=self.storage))
            for t in manifest.tables
        }
        if plan.kind == KIND_SNAPSHOT:
            # A chunk that staged no rows still tells whether its round's table is still there.
            names = [s.table for s in snapshot_state.chunks_of(plan) if s.table not in landed]
            known = lake_registry.LakeRegistry.from_dict(self.coordinator.read_lake()).tables if names else {}
            for name in names:
                entry = known.get(name)
                if entry is not None:
                    now = delta_state.table_id(self.table_uri(entry.schema, entry.table), storage=self.storage)
                    landed[name] = (entry.schema, entry.table, now)
        if not landed and not completes:
            return
        recreated: list[str] = []

        def change(current: dict[str, Any] | None) -> dict[str, Any]:
            new, found = lake_registry.after_ack(
                lake_registry.LakeRegistry.from_dict(current), plan, landed,
                completes_backfill=completes, backfill_tables=tuple(bf.tables) if bf is not None else (),
            )
            recreated[:] = found
            return new.to_dict()

        reg = lake_registry.LakeRegistry.from_dict(self.coordinator.update_lake(grant, change))
        for n in recreated:  # the next stream window refuses to plan until a repair rebuilt it
            rb = reg.tables[n].rebuild if n in reg.tables else None
            if rb is not None and rb.broken:
                self.log_event("lake.snapshot_round_broken", grant, seq=plan.seq, table=n, round=rb.round,
                          round_delta_id=rb.delta_id, reason="a chunk landed in another Delta table than chunk 1")
            else:
                self.log_event("lake.table_recreated", grant, seq=plan.seq, table=n)

    # ------------------------------------------------------------------------------------ whole run

    def run_cycle(
        self,
        holder: str,
        *,
        max_windows: int = 1,
        merge: Callable[..., Any] | None = None,
        until_caught_up: bool = False,
        process: holders.ProcessIdentity | None = None,
        break_dead: bool = False,
    ) -> dict[str, Any]:
        """acquire -> (plan -> stage -> merge -> ack) x N -> release. Used by the CLI and tests.

        At most `max_windows` windows; an empty window always ends the run. With `until_caught_up`
        (the CLI's default) the run goes on while it is behind the source's end as seen when the run
        started (a window cut short by a cap), or while a backfill or a snapshot is in progress, and
        stops once a window reaches that end: new changes arriving meanwhile wait for the next run, so
        a busy source cannot keep one run going forever. Without it, the first window ends the run
        unless `max_windows` allows more (the old behaviour: stop at an empty window only).
        """
        if max_windows < 1:
            raise ConfigError(f"pipeline {self.name!r}: max windows must be at least 1, got {max_windows}")
        grant = self.acquire(holder, process=process, break_dead=break_dead)
        try:
            return self.run_windows(
                grant, holder, max_windows=max_windows, merge=merge, until_caught_up=until_caught_up
            )
        finally:
            self.release(grant)

    def run_windows(
        self,
        grant: LeaseGrant,
        holder: str,
        *,
        max_windows: int = 1,
        merge: Callable[..., Any] | None = None,
        until_caught_up: bool = False,
    ) -> dict[str, Any]:
        """(plan -> stage -> merge -> ack) x N under a lease the caller holds (`run_cycle`, or a group
        pipeline's run over its sources, cdc_core.run.group)."""
        done: list[dict[str, Any]] = []
        doing, seq = "plan_window", None
        stop_reason = "max_windows"
        try:
            target = self.source_facts(refresh=True).end if until_caught_up else None
            for _ in range(max_windows):
                doing, seq = "plan_window", None
                step = self.plan(grant)
                doing, seq = "stage_window", step["seq"]
                staged = self.stage(grant, step["seq"])
                if not staged["empty"]:
                    doing = "merge_window"
                    (merge or self.merge_locally)(grant, step["seq"])
                doing = "ack_window"
                self.ack(grant, step["seq"])
                done.append({**step, "changes": staged["changes"]})
                if step["empty"]:
                    stop_reason = "empty_window"
                    break
                if until_caught_up:
                    behind = self._behind(target)
                    if behind is None:
                        stop_reason = "caught_up"
                        break
                    self.log_event("run.continue", grant, seq=step["seq"], reason=behind, windows=len(done))
            else:
                if until_caught_up and self._behind(target) is not None:
                    self.log_event("run.window_cap", grant, windows=len(done), max_windows=max_windows,
                              hint="more is waiting: run again, or raise --max-windows")
        except Exception as e:
            self.note_failure(doing, e, seq=seq, holder=holder)
            raise
        return {"pipeline": self.name, "windows": done, **({"stopped": stop_reason} if until_caught_up else {})}

    def _behind(self, target: Any) -> str | None:
        """Why the run should go on (backfill, snapshot, before the source end seen at its start), or None."""
        cursor = self.coordinator.read_cursor()
        if cursor.backfill is not None:
            return "backfill"
        if self.coordinator.read_snapshot().active:
            return "snapshot"
        pos = cursor.position
        if target is None or pos is None:
            return None
        from cdc_core.model.positions import binlog_file_index

        if (binlog_file_index(pos.file), pos.offset) < (binlog_file_index(target.file), target.offset):
            return "behind_source_end"
        return None


def zk_client_for(config: PipelineConfig, zk_digest: Any = _FROM_CONFIG) -> Any:
    """A started ZooKeeper client for the pipeline (one per pipeline, shared by a group's sources), with the
    digest identity the caller resolved, else the configuration's (`ZooKeeperConfig.digest`)."""
    if zk_digest is _FROM_CONFIG:
        zk_digest = config.zookeeper.digest(pipeline=config.name)
    return make_zk_client(config.zookeeper.hosts, auth=cast("tuple[str, str] | None", zk_digest))


def configure_logging(level: int = logging.INFO) -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
