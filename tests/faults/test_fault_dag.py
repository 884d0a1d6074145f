"""A crash through the Airflow DAG: the `airflow dags test` process (scheduler and worker in one) is
SIGKILLed inside the ack task (fault point `mid_ack`: lease checked, the ack's ZooKeeper multi-op not
committed), after the SparkSubmitOperator merge (real spark-submit) landed the window. The next DAG run
takes the expired lease over, recovers (acks the landed window) and carries on; the oracle checks the
state after the crash and after the recovery, and the lake then equals the source.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from cdc_core.run.status import pipeline_status
from tests.faults.oracle import Oracle
from tests.faults.workload import Shadow, Workload
from tests.support.e2e import CdcCase, binlog_position

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(5400)]


def test_dag_killed_inside_the_ack_is_recovered_by_the_next_run(
    airflow_home: Any, services: Any, source_db: str, zk_root: str, zk_client: Any, tmp_path: Path
) -> None:
    case = CdcCase(
        name="fdag_" + uuid.uuid4().hex[:6], database=source_db, zk_root=zk_root, lake=tmp_path / "lake",
        staging=tmp_path / "staging", config_path=tmp_path / "pipelines.json", airflow=airflow_home,
        services=services,
    )
    case.lake.mkdir()
    case.staging.mkdir()
    # The workload writes zero dates (tests/faults/workload.py): land them as NULL knowingly, as the harness does.
    case.write_config(binlog_position(services), lease_seconds=4, zero_dates="null")
    # The shared server: no binlog rotations from this workload (other people's tests read it).
    workload = Workload(4001, source_db, rotate_every=10**9, big_txn_rows=(300, 800))
    conn = services.root_connect()
    shadow = Shadow(services, workload)
    oracle = Oracle(services, workload, shadow, case.name, zk_client, zk_root, case.lake, case.staging)
    try:
        workload.create(conn)
        workload.run(conn, 12, tables=("orders", "events"))
        fired = tmp_path / "faults-fired"

        crashed = case.run_pipeline(env={"CDC_FAULT": "mid_ack", "CDC_FAULT_ONCE": str(fired)})
        assert fired.exists() and "mid_ack" in fired.read_text(), crashed.explain()
        assert crashed.state != "success" and crashed.tasks.get("merge_window") == "success", crashed.explain()
        oracle.check("DAG run killed inside the ack")
        with case.pipeline() as p:
            status = pipeline_status(p)
        assert status["cursor"]["seq"] == 0 and status["windows"][0]["state"] == "planned", status

        # The killed task's lease (4 s) is taken over by the next run without waiting for it to expire: that
        # run's lease clock runs past the expiry (cdc_core.model.faults.clock), as a clock running ahead would.
        lease = oracle.coordinator.read_lease()
        ahead = max(0.0, lease.expires_at - time.time() + 0.5) if lease is not None else 0.0
        recovered = case.run_pipeline(env={"CDC_FAULT_CLOCK_OFFSET": f"{ahead:.3f}"})
        assert recovered.state == "success", recovered.explain()
        first = oracle.coordinator.get_window(1)
        assert first is not None and first.state == "acked" and first.result.get("recovered"), first
        oracle.check("the next DAG run", final=True)
        f = oracle.figures
        assert (f.rows_lost, f.rows_duplicated, f.wrong_values, f.type_mismatches) == (0, 0, 0, 0), f
        assert f.windows_acked >= 2 and f.rows_compared > 0, f
    finally:
        oracle.close()
        shadow.close()
        conn.close()
