"""The one codec between a Spark job and its callers (cdc_core.lake.job_outcome): what the job says when it
fails (`job_error`, used by the jobs' `main` and the warm merge server) and what the CLI, the operators and
the merge server's client read back from it (`decode`), as a table of cases."""

from __future__ import annotations

import pytest

from cdc_core.lake import job_outcome as jo
from cdc_core.model.errors import (
    CdcError,
    ConfigError,
    CoordinationError,
    Fenced,
    LakeError,
    LeaseHeld,
    PositionPurged,
    SchemaConflict,
    SourceError,
    StagingError,
)

pytestmark = pytest.mark.unit

MERGE = jo.JobRef.merge("orders", 7, holder="cdc_orders/manual__1", token=0x1A2B)
MAINT = jo.JobRef.maintenance("orders", holder="cdc_orders_maintenance/manual__1", token=0x1A2B)


def said(rc: int, line: str, prog: str = jo.MERGE_PROG, **kw: str) -> jo.JobExit:
    return jo.JobExit(rc, kw.get("stdout", "Spark says hello\n"), f"WARN noise\n{prog}: {line}\nINFO shutdown\n")


@pytest.mark.parametrize(
    ("ended", "cls", "retryable"),
    [
        (said(2, "ConfigError: spec parallelism must be >= 1, got 0"), ConfigError, False),
        (jo.JobExit(2, "", "usage: merge_window.py --spec SPEC\nerror: the following arguments are required"),
         ConfigError, False),  # argparse's own exit 2, no error line
        (said(5, "Fenced: fenced: pipeline 'orders' lease is now held by token 0x1a2c"), Fenced, False),
        (jo.JobExit(5, "", ""), Fenced, False),
        (said(7, "SchemaConflict: table shop.t column 'a' is int in Delta but string in the source"),
         SchemaConflict, False),
        (said(3, "PositionPurged: the binlog is gone"), PositionPurged, True),  # the named subclass
        (said(3, "ConfigError: mislabelled"), SourceError, True),  # the exit code decides, the name refines
        (said(4, "CoordinationError: ZooKeeper unreachable; retry"), CoordinationError, True),
        (said(6, "StagingError: the manifest is gone"), StagingError, True),
        (said(8, "LakeError: table x belongs to pipeline 'y'"), LakeError, True),
        (said(1, "unexpected Py4JError: An error occurred"), LakeError, True),
        (said(75, "LeaseHeld: held"), LakeError, True),  # a job never takes the lease: never a skip
        (jo.JobExit(137, "", ""), LakeError, True),  # killed
        (jo.JobExit(-9, "", ""), LakeError, True),
    ],
)
def test_a_failed_job_is_the_error_its_exit_code_stands_for(ended: jo.JobExit, cls: type[CdcError],
                                                             retryable: bool) -> None:
    outcome = jo.decode(MERGE, ended)
    assert not outcome.ok and type(outcome.error) is cls and outcome.rc == ended.rc
    assert outcome.error is not None and outcome.error.retryable is retryable
    with pytest.raises(cls):
        outcome.raise_error()


def test_success_carries_the_report() -> None:
    outcome = jo.decode(MERGE, jo.JobExit(0, '{"seq": 7}\n', "WARN merge_window: not a failure"), {"seq": 7})
    assert outcome.ok and outcome.error is None and outcome.report == {"seq": 7} and outcome.said is None
    outcome.raise_error()  # nothing to raise


