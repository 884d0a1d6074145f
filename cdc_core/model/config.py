"""The configuration model: one YAML file that declares any number of pipelines.

The file has two keys. `defaults` holds every setting a pipeline may override (ZooKeeper, lease,
storage roots, Spark, window caps, schedule, catching up, delete mode, ...); `pipelines` lists the pipelines, each
with its name, its source (an Airflow connection id: secrets never live in this file), its table
filter and its configured start. `load_config()` reads the file named by `$CDC_CONFIG` (default
`<repo>/config/pipelines.yaml`), merges the defaults into each pipeline (mappings key by key; lists
and scalars replace) and validates everything with pydantic. Every problem becomes a `ConfigError`
line that names the file, the pipeline, the key path and what is wrong:

    config/pipelines.yaml: pipeline 'orders': caps.max_events: must be > 0 (got -1)

Relative storage roots are relative to the configuration file's directory; fsspec URLs
(`s3://bucket/lake`) are kept as written.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, cast, get_args, get_origin

import fsspec
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict, is_typeddict

from cdc_core.model import retention
from cdc_core.model.errors import ConfigError
from cdc_core.model.layout import PROJECT_ROOT
from cdc_core.model.naming import parse_table_pattern, table_id
from cdc_core.model.positions import START_FIELDS, START_KEYS, StartKind, binlog_file_index, parse_gtid_set
from cdc_core.model.schema_policy import DEFAULT_GHOST_TABLES, DEFAULT_TRASH_TABLES, SchemaPolicy
from cdc_core.model.sources import SOURCE_ID_RE, Route
from cdc_core.model.window_plan import WindowCaps

DEFAULT_CONFIG = PROJECT_ROOT / "config" / "pipelines.yaml"
LOCAL_CONFIG = PROJECT_ROOT / "config" / "pipelines.local.yaml"
CONFIG_ENV = "CDC_CONFIG"


# `\Z`, not `$`: `$` also matches before a trailing newline ("orders\n" would pass as a name).
_NAME_RE = re.compile(r"^[a-z0-9_-]{1,64}\Z")
_CONN_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,249}\Z")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_MEMORY_RE = re.compile(r"^[0-9]+[kKmMgGtT]?[bB]?\Z")
_CRON_FIELD_RE = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+\Z")
_CRON_PRESETS = (
    "@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly", "@annually",
)
_ZK_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}\Z")
# Keys that look like they hold a secret. Secrets live in Airflow connections or environment variables.
_SECRET_KEY_RE = re.compile(r"pass(word|wd)|secret|private[_.-]?key|credential", re.IGNORECASE)
# Timestamps a binlog can hold: 1970 .. 9999 (datetime's range; beyond it nothing can be formatted).
_MIN_SECONDS, _MAX_SECONDS = 0.0, 253402300799.0
_URL_CREDENTIALS_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^/@]*:[^/@]*@")


# ------------------------------------------------------------------------------------------ helpers


def parse_utc_timestamp(value: object, what: str = "timestamp") -> float:
    """A point in time as unix seconds, from ISO-8601 with a timezone, an aware datetime, or a number.

    Naive values are refused: a binlog is replayed from an exact instant, and guessing the server's or
    the operator's local zone would silently shift a backfill by hours.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected an ISO-8601 UTC timestamp such as 2026-11-20T08:00:00Z (got {value!r})")
    if isinstance(value, int | float):
        seconds = float(value)
        if not math.isfinite(seconds) or not _MIN_SECONDS <= seconds <= _MAX_SECONDS:
            raise ConfigError(
                f"{what}: {value!r} is not a usable point in time; write e.g. 2026-11-20T08:00:00Z (or unix seconds)"
            )
        return seconds
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ConfigError(
                f"{what}: {value.isoformat()!r} has no timezone; write it in UTC with a Z suffix, "
                f"e.g. {value.replace(microsecond=0).isoformat()}Z"
            )
        try:
            return value.timestamp()
        except (OverflowError, ValueError):
            raise ConfigError(
                f"{what}: {value.isoformat()!r} is out of range; write e.g. 2026-11-20T08:00:00Z"
            ) from None
    if isinstance(value, date):
        raise ConfigError(
            f"{what}: {value.isoformat()!r} is a date without a time and timezone; "
            f"write e.g. {value.isoformat()}T00:00:00Z"
        )
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
            return parse_utc_timestamp(float(text), what)  # unix seconds
        try:
            parsed = datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            raise ConfigError(
                f"{what}: {_shown(value)} is not an ISO-8601 timestamp; write e.g. 2026-11-20T08:00:00Z"
            ) from None
        return parse_utc_timestamp(parsed, what)
    raise ConfigError(
        f"{what}: expected an ISO-8601 UTC timestamp such as 2026-11-20T08:00:00Z (got {_shown(value)})"
    )


