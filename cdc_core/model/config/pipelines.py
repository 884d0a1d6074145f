"""A pipeline's configuration: `PipelineSettings` (what `defaults:` may set and each pipeline override), its
sources, tables, routes and start (`PipelineConfig`), and the whole file (`CdcConfig`)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from cdc_core.model import retention
from cdc_core.model.config.checks import (
    CONN_ID_RE,
    NAME_RE,
    StrictModel,
    check_schedule,
    check_table_pattern,
    display_path,
    resolve_root,
    stringify_scalars,
    utc_datetime,
)
from cdc_core.model.config.sections import (
    TABLE_OPTION_DEFAULTS,
    AlertsConfig,
    CapsConfig,
    MaintenanceConfig,
    MetricsConfig,
    ObjectStoreConfig,
    SchemaChangesConfig,
    SnapshotConfig,
    SparkConfig,
    TableOptions,
    ZooKeeperConfig,
)
from cdc_core.model.errors import ConfigError
from cdc_core.model.naming import parse_table_pattern, table_id
from cdc_core.model.output_modes import OutputModes
from cdc_core.model.positions import START_FIELDS, START_KEYS, StartKind, binlog_file_index, parse_gtid_set
from cdc_core.model.sources import SOURCE_ID_RE, Route
from cdc_core.model.transforms import TransformConfig
from cdc_core.model.window_plan import WindowCaps


class PipelineSettings(StrictModel):
    """Everything `defaults:` may set and each pipeline may override."""

    zookeeper: ZooKeeperConfig = Field(default_factory=ZooKeeperConfig)
    lease_seconds: int = Field(default=600, gt=0)
    staging_root: str = ".local/staging"
    lake_root: str = ".local/lake"
    object_store: ObjectStoreConfig = Field(default_factory=ObjectStoreConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    caps: CapsConfig = Field(default_factory=CapsConfig)
    schedule: str | None = "*/10 * * * *"  # cron, an Airflow preset (@hourly), or null for manual runs only
    delete_mode: Literal["hard", "soft"] = "hard"
    # Zero and partial dates (0000-00-00, 2024-00-10, TIMESTAMP's zero) have no exact value: "refuse" fails
    # the window naming table, column and value; "null" lands them as NULL knowingly (docs/type-map.md).
    zero_dates: Literal["refuse", "null"] = "refuse"
    # How row images are decoded: "columnar" (vector kernels per column batch) or "library" (the
    # python-mysql-replication library's row-by-row decoding: several times slower, stages byte-identical
    # windows; a way around a columnar decoding defect until it is fixed).
    decoder: Literal["columnar", "library"] = "columnar"
    timestamp_fallback_seconds: int = Field(default=60, ge=0)
    retries: int = Field(default=3, ge=0)
    # After a successful ack with more work waiting (a capped window, a backfill or a snapshot in progress),
    # trigger the pipeline's next run at once instead of waiting for the schedule (see `Pipeline.more_work`).
    continue_while_behind: bool = True
    staging_retention_hours: int = Field(default=72, gt=0)
    table_options: dict[str, TableOptions] = Field(default_factory=dict)  # "schema.table" -> options
    snapshot: SnapshotConfig = Field(default_factory=SnapshotConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    schema_changes: SchemaChangesConfig = Field(default_factory=SchemaChangesConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)

    @field_validator("staging_root", "lake_root")
    @classmethod
    def _roots(cls, v: str, info: ValidationInfo) -> str:
        return resolve_root(v, info)

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str | None) -> str | None:
        return check_schedule(v)

    @field_validator("table_options", mode="before")
    @classmethod
    def _table_option_strings(cls, v: object) -> object:
        if not isinstance(v, Mapping):
            return v  # the type check reports it
        return {
            name: {**opts, "properties": stringify_scalars(opts["properties"])}
            if isinstance(opts, Mapping) and "properties" in opts
            else opts
            for name, opts in v.items()
        }

    @field_validator("table_options")
    @classmethod
    def _table_options(cls, v: dict[str, TableOptions]) -> dict[str, TableOptions]:
        out: dict[str, TableOptions] = {}
        for name, opts in v.items():
            check_table_pattern(name)
            schema, table = parse_table_pattern(name)
            if not (schema.is_literal and table.is_literal):
                raise ValueError(f"{name!r}: table options name one table exactly (no globs)")
            columns = opts.get("partition_by", [])
            if any(not c.strip() for c in columns) or len(set(columns)) != len(columns):
                raise ValueError(f"{name!r}: partition_by must list distinct, non-empty column names")
            OutputModes.parse(name, opts.get("outputs"), opts.get("track"))
            # Keyed by the table's id (`naming.table_id`), the name the merge job looks options up by.
            out[table_id(schema.text, table.text)] = cast(TableOptions, {**TABLE_OPTION_DEFAULTS, **opts})
        return out

    def outputs_of(self, table: str) -> OutputModes:
        """What lake table `table` (its id, `naming.table_id`) keeps besides its state (docs/output-modes.md)."""
        opts = self.table_options.get(table) or {}
        return OutputModes.parse(table, opts.get("outputs"), opts.get("track"))

    @model_validator(mode="after")
    def _housekeeping(self) -> PipelineSettings:
        """Retention floors (cdc_core.model.retention) and the maintenance-only table options."""
        m = self.maintenance
        problems = retention.retention_problems(
            staging_retention_hours=self.staging_retention_hours,
            lease_seconds=self.lease_seconds,
            vacuum_retention_hours=m.vacuum_retention_hours,
            log_retention_hours=m.log_retention_hours,
            txn_retention_hours=m.txn_retention_hours,
        )
        problems += retention.managed_property_overrides(dict(self.table_options))
        for name, opts in self.table_options.items():
            zorder = opts.get("zorder_by") or []
            if any(not c.strip() for c in zorder) or len(set(zorder)) != len(zorder):
                problems.append(f"table_options[{name!r}].zorder_by: must list distinct, non-empty column names")
            both = sorted(set(zorder) & set(opts.get("partition_by") or []))
            if both:
                problems.append(
                    f"table_options[{name!r}].zorder_by: {both} are partition columns; Z-order only helps within "
                    "a partition, so name other columns (usually the key)"
                )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class SourceConfig(StrictModel):
    conn_id: str  # an Airflow connection (mysql type); host, port, login and password live there

    @field_validator("conn_id")
    @classmethod
    def _conn_id(cls, v: str) -> str:
        if not CONN_ID_RE.match(v):
            raise ValueError("must be an Airflow connection id (letters, digits, _ . -)")
        return v


class SourceEntry(SourceConfig):
    """One source of a group pipeline (`sources:`): its id, its connection, optionally its own start."""

    id: str
    start: StartConfig | None = None  # default: the pipeline's `start`
    alerts: AlertsConfig | None = None  # default: the pipeline's `alerts` (this source's lag is its own)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not SOURCE_ID_RE.match(v):
            raise ValueError("must be 1-32 characters of a-z, 0-9, _ and - (it names ZooKeeper nodes and paths)")
        return v


class RouteConfig(StrictModel):
    """Many source tables into one lake table (cdc_core.model.sources.Route)."""

    from_: str = Field(alias="from")  # a regular expression over the whole `schema.table`
    to: str  # the lake table, `schema.table`; `\\1` refers to the pattern's groups
    key: Literal["source", "primary_key"] = "source"

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _compiles(self) -> RouteConfig:
        try:
            groups = re.compile(self.from_).groups
        except re.error as e:
            raise ValueError(f"from {self.from_!r} is not a regular expression: {e}") from None
        refs = [int(n) for n in re.findall(r"\\(\d+)", self.to)]
        if any(n == 0 or n > groups for n in refs):
            raise ValueError(f"to {self.to!r} refers to a group that {self.from_!r} does not have ({groups} groups)")
        plain = re.sub(r"\\\d+", "x", self.to)
        if plain.count(".") != 1 or plain.startswith(".") or plain.endswith("."):
            raise ValueError(f"to {self.to!r} must name one lake table as schema.table")
        return self

    def route(self) -> Route:
        return Route(pattern=self.from_, target=self.to, key=self.key)


class TablesConfig(StrictModel):
    include: list[str] = Field(min_length=1)
    exclude: list[str] = Field(default_factory=list)
    # Tables (patterns) without a primary or unique key that may use all columns as their key.
    full_row_key: list[str] = Field(default_factory=list)
    # Tables (patterns) captured although a foreign key's cascade can change their rows, which the binlog does not
    # record (cdc_core.capture.tables.check_cascades): refused unless listed here.
    cascading_foreign_keys: list[str] = Field(default_factory=list)

    @field_validator("include", "exclude", "full_row_key", "cascading_foreign_keys")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        for p in v:
            check_table_pattern(p)
        return v


class StartConfig(StrictModel):
    """Where a pipeline with no saved cursor starts (a saved cursor always wins)."""

    kind: StartKind = "current"
    gtid: str | None = None
    file: str | None = None
    offset: int | None = Field(default=None, ge=4)
    at: datetime | None = None  # aware, UTC

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, v: object) -> object:
        return None if v is None else utc_datetime(v)

    @field_validator("gtid")
    @classmethod
    def _gtid(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                if not parse_gtid_set(v):
                    raise ValueError("must not be empty (e.g. 0-1-42 for MariaDB, uuid:1-42 for MySQL)")
            except ConfigError as e:
                raise ValueError(str(e)) from None
        return v

    @field_validator("file")
    @classmethod
    def _file(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                binlog_file_index(v)
            except ConfigError as e:
                raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _fields_for_kind(self) -> StartConfig:
        allowed, required = START_FIELDS[self.kind]
        given = [f for f in START_KEYS if getattr(self, f) is not None]
        extra = [f for f in given if f not in allowed]
        if extra:
            takes = ", ".join(allowed) if allowed else "nothing else"
            raise ValueError(f"kind {self.kind!r} takes {takes}; remove {', '.join(extra)}")
        missing = [f for f in required if getattr(self, f) is None]
        if missing:
            example = {
                "gtid": 'gtid: "0-1-42"',
                "file": "file: mysql-bin.000042",
                "at": "at: 2026-11-20T08:00:00Z",
            }
            raise ValueError(
                f"kind {self.kind!r} needs {', '.join(missing)} (e.g. {'; '.join(example[m] for m in missing)})"
            )
        return self

    def spec_kwargs(self) -> dict[str, Any]:
        """The resolver's StartSpec arguments: kind plus the fields this kind uses (`at` as unix seconds)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.gtid is not None:
            out["gtid"] = self.gtid
        if self.file is not None:
            out["file"] = self.file
            if self.kind == "file":
                out["offset"] = self.offset if self.offset is not None else 4
        if self.at is not None:
            out["at"] = self.at.timestamp()
        return out


