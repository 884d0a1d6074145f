"""What the operator actions (backfill, status, snapshot steps, housekeeping) need of a pipeline.

They take this protocol, not `Pipeline`, so that each is written against the pipeline's public face only:
its configuration, its coordinator and source, reading the source, and the lease. `Pipeline` is the one
implementation; the protocol keeps the actions from reaching into the run cycle's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from cdc_core.capture.binlog import BinlogScanner
from cdc_core.capture.resolver import Resolution
from cdc_core.capture.source import SourceFacts, SourceParams, TableFilter
from cdc_core.coordination import LeaseGrant, PipelineCoordinator
from cdc_core.lake.object_store import Storage
from cdc_core.model.config import PipelineConfig
from cdc_core.model.positions import BinlogPosition, StartSpec
from cdc_core.model.window_plan import WindowPlan


class PipelineContext(Protocol):
    config: PipelineConfig
    source: SourceParams
    coordinator: PipelineCoordinator

    @property
    def name(self) -> str: ...

    @property
    def staging_root(self) -> str: ...

    @property
    def lake_root(self) -> str: ...

    @property
    def storage(self) -> Storage: ...

    def log_event(self, event: str, grant: LeaseGrant | None = None, **fields: Any) -> None: ...

    # the lease
    def renew(self, grant: LeaseGrant) -> LeaseGrant: ...

    def release(self, grant: LeaseGrant) -> None: ...

    # the source
    def table_filter(self, tables: tuple[str, ...] | None = None) -> TableFilter: ...
    def lake_table_filter(self) -> TableFilter: ...

    def capture_settings(self, tables: tuple[str, ...] | None = None) -> dict[str, tuple[str, ...]]: ...

    def plan_capture(self, plan: WindowPlan) -> tuple[TableFilter, tuple[str, ...]]: ...

    def source_facts(self, refresh: bool = False) -> SourceFacts: ...

    def describe(self, tables: tuple[str, ...] | None = None) -> dict[str, Any]: ...

    def scanner(self, facts: SourceFacts | None = None) -> BinlogScanner: ...

    def resolve(self, saved: BinlogPosition | None, spec: StartSpec | None = None) -> Resolution: ...

    def schema_lookup(self, full_row_key: tuple[str, ...]) -> Callable[[str, str], Any]: ...
