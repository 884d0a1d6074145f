"""One way to run a pipeline's Spark job (the merge or the maintenance job), whoever runs it.

The CLI, the Airflow operators and the warm merge server differ only in the `JobRunner` they hand over
(cdc_core.lake.job_runner); the rest is this one function: the lease renewed before a Spark start and kept
alive while the job runs, the job's report read, and what the job came to decoded by the one codec
(cdc_core.lake.job_outcome), so a failure is the same `CdcError` on every path.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from typing import Any, Protocol

from cdc_core.coordination import LeaseGrant, LeaseKeeper
from cdc_core.lake.job_outcome import JobOutcome, JobRef, decode
from cdc_core.lake.job_runner import JobRunner, read_report
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.lake.spark_conf import SparkJob
from cdc_core.model.errors import Fenced


class LeaseHolder(Protocol):
    """What `run_job` needs of a pipeline (`Pipeline`)."""

    def renew(self, grant: LeaseGrant) -> Any: ...
    def keep_lease(self, grant: LeaseGrant) -> AbstractContextManager[LeaseKeeper]: ...


def run_job(
    p: LeaseHolder, grant: LeaseGrant, job: SparkJob, ref: JobRef, runner: JobRunner, *, report: str | None = None,
    storage: Storage = AMBIENT,
) -> JobOutcome:
    """Run `job` with `runner` under `grant`: renew the lease first (fail now, not after a Spark start), keep
    it alive while the job runs (a window of many tables may outlast it), read the job's report (`report`:
    where its spec says it writes it, read with the pipeline's `storage`), and return what it came to. A
    lease lost while the job ran is the outcome (`Fenced`) even when the job finished, unless the job's own
    fence check already said so."""
    p.renew(grant)
    with p.keep_lease(grant) as keeper:
        ended = runner(job)
    found = read_report(report, storage=storage) if report else None
    outcome = decode(ref, ended, found)
    if keeper.lost is not None and not isinstance(outcome.error, Fenced):
        return dataclasses.replace(outcome, error=keeper.lost)
    return outcome


__all__ = ["LeaseHolder", "run_job"]
