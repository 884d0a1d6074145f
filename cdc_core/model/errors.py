"""One exception hierarchy for the whole product.

Every message names the pipeline (where there is one), the object, what was found, and the way out.
Callers (CLI, Airflow tasks, the Spark job) map these to exit codes and task states; nothing else
needs to know the difference between a kazoo and a pymysql exception.
"""

from __future__ import annotations


class CdcError(Exception):
    """Base of every error the product raises on purpose."""

    exit_code = 1


class ConfigError(CdcError):
    """The configuration (file, trigger form, CLI flags) is invalid."""

    exit_code = 2


class SourceError(CdcError):
    """The source database is unreachable, misconfigured, or refused something."""

    exit_code = 3


class PositionPurged(SourceError):
    """A saved or configured binlog position is no longer on the server."""


class UnknownTable(SourceError):
    """A table named in the configuration or a form does not exist on the source."""


class MissingKey(SourceError):
    """A captured table has neither a primary key nor a unique not-null key."""


class UnsupportedType(SourceError):
    """A column type the type map cannot land exactly."""


class CoordinationError(CdcError):
    """ZooKeeper is unreachable, suspended, or holds records we cannot interpret."""

    exit_code = 4


class LeaseHeld(CoordinationError):
    """Another run holds the pipeline's lease: the caller should skip, not fail."""

    exit_code = 75  # EX_TEMPFAIL: "try again later" to shells and schedulers


class Fenced(CoordinationError):
    """This run lost its lease; whatever it tried to change was refused and nothing changed."""

    exit_code = 5


class StateConflict(CoordinationError):
    """ZooKeeper state is not what the protocol allows (e.g. an ack that does not follow the cursor)."""


class StagingError(CdcError):
    """A staged window is missing, incomplete or does not match its plan."""

    exit_code = 6


class SchemaConflict(CdcError):
    """A source schema change cannot be applied to the Delta table."""

    exit_code = 7


class LakeError(CdcError):
    """The lakehouse does not hold what the cursor says it holds (e.g. a table directory deleted)."""

    exit_code = 8
