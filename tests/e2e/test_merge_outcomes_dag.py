"""What a failed merge job makes of the `merge_window` task under Airflow (`airflow dags test`), read from the
task instance's tries: the DAG's operator decodes the job's exit code with the CLI's codec
(cdc_core.lake.job_outcome) instead of taking the Spark provider's plain AirflowException, so

- a configuration error (exit 2) fails the task after exactly one try, although the pipeline has retries;
- a fenced job (exit 5) fails at once too: no retry delay waited, nothing retried;
- a retryable error (exit 4, ZooKeeper unreachable for the job's fence check) is retried.

Each case is one DAG run of its own pipeline over a tiny window. The merge job fails through the product's
fault hook (`CDC_FAULT=merge_start CDC_FAULT_ACTION=raise:<Error>`, cdc_core/model/faults.py): it raises the
error as its spec is read, before a Spark session starts, and exits as that error would have it, through the
real spark-submit and SparkSubmitHook. The schema-conflict case (exit 7, like a configuration error) and every
other exit code are table-tested without Airflow (tests/unit/test_job_outcome.py, test_airflow_plugin.py).
"""

from __future__ import annotations

import pytest

from cdc_core.run.status import pipeline_status
from tests.support.e2e import CdcCase, binlog_position, seed

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("error", "tries"),
    [
        ("ConfigError", 1),  # no retry can fix it
        ("Fenced", 1),  # only a new run (a new lease) can land the window
        ("CoordinationError", 2),  # retryable: tried again after the retry delay
    ],
)
def test_the_merge_tasks_tries_follow_the_jobs_error(cdc_case: CdcCase, error: str, tries: int) -> None:
    case = cdc_case
    case.write_config(binlog_position(case.services), retries=1)
    seed(case, customers=2, orders=2)

    result = case.run_pipeline(env={"CDC_FAULT": "merge_start", "CDC_FAULT_ACTION": f"raise:{error}"})

    assert result.state == "failed", result.explain()
    assert result.tasks["merge_window"] == "failed", result.explain()
    assert result.tries["merge_window"] == tries, result.explain()
    assert result.tasks["stage_window"] == "success" and result.tasks["ack_window"] == "upstream_failed", (
        result.explain()
    )
    assert result.tasks["release_lease"] == "success", result.explain()  # the teardown still lets the lease go
    assert f"fault point merge_start: injected {error}" in result.output, result.explain()

    with case.pipeline() as p:
        status = pipeline_status(p)
    last = status["last_error"]  # the failure callback noted the decoded error for the monitor
    assert last["step"] == "merge_window" and last["seq"] == 1 and not last["resolved"], last
    assert f"{error}: pipeline '{case.name}'" in last["message"], last
    assert status["cursor"]["seq"] == 0, status  # nothing acked: the next run replays the stored window
