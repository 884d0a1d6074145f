"""What the run's steps and the operator actions need of a pipeline: its public face.

The steps (cdc_core.run.plan, stage, merge_step, ack, lake_tables, checkpoints, loop) and the actions
(backfill, status, snapshot steps, housekeeping) take this protocol, not `Pipeline`, so that each is written
against the pipeline's identity, configuration, coordinator and source, reading the source, the lease and the
job environment only; one step calls another step's module, never back into the facade. `Pipeline`
(cdc_core.run.pipeline) is the one implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from cdc_core.capture.binlog import BinlogScanner
from cdc_core.capture.resolver import Resolution
from cdc_core.capture.source import SourceFacts, SourceParams, TableFilter
from cdc_core.coordination import LeaseGrant, LeaseKeeper, PipelineCoordinator
from cdc_core.lake.object_store import S3Credentials, Storage
from cdc_core.lake.spark_conf import SparkJob
from cdc_core.model import sources
from cdc_core.model.config import PipelineConfig
from cdc_core.model.positions import BinlogPosition, StartSpec
from cdc_core.model.window_plan import WindowPlan


class PipelineContext(Protocol):
    config: PipelineConfig
    source: SourceParams
    coordinator: PipelineCoordinator
    source_id: str | None
    store: S3Credentials | None

    @property
    def name(self) -> str: ...

    @property
    def pipeline_name(self) -> str: ...

    @property
    def staging_root(self) -> str: ...

    @property
    def lake_root(self) -> str: ...

    @property
    def storage(self) -> Storage: ...

    def log_event(self, event: str, grant: LeaseGrant | None = None, **fields: Any) -> None: ...

    # where tables land
    def lineage(self, schema: str, table: str) -> sources.Lineage: ...

    def table_uri(self, schema: str, table: str) -> str: ...

    # the lease
    def renew(self, grant: LeaseGrant) -> LeaseGrant: ...

    def keep_lease(self, grant: LeaseGrant) -> AbstractContextManager[LeaseKeeper]: ...

    def release(self, grant: LeaseGrant) -> None: ...

    # the source
    def table_filter(self, tables: tuple[str, ...] | None = None) -> TableFilter: ...
    def lake_table_filter(self) -> TableFilter: ...

    def capture_settings(self, tables: tuple[str, ...] | None = None) -> dict[str, tuple[str, ...]]: ...

    def plan_capture(self, plan: WindowPlan) -> tuple[TableFilter, tuple[str, ...]]: ...

    def plan_before_images(self, plan: WindowPlan) -> Callable[[str, str], bool] | None: ...

    def transform_key(self) -> bytes | None: ...

    def source_facts(self, refresh: bool = False) -> SourceFacts: ...

    def describe(self, tables: tuple[str, ...] | None = None) -> dict[str, Any]: ...

    def scanner(self, facts: SourceFacts | None = None) -> BinlogScanner: ...

    def resolve(self, saved: BinlogPosition | None, spec: StartSpec | None = None) -> Resolution: ...

    def schema_lookup(self, full_row_key: tuple[str, ...]) -> Callable[[str, str], Any]: ...

    # the Spark jobs' environment (cdc_core.run.spark_jobs)
    def zk_auth(self) -> str | None: ...

    def spark_master(self) -> str: ...

    def spark_jars(self) -> str: ...

    def spark_conf(self) -> dict[str, str]: ...

    def spark_job(self, application: object, args: list[str], name: str) -> SparkJob: ...
