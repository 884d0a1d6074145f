"""What a CDC error makes of an Airflow task: skipped, failed without retries, or failed and retried.

One decision (`task_state`), read from the error's own fields (`cdc_core.model.errors`: `skips_run`,
`retryable`, `rejects_request`), never from lists of exception types; `raise_for` turns it into what
Airflow understands. Every task and operator of the CDC DAGs maps its errors here.

- `LeaseHeld` (another run holds the lease): skipped, the message naming the holder and the expiry.
- not `retryable` (`ConfigError`, `SchemaConflict`, `Fenced`: fails the same way until someone acts):
  failed, no retries.
- while checking a request (the backfill form, a cancel), one that `rejects_request` (`PositionPurged`,
  `UnknownTable`, `StateConflict`): failed, no retries (`RequestRefused`).
- anything else (source, ZooKeeper, staging, lake hiccups; errors that are not CDC errors): failed,
  retried with back-off.

A Spark job's failure arrives here as the CdcError its exit code stands for: the Spark operators decode
it with the CLI's codec (cdc_core.lake.job_outcome), not as the provider's plain AirflowException.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, NoReturn

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException


class TaskState(enum.StrEnum):
    SKIP = "skipped"
    FAIL = "failed"  # without retries
    RETRY = "up_for_retry"  # failed; Airflow retries it while retries are left


class RequestRefused(AirflowFailException):
    """A request (the backfill form) refused before anything changed: fails without retries, and is not a
    pipeline failure (the failure callback leaves the monitor's last error alone)."""


def task_state(err: BaseException, *, checking_request: bool = False) -> TaskState:
    """Pure: the task state `err` calls for. `checking_request`: the step only validates a request (the
    form) before anything changes, so an error that answers the request itself fails at once."""
    if getattr(err, "skips_run", False):
        return TaskState.SKIP
    if getattr(err, "retryable", True) is False:
        return TaskState.FAIL
    if checking_request and getattr(err, "rejects_request", False):
        return TaskState.FAIL
    return TaskState.RETRY


def _fmt_ts(value: Any) -> str:
    try:
        return datetime.fromtimestamp(float(value), tz=UTC).isoformat(timespec="seconds")
    except (TypeError, ValueError):
        return str(value)


def lease_held_message(pipeline: str, err: BaseException) -> str:
    """The skip message: who holds the lease until when (from `LeaseHeld`'s fields)."""
    holder, until = getattr(err, "holder", None), getattr(err, "expires_at", None)
    if holder is None:
        return f"pipeline {pipeline!r}: skipped, the lease is held by another run ({err})"
    return (
        f"pipeline {pipeline!r}: skipped, the lease is held by {holder} until {_fmt_ts(until)}; "
        "the next scheduled run continues where that one stops"
    )


def raise_for(err: BaseException, pipeline: str, *, checking_request: bool = False) -> NoReturn:
    """Raise what Airflow needs for `err` (call it in an `except` block): a skip, a failure without
    retries, or `err` itself (Airflow retries it)."""
    state = task_state(err, checking_request=checking_request)
    if state is TaskState.SKIP:
        raise AirflowSkipException(lease_held_message(pipeline, err)) from err
    if state is TaskState.FAIL:
        cls = RequestRefused if checking_request else AirflowFailException
        raise cls(f"{type(err).__name__}: {err}") from err
    raise err
