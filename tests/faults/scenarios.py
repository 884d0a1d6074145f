"""Fault scenarios over a `Rig` (tests/faults/harness.py), shared by the CI tests and the soak.

Each function writes some workload, injects one fault into the real `cdc` CLI (or the services around
it), and checks the oracle right after; none of them drains the pipeline (the caller decides when to
`rig.finish()`). Every function returns a short outcome string for the soak's log. Expectations are
the product's promises: a crashed run leaves nothing the next run cannot recover; a zombie changes
nothing; a restarted service makes a run either continue safely or stop with a clear error.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from cdc_core.model import retention
from tests.faults.harness import (
    RC_COORDINATION,
    RC_FENCED,
    RC_LAKE,
    RC_OK,
    RC_PARTIAL,
    RC_SKIPPED,
    RC_SOURCE,
    RC_STAGING,
    CliResult,
    Rig,
)

# Fault points a `cdc run` passes through, in order (cdc_core/model/faults.py).
CRASH_POINTS = (
    "after_acquire",
    "after_plan",
    "mid_stage_before",
    "mid_stage",
    "after_stage",
    "mid_merge",
    "mid_merge_table",
    "after_merge",
    "before_ack",
    "mid_ack",
    "after_ack",
)
# With schema changes in the windows (workload DDL_ALL): also inside a schema change, its structure and row
# steps done, its mark not (spark_apps/merge/schema_steps.py), in the merge job's first phase.
SCHEMA_POINTS = (*CRASH_POINTS, "mid_schema_change")
# Points inside the merge job (spark_apps/merge_window.py, schema_steps.py), a separate process under spark-submit.
MERGE_JOB_POINTS = ("mid_merge", "mid_merge_table", "mid_schema_change", "mid_derive", "mid_outputs")
# Where a paused zombie is most dangerous: holding a plan, a staged window, or an ack about to commit.
ZOMBIE_POINTS = ("after_plan", "after_stage", "after_merge", "before_ack", "mid_ack")


def _partial(rig: Rig) -> tuple[int, ...]:
    """A group pipeline's run may also end in a partial failure (some sources landed, one failed: exit 9)."""
    return (RC_PARTIAL,) if hasattr(rig, "sources") else ()


def _expect(r: CliResult, allowed: tuple[int, ...], what: str) -> None:
    if r.rc not in allowed:
        raise AssertionError(f"{what}: exit {r.rc}, expected one of {allowed}:\n{r.explain()}")


# -------------------------------------------------------------------------------------- crashes


def crash_at(rig: Rig, point: str, txns: int = 4, *, require: bool = True, attempts: int = 4) -> str:
    """SIGKILL the run at `point`; with `require`, retry with more workload until the point fires
    (a merge-job point needs a window with two tables, or with deletes)."""
    for attempt in range(1, attempts + 1):
        if txns or attempt > 1:
            rig.write(max(txns, 3))
        rig.let_next_run_take_lease()
        r = rig.run(fault=point)
        rig.check(f"crash at {point} (attempt {attempt}, rc {r.rc})")
        if r.killed:
            if point not in r.fired:
                raise AssertionError(f"run killed, but not at {point}:\n{r.explain()}")
            return f"killed at {point}"
        if point in MERGE_JOB_POINTS and point in r.fired and r.rc in (RC_LAKE, RC_PARTIAL):
            # With real spark-submit the point kills the merge job's driver, a child of the run: the
            # run sees the job die (exit 137) and fails its merge step, retryable, like a lost worker
            # (in a group run: that source's; the others may land, a partial failure).
            return f"merge job killed at {point}"
        _expect(r, (RC_OK,), f"run with fault {point} that did not fire")
        if not require:
            return f"{point} not reached"
    raise AssertionError(f"fault point {point} never fired in {attempts} runs")


def random_kill(rig: Rig, rng: random.Random, txns: int = 6, max_after: float = 15.0) -> str:
    """SIGKILL the run's process group after a random time."""
    rig.write(txns)
    rig.let_next_run_take_lease()
    after = rng.uniform(0.3, max_after)
    r = rig.run(kill_after=after)
    rig.check(f"random kill after {after:.1f}s (rc {r.rc})")
    _expect(r, (RC_OK, -9), "a run killed at a random time")
    return f"killed after {after:.1f}s" if r.timer_killed else f"finished before the kill ({after:.1f}s)"


# ---------------------------------------------------------------------------------------- zombie


