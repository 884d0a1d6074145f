"""Who runs a pipeline's Spark job: one small protocol, `JobRunner`, a `SparkJob` in and a `JobExit` out.

- `SparkSubmitRunner`: spark-submit in a subprocess, in deploy mode client (the CLI: `cdc run`, `cdc maintain`);
- `MergeServerRunner`: the warm option's merge server (`cdc_core.lake.merge_client`), whose answer is what
  spark-submit would have returned;
- the Airflow operators' runner, a `SparkSubmitHook` per job (plugins/cdc_airflow/operators.py: cdc_core
  imports no Airflow).

Whichever ran it, what the job came to is read by the one codec, `cdc_core.lake.job_outcome.decode`, and
its report by `read_report`; `cdc_core.run.spark_jobs.run_job` puts them together under the run's lease.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cdc_core.lake import merge_client
from cdc_core.lake.job_outcome import JobExit
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.lake.spark_conf import SparkJob
from cdc_core.model.errors import LakeError

SubprocessRun = Callable[[list[str], dict[str, str]], "subprocess.CompletedProcess[str]"]


class JobRunner(Protocol):
    """Runs one Spark job to its end and says how it ended (its own failures, such as a merge server that
    cannot be reached, it raises as CdcErrors)."""

    def __call__(self, job: SparkJob) -> JobExit: ...


def run_subprocess(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


@dataclass(frozen=True)
class SparkSubmitRunner:
    """spark-submit to `master` in a subprocess, with the submitter's environment plus the job's (its
    credentials); `run` is the subprocess call (a test runs the job in its own Spark session instead)."""

    master: str
    run: SubprocessRun = run_subprocess

    def __call__(self, job: SparkJob) -> JobExit:
        proc = self.run(job.command(self.master), {**os.environ, **job.env})
        return JobExit(proc.returncode, proc.stdout or "", proc.stderr or "")


@dataclass(frozen=True)
class MergeServerRunner:
    """The merge job on the warm option's merge server at `address`. A server that cannot be reached, or that
    went away before answering, fails the step with a retryable `MergeServerUnavailable`, named after `what`
    ("pipeline 'orders': merge of window 7"): never a skip, and no silent fallback to spark-submit."""

    address: str
    timeout: float | None
    what: str

    def __call__(self, job: SparkJob) -> JobExit:
        try:
            answer = merge_client.request_merge(self.address, job.args, timeout=self.timeout)
        except merge_client.MergeServerUnavailable as e:
            raise merge_client.MergeServerUnavailable(f"{self.what} failed: {e}") from e
        return JobExit(answer.rc, answer.stdout, answer.stderr)


def read_report(uri: str, *, storage: Storage = AMBIENT) -> dict[str, Any] | None:
    """A job's JSON report (the spec's `report`, under the pipeline's `storage`), or None when it did not
    write one (it failed before the end); an unreadable one is a LakeError."""
    try:
        with storage.open(uri, "r") as f:
            data: dict[str, Any] = json.load(f)
            return data
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise LakeError(f"cannot read the job report {uri} ({type(e).__name__}: {e})") from None


__all__ = ["JobRunner", "MergeServerRunner", "SparkSubmitRunner", "SubprocessRun", "read_report", "run_subprocess"]
