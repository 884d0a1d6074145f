"""Crashes of the `cdc run` CLI (SIGKILL, no cleanup) at every named fault point and at random times.

One pipeline per test over a seeded random workload on the private MariaDB/ZooKeeper; the oracle
(tests/faults/oracle.py) checks every invariant after every run, and at the end, after a clean run to
the source's end, every Delta table must equal its source table. Merges go to the suite's one-JVM
merge server (tests/faults/merge_server.py); `tests/faults/test_fault_dag.py` crashes the DAG with the
real spark-submit.
"""

from __future__ import annotations

import random
import statistics

import pytest

from tests.faults.scenarios import CRASH_POINTS, crash_at, random_kill

# Minutes on a quiet machine; a busy shared one can take ten times longer than the suite-wide 900 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(5400)]


def _assert_clean(rig) -> None:  # type: ignore[no-untyped-def]
    f = rig.oracle.figures
    assert (f.rows_lost, f.rows_duplicated, f.wrong_values, f.type_mismatches) == (0, 0, 0, 0), f
    assert f.rows_compared > 0 and f.windows_acked > 0, f


def test_a_crash_at_every_fault_point_converges(rig) -> None:  # type: ignore[no-untyped-def]
    r = rig(1001, tables=("kinds", "orders"))
    r.write(4)
    for point in CRASH_POINTS:
        assert crash_at(r, point, txns=3) == f"killed at {point}"
    r.finish("after a crash at every fault point")
    _assert_clean(r)


def test_kills_at_random_times_converge(rig, merge_server) -> None:  # type: ignore[no-untyped-def]
    r = rig(1002, tables=("orders", "events"))
    rng = random.Random(1002)
    r.write(6)
    r.drain("warm-up")  # how long a run takes here, to aim the kills inside runs
    typical = statistics.median(x.seconds for x in r.runs)
    outcomes = [random_kill(r, rng, txns=4, max_after=max(2.0, 1.5 * typical)) for _ in range(3)]
    r.finish("after random kills")
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