def _state(rig: Rig) -> dict[str, Any]:
    """Everything a zombie must not change: ZooKeeper records, staged manifests, Delta logs."""
    co = rig.oracle.coordinator
    zk = {
        "cursor": co.read_cursor().to_dict(),
        "windows": {s: json.dumps(w.to_dict(), sort_keys=True) for s in co.window_record_seqs()
                    if (w := co.get_window(s)) is not None},
    }
    files: dict[str, int] = {}
    for base in (rig.lake, rig.staging):
        for p in sorted(base.rglob("*")):
            # Not the merge reports, nor the after-ack pass's due note (a zombie paused inside its pass, after
            # its lease check, may still write either: neither is read as a fact, cdc_core.run.housekeeping).
            if p.is_file() and "/reports/" not in str(p) and p.name != retention.STAGING_DUE_NAME:
                files[str(p.relative_to(base.parent))] = p.stat().st_size
    return {"zk": zk, "files": files}


def _diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    if before["zk"] != after["zk"]:
        out.append(f"ZooKeeper changed: {before['zk']} -> {after['zk']}")
    for f in sorted(set(before["files"]) | set(after["files"])):
        if before["files"].get(f) != after["files"].get(f):
            out.append(f"{f}: {before['files'].get(f)} -> {after['files'].get(f)} bytes")
    return out


def zombie(rig: Rig, rng: random.Random, point: str | None = None, txns: int = 5) -> str:
    """A run paused (SIGSTOP) past its lease expiry while another run completes windows; once resumed
    (SIGCONT) it must be fenced and change nothing: cursor, window records, staged files, Delta logs.

    With `point`, the run stops itself at that fault point; without, the test stops it at a random time.
    """
    rig.write(txns)
    rig.let_next_run_take_lease()
    if point is not None:
        a = rig.start_run(windows=1, fault=point, action="stop")
        a.wait_stopped()
        how = f"paused at {point}"
    else:
        a = rig.start_run(windows=1)
        time.sleep(rng.uniform(0.2, 4.0))
        if a.proc.poll() is not None:
            r = a.finish()
            rig.check(f"zombie candidate finished before the pause (rc {r.rc})")
            return "finished before the pause"
        a.stop()
        how = "paused at a random time"
        lease = rig.lease()
        if lease is None or (lease.process or {}).get("pid") != a.pid:
            # Paused before it took the lease (still starting: a slow start-up, an object store's client): not a
            # zombie, a run that has not begun. Resumed, it takes the lease and runs as any run does.
            a.cont()
            r = a.finish()
            rig.runs.append(r)
            _expect(r, (RC_OK,), "a run paused before it took the lease, then resumed")
            rig.check(f"a run paused before taking the lease, resumed (rc {r.rc})")
            return "paused before taking the lease: ran as any run"
    try:
        # Another run takes the live zombie's lease over (its clock past the expiry) and lands windows.
        rig.let_next_run_take_lease()
        rig.write(txns)
        b = rig.run(windows=3)
        _expect(b, (RC_OK,), f"the run taking over from a zombie {how}")
        rig.check(f"took over from a zombie {how}")
        before = _state(rig)
    finally:
        a.cont()
    ra = a.finish()
    rig.runs.append(ra)
    after = _state(rig)
    changed = _diff(before, after)
    if changed:
        raise AssertionError(f"a zombie {how} changed state after resuming:\n  " + "\n  ".join(changed[:20])
                             + f"\n{ra.explain()}")
    # Fenced (5), or stopped on its ZooKeeper session (4); 0 only if it had nothing left to write.
    _expect(ra, (RC_FENCED, RC_COORDINATION, RC_OK), f"the zombie {how}")
    if ra.rc in (RC_FENCED, RC_COORDINATION):  # fenced by the lease token or by its expired session
        rig.oracle.figures.fenced_zombies += 1
    if ra.rc == RC_FENCED and "no longer holds the lease" not in ra.stderr and "fenced" not in ra.stderr.lower():
        raise AssertionError(f"the zombie exited 5 without saying it was fenced:\n{ra.explain()}")
    rig.check(f"zombie {how} resumed (rc {ra.rc})")
    return f"zombie {how}: rc {ra.rc}"


# ------------------------------------------------------------------------------- infrastructure


