"""What a pipeline's Spark jobs are asked to do: one JSON argument each (`--spec '{...}'`), built from the
pipeline's configuration by `cdc_core.run` and read back by the job, instead of a dozen flags that the
submitter and the job each had to spell. No secrets: credentials travel in the job's environment
(`spark_conf.spark_env`). `SparkJob` (spark_conf) carries the spec's `args()` to spark-submit alike from the
CLI and the Airflow operators.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cdc_core.model.errors import ConfigError
from cdc_core.model.merge_semantics import DELETE_HARD

SPEC_FORMAT = 1
SPEC_FLAG = "--spec"

T = TypeVar("T", bound="_Spec")


@dataclass(frozen=True)
class _Spec:
    def to_json(self) -> str:
        return json.dumps({"format": SPEC_FORMAT, **dataclasses.asdict(self)}, sort_keys=True)

    def args(self) -> list[str]:
        """The job's application arguments."""
        return [SPEC_FLAG, self.to_json()]

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        """The spec the job was given, checked field by field: a clear ConfigError names what is wrong."""
        what = f"{cls.__name__} ({SPEC_FLAG})"
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{what} is not valid JSON ({e})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{what} must be a JSON object")
        if raw.pop("format", None) != SPEC_FORMAT:
            raise ConfigError(f"{what} has no format {SPEC_FORMAT}: submit with the same release as the job")
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            raise ConfigError(f"{what}: unknown field(s) {', '.join(unknown)}")
        missing = [n for n, f in fields.items() if n not in raw and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"{what}: missing field(s) {', '.join(missing)}")
        for name, value in raw.items():
            if not _is(value, hints[name]):
                want = getattr(hints[name], "__name__", str(hints[name]))
                raise ConfigError(f"{what}: {name} must be {want}, got {value!r:.80}")
        return cls(**raw)


def _is(value: Any, hint: Any) -> bool:
    """A JSON value against a simple annotation (str, int, bool, None, dict[...], list[...], unions)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is(value, h) for h in typing.get_args(hint))
    if hint is int:  # a JSON true is not a number here
        return isinstance(value, int) and not isinstance(value, bool)
    json_types: dict[Any, type] = {type(None): type(None), str: str, bool: bool, dict: dict, list: list}
    json_type = json_types.get(origin or hint)
    return json_type is not None and isinstance(value, json_type)


@dataclass(frozen=True)
class MergeJobSpec(_Spec):
    """spark_apps/merge_window.py: MERGE one staged window into its Delta tables."""

    window_dir: str  # the staged window (holds manifest.json)
    lake_root: str
    pipeline: str  # the configured pipeline: its lease fences the job
    seq: int
    token: int  # the fencing token (lease czxid)
    report: str  # where the job writes its JSON report (path or fsspec URL)
    delete_mode: str = DELETE_HARD
    zk_hosts: str | None = None  # with zk_root: the fence the job checks before each commit
    zk_root: str | None = None
    table_options: dict[str, Any] = field(default_factory=dict)  # {"schema.table": {"partition_by": [...]}}
    table_properties: dict[str, str] = field(default_factory=dict)  # set on every table the job creates
    parallelism: int = 4  # tables merged at the same time, one Spark session each
    source: str | None = None  # a group pipeline's source: the window is that source's (cdc_core.model.sources)
    routes: list[dict[str, str]] = field(default_factory=list)  # [{"from", "to", "key"}]: many tables into one
    group_sources: list[str] = field(default_factory=list)  # every source of a group pipeline (the writer record)
    small_table_rows: int = 100_000  # tables up to this many rows merge with delta-rs, no Spark job (0: none)
    # An object-store lake: "auto" probes for conditional writes, which delta-rs's commits need; "off": Spark.
    conditional_puts: str = "auto"
    # How lake tables follow schema changes (cdc_core.model.schema_evolution.SchemaPolicy.to_dict) and the
    # pipeline's zero_dates (a column added NOT NULL to a date type gives old rows the zero date).
    schema_changes: dict[str, Any] = field(default_factory=dict)
    zero_dates: str = "refuse"


@dataclass(frozen=True)
class MaintenanceJobSpec(_Spec):
    """spark_apps/maintain_tables.py: OPTIMIZE, VACUUM and log retention of a pipeline's Delta tables."""

    pipeline: str
    token: int
    tables: list[dict[str, Any]]  # [{"name", "uri", "kind", "zorder_by"}]
    report: str
    vacuum_retention_hours: int
    log_retention_hours: int
    txn_retention_hours: int
    min_retention_hours: int  # the replay horizon: no retention may go below it
    optimize: bool = True
    vacuum: bool = True
    zk_hosts: str | None = None
    zk_root: str | None = None
    parallelism: int = 4  # tables maintained at the same time, one Spark session each (spark.merge_parallelism)
