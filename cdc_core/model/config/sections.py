"""The settings sections of a pipeline: ZooKeeper, Spark (and its warm merge server), the object store,
window caps, the snapshot, per-table Delta options, schema changes, maintenance and metrics."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator, with_config
from typing_extensions import TypedDict

from cdc_core.model.config.checks import (
    CONN_ID_RE,
    ENV_NAME_RE,
    MEMORY_RE,
    ZK_HOST_RE,
    StrictModel,
    check_schedule,
    check_table_pattern,
    stringify_scalars,
)
from cdc_core.model.errors import ConfigError
from cdc_core.model.schema_policy import DEFAULT_GHOST_TABLES, DEFAULT_TRASH_TABLES, SchemaPolicy


class ZooKeeperConfig(StrictModel):
    hosts: str = "127.0.0.1:22181"
    root: str = "/binlog-delta-cdc"
    auth_env: str | None = None  # NAME of an env var holding "user:password"; never the secret itself
    # Or an Airflow connection whose login and password are the digest identity: resolved by Airflow in
    # the DAGs (metadata database, AIRFLOW_CONN_* or a secrets backend), from AIRFLOW_CONN_<ID> by the CLI.
    conn_id: str | None = None

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: str) -> str:
        connect = v.partition("/")[0]  # an optional /chroot suffix is kazoo's business
        hosts = [h.strip() for h in connect.split(",")]
        bad = [h for h in hosts if not ZK_HOST_RE.match(h)]
        if not v.strip() or bad:
            bad_entry = bad[0] if bad else v
            raise ValueError(f"expected host:port[,host:port...], e.g. 127.0.0.1:2181 (bad entry {bad_entry!r})")
        return v

    @field_validator("root")
    @classmethod
    def _root(cls, v: str) -> str:
        if not v.startswith("/") or v.endswith("/") or "//" in v or any(p in (".", "..") for p in v.split("/")):
            raise ValueError("must be an absolute ZooKeeper path without a trailing slash, e.g. /binlog-delta-cdc")
        if any(c <= "\x1f" or "\x7f" <= c <= "\x9f" or "\ud800" <= c <= "\uf8ff" or c >= "\ufff0" for c in v):
            # ZooKeeper's own path rules (PathUtils.validatePath): refused here, not by the server mid-run.
            raise ValueError("contains a character ZooKeeper does not allow in paths (control or private-use)")
        return v

    def digest(self, environ: Mapping[str, str] | None = None, *, pipeline: str = "-") -> tuple[str, str] | None:
        """The digest identity (user, password) from the variable `auth_env` names, or from the connection
        `conn_id` names as the CLI reads connections (AIRFLOW_CONN_<ID> in `environ`); None when no auth is
        configured; a ConfigError naming the variable or connection when it is unset or malformed. Inside
        Airflow the glue resolves `conn_id` through Airflow itself (`digest_from_login`)."""
        if self.conn_id:
            from cdc_core.model.connections import resolve_connection

            info = resolve_connection(self.conn_id, environ)
            return self.digest_from_login(info.user, info.password, pipeline=pipeline)
        if not self.auth_env:
            return None
        raw = (os.environ if environ is None else environ).get(self.auth_env, "")
        user, sep, password = raw.partition(":")
        if not sep or not user or not password:
            raise ConfigError(
                f"pipeline {pipeline!r}: zookeeper.auth_env names {self.auth_env!r}, which must hold 'user:password'; "
                "set that environment variable for every process that runs the pipeline (in Airflow: the "
                "scheduler, the workers and the API server)"
            )
        return user, password

    def digest_from_login(self, user: str | None, password: str | None, *, pipeline: str = "-") -> tuple[str, str]:
        """Pure: the digest identity from the login and password of the connection `conn_id` names."""
        if not user or ":" in user or not password:
            raise ConfigError(
                f"pipeline {pipeline!r}: zookeeper.conn_id names the connection {self.conn_id!r}, whose login and "
                "password must be ZooKeeper's digest user (without ':') and password; set both in that connection"
            )
        return user, password

    @field_validator("conn_id")
    @classmethod
    def _conn_id(cls, v: str | None) -> str | None:
        if v is not None and not CONN_ID_RE.match(v):
            raise ValueError("must be an Airflow connection id (letters, digits, _ . -)")
        return v

    @model_validator(mode="after")
    def _one_credential_source(self) -> ZooKeeperConfig:
        if self.auth_env and self.conn_id:
            raise ValueError("set zookeeper.auth_env or zookeeper.conn_id, not both (one place for the credentials)")
        return self

    @field_validator("auth_env")
    @classmethod
    def _auth_env(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME_RE.match(v):
            raise ValueError(
                "must be the NAME of an environment variable that holds 'user:password' "
                "(e.g. CDC_ZK_AUTH), never the credentials themselves"
            )
        return v


class MergeServerConfig(StrictModel):
    """The warm merge option (cdc_core.lake.merge_client): `cdc run` sends each window's merge job to a
    long-running merge server (`cdc merge-server <pipeline>`) instead of starting spark-submit."""

    address: str  # host:port the server listens on
    # How long a merge request may take before the client gives up (the step then fails, retryable).
    timeout_seconds: float = Field(default=3600, gt=0)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        return check_host_port(v, "127.0.0.1:7199")


def check_host_port(v: str, example: str) -> str:
    host, sep, port = v.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be host:port, e.g. {example}")
    return v.strip()


class NotifyConfig(StrictModel):
    """What the pipeline DAG's lag deadline calls (Airflow's deadline alerts run it in the triggerer): an Airflow
    notifier class or an async function, by its dotted path, with keyword arguments (docs/operations.md)."""

    callable: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("kwargs")
    @classmethod
    def _kwargs(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "context" in v:
            raise ValueError("'context' is Airflow's: the deadline passes the run's context itself")
        return v


class AlertsConfig(StrictModel):
    """When a pipeline counts as behind (`cdc status` and the monitor page show the breach; the pipeline DAG
    carries an Airflow deadline alert: docs/operations.md)."""

    max_lag_seconds: int | None = Field(default=None, gt=0)  # None: no lag alert
    notify: NotifyConfig | None = None  # None: the deadline logs a warning (cdc_airflow.alerts)


class MetricsConfig(StrictModel):
    """Where `cdc` commands send the pipeline's metrics (cdc_core/run/metrics.py, docs/operations.md). Under
    Airflow they go through Airflow's own `Stats` (its `[metrics]` section) instead."""

    statsd: str | None = None  # host:port of a StatsD server; env CDC_STATSD overrides; None: no metrics
    prefix: str = Field(default="cdc", pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")

    @field_validator("statsd")
    @classmethod
    def _statsd(cls, v: str | None) -> str | None:
        return None if v is None else check_host_port(v, "127.0.0.1:8125")


class SparkConfig(StrictModel):
    conn_id: str = "spark_local"  # Airflow connection of type spark (master URL)
    shuffle_partitions: int = Field(default=2, gt=0)
    driver_memory: str = "1g"
    conf: dict[str, str] = Field(default_factory=dict)
    # Tables of one window the merge job lands at the same time (one Spark session per writer thread).
    merge_parallelism: int = Field(default=4, ge=1, le=64)
    # Tables holding at most this many rows once a window lands are merged by delta-rs inside the merge
    # job, in milliseconds instead of ~1 s of Spark each (cdc_core.lake.small_writer); 0: all by Spark.
    small_table_rows: int = Field(default=100_000, ge=0)
    # null: each window's merge is a spark-submit (the default); {address: host:port}: the warm option.
    merge_server: MergeServerConfig | None = None

    @field_validator("conn_id")
    @classmethod
    def _conn_id(cls, v: str) -> str:
        if not CONN_ID_RE.match(v):
            raise ValueError("must be an Airflow connection id (letters, digits, _ . -)")
        return v

    @field_validator("driver_memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        if not MEMORY_RE.match(v):
            raise ValueError("must be a JVM memory size such as 512m or 2g")
        return v

    @field_validator("conf", mode="before")
    @classmethod
    def _conf_strings(cls, v: object) -> object:
        return stringify_scalars(v)

    @field_validator("conf")
    @classmethod
    def _conf_keys(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if not k.startswith("spark.")]
        if bad:
            raise ValueError(f"Spark configuration keys start with 'spark.' (got {bad[0]!r})")
        return v


class ObjectStoreConfig(StrictModel):
    # An Airflow connection of type aws (login = access key id, password = secret, extra = endpoint_url,
    # region_name) for s3:// staging and lake roots; None: the libraries' default chains (env, instance role).
    conn_id: str | None = None
    # auto: the merge job probes the store for conditional writes (If-None-Match) and, where it honours them,
    # lands small tables with delta-rs as on local disk; off: every table of the store merges through Spark.
    conditional_puts: Literal["auto", "off"] = "auto"

    @field_validator("conn_id")
    @classmethod
    def _conn_id(cls, v: str | None) -> str | None:
        if v is not None and not CONN_ID_RE.match(v):
            raise ValueError("must be an Airflow connection id (letters, digits, _ . -)")
        return v


class CapsConfig(StrictModel):
    """Upper bounds for one window (same fields as `window_plan.WindowCaps`)."""

    max_events: int = Field(default=200_000, gt=0)
    max_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    max_transactions: int = Field(default=50_000, gt=0)


class SnapshotConfig(StrictModel):
    """The initial load (docs/snapshot.md): chunked, lock-free reads of existing rows."""

    # Snapshot every captured table when the pipeline first starts. null (the default) = true when the
    # start is `current` (rows written before it are in no binlog the pipeline reads), false for an
    # explicit start position (the binlog from there is the initial load).
    on_start: bool | None = None
    chunk_rows: int = Field(default=100_000, gt=0, le=10_000_000)  # rows per chunk (one snapshot window)
    # A snapshot window that finishes its table takes the whole remainders of the next tables too, while
    # its rows stay within chunk_rows and its tables within this many (small tables load many per window).
    # 300: each table costs ~1 s of Spark on 2 cores, so ~5 min per window, half the default lease; the
    # window's plan and ack (one ZooKeeper request, at most 1 MB) stay under ~0.4 MB at 500 tables even
    # with names of 64 + 64 characters.
    max_tables_per_window: int = Field(default=300, ge=1, le=500)


@with_config(ConfigDict(extra="forbid", strict=True))
class TableOptions(TypedDict, total=False):
    """Per-table Delta options, applied when the merge job creates the table.

    A TypedDict, so a validated value is a plain dict that serialises straight to JSON (the merge job
    receives it as an argument).
    """

    partition_by: list[str]
    change_data_feed: bool
    properties: dict[str, str]
    # Used by the maintenance job's OPTIMIZE (Z-order on these columns, usually the key); not by creation.
    zorder_by: list[str]
    # What the table keeps (cdc_core.model.output_modes, docs/output-modes.md): [state] and any of history,
    # changelog; `track`: the columns whose change opens a history version (default: every column).
    outputs: list[str]
    track: list[str]


TABLE_OPTION_DEFAULTS: dict[str, Any] = {"partition_by": [], "change_data_feed": False, "properties": {}}


class SchemaChangesConfig(StrictModel):
    """How the lake follows the source's DDL (docs/schema-changes.md; cdc_core.model.schema_evolution)."""

    # follow: the lake follows every change exactly; lenient: never drop or rename in the lake (add and widen
    # only; a truncate still empties the table); refuse: stop at any change with an error.
    mode: Literal["follow", "lenient", "refuse"] = "follow"
    # Per table: "schema.table" (globs allowed) -> mode; the first pattern that matches wins.
    tables: dict[str, Literal["follow", "lenient", "refuse"]] = Field(default_factory=dict)
    # Renames and drops as Delta column mapping (metadata only); false: the table is rewritten instead, for
    # readers that do not know column mapping (delta-rs' to_pyarrow_table).
    column_mapping: bool = True
    # Statements to pass over (`binlog-file:offset`, as a refusal names them) after applying them by hand.
    skip: list[str] = Field(default_factory=list)
    # Online schema-change tools' tables: never landed; a ghost's changes apply to the real table at the swap.
    ghost_tables: list[str] = Field(default_factory=lambda: list(DEFAULT_GHOST_TABLES))
    trash_tables: list[str] = Field(default_factory=lambda: list(DEFAULT_TRASH_TABLES))

    @field_validator("tables")
    @classmethod
    def _patterns(cls, v: dict[str, str]) -> dict[str, str]:
        for p in v:
            check_table_pattern(p)
        return v

    @field_validator("skip")
    @classmethod
    def _positions(cls, v: list[str]) -> list[str]:
        for p in v:
            file, sep, offset = p.rpartition(":")
            if not sep or not file or not offset.isdigit():
                raise ValueError(f"{p!r} is not a binlog position file:offset (e.g. mysql-bin.000042:1337)")
        return v

    @field_validator("ghost_tables", "trash_tables")
    @classmethod
    def _templates(cls, v: list[str]) -> list[str]:
        for t in v:
            if t.count("{table}") != 1 or t == "{table}":
                raise ValueError(f"{t!r} must hold {{table}} once, with a prefix or suffix (e.g. _{{table}}_gho)")
        return v

    def policy(self) -> SchemaPolicy:
        return SchemaPolicy(
            mode=self.mode, tables=tuple(self.tables.items()), column_mapping=self.column_mapping,
            skip=tuple(self.skip), ghost_tables=tuple(self.ghost_tables), trash_tables=tuple(self.trash_tables),
        )


class MaintenanceConfig(StrictModel):
    """Housekeeping of a long-running pipeline (docs/housekeeping.md); floors in `cdc_core.model.retention`."""

    schedule: str | None = "@daily"  # the maintenance DAG's schedule (cron, preset, or null: manual only)
    vacuum_retention_hours: int = Field(default=168, gt=0)  # VACUUM RETAIN / delta.deletedFileRetentionDuration
    log_retention_hours: int = Field(default=720, gt=0)  # delta.logRetentionDuration
    txn_retention_hours: int = Field(default=720, gt=0)  # delta.setTransactionRetentionDuration
    window_records_retention_hours: int = Field(default=168, gt=0)  # acked ZooKeeper window records
    window_records_keep: int = Field(default=100, ge=1)  # the newest acked records always stay
    window_records_max: int = Field(default=5000, ge=10)  # hard bound on a pipeline's window records
    cleanup_after_ack: bool = True  # staging + record cleanup at the end of every ack (cheap, batched)
    lease_wait_seconds: int = Field(default=600, ge=0)  # how long maintenance waits for a running run

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str | None) -> str | None:
        return check_schedule(v)

    @model_validator(mode="after")
    def _bounds(self) -> MaintenanceConfig:
        if self.window_records_max < self.window_records_keep:
            raise ValueError(
                f"window_records_max ({self.window_records_max}) must be >= window_records_keep "
                f"({self.window_records_keep})"
            )
        return self


ZK_AUTH_ENV = "CDC_ZK_AUTH"  # what the Spark jobs' fence checks read: scheme:credential