def _wait_zk(rig: Rig, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not rig.zk_client.connected:
        if time.monotonic() > deadline:
            raise AssertionError("the oracle's ZooKeeper client did not reconnect")
        time.sleep(0.1)


def _run_across(rig: Rig, point: str | None, restart: Any, txns: int, running_for: float = 1.0) -> CliResult:
    """A run with `restart()` done while it is in the middle of a window: paused at `point` (resumed after), or
    `running_for` seconds after it started."""
    rig.write(txns)
    rig.let_next_run_take_lease()
    if point:
        a = rig.start_run(fault=point, action="stop")
        a.wait_stopped()
        restart()
        a.cont()
    else:
        a = rig.start_run()
        time.sleep(running_for)
        restart()
    r = a.finish()
    rig.runs.append(r)
    return r


def zk_restart(rig: Rig, point: str | None = "after_stage", txns: int = 4) -> str:
    """ZooKeeper restarted while a run is in the middle of a window (paused at `point`, or running)."""
    r = _run_across(rig, point, rig.services.restart_zookeeper, txns)
    _wait_zk(rig)
    _expect(r, (RC_OK, RC_COORDINATION, *_partial(rig)), "a run across a ZooKeeper restart")
    rig.check(f"ZooKeeper restarted mid-run at {point} (rc {r.rc})")
    return f"ZooKeeper restart at {point}: rc {r.rc}"


def session_expiry(rig: Rig, point: str = "after_stage", txns: int = 4) -> str:
    """The run's ZooKeeper session is expired from outside (a second client with the same session id,
    started then stopped) while the run is in the middle of a window."""
    from kazoo.client import KazooClient

    rig.write(txns)
    rig.let_next_run_take_lease()
    session_file = rig.workdir / f"zk-session-{time.monotonic_ns()}.json"
    a = rig.start_run(fault=point, action="stop", extra_env={"CDC_TEST_ZK_SESSION_FILE": str(session_file)})
    a.wait_stopped()
    sess = json.loads(session_file.read_text())
    twin = KazooClient(hosts=rig.services.zk_hosts, client_id=(sess["session_id"], bytes.fromhex(sess["password"])))
    twin.start(timeout=30)
    twin.stop()
    twin.close()
    a.cont()
    r = a.finish()
    rig.runs.append(r)
    _expect(r, (RC_OK, RC_COORDINATION, *_partial(rig)), "a run whose session was expired")
    rig.check(f"session expired at {point} (rc {r.rc})")
    return f"session expired at {point}: rc {r.rc}"


def mariadb_restart_mid_stage(rig: Rig, txns: int = 6) -> str:
    """MariaDB restarted while the run is reading a window's binlog (paused at mid_stage)."""
    # A window left pending (and staged) by an earlier step would be replayed without reading the
    # binlog, and the run would never reach mid_stage: finish it first.
    rig.drain("before the MariaDB restart mid-staging")
    rig.write(txns)
    rig.let_next_run_take_lease()
    a = rig.start_run(fault="mid_stage", action="stop")
    a.wait_stopped()
    rig.services.restart_mariadb()
    rig.reconnect()
    a.cont()
    r = a.finish()
    rig.runs.append(r)
    _expect(r, (RC_OK, RC_SOURCE), "a run whose source restarted mid-staging")
    rig.check(f"MariaDB restarted mid-staging (rc {r.rc})")
    return f"MariaDB restart mid-staging: rc {r.rc}"


def mariadb_restart_between(rig: Rig, txns: int = 4) -> str:
    """MariaDB restarted between two windows (the restart rotates the binlog)."""
    rig.write(txns)
    rig.let_next_run_take_lease()
    r1 = rig.run(windows=1)
    _expect(r1, (RC_OK,), "the run before the restart")
    rig.services.restart_mariadb()
    rig.reconnect()
    rig.write(txns)
    r2 = rig.run()
    _expect(r2, (RC_OK,), "the first run after a MariaDB restart")
    rig.check("MariaDB restarted between windows")
    return "MariaDB restart between windows"


def staging_deleted(rig: Rig, rng: random.Random, txns: int = 5) -> str:
    """The staged files of an un-merged window are deleted (all of them, or one Parquet file): the next
    run must re-stage the very same window (the oracle compares the manifest byte for byte)."""
    for _ in range(4):
        rig.write(txns)
        rig.let_next_run_take_lease()
        r = rig.run(fault="after_stage")
        rig.check(f"crash after staging (rc {r.rc})")
        if r.killed:
            break
    else:
        raise AssertionError("after_stage never fired")
    seq = rig.oracle.coordinator.read_cursor().seq + 1
    wdir = rig.staging / rig.name / f"w{seq:010d}"
    parts = sorted(wdir.rglob("*.parquet"))
    if parts and rng.random() < 0.5:
        victim = rng.choice(parts)
        victim.unlink()
        what = f"one file ({victim.name})"
    else:
        shutil.rmtree(wdir)
        what = "the whole window"
    rig.oracle.forget_staged(seq)
    rig.let_next_run_take_lease()
    r2 = rig.run()
    _expect(r2, (RC_OK,), "the run after the staged files were deleted")
    rig.check(f"staged window {seq} deleted ({what}) and re-staged")
    if rig.oracle.figures.restaged_identical < 1:
        raise AssertionError("the deleted window was not re-staged (or not identically)")
    return f"staged window {seq}: {what} deleted, re-staged identically"


def lake_table_deleted(rig: Rig, rng: random.Random, txns: int = 6) -> str:
    """One table's lakehouse directory is deleted: the run must fail clearly (naming the table and the
    backfill that repairs it), change nothing, and `cdc backfill <p> --from <ts>` must repair it."""
    rig.drain("before deleting a lake table")
    present = [t for t in rig.workload.table_names if Path(rig.oracle.table_uri(t)).exists()]
    table = rng.choice(present)
    shutil.rmtree(rig.oracle.table_uri(table))
    rig.oracle.damaged(table)
    for _ in range(6):  # until a window touches the table (others land normally)
        rig.write(txns)
        rig.let_next_run_take_lease()
        r = rig.run()
        rig.check(f"lake table {table} deleted (rc {r.rc})")
        if r.rc == RC_LAKE:
            break
        _expect(r, (RC_OK,), f"a run after {table}'s Delta table was deleted")
    else:
        raise AssertionError(f"no run noticed that {table}'s Delta table is gone")
    if table not in r.stderr or "cdc backfill" not in r.stderr:
        raise AssertionError(f"the error does not name the table and the backfill:\n{r.explain()}")
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rig.created_at - 2))
    rig.let_next_run_take_lease()
    b = rig.cli("backfill", rig.name, "--from", since, "--table", f"{rig.database}.{table}")
    _expect(b, (RC_OK,), "the backfill that repairs the deleted table")
    rig.oracle.repaired(table)
    rig.check(f"backfill from {since} repaired {table}")
    return f"lake table {table} deleted, failed clearly, repaired by backfill"