def _shown(value: object, limit: int = 80) -> str:
    """repr() for an error message, cut short: a form or flag may hold anything, megabytes included."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _utc_datetime(value: object) -> datetime:
    """Validator helper: any accepted timestamp form -> aware UTC datetime (ValueError for pydantic)."""
    try:
        seconds = parse_utc_timestamp(value, "value")
    except ConfigError as e:
        raise ValueError(str(e).removeprefix("value: ")) from None
    return datetime.fromtimestamp(seconds, tz=UTC)


def _check_table_pattern(pattern: object) -> str:
    if not isinstance(pattern, str):
        raise ValueError(f"{pattern!r} is not of the form schema.table (e.g. demo.orders or demo.*)")
    parse_table_pattern(pattern)  # ValueError saying how to write it
    return pattern


def _stringify_scalars(value: object) -> object:
    """Spark confs and Delta properties are strings; YAML hands us bools and numbers."""
    if not isinstance(value, Mapping):
        return value
    out: dict[object, object] = {}
    for k, v in value.items():
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, int | float):
            out[k] = str(v)
        else:
            out[k] = v
    return out


def _resolve_root(value: str, info: ValidationInfo) -> str:
    """Relative local paths -> absolute, relative to the config file; URLs stay as written."""
    if not value.strip():
        raise ValueError("must not be empty")
    if "://" in value:
        if _URL_CREDENTIALS_RE.match(value):
            raise ValueError(
                "the URL embeds credentials; configure them for the storage library instead "
                "(e.g. AWS_* environment variables or an instance role), never in this file"
            )
        protocol = value.split("://", 1)[0].lower()
        if protocol not in fsspec.available_protocols():
            raise ValueError(f"{protocol!r} is not a storage protocol fsspec knows (e.g. file, s3, gs, abfs)")
        return value
    base = Path((info.context or {}).get("base_dir") or Path.cwd())
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base / path
    return str(Path(os.path.normpath(path)))


def _check_schedule(v: str | None) -> str | None:
    """A cron expression, an Airflow preset, or None (manual runs only)."""
    if v is None:
        return v
    text = v.strip()
    if text.startswith("@"):
        if text not in _CRON_PRESETS:
            raise ValueError(f"unknown preset; use a cron expression or one of {', '.join(_CRON_PRESETS)}")
        return text
    fields = text.split()
    if len(fields) != 5 or not all(_CRON_FIELD_RE.match(f) for f in fields):
        raise ValueError("must be a 5-field cron expression (e.g. '*/10 * * * *'), an Airflow preset, or null")
    return text


# ------------------------------------------------------------------------------------------- models


class _Model(BaseModel):
    # strict: "5" is not 5 and 1 is not true in a config file; extra: a typo is an error, not a no-op.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ZooKeeperConfig(_Model):
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
        bad = [h for h in hosts if not _ZK_HOST_RE.match(h)]
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
        if v is not None and not _CONN_ID_RE.match(v):
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
        if v is not None and not _ENV_NAME_RE.match(v):
            raise ValueError(
                "must be the NAME of an environment variable that holds 'user:password' "
                "(e.g. CDC_ZK_AUTH), never the credentials themselves"
            )
        return v


class MergeServerConfig(_Model):
    """The warm merge option (cdc_core.lake.merge_client): `cdc run` sends each window's merge job to a
    long-running merge server (`cdc merge-server <pipeline>`) instead of starting spark-submit."""

    address: str  # host:port the server listens on
    # How long a merge request may take before the client gives up (the step then fails, retryable).
    timeout_seconds: float = Field(default=3600, gt=0)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        host, sep, port = v.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be host:port, e.g. 127.0.0.1:7199")
        return v.strip()


class SparkConfig(_Model):
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
        if not _CONN_ID_RE.match(v):
            raise ValueError("must be an Airflow connection id (letters, digits, _ . -)")
        return v

    @field_validator("driver_memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        if not _MEMORY_RE.match(v):
            raise ValueError("must be a JVM memory size such as 512m or 2g")
        return v

    @field_validator("conf", mode="before")
    @classmethod
    def _conf_strings(cls, v: object) -> object:
        return _stringify_scalars(v)

    @field_validator("conf")
    @classmethod
    def _conf_keys(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if not k.startswith("spark.")]
        if bad:
            raise ValueError(f"Spark configuration keys start with 'spark.' (got {bad[0]!r})")
        return v


class ObjectStoreConfig(_Model):
    # An Airflow connection of type aws (login = access key id, password = secret, extra = endpoint_url,
    # region_name) for s3:// staging and lake roots; None: the libraries' default chains (env, instance role).
    conn_id: str | None = None

    @field_validator("conn_id")
    @classmethod
    def _conn_id(cls, v: str | None) -> str | None:
        if v is not None and not _CONN_ID_RE.match(v):
            raise ValueError("must be an Airflow connection id (letters, digits, _ . -)")
        return v


class CapsConfig(_Model):
    """Upper bounds for one window (same fields as `window_plan.WindowCaps`)."""

    max_events: int = Field(default=200_000, gt=0)
    max_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    max_transactions: int = Field(default=50_000, gt=0)


class SnapshotConfig(_Model):
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


TABLE_OPTION_DEFAULTS: dict[str, Any] = {"partition_by": [], "change_data_feed": False, "properties": {}}


class SchemaChangesConfig(_Model):
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
            _check_table_pattern(p)
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


class MaintenanceConfig(_Model):
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
        return _check_schedule(v)

    @model_validator(mode="after")
    def _bounds(self) -> MaintenanceConfig:
        if self.window_records_max < self.window_records_keep:
            raise ValueError(
                f"window_records_max ({self.window_records_max}) must be >= window_records_keep "
                f"({self.window_records_keep})"
            )
        return self


class PipelineSettings(_Model):
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

    @field_validator("staging_root", "lake_root")
    @classmethod
    def _roots(cls, v: str, info: ValidationInfo) -> str:
        return _resolve_root(v, info)

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str | None) -> str | None:
        return _check_schedule(v)

    @field_validator("table_options", mode="before")
    @classmethod
    def _table_option_strings(cls, v: object) -> object:
        if not isinstance(v, Mapping):
            return v  # the type check reports it
        return {
            name: {**opts, "properties": _stringify_scalars(opts["properties"])}
            if isinstance(opts, Mapping) and "properties" in opts
            else opts
            for name, opts in v.items()
        }

    @field_validator("table_options")
    @classmethod
    def _table_options(cls, v: dict[str, TableOptions]) -> dict[str, TableOptions]:
        out: dict[str, TableOptions] = {}
        for name, opts in v.items():
            _check_table_pattern(name)
            schema, table = parse_table_pattern(name)
            if not (schema.is_literal and table.is_literal):
                raise ValueError(f"{name!r}: table options name one table exactly (no globs)")
            columns = opts.get("partition_by", [])
            if any(not c.strip() for c in columns) or len(set(columns)) != len(columns):
                raise ValueError(f"{name!r}: partition_by must list distinct, non-empty column names")
            # Keyed by the table's id (`naming.table_id`), the name the merge job looks options up by.
            out[table_id(schema.text, table.text)] = cast(TableOptions, {**TABLE_OPTION_DEFAULTS, **opts})
        return out

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


class SourceConfig(_Model):
    conn_id: str  # an Airflow connection (mysql type); host, port, login and password live there

    @field_validator("conn_id")
    @classmethod
    def _conn_id(cls, v: str) -> str:
        if not _CONN_ID_RE.match(v):
            raise ValueError("must be an Airflow connection id (letters, digits, _ . -)")
        return v


class SourceEntry(SourceConfig):
    """One source of a group pipeline (`sources:`): its id, its connection, optionally its own start."""

    id: str
    start: StartConfig | None = None  # default: the pipeline's `start`

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not SOURCE_ID_RE.match(v):
            raise ValueError("must be 1-32 characters of a-z, 0-9, _ and - (it names ZooKeeper nodes and paths)")
        return v


class RouteConfig(_Model):
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


class TablesConfig(_Model):
    include: list[str] = Field(min_length=1)
    exclude: list[str] = Field(default_factory=list)
    # Tables (patterns) without a primary or unique key that may use all columns as their key.
    full_row_key: list[str] = Field(default_factory=list)

    @field_validator("include", "exclude", "full_row_key")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        for p in v:
            _check_table_pattern(p)
        return v


class StartConfig(_Model):
    """Where a pipeline with no saved cursor starts (a saved cursor always wins)."""

    kind: StartKind = "current"
    gtid: str | None = None
    file: str | None = None
    offset: int | None = Field(default=None, ge=4)
    at: datetime | None = None  # aware, UTC

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, v: object) -> object:
        return None if v is None else _utc_datetime(v)

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
        """This pipeline as seen by one of its sources: that source's connection and start."""
        if source is None:
            self.source_config(None)
            return self
        entry = self.source_config(source)
        assert isinstance(entry, SourceEntry)
        return self.model_copy(update={"start": entry.start or self.start})

    def route_list(self) -> tuple[Route, ...]:
        return tuple(r.route() for r in self.routes)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
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
            f"{_display(self.path)}: no pipeline named {name!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; the file declares: {', '.join(self.names)}"
        )


