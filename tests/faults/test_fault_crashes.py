"""Crashes of the `cdc run` CLI (SIGKILL, no cleanup) at every named fault point and at random times.

One pipeline over a seeded random workload on the private MariaDB/ZooKeeper; the oracle
(tests/faults/oracle.py) checks every invariant after every run, and at the end, after a clean run to
the source's end, every Delta table must equal its source table. One window per run and a 1 s lease
keep it short: each crash leaves the window where the next run must pick it up (replay it, re-stage
it, finish its merge, or ack it). Merges go to the suite's one-JVM merge server
(tests/faults/merge_server.py); tests/faults/test_fault_dag.py crashes the DAG with real spark-submit.
"""

from __future__ import annotations

import random

import pytest

from tests.faults.scenarios import CRASH_POINTS, crash_at, random_kill

# Minutes on a quiet machine; a busy shared one can take ten times longer than the suite-wide 900 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(5400)]

BIG_CAPS = {"max_events": 100_000, "max_bytes": 1 << 30, "max_transactions": 1000}


def _assert_clean(rig) -> None:  # type: ignore[no-untyped-def]
    f = rig.oracle.figures
    assert (f.rows_lost, f.rows_duplicated, f.wrong_values, f.type_mismatches) == (0, 0, 0, 0), f
    assert f.rows_compared > 0 and f.windows_acked > 0, f


def test_crashes_at_every_fault_point_and_at_random_times_converge(rig, merge_server) -> None:  # type: ignore[no-untyped-def]
    r = rig(1001, tables=("kinds", "orders"), windows_per_run=1, lease_seconds=1, caps=BIG_CAPS)
    r.write(8)  # window 1: both tables, deletes included (mid_merge needs two tables, mid_merge_table deletes)
    for point in CRASH_POINTS:
        # New changes only where the crash should hit a fresh window's ack; the others replay window 1.
        assert crash_at(r, point, txns=2 if point in ("before_ack", "after_ack") else 0) == f"killed at {point}"
    rng = random.Random(1001)
    done = [x.seconds for x in r.runs if not x.killed] or [10.0]
    outcomes = [random_kill(r, rng, txns=3, max_after=max(2.0, 1.5 * max(done))) for _ in range(2)]
    r.finish("after a crash at every fault point and random kills")
    _assert_clean(r)
    assert any(o.startswith("killed") for o in outcomes), outcomes
    _oracle_notices_damage(r, merge_server.spark())


def _oracle_notices_damage(rig, spark) -> None:  # type: ignore[no-untyped-def]
    """The oracle can fail: a duplicated row, a lost row and a re-planned window are each reported."""
    import json

    t = f"delta.`{rig.oracle.table_uri('orders')}`"
    first = spark.sql(f"SELECT region, order_no, line FROM {t} ORDER BY region, order_no, line LIMIT 1").collect()[0]
    where = f"region = '{first.region}' AND order_no = {first.order_no} AND line = {first.line}"
    spark.sql(f"INSERT INTO {t} SELECT * FROM {t} WHERE {where}")
    with pytest.raises(AssertionError, match="duplicated 1"):
        rig.check("a duplicated row")
    spark.sql(f"DELETE FROM {t} WHERE {where}")
    with pytest.raises(AssertionError, match="missing 1"):
        rig.check("a lost row")
    path = rig.oracle.coordinator.window_path(1)
    data, stat = rig.zk_client.get(path)
    record = json.loads(data)
    record["plan"]["events"] += 1
    rig.zk_client.set(path, json.dumps(record).encode(), version=stat.version)
    with pytest.raises(AssertionError, match="window 1 was re-planned"):
        rig.check("a re-planned window")
