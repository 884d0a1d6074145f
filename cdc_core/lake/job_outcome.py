"""What a run of one of the pipeline's Spark jobs came to: the one codec between the job and its callers.

A job (spark_apps/merge_window.py, spark_apps/maintain_tables.py) ends in one way only: an exit code, and
on failure one error line `<prog>: <ErrorType>: <message>` (`job_error`, which the jobs' `main` and the warm
merge server both use to say it). Whoever ran it (the CLI's spark-submit subprocess, the Airflow operators'
`SparkSubmitHook`, the warm merge server's answer) hands back a `JobExit`, and `decode` turns that, with the
job's report when the caller read one, into a `JobOutcome`: success with the report, or the `CdcError` to
raise, its class chosen from the exit code (refined by the type the error line names) and its message
saying what failed and what to do. The callers then only raise it: the CLI exits with its `exit_code`, the
Airflow operators map it to a task state from its `retryable` field (plugins/cdc_airflow/states.py), so a
configuration or schema error fails without retries and a fenced job fails at once, on every path alike.

Pure: no I/O, no Airflow, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_core.model import errors
from cdc_core.model.errors import CdcError, Fenced, LakeError
from cdc_core.model.logfmt import one_line

MERGE_PROG = "merge_window"  # the merge job's error-line prefix (spark_apps/merge_window.py, the merge server)
MAINTENANCE_PROG = "maintain_tables"
TAIL_LINES = 15  # of the job's output, in a failure's message
UNEXPECTED = "unexpected "  # a job's error that is no CdcError: `<prog>: unexpected <Type>: <message>`

# The error class of an exit code (`CdcError.exit_code`); anything else (1: an unexpected error, 137: killed,
# spark-submit's own failures) is a LakeError: the step failed and is safe to retry.
_BY_EXIT_CODE: dict[int, type[CdcError]] = {
    cls.exit_code: cls
    for cls in (
        errors.ConfigError, errors.SourceError, errors.CoordinationError, errors.Fenced, errors.StagingError,
        errors.SchemaConflict, errors.LakeError,
    )
}


def _named_errors() -> dict[str, type[CdcError]]:
    """Every error class of the hierarchy by name (a job may name a subclass: `PositionPurged`), except those
    that skip a run (`LeaseHeld`: a Spark job never takes the lease, so it can never have lost that race)."""
    found: dict[str, type[CdcError]] = {}
    todo: list[type[CdcError]] = [CdcError]
    while todo:
        cls = todo.pop()
        if cls.__module__ == errors.__name__ and not cls.skips_run:
            found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


_NAMED = _named_errors()


@dataclass(frozen=True)
class JobExit:
    """How one run of a Spark job ended, however it ran: its exit code and output (a tail is enough; the
    Airflow hook gives its combined output as `stdout`)."""

    rc: int
    stdout: str = ""
    stderr: str = ""


@dataclass(frozen=True)
class JobRef:
    """Which job ran, for whom and under whose lease: what a failure's message names."""

    pipeline: str
    prog: str  # the job's error-line prefix (MERGE_PROG, MAINTENANCE_PROG)
    job: str  # "the merge job of window 7"
    what: str  # "merge of window 7": what failed
    holder: str | None = None
    token: int | None = None
    # What a fenced job leaves behind, and what to do about it.
    fenced_left: str = "nothing it wrote needs undoing"
    fenced_next: str = "the lease holder carries on"

    @classmethod
    def merge(cls, pipeline: str, seq: int, holder: str | None = None, token: int | None = None) -> JobRef:
        return cls(
            pipeline, MERGE_PROG, f"the merge job of window {seq}", f"merge of window {seq}", holder, token,
            fenced_left="what it may have committed before is this same immutable window, idempotently",
            fenced_next="the lease holder lands the window",
        )

    @classmethod
    def maintenance(cls, pipeline: str, holder: str | None = None, token: int | None = None) -> JobRef:
        return cls(
            pipeline, MAINTENANCE_PROG, "the maintenance job", "maintenance of the pipeline's tables", holder, token,
            fenced_left="what it compacted or vacuumed before is committed and changed no table's rows",
            fenced_next="the next maintenance run takes the lease again",
        )