def run_cleanly(rig: Rig, txns: int = 5) -> str:
    rig.write(txns)
    rig.let_next_run_take_lease()
    r = rig.run()
    _expect(r, (RC_OK, RC_SKIPPED), "a clean run")
    rig.check(f"clean run (rc {r.rc})")
    return "clean run"


# ------------------------------------------------------------------------- shapes' own faults


def merge_server_kill(rig: Rig, rng: random.Random, txns: int = 5, max_after: float = 10.0) -> str:
    """The pipeline's warm merge server (`cdc merge-server`, rig.merge_server) SIGKILLed: either at a point
    inside the merge job (the server is restarted with the point armed once and kills itself there, after its
    first table committed), or at a random time while a run is going on. The run fails its merge step
    retryably (a lake error, never a skip) or had finished first; the server is started again, as its
    supervisor would, and the next run replays the window."""
    server = rig.merge_server
    rig.write(txns)
    rig.let_next_run_take_lease()
    if rng.random() < 0.5:
        point = rng.choice(("mid_merge", "mid_merge_table"))
        marker = rig.workdir / f"server-fault-{time.monotonic_ns()}.fired"
        server.kill()
        server.start(extra_env={"CDC_FAULT": point, "CDC_FAULT_ONCE": str(marker)})
        r = rig.run()
        how = f"at {point}" if marker.exists() else f"armed at {point}, not reached"
    else:
        after = rng.uniform(0.3, max_after)
        a = rig.start_run()
        deadline = time.monotonic() + after
        while a.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()
        r = a.finish()
        rig.runs.append(r)
        how = f"after {after:.1f}s"
    _expect(r, (RC_OK, RC_LAKE, *_partial(rig)), f"a run whose merge server was killed {how}")
    if r.rc != RC_OK and "merge server" not in r.stderr:
        raise AssertionError(f"the run failed on the killed merge server without saying so:\n{r.explain()}")
    if server.proc is not None and server.proc.poll() is not None:  # it killed itself at the point
        server.wait_gone()
    server.close()
    server.start()
    rig.check(f"merge server killed {how} (rc {r.rc})")
    return f"merge server killed {how}: rc {r.rc}"