def test_messages_name_the_pipeline_the_window_what_the_job_said_and_the_way_out() -> None:
    config = jo.decode(MERGE, said(2, "ConfigError: spec parallelism must be >= 1, got 0")).error
    assert str(config).startswith(
        "pipeline 'orders': merge of window 7 failed (exit 2): ConfigError: spec parallelism must be >= 1, got 0; "
        "retrying cannot help"
    )
    assert str(config).endswith("Last output:\nWARN noise\nmerge_window: ConfigError: spec parallelism must be >= 1, "
                                "got 0\nINFO shutdown")
    retry = jo.decode(MERGE, said(1, "unexpected Boom: no")).error
    assert "window 7 failed (exit 1): unexpected Boom: no; the step is safe to retry once that is fixed" in str(retry)
    killed = jo.decode(MERGE, jo.JobExit(137, "", "")).error
    assert str(killed).startswith("pipeline 'orders': merge of window 7 failed (exit 137); the step is safe to retry")


def test_a_fenced_job_names_the_lost_lease_and_what_to_do() -> None:
    outcome = jo.decode(MERGE, said(5, "Fenced: fenced"))
    err = outcome.error
    assert isinstance(err, Fenced) and (err.holder, err.token) == ("cdc_orders/manual__1", 0x1A2B)
    assert outcome.said == "Fenced: fenced"
    assert str(err).startswith(
        "pipeline 'orders': the merge job of window 7 refused to write: run 'cdc_orders/manual__1' (token 0x1a2b) "
        "no longer holds the lease"
    )
    assert "Stop this run: the lease holder lands the window" in str(err)
    maint = jo.decode(MAINT, said(5, "Fenced: fenced", prog=jo.MAINTENANCE_PROG)).error
    assert isinstance(maint, Fenced)
    assert str(maint).startswith("pipeline 'orders': the maintenance job refused to write")
    anonymous = jo.decode(jo.JobRef.merge("orders", 7), jo.JobExit(5)).error
    assert isinstance(anonymous, Fenced) and "run ? (token ?)" in str(anonymous)


def test_only_the_jobs_own_line_counts() -> None:
    # Another program's line, or the merge job's in a maintenance run, is output, not the job's word.
    ended = jo.JobExit(8, "", "merge_window: Fenced: not mine\nmaintain_tables: LakeError: t1: OPTIMIZE failed\n")
    outcome = jo.decode(MAINT, ended)
    assert type(outcome.error) is LakeError and outcome.said == "LakeError: t1: OPTIMIZE failed"
    assert jo.error_line("a\n  merge_window: first\nmerge_window: last\nz", jo.MERGE_PROG) == "last"
    assert jo.error_line("merge_windows: x", jo.MERGE_PROG) is None


def test_the_spark_submit_hook_output_is_read_from_stdout() -> None:
    # The Airflow hook hands back spark-submit's combined output as one text.
    ended = jo.JobExit(2, "line 1\nmerge_window: ConfigError: bad spec\nINFO Shutdown hook called", "")
    outcome = jo.decode(MERGE, ended)
    assert type(outcome.error) is ConfigError and outcome.said == "ConfigError: bad spec"
    tail = "Last output:\nline 1\nmerge_window: ConfigError: bad spec\nINFO Shutdown hook called"
    assert str(outcome.error).endswith(tail)


@pytest.mark.parametrize(
    ("err", "rc", "line"),
    [
        (ConfigError("bad\nsecond line"), 2, "merge_window: ConfigError: bad"),
        (Fenced("lost", holder="h", token=1), 5, "merge_window: Fenced: lost"),
        (PositionPurged("gone"), 3, "merge_window: PositionPurged: gone"),
        (RuntimeError("boom"), 1, "merge_window: unexpected RuntimeError: boom"),
    ],
)
def test_what_a_failing_job_says_decodes_back_to_its_error(err: BaseException, rc: int, line: str) -> None:
    assert jo.job_error(jo.MERGE_PROG, err) == (rc, line)
    outcome = jo.decode(MERGE, jo.JobExit(rc, "", line + "\n"))
    want = type(err) if isinstance(err, CdcError) else LakeError
    assert type(outcome.error) is want


def test_lease_held_is_no_job_outcome() -> None:
    assert "LeaseHeld" not in jo._NAMED and jo.error_class(LeaseHeld.exit_code, "LeaseHeld: x") is LakeError