# ------------------------------------------------------------------------------------------ loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; in a config file that hides a mistake, so refuse it."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
            )
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _display(path: Path) -> str:
    """The file as the operator would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def config_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The file to read: the argument, else $CDC_CONFIG, else <repo>/config/pipelines.yaml."""
    if path is not None and str(path) != "":
        return Path(path).expanduser()
    env = os.environ.get(CONFIG_ENV)
    return Path(env).expanduser() if env else DEFAULT_CONFIG


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(
            f"{_display(path)}: configuration file not found. Point {CONFIG_ENV} at a pipelines file "
            f"(e.g. {CONFIG_ENV}={_display(LOCAL_CONFIG)} for the local services) or create {_display(DEFAULT_CONFIG)}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{_display(path)}: cannot read the configuration file: {e}") from e
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" line {mark.line + 1} column {mark.column + 1}:"
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{_display(path)}:{where} invalid YAML: {problem}") from None


def _fmt_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not re.fullmatch(r"[A-Za-z0-9_\-]+", part):  # dots, spaces, newlines, ...: one line, unambiguous
            out += f"[{part!r}]"
        else:
            out += ("." if out else "") + part
    return out


def _allowed_keys(loc: tuple[int | str, ...], model: type[BaseModel]) -> list[str] | None:
    """The keys the model at `loc` accepts (for 'unknown key' messages), or None when unknown."""
    current: Any = model
    for part in loc:
        if get_origin(current) in (Union, UnionType):  # `X | None`: the model side
            models = [a for a in get_args(current) if a is not type(None)]
            current = models[0] if len(models) == 1 else current
        if get_origin(current) is list and isinstance(part, int):
            current = get_args(current)[0]
            continue
        if get_origin(current) is dict:
            current = get_args(current)[1]  # `part` is a free-form key (e.g. a table name)
        elif isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif is_typeddict(current) and isinstance(part, str):
            current = current.__annotations__.get(part)
        else:
            return None
    if get_origin(current) in (Union, UnionType):
        models = [a for a in get_args(current) if a is not type(None)]
        current = models[0] if len(models) == 1 else current
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    if is_typeddict(current):
        return list(current.__annotations__)
    return None


