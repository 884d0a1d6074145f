"""Infrastructure faults around the `cdc run` CLI, on the private MariaDB and ZooKeeper only
(tests/faults/services.py: ports 13317 / 22193 by default; the shared services are never restarted):

- ZooKeeper restarted while a run is in the middle of a window, and the run's session expired from
  outside (a second client with the same session id, started then stopped);
- MariaDB restarted while a run reads a window's binlog, and between two windows;
- a dropped binlog connection in the middle of a transaction (the reader used to resume silently and
  lose rows);
- the staged files of an un-merged window deleted: the same window is re-staged, byte for byte;
- one table's lakehouse directory deleted: the run fails clearly and `cdc backfill` repairs it.

Every step is checked by the oracle; each test ends with a clean run to the source's end and the lake
equal to the source.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cdc_core.model.errors import SourceError
from tests.faults.scenarios import (
    lake_table_deleted,
    mariadb_restart_between,
    mariadb_restart_mid_stage,
    session_expiry,
    staging_deleted,
    zk_restart,
)

# Minutes on a quiet machine; a busy shared one can take ten times longer than the suite-wide 900 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(5400)]


def _assert_clean(rig) -> None:  # type: ignore[no-untyped-def]
    f = rig.oracle.figures
    assert (f.rows_lost, f.rows_duplicated, f.wrong_values, f.type_mismatches) == (0, 0, 0, 0), f


BIG_CAPS = {"max_events": 100_000, "max_bytes": 1 << 30, "max_transactions": 1000}


def test_service_restarts_and_session_expiry_mid_run(rig) -> None:  # type: ignore[no-untyped-def]
    r = rig(3001, tables=("orders",), windows_per_run=1, lease_seconds=1, caps=BIG_CAPS)
    zk_restart(r, "after_stage", txns=3)  # between the stage and the merge task
    session_expiry(r, "after_stage", txns=3)
    mariadb_restart_mid_stage(r, txns=4)
    mariadb_restart_between(r, txns=3)  # issue 3: a restart of the server between windows
    r.finish("after ZooKeeper and MariaDB restarts and a session expiry")
    _assert_clean(r)


def test_deleted_staging_and_lake_table(rig) -> None:  # type: ignore[no-untyped-def]
    r = rig(3003, tables=("orders",), windows_per_run=1, lease_seconds=1, caps=BIG_CAPS)
    rng = random.Random(3003)
    staging_deleted(r, rng, txns=4)
    assert r.oracle.figures.restaged_identical >= 1
    lake_table_deleted(r, rng, txns=3)
    failed = [x for x in r.runs if x.rc == 8]
    assert failed, "no run failed"
    err = failed[0].stderr
    assert "LakeError" in err and "was deleted" in err and "Nothing was planned or changed" in err, err[-2000:]
    r.finish("after re-staging, and a backfill rebuilding a deleted table")
    _assert_clean(r)


def test_a_lost_binlog_connection_mid_transaction_is_an_error_not_a_gap(
    private_services: Any, fault_zk: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: python-mysql-replication reconnects by itself after a dropped connection and resumes
    inside the transaction, where the rows after the drop reference a table map it never saw again and
    are dropped without a word (the transaction's counts still match). The reader now refuses the silent
    resume: the stage step fails with a SourceError, and re-staging reads every row."""
    from cdc_core.capture.source import SourceParams
    from cdc_core.model.config import load_config
    from cdc_core.run.pipeline import Pipeline
    from tests.faults.harness import Rig

    r = Rig(private_services, tmp_path / "rig", fault_zk, None, 3005, tables=("orders",),
            caps={"max_events": 1_000_000, "max_bytes": 1 << 30, "max_transactions": 1000})
    try:
        with r.conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{r.database}`.big (id INT PRIMARY KEY, v VARCHAR(200), w TEXT)")
            r.conn.begin()
            for i in range(0, 60_000, 2000):
                cur.execute(f"INSERT INTO `{r.database}`.big VALUES "
                            + ",".join(f"({j}, REPEAT('x', 150), REPEAT('y', 300))" for j in range(i, i + 2000)))
            r.conn.commit()
        cfg = load_config(r.config_path).pipeline(r.name)
        with Pipeline.from_config(cfg, SourceParams(**private_services.source_params)) as p:
            grant = p.acquire("test/lost-connection")
            step = p.plan(grant)
            killed: list[int] = []

            def kill_dump_connection() -> None:
                admin = private_services.root_connect()
                try:
                    with admin.cursor() as cur:
                        deadline = time.monotonic() + 60
                        while time.monotonic() < deadline and not killed:
                            cur.execute(
                                "SELECT ID FROM information_schema.PROCESSLIST "
                                "WHERE COMMAND LIKE 'Binlog Dump%%' AND USER = %s",
                                (private_services.mysql_user,),
                            )
                            for (pid,) in cur.fetchall():
                                time.sleep(0.3)  # inside the 30 MB transaction, well before its end
                                cur.execute(f"KILL {int(pid)}")
                                killed.append(int(pid))
                            time.sleep(0.01)
                finally:
                    admin.close()

            # The reader takes the 30 MB transaction in about a second, which can be before the KILL
            # lands (then nothing is lost and nothing fails): read it slowly so the KILL is mid-way.
            from cdc_core.capture import binlog

            fast_read = binlog._Packets.read

            def slow_read(self: Any) -> bytes:
                time.sleep(0.002)
                return fast_read(self)

            monkeypatch.setattr(binlog._Packets, "read", slow_read)
            killer = threading.Thread(target=kill_dump_connection)
            killer.start()
            try:
                with pytest.raises(SourceError, match=r"connection to the source .* was lost while reading the binlog"):
                    p.stage(grant, step.seq)
            finally:
                killer.join()
            assert killed
            staged = p.stage(grant, step.seq)  # the retry reads the window from its start
            assert staged.changes == 60_000 + r.workload.stats.rows, staged
            p.release(grant)
    finally:
        r.close()