@dataclass(frozen=True)
class JobOutcome:
    """A Spark job's outcome: `error` is None when it succeeded. `report` is the job's report when the caller
    read one (the maintenance job writes it also when some tables failed); `said` is the job's own error
    line, without its prefix."""

    ref: JobRef
    rc: int
    report: Mapping[str, Any] | None = field(default=None, repr=False)
    error: CdcError | None = None
    said: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_error(self) -> None:
        """Raise the job's error, if it failed."""
        if self.error is not None:
            raise self.error


def job_error(prog: str, err: BaseException) -> tuple[int, str]:
    """The job side: the exit code and the one error line of a job that failed with `err` (`decode` reads both)."""
    if isinstance(err, CdcError):
        return err.exit_code, f"{prog}: {type(err).__name__}: {one_line(err)}"
    return 1, f"{prog}: {UNEXPECTED}{type(err).__name__}: {one_line(err)}"


def error_line(output: str, prog: str) -> str | None:
    """The job's last error line in `output`, without its `<prog>: ` prefix (None when it printed none:
    killed, or spark-submit itself failed)."""
    prefix = f"{prog}: "
    for raw in reversed(output.splitlines()):
        line = raw.strip()
        if line.startswith(prefix):
            return line.removeprefix(prefix)
    return None


def error_class(rc: int, said: str | None) -> type[CdcError]:
    """The error a failed job's exit code stands for; the type its error line names when that one has the
    same exit code (a subclass: `PositionPurged` for 3)."""
    named = _NAMED.get((said or "").partition(": ")[0])
    if named is not None and named.exit_code == rc:
        return named
    return _BY_EXIT_CODE.get(rc, LakeError)


def output_tail(ended: JobExit, lines: int = TAIL_LINES) -> str:
    """The last lines of the job's output (its stderr, else its stdout), for a message."""
    text = (ended.stderr or ended.stdout or "").strip()
    return "\n".join(text.splitlines()[-lines:])


def decode(ref: JobRef, ended: JobExit, report: Mapping[str, Any] | None = None) -> JobOutcome:
    """Pure: the outcome of the run of `ref`'s job that ended as `ended` (`report`: its report, if read)."""
    if ended.rc == 0:
        return JobOutcome(ref, 0, report)
    said = error_line(f"{ended.stdout}\n{ended.stderr}", ref.prog)
    cls = error_class(ended.rc, said)
    tail = output_tail(ended)
    if issubclass(cls, Fenced):
        holder = "?" if ref.holder is None else repr(ref.holder)
        token = "?" if ref.token is None else f"{ref.token:#x}"
        error: CdcError = Fenced(
            f"pipeline {ref.pipeline!r}: {ref.job} refused to write: run {holder} (token {token}) no longer holds "
            f"the lease, so the job stopped writing ({ref.fenced_left}). Stop this run: {ref.fenced_next}. "
            f"Last output:\n{tail}",
            holder=ref.holder,
            token=ref.token,
        )
    else:
        way_out = (
            "the step is safe to retry once that is fixed" if cls.retryable else
            "retrying cannot help: fix what it names (the configuration, or the table's schema), then run the "
            "step again"
        )
        error = cls(
            f"pipeline {ref.pipeline!r}: {ref.what} failed (exit {ended.rc})" + (f": {said}" if said else "")
            + f"; {way_out}. Last output:\n{tail}"
        )
    return JobOutcome(ref, ended.rc, report, error, said)


__all__ = [
    "MAINTENANCE_PROG", "MERGE_PROG", "JobExit", "JobOutcome", "JobRef", "decode", "error_class", "error_line",
    "job_error", "output_tail",
]
