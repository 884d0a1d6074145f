"""The checks behind the configuration models, and their strict base model.

Each check is a plain function a pydantic validator calls (a `ValueError` becomes one line of the
`ConfigError`): timestamps (`parse_utc_timestamp`, also the CLI's `--from`), table patterns, storage roots,
schedules, and the patterns of names, connection ids and hosts."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from pathlib import Path

import fsspec
from pydantic import BaseModel, ConfigDict, ValidationInfo

from cdc_core.model.errors import ConfigError
from cdc_core.model.naming import parse_table_pattern

# `\Z`, not `$`: `$` also matches before a trailing newline ("orders\n" would pass as a name).
NAME_RE = re.compile(r"^[a-z0-9_-]{1,64}\Z")
CONN_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,249}\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
MEMORY_RE = re.compile(r"^[0-9]+[kKmMgGtT]?[bB]?\Z")
_CRON_FIELD_RE = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+\Z")
_CRON_PRESETS = (
    "@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly", "@annually",
)
ZK_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}\Z")
# Timestamps a binlog can hold: 1970 .. 9999 (datetime's range; beyond it nothing can be formatted).
_MIN_SECONDS, _MAX_SECONDS = 0.0, 253402300799.0
URL_CREDENTIALS_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^/@]*:[^/@]*@")


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


def utc_datetime(value: object) -> datetime:
    """Validator helper: any accepted timestamp form -> aware UTC datetime (ValueError for pydantic)."""
    try:
        seconds = parse_utc_timestamp(value, "value")
    except ConfigError as e:
        raise ValueError(str(e).removeprefix("value: ")) from None
    return datetime.fromtimestamp(seconds, tz=UTC)


def check_table_pattern(pattern: object) -> str:
    if not isinstance(pattern, str):
        raise ValueError(f"{pattern!r} is not of the form schema.table (e.g. demo.orders or demo.*)")
    parse_table_pattern(pattern)  # ValueError saying how to write it
    return pattern


def stringify_scalars(value: object) -> object:
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


def resolve_root(value: str, info: ValidationInfo) -> str:
    """Relative local paths -> absolute, relative to the config file; URLs stay as written."""
    if not value.strip():
        raise ValueError("must not be empty")
    if "://" in value:
        if URL_CREDENTIALS_RE.match(value):
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


def check_schedule(v: str | None) -> str | None:
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


class StrictModel(BaseModel):
    # strict: "5" is not 5 and 1 is not true in a config file; extra: a typo is an error, not a no-op.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def display_path(path: Path) -> str:
    """The file as the operator would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