def _describe_error(err: Mapping[str, Any], model: type[BaseModel] | None = None) -> str:
    """One pydantic error as 'what is wrong (got x)'."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    got = True
    if kind == "missing":
        msg, got = "required key is missing", False
    elif kind == "extra_forbidden":
        got = False
        key = str(err["loc"][-1]) if err["loc"] else ""
        allowed = _allowed_keys(tuple(err["loc"][:-1]), model) if model else None
        msg = "unknown key"
        if allowed:
            hint = difflib.get_close_matches(key, allowed, n=1)
            msg += (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; allowed here: {', '.join(allowed)}"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        bound = next(iter(ctx.values()), "?")
        msg = f"must be {op} {bound}"
    elif kind in ("int_type", "int_parsing", "int_from_float"):
        msg = "must be an integer"
    elif kind in ("string_type", "string_sub_type"):
        msg = "must be a string"
    elif kind == "bool_type":
        msg = "must be true or false"
    elif kind == "literal_error":
        msg = f"must be one of {ctx.get('expected', '?')}"
    elif kind in ("list_type", "tuple_type"):
        msg = "must be a list"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        msg, got = "must be a mapping (key: value)", not isinstance(value, Mapping)
    elif kind == "too_short" and ctx.get("min_length") == 1:
        msg = "must not be empty"
    elif kind == "value_error":
        msg = str(ctx.get("error") or err["msg"]).removeprefix("Value error, ")
        got = not isinstance(value, Mapping | list) and repr(value) not in msg
    else:
        msg = err["msg"]
    if _may_be_secret(err):
        got = False  # an error message ends up in logs and task output: never echo a credential
    if got and (value is None or isinstance(value, str | int | float | bool | datetime | date)):
        msg += f" (got {value!r})" if not isinstance(value, datetime | date) else f" (got {value.isoformat()})"
    return msg


def _may_be_secret(err: Mapping[str, Any]) -> bool:
    """A value that may be a credential: whatever sits in auth_env, or a URL with user:password@."""
    loc = err.get("loc") or ()
    value = err.get("input")
    return bool(loc and loc[-1] == "auth_env") or (isinstance(value, str) and bool(_URL_CREDENTIALS_RE.match(value)))


def _error_lines(e: ValidationError, model: type[BaseModel]) -> list[str]:
    lines = []
    for err in e.errors():
        loc = _fmt_loc(tuple(err["loc"]))
        lines.append(f"{loc}: {_describe_error(err, model)}" if loc else _describe_error(err, model))
    return lines


def _find_secrets(node: Any, loc: tuple[int | str, ...] = ()) -> list[tuple[int | str, ...]]:
    found: list[tuple[int | str, ...]] = []
    if isinstance(node, Mapping):
        for k, v in node.items():
            here = (*loc, str(k))
            if isinstance(k, str) and k not in ("auth_env",) and _SECRET_KEY_RE.search(k):
                found.append(here)
            found.extend(_find_secrets(v, here))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found.extend(_find_secrets(v, (*loc, i)))
    return found


_WHERE_CREDENTIALS_GO = (
    "secrets do not belong in the configuration file; put the source's credentials in the Airflow "
    "connection named by source.conn_id (env AIRFLOW_CONN_<ID> or the Airflow UI), and ZooKeeper's in the "
    "environment variable named by zookeeper.auth_env"
)


def _without(node: Any, locs: list[tuple[int | str, ...]]) -> Any:
    """A copy of `node` without the keys at `locs` (so the rest can still be validated)."""
    if isinstance(node, Mapping):
        return {
            k: _without(v, [loc[1:] for loc in locs if loc[0] == str(k) and len(loc) > 1])
            for k, v in node.items()
            if (str(k),) not in locs
        }
    if isinstance(node, list):
        return [_without(v, [loc[1:] for loc in locs if loc[0] == i and len(loc) > 1]) for i, v in enumerate(node)]
    return node


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else in `override` replaces."""
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def load_config(path: str | os.PathLike[str] | None = None) -> CdcConfig:
    """Read, merge and validate the pipelines file; raise one ConfigError listing every problem."""
    p = config_path(path)
    shown = _display(p)
    raw = _read_yaml(p)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{shown}: the top level must be a mapping with 'defaults' and 'pipelines'")
    problems: list[str] = []
    for key in raw:
        if key not in ("defaults", "pipelines"):
            hint = difflib.get_close_matches(str(key), ["defaults", "pipelines"], n=1)
            problems.append(
                f"{shown}: {key}: unknown top-level key"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + "; the file has 'defaults' and 'pipelines'"
            )

    defaults_raw = raw.get("defaults") or {}
    pipelines_raw = raw.get("pipelines")
    if not isinstance(defaults_raw, Mapping):
        problems.append(f"{shown}: defaults: must be a mapping (key: value)")
        defaults_raw = {}
    secrets = _find_secrets(defaults_raw)
    for loc in secrets:
        problems.append(f"{shown}: defaults: {_fmt_loc(loc)}: {_WHERE_CREDENTIALS_GO}")
    defaults_raw = _without(defaults_raw, secrets)

    context = {"base_dir": p.resolve().parent}
    defaults: PipelineSettings | None = None
    try:
        defaults = PipelineSettings.model_validate(defaults_raw, context=context)
    except ValidationError as e:
        problems.extend(f"{shown}: defaults: {line}" for line in _error_lines(e, PipelineSettings))

    if not isinstance(pipelines_raw, list) or not pipelines_raw:
        problems.append(
            f"{shown}: pipelines: must be a non-empty list of pipelines "
            "(each with name, source.conn_id and tables.include)"
        )
        pipelines_raw = []

    pipelines: list[PipelineConfig] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(pipelines_raw):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        label = f"pipeline {name!r}" if isinstance(name, str) else f"pipelines[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{shown}: {label}: must be a mapping with name, source, tables (and optional overrides)")
            continue
        if isinstance(name, str):
            if name in seen:
                problems.append(
                    f"{shown}: {label}: duplicate pipeline name (also pipelines[{seen[name]}]); names must be unique"
                )
                continue
            seen[name] = i
        secrets = _find_secrets(entry)
        for loc in secrets:
            problems.append(f"{shown}: {label}: {_fmt_loc(loc)}: {_WHERE_CREDENTIALS_GO}")
        if defaults is None:
            continue  # defaults errors were reported once above, not again per pipeline
        try:
            merged = _deep_merge(defaults_raw, _without(entry, secrets))
            pipelines.append(PipelineConfig.model_validate(merged, context=context))
        except ValidationError as e:
            problems.extend(f"{shown}: {label}: {line}" for line in _error_lines(e, PipelineConfig))

    if problems:
        raise ConfigError("\n".join(problems))
    assert defaults is not None
    return CdcConfig(path=p.resolve(), defaults=defaults, pipelines=tuple(pipelines))


ZK_AUTH_ENV = "CDC_ZK_AUTH"  # what the Spark jobs' fence checks read: scheme:credential
