"""The pipeline cycle: the steps one run performs, shared by the CLI and the Airflow tasks.

    acquire -> plan (recover first) -> stage -> merge (Spark) -> ack -> release

`Pipeline` is a thin facade: one configured pipeline (or one source of a group pipeline) bound to its
source, its ZooKeeper subtree and its storage roots, with the lease; each step is a module of its own
that takes the pipeline's public face (cdc_core.run.context.PipelineContext):

- cdc_core.run.plan: recover, then the window to work on, stored immutably (`PlannedWindow`);
- cdc_core.run.stage: the window's changes staged durably, or a staged copy verified (`StagedWindow`);
- cdc_core.run.merge_step: the Spark MERGE job built and run under the lease (`MergeResult`);
- cdc_core.run.ack: the cursor moved once Delta holds the window (`AckResult`), with the lake's table
  registry (cdc_core.run.lake_tables) and checkpoints table (cdc_core.run.checkpoints);
- cdc_core.run.loop: window after window until a stop predicate says why not (`WindowsRun`);
- cdc_core.run.spark_jobs: the environment of the pipeline's Spark jobs and how one runs.

Every step is idempotent and fenced, so any step can be retried (an Airflow "clear") and a crash at
any point converges on the next run. State between steps lives in ZooKeeper and the staging area, not in
the caller: Airflow clears XComs on retry, and the CLI may be killed between steps.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from cdc_core.capture.binlog import BinlogScanner
from cdc_core.capture.resolver import Resolution, resolve_start
from cdc_core.capture.source import (
    SourceFacts,
    SourceParams,
    TableFilter,
    check_binlog_filters,
    check_cdc_ready,
    check_first_contact,
    connect,
    describe_tables,
    inspect_source,
)
from cdc_core.coordination import LeaseGrant, LeaseKeeper, PipelineCoordinator, make_zk_client
from cdc_core.lake import object_store
from cdc_core.lake.job_runner import JobRunner
from cdc_core.lake.job_specs import MergeJobSpec
from cdc_core.lake.spark_conf import SparkJob
from cdc_core.model import faults, holders, layout, sources, transforms
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import ConfigError, LeaseHeld, StateConflict
from cdc_core.model.lake_writers import route_target_pattern
from cdc_core.model.logfmt import iso_seconds, kv
from cdc_core.model.manifest import Manifest
from cdc_core.model.naming import table_id
from cdc_core.model.positions import BinlogPosition, StartSpec
from cdc_core.model.snapshot_state import TableRequest
from cdc_core.model.sources import unit_name
from cdc_core.model.window_plan import WindowPlan
from cdc_core.run import ack, lake_tables, loop, merge_step, plan, spark_jobs, stage
from cdc_core.run.ack import AckResult
from cdc_core.run.loop import WindowsRun
from cdc_core.run.merge_step import MergeResult
from cdc_core.run.metrics import CONFIGURED, Metrics, Sink, metrics_for
from cdc_core.run.plan import PlannedWindow
from cdc_core.run.stage import StagedWindow
from cdc_core.run.validate import capture_filter

log = logging.getLogger("cdc.pipeline")

_FROM_CONFIG: Any = object()  # `Pipeline.from_config`'s default: read the credential from the configuration


@dataclass
class Pipeline:
    """One configured pipeline bound to its source, its ZooKeeper subtree and its storage roots."""

    config: PipelineConfig
    source: SourceParams
    coordinator: PipelineCoordinator
    _owns_client: bool = False
    _client: Any = None
    _facts: SourceFacts | None = field(default=None, repr=False)
    _first_contact_checked: bool = field(default=False, repr=False)
    # The object store's credentials (`object_store.conn_id`), None for local roots or ambient credentials.
    store: object_store.S3Credentials | None = field(default=None, repr=False)
    # ZooKeeper's digest identity as the caller resolved it (the Airflow glue, through Airflow); unset: read
    # from the configuration's `zookeeper.auth_env` / `conn_id` as the CLI does (`ZooKeeperConfig.digest`).
    _zk_digest: Any = field(default=_FROM_CONFIG, repr=False)
    # One source of a group pipeline (cdc_core.model.sources); None: the pipeline's one source.
    source_id: str | None = None
    metrics: Metrics = field(default_factory=lambda: Metrics(None, ""), repr=False)  # cdc_core/run/metrics.py
    # The transforms' hash key, read when a rule needs it (ConfigError when configured but missing).
    transform_key: Callable[[], bytes | None] = field(default=lambda: None, repr=False)

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
        metrics_sink: Sink | object | None = CONFIGURED,
        hash_key: bytes | None = None,
    ) -> Pipeline:
        """`store`, `zk_digest`: the object store's credentials and ZooKeeper's digest identity as the caller
        resolved them (the Airflow glue, through Airflow); by default `object_store.conn_id` is looked up in
        the environment, as the source's is, and ZooKeeper's identity by `ZooKeeperConfig.digest`.
        `clock`, `before_commit`: the coordinator's (`PipelineCoordinator`; tests and tools). `source_id`:
        which source of a group pipeline this object runs (its state, windows and Delta writes are that
        source's; `source` must be its connection); None for a single-source pipeline. `metrics_sink`: where
        the metrics go (Airflow: its `Stats`); by default `metrics_for`'s StatsD server, if configured.
        `hash_key`: the transforms' key as the caller resolved it (the Airflow glue); None: read as the CLI does."""
        config = config.for_source(source_id)
        if store is None:
            store = object_store.for_pipeline(config)
        if zk_digest is _FROM_CONFIG:
            zk_digest = config.zookeeper.digest(pipeline=config.name)
        owns = zk_client is None
        zk_client = zk_client_for(config, zk_digest) if owns else zk_client
        coordinator = PipelineCoordinator(
            zk_client, config.zookeeper.root, config.name, before_commit=before_commit, source=source_id,
            **({"clock": clock} if clock is not None else {}),
        )
        metrics = metrics_for(unit_name(config.name, source_id), config.metrics, metrics_sink)
        return cls(config=config, source=source, coordinator=coordinator, _owns_client=owns, _client=zk_client,
                   store=store, _zk_digest=zk_digest, source_id=source_id, metrics=metrics,
                   transform_key=(lambda: hash_key) if hash_key is not None else
                   functools.partial(transforms.read_key, config.transform, config.name))

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
        self.metrics.observe(event, fields)

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
        out = {"include": f.include, "exclude": f.exclude, "full_row_key": tuple(self.config.tables.full_row_key)}
        # The lake tables that keep a change log: their source tables stage updates' before images.
        logs = tuple(sorted(name for name in self.config.table_options if self.config.outputs_of(name).changelog))
        if logs:
            out["before_images"] = logs
        return {**out, **transforms.plan_record(self.config.transform, self.name, self.transform_key)}

    def plan_before_images(self, plan: WindowPlan) -> Callable[[str, str], bool] | None:
        """Whether a source table's updates stage their before images, as the stored plan was planned (a plan
        recorded without the setting stages none)."""
        logs = frozenset((plan.capture or self.capture_settings(plan.tables)).get("before_images", ()))
        if not logs:
            return None

        @functools.cache
        def wanted(schema: str, table: str) -> bool:
            return self.lineage(schema, table).lake_name in logs

        return wanted

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
                if not self._first_contact_checked:
                    check_first_contact(conn, self.name, self.table_filter(), self.config.tables.cascading_foreign_keys)
                    self._first_contact_checked = True
                facts = inspect_source(conn)
                check_cdc_ready(facts, self.name)
                check_binlog_filters(facts, self.table_filter(), self.name)
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

    def schema_lookup(self, full_row_key: tuple[str, ...]) -> Callable[[str, str], Any]:
        """A cached `(schema, table) -> TableSchema | None` over the source (what staging decodes rows with)."""
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

    # -------------------------------------------------------------------------------------- lease

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
            break_dead_holder(self)
            grant = self.coordinator.acquire(holder, self.config.lease_seconds, process=ident)
        self.log_event("lease.acquired", grant, holder=holder, expires_at=grant.expires_at)
        faults.point("after_acquire")
        return grant

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

    # ------------------------------------------------------------------------ where tables land

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
        return merge_step.report_uri(self, seq, token)

    # ------------------------------------------------------------------ the steps (one module each)

    def plan(self, grant: LeaseGrant) -> PlannedWindow:
        """Recover, then the window to work on (cdc_core.run.plan)."""
        return plan.plan(self, grant)

    def recover(self, grant: LeaseGrant) -> str | None:
        """Ack a pending window whose Delta commits all landed (cdc_core.run.ack.recover)."""
        return ack.recover(self, grant)

    def check_lake(self, grant: LeaseGrant, next_seq: int) -> None:
        """Every Delta table the pipeline landed into is still the same table (cdc_core.run.lake_tables)."""
        lake_tables.check_lake(self, grant, next_seq)

    def stage(self, grant: LeaseGrant, seq: int) -> StagedWindow:
        """Stage the stored plan, or verify the staged copy (cdc_core.run.stage)."""
        return stage.stage(self, grant, seq)

    def manifest(self, seq: int) -> Manifest:
        """Window `seq`'s staged manifest (cdc_core.run.stage.manifest)."""
        return stage.manifest(self, seq)

    def merge_spec(self, grant: LeaseGrant, seq: int) -> MergeJobSpec:
        return merge_step.merge_spec(self, grant, seq)

    def merge_application_args(self, grant: LeaseGrant, seq: int) -> list[str]:
        return merge_step.merge_application_args(self, grant, seq)

    def merge_job(self, grant: LeaseGrant, seq: int) -> SparkJob:
        return merge_step.merge_job(self, grant, seq)

    def spark_submit_command(self, grant: LeaseGrant, seq: int, master: str | None = None) -> list[str]:
        return merge_step.spark_submit_command(self, grant, seq, master)

    def merge_server_address(self) -> str | None:
        return merge_step.merge_server_address(self)

    def merge_server_launch(self, listen: str) -> tuple[list[str], dict[str, str]]:
        return merge_step.merge_server_launch(self, listen)

    def merge_runner(self, seq: int, submit: JobRunner | None = None) -> JobRunner:
        return merge_step.merge_runner(self, seq, submit)

    def merge_needed(self, manifest: Manifest) -> bool:
        return merge_step.merge_needed(self, manifest)

    def merge_locally(self, grant: LeaseGrant, seq: int, submit: JobRunner | None = None) -> MergeResult:
        """The merge step, CLI and DAG alike (cdc_core.run.merge_step.merge)."""
        return merge_step.merge(self, grant, seq, submit)

    def landed(self, manifest: Manifest) -> dict[str, int | None]:
        return ack.landed(self, manifest)

    def ack(self, grant: LeaseGrant, seq: int) -> AckResult:
        """Move the cursor past window `seq` once Delta holds it (cdc_core.run.ack)."""
        return ack.ack(self, grant, seq)

    def schema_rereads(self, manifest: Manifest) -> list[TableRequest]:
        return ack.schema_rereads(self, manifest)

    def merge_report(self, seq: int) -> dict[str, Any] | None:
        return ack.merge_report(self, seq)

    def more_work(self, seq: int) -> dict[str, Any]:
        """Right after window `seq` was acked: is more work waiting now, and why? (cdc_core.run.loop)"""
        return loop.more_work(self, seq)

    def note_failure(self, step: str, error: BaseException, *, seq: int | None = None, holder: str = "") -> None:
        """Record a failed step for the monitor page (`status()["last_error"]`)."""
        loop.note_failure(self, step, error, seq=seq, holder=holder)

    # ------------------------------------------------------------- the Spark jobs' environment

    def zk_auth(self) -> str | None:
        """The ZooKeeper digest credential (user:password): as resolved by `from_config`'s caller, else from
        the configuration (`zookeeper.auth_env` or `zookeeper.conn_id`)."""
        digest = self._zk_digest
        if digest is _FROM_CONFIG:
            digest = self.config.zookeeper.digest(pipeline=self.name)
        return ":".join(cast("tuple[str, str]", digest)) if digest else None

    def merge_secret_env(self) -> dict[str, str]:
        return spark_jobs.merge_secret_env(self)

    def spark_job_env(self) -> dict[str, str]:
        return spark_jobs.spark_job_env(self)

    def uses_object_store(self) -> bool:
        return spark_jobs.uses_object_store(self)

    def spark_master(self) -> str:
        return spark_jobs.spark_master(self)

    def spark_conf(self) -> dict[str, str]:
        return spark_jobs.spark_conf(self)

    def spark_jars(self) -> str:
        return spark_jobs.spark_jars(self)

    def spark_job(self, application: object, args: list[str], name: str) -> SparkJob:
        return spark_jobs.spark_job(self, application, args, name)

    # ------------------------------------------------------------------------------------ whole run

    def run_cycle(
        self,
        holder: str,
        *,
        max_windows: int = 1,
        merge: loop.Merge | None = None,
        until_caught_up: bool = False,
        process: holders.ProcessIdentity | None = None,
        break_dead: bool = False,
    ) -> WindowsRun:
        """acquire -> (plan -> stage -> merge -> ack) x N -> release. Used by the CLI and tests.

        At most `max_windows` windows; an empty window always ends the run. With `until_caught_up`
        (the CLI's default) the run goes on while it is behind the source's end as seen when the run
        started, or while a backfill or a snapshot is in progress (cdc_core.run.loop.caught_up).
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
        merge: loop.Merge | None = None,
        until_caught_up: bool = False,
    ) -> WindowsRun:
        """(plan -> stage -> merge -> ack) x N under a lease the caller holds (`run_cycle`, or a group
        pipeline's run over its sources, cdc_core.run.group)."""
        return loop.run(self, grant, holder, max_windows=max_windows, merge=merge, until_caught_up=until_caught_up)


def zk_client_for(config: PipelineConfig, zk_digest: Any = _FROM_CONFIG) -> Any:
    """A started ZooKeeper client for the pipeline (one per pipeline, shared by a group's sources), with the
    digest identity the caller resolved, else the configuration's (`ZooKeeperConfig.digest`)."""
    if zk_digest is _FROM_CONFIG:
        zk_digest = config.zookeeper.digest(pipeline=config.name)
    return make_zk_client(config.zookeeper.hosts, auth=cast("tuple[str, str] | None", zk_digest))


def break_dead_holder(p: Pipeline) -> None:
    """Break the current lease if its holder is a dead process on this host; otherwise re-raise LeaseHeld."""
    info = p.coordinator.read_lease()
    if info is None:
        return  # released meanwhile: the next acquire takes it
    verdict, reason = holders.judge_holder(holders.ProcessIdentity.from_dict(info.process))
    if verdict != "dead":
        p.log_event("lease.holder_kept", None, holder=info.holder, verdict=verdict, reason=reason)
        raise LeaseHeld(
            f"pipeline {p.name!r}: the lease is held by {info.holder!r} until {iso_seconds(info.expires_at)} "
            f"(token {info.token:#x}); {reason}: skip this run (the next run picks up where it stops)",
            holder=info.holder,
            expires_at=info.expires_at,
            token=info.token,
        )
    p.log_event(
        "lease.dead_holder", None, holder=info.holder, previous_token=f"{info.token:#x}", reason=reason,
        action="break",
    )
    # StateConflict: someone else broke, released or took it meanwhile; the next acquire decides.
    with contextlib.suppress(StateConflict):
        p.coordinator.break_lease(info.holder)


def configure_logging(level: int = logging.INFO) -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