class PipelineConfig(PipelineSettings):
    """One pipeline, defaults merged in."""

    name: str
    source: SourceConfig | None = None  # one source (today's form) ...
    sources: list[SourceEntry] = Field(default_factory=list)  # ... or several: a group pipeline
    tables: TablesConfig
    start: StartConfig = Field(default_factory=StartConfig)
    routes: list[RouteConfig] = Field(default_factory=list)
    # What lands of each table: columns, hashing, masking, a row filter (cdc_core/model/transforms.py).
    transform: TransformConfig = Field(default_factory=TransformConfig)

    @model_validator(mode="after")
    def _one_source_form(self) -> PipelineConfig:
        if (self.source is None) == (not self.sources):
            raise ValueError(
                "declare either `source: {conn_id: ...}` (one server) or `sources: [{id: ..., conn_id: ...}, ...]` "
                "(a group pipeline over several servers), not both and not neither"
            )
        ids = [s.id for s in self.sources]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"sources: ids must be distinct, {dup} appear more than once")
        for conn_id in dict.fromkeys(s.conn_id for s in self.sources):
            same = [s.id for s in self.sources if s.conn_id == conn_id]
            if len(same) > 1:
                raise ValueError(
                    f"sources: {same} use the same connection {conn_id!r}: one server read twice lands every row "
                    "twice (with key: primary_key, two live rows per id and a silent tie-break). Give each source "
                    "its own server"
                )
        return self

    @property
    def is_group(self) -> bool:
        return bool(self.sources)

    def source_ids(self) -> list[str | None]:
        """The pipeline's sources: [None] for the one-source form, else every source's id."""
        return [s.id for s in self.sources] if self.sources else [None]

    def source_config(self, source: str | None) -> SourceConfig:
        if source is None:
            if self.source is None:
                raise ConfigError(
                    f"pipeline {self.name!r} is a group pipeline: name one of its sources {self.source_ids()}"
                )
            return self.source
        for s in self.sources:
            if s.id == source:
                return s
        raise ConfigError(
            f"pipeline {self.name!r} has no source {source!r}; its sources: "
            + (", ".join(str(i) for i in self.source_ids()) if self.sources else "(one, unnamed: omit --source)")
        )

    def for_source(self, source: str | None) -> PipelineConfig:
        """This pipeline as seen by one of its sources: that source's connection, start and alerts."""
        if source is None:
            self.source_config(None)
            return self
        entry = self.source_config(source)
        assert isinstance(entry, SourceEntry)
        return self.model_copy(update={"start": entry.start or self.start, "alerts": entry.alerts or self.alerts})

    def deadline_seconds(self) -> int | None:
        """How long a run of the pipeline DAG may take to catch up: the pipeline's `alerts.max_lag_seconds`, else
        the smallest of its sources' (a group pipeline's one DAG runs every source)."""
        found = [self.alerts.max_lag_seconds, *(s.alerts.max_lag_seconds for s in self.sources if s.alerts)]
        pipeline, *sources = found
        return pipeline if pipeline is not None else min((x for x in sources if x is not None), default=None)

    def route_list(self) -> tuple[Route, ...]:
        return tuple(r.route() for r in self.routes)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must be 1-64 characters of a-z, 0-9, _ and - (it names ZooKeeper nodes, paths and DAGs)")
        return v

    def start_spec(self) -> Any:
        """The configured start as the resolver's `StartSpec`."""
        # Lazy: the resolver depends on the source layer, which plain config users need not load.
        from cdc_core.model.positions import StartSpec

        return StartSpec(**self.start.spec_kwargs())

    def window_caps(self) -> WindowCaps:
        return WindowCaps(**self.caps.model_dump())

    def snapshot_on_start(self) -> bool:
        """Whether a new pipeline snapshots its tables before streaming (see SnapshotConfig.on_start)."""
        if self.snapshot.on_start is not None:
            return self.snapshot.on_start
        return self.start.kind == "current"


class CdcConfig(BaseModel):
    """The whole file: where it came from, its defaults, and its pipelines (defaults merged)."""

    model_config = ConfigDict(frozen=True)

    path: Path
    defaults: PipelineSettings
    pipelines: tuple[PipelineConfig, ...]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.pipelines]

    def pipeline(self, name: str) -> PipelineConfig:
        for p in self.pipelines:
            if p.name == name:
                return p
        hint = difflib.get_close_matches(name, self.names, n=1)
        raise ConfigError(
            f"{display_path(self.path)}: no pipeline named {name!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; the file declares: {', '.join(self.names)}"
        )
