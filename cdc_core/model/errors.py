"""One exception hierarchy for the whole product.

Every message names the pipeline (where there is one), the object, what was found, and the way out.
Callers (CLI, Airflow tasks, the Spark job) map these to exit codes and task states from the fields
below (`exit_code`, `retryable`, `rejects_request`, and the lease facts of `LeaseHeld` and `Fenced`);
nothing else needs to know the difference between a kazoo and a pymysql exception, nor keep its own
list of error types.
"""

from __future__ import annotations

from typing import Any


class CdcError(Exception):
    """Base of every error the product raises on purpose."""

    exit_code = 1
    # A retry of the same step may succeed without anyone acting (a service hiccup, a race). False: it
    # fails the same way until someone acts (a configuration to fix, a lost lease), so never retry it.
    retryable = True
    # The answer to a request's own content or to the state it asks to change (a backfill form, CLI
    # flags): a check of the request refuses it at once. False for a service that could not be asked.
    rejects_request = False
    # Not a failure at all: another run is doing the work, so this one skips (LeaseHeld).
    skips_run = False


class ConfigError(CdcError):
    """The configuration (file, trigger form, CLI flags) is invalid."""

    exit_code = 2
    retryable = False
    rejects_request = True


class SourceError(CdcError):
    """The source database is unreachable, misconfigured, or refused something."""

    exit_code = 3


class PositionPurged(SourceError):
    """A saved or configured binlog position is no longer on the server."""

    rejects_request = True


class UnknownTable(SourceError):
    """A table named in the configuration or a form does not exist on the source."""

    rejects_request = True


class MissingKey(SourceError):
    """A captured table has neither a primary key nor a unique not-null key."""


class CascadingForeignKey(SourceError):
    """A captured table's rows can be changed by a foreign key's cascade, which the binlog does not record."""

    retryable = False


class SystemVersionedTable(SourceError):
    """A captured table is system-versioned: its history rows are row changes in the binlog, not deletes."""

    retryable = False


class UnsupportedType(SourceError):
    """A column type the type map cannot land exactly."""


class CoordinationError(CdcError):
    """ZooKeeper is unreachable, suspended, or holds records we cannot interpret."""

    exit_code = 4


class LeaseHeld(CoordinationError):
    """Another run holds the pipeline's lease: the caller should skip, not fail.

    `holder`, `expires_at` (unix seconds) and `token` say whose lease it is and until when (None when
    the raiser did not know them).
    """

    exit_code = 75  # EX_TEMPFAIL: "try again later" to shells and schedulers
    skips_run = True  # not a failure: the run that holds the lease does the work

    def __init__(
        self, message: str, *, holder: str | None = None, expires_at: float | None = None, token: int | None = None
    ) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires_at = expires_at
        self.token = token

    def __reduce__(self) -> tuple[Any, ...]:  # keep the fields across pickling (the message is args[0])
        return (_rebuild, (type(self), self.args, self.__dict__))


class Fenced(CoordinationError):
    """This run lost its lease; whatever it tried to change was refused and nothing changed.

    `holder` and `token` name the run's lost lease (None when the raiser did not know them).
    Retrying with that grant can never succeed: only a new run (a new lease) can.
    """

    exit_code = 5
    retryable = False

    def __init__(self, message: str, *, holder: str | None = None, token: int | None = None) -> None:
        super().__init__(message)
        self.holder = holder
        self.token = token

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class StateConflict(CoordinationError):
    """ZooKeeper state is not what the protocol allows (e.g. an ack that does not follow the cursor)."""

    rejects_request = True


class StagingError(CdcError):
    """A staged window is missing, incomplete or does not match its plan."""

    exit_code = 6


class SchemaConflict(CdcError):
    """A source schema change cannot be applied to the Delta table."""

    exit_code = 7
    retryable = False  # the same window meets the same table again: someone rebuilds or remaps it first


class LakeError(CdcError):
    """The lakehouse does not hold what the cursor says it holds (e.g. a table directory deleted)."""

    exit_code = 8


class PartialFailure(CdcError):
    """A run of a group pipeline in which some sources failed and the others landed their windows.

    Its own exit code (9), so a script tells it from a total failure (the first error's code) without reading
    the output; each failed source's error is in the run's output and recorded as that source's last error,
    and the next run retries those sources. Never raised by a Spark job."""

    exit_code = 9


def _rebuild(cls: type[CdcError], args: tuple[Any, ...], fields: dict[str, Any]) -> CdcError:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(fields)
    return err