def object_store_restart(rig: Rig, rng: random.Random, txns: int = 4) -> str:
    """The object store holding the staging area and the lake (rig.store) restarted while a run is in the
    middle of a window: paused at a point (planned, staged, or merged and about to ack), or running. The run
    carries on or stops with a clear staging or lake error; the next run finishes the window."""
    point = rng.choice(("after_plan", "after_stage", "before_ack", None))

    def restart() -> None:
        rig.store.stop()
        rig.store.start()

    r = _run_across(rig, point, restart, txns, running_for=rng.uniform(0.5, 4.0))
    _expect(r, (RC_OK, RC_STAGING, RC_LAKE, *_partial(rig)), "a run across an object-store restart")
    rig.check(f"object store restarted mid-run at {point} (rc {r.rc})")
    return f"object store restart at {point}: rc {r.rc}"


def cluster_worker_kill(rig: Rig, rng: random.Random, txns: int = 5, max_after: float = 20.0) -> str:
    """A worker of the Spark cluster the merges are submitted to (rig.cluster) SIGKILLed with its executors while
    a run is going on (at a random time: before, during or after its merge). Spark re-runs the lost tasks on the
    other worker, or the job fails and the run with it (retryable); either way nothing lands twice. The worker
    is started again after the run."""
    rig.write(txns)
    rig.let_next_run_take_lease()
    worker = rng.choice((1, 2))
    after = rng.uniform(1.0, max_after)
    a = rig.start_run()
    deadline = time.monotonic() + after
    while a.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(rig.cluster.worker_pid(worker), signal.SIGKILL)
    r = a.finish()
    rig.runs.append(r)
    restarted = rig.cluster.script("start")  # the killed worker back
    if restarted.returncode != 0:
        raise AssertionError(f"the cluster's worker {worker} did not start again: {restarted.stderr[-2000:]}")
    _expect(r, (RC_OK, RC_LAKE, *_partial(rig)), f"a run whose cluster lost worker {worker}")
    rig.check(f"cluster worker {worker} killed after {after:.1f}s (rc {r.rc})")
    return f"cluster worker killed after {after:.1f}s: rc {r.rc}"


def _spark_submits(root: int) -> list[int]:
    """The spark-submit JVMs (the merge job's driver, client deploy mode) among `root`'s descendants."""
    from tests.support.merge_server import child_pids

    out, todo = [], child_pids(root)
    while todo:
        pid = todo.pop()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"org.apache.spark.deploy.SparkSubmit" in argv:
            out.append(pid)
        todo += child_pids(pid)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def merge_driver_kill(rig: Rig, rng: random.Random, txns: int = 5, max_after: float = 12.0) -> str:
    """The merge job's driver alone SIGKILLed (the spark-submit JVM a run started, on a local master or the
    cluster; its Python driver dies with it) a random time after it started: the run itself lives on and sees
    its merge fail (exit 8, retryable) or, killed after the job's last commit, fail to read its report (the
    same); or the job finished before the kill came (exit 0). Nothing is acked that did not land; the next
    runs replay the window from its plan and it lands once."""
    rig.write(txns)
    rig.let_next_run_take_lease()
    after = rng.uniform(0.5, max_after)
    a = rig.start_run()
    driver: int | None = None
    while a.proc.poll() is None and driver is None:
        found = _spark_submits(a.proc.pid)
        driver = found[0] if found else None
        time.sleep(0.05)
    killed = False
    if driver is not None:
        deadline = time.monotonic() + after
        while a.proc.poll() is None and _alive(driver) and time.monotonic() < deadline:
            time.sleep(0.05)
        if a.proc.poll() is None and _alive(driver):
            os.kill(driver, signal.SIGKILL)
            killed = True
    r = a.finish()
    rig.runs.append(r)
    _expect(r, (RC_OK, RC_LAKE, *_partial(rig)), "a run whose merge driver was SIGKILLed")
    what = (f"merge driver killed {after:.1f}s into its job" if killed
            else "no merge driver to kill (nothing to merge, or done)")
    rig.check(f"{what} (rc {r.rc})")
    return f"{what}: rc {r.rc}"
