"""Driving the real `cdc` CLI through faults: one pipeline of its own per scenario (a `Rig`).

A `Rig` bundles what a fault scenario works with: a source database on the (private) MariaDB filled by
a seeded `Workload`, its `Shadow` replay, a pipeline configuration (own ZooKeeper root, lake and
staging directories, a short lease so a crashed run's lease expires quickly, small window caps so a
run spans many windows), and the `Oracle` that checks every invariant after every step.

Runs are `python -m tests.faults.cli_shim --config <cfg> run <pipeline> --max-windows N` subprocesses: the
real CLI (`cdc_core.cli`), with merges sent to the suite's one-JVM merge server (or real
`spark-submit` with `real_spark=True`). Crashes come from the product's fault points (`CDC_FAULT`,
cdc_core/model/faults.py), pauses from `CDC_FAULT_ACTION=stop`, random kills from a timer that SIGKILLs
the run's whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc_core.model import holders
from tests.faults.oracle import Oracle, gtid_seq
from tests.faults.workload import DDL_ALL, DDL_COLUMNS, Shadow, Workload

ROOT = Path(__file__).resolve().parents[2]
CONN_ID = "cdc_source_faults"
STORE_CONN_ID = "cdc_store_faults"
CLUSTER_CONN_ID = "spark_cluster_faults"
_OWN_ENV = ("CDC_FAULT", "CDC_FAULT_ONCE", "CDC_FAULT_ACTION", "CDC_MERGE_SERVER", "CDC_TEST_ZK_SESSION_FILE",
            "CDC_CONFIG")

# Exit codes of `cdc` (cdc_core/cli.py, cdc_core/model/errors.py)
RC_OK, RC_SOURCE, RC_COORDINATION, RC_FENCED, RC_STAGING, RC_LAKE, RC_PARTIAL, RC_SKIPPED = 0, 3, 4, 5, 6, 8, 9, 75
RC_KILLED = -signal.SIGKILL


@dataclass
class CliResult:
    args: list[str]
    rc: int
    stdout: str
    stderr: str
    seconds: float
    fired: list[str] = field(default_factory=list)  # fault points that fired (CDC_FAULT_ONCE marker)
    timer_killed: bool = False

    @property
    def killed(self) -> bool:
        return self.rc == RC_KILLED

    @property
    def report(self) -> dict[str, Any] | None:
        try:
            start = self.stdout.index("{")
            out: dict[str, Any] = json.loads(self.stdout[start:])
            return out
        except ValueError:
            return None

    @property
    def windows(self) -> list[dict[str, Any]]:
        rep = self.report
        return list(rep.get("windows", [])) if rep else []

    def explain(self) -> str:
        return (f"`{' '.join(self.args)}` rc={self.rc} fired={self.fired} timer_killed={self.timer_killed} "
                f"secs={self.seconds:.1f}\n--- stdout ---\n{self.stdout[-3000:]}\n"
                f"--- stderr ---\n{self.stderr[-6000:]}")


class Running:
    """A CLI subprocess in its own process group, with its output in files (it may be stopped for long)."""

    def __init__(self, args: list[str], env: dict[str, str], workdir: Path, marker: Path | None):
        self.args = args
        self.marker = marker
        tag = uuid.uuid4().hex[:8]
        self._out = workdir / f"run-{tag}.out"
        self._err = workdir / f"run-{tag}.err"
        self.t0 = time.monotonic()
        with open(self._out, "w") as out, open(self._err, "w") as err:
            self.proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=out, stderr=err, start_new_session=True)
        self.timer_killed = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def state(self) -> str | None:
        """The kernel's state letter ('T' = stopped), None once it exited."""
        try:
            return Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return None

    def wait_stopped(self, timeout: float = 1800) -> None:
        """Until the process stopped itself at its fault point (CDC_FAULT_ACTION=stop)."""
        deadline = time.monotonic() + timeout
        while self.state() not in ("T", "t"):
            if self.proc.poll() is not None:
                raise AssertionError(f"the run exited (rc {self.proc.returncode}) instead of stopping at its fault "
                                     f"point:\n{self.finish().explain()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the run did not reach its fault point in {timeout}s")
            time.sleep(0.05)

    def stop(self) -> None:
        os.killpg(self.pid, signal.SIGSTOP)

    def cont(self) -> None:
        os.killpg(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)

    def finish(self, timeout: float = 1800, kill_after: float | None = None) -> CliResult:
        if kill_after is not None:
            try:
                self.proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                self.timer_killed = True
                self.kill()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.wait()
        if self.timer_killed or rc == RC_KILLED:
            self.kill()  # the whole group: a spark-submit child must not outlive a "crashed" run
        fired = self.marker.read_text().split() if self.marker is not None and self.marker.exists() else []
        return CliResult(self.args, rc, self._out.read_text(), self._err.read_text(), time.monotonic() - self.t0,
                         fired, self.timer_killed)


@dataclass
class Rig:
    """One scenario's pipeline, source database, shadow, oracle, and the CLI to drive them."""

    services: Any
    workdir: Path
    zk_client: Any
    merge_address: str | None
    seed: int
    lease_seconds: int = 2
    caps: dict[str, int] = field(default_factory=lambda: {"max_events": 400, "max_bytes": 4_000_000,
                                                          "max_transactions": 6})
    windows_per_run: int = 4
    real_spark: bool = False
    tables: tuple[str, ...] | None = None  # write to these workload tables only (fewer tables, cheaper merges)
    # The workload's DDL (tests/faults/workload.py): DDL_COLUMNS, or DDL_ALL (every kind; `tables` are then the
    # tables it starts with), one unit of work in `ddl_every` on average.
    ddl: str = DDL_COLUMNS
    ddl_every: int = 25
    schema_changes: dict[str, Any] | None = None  # the pipeline's `schema_changes:` (None: the default, follow)
    # An S3-compatible store (tests/support/object_store.ObjectStore) for the staging area and the lake, under a
    # prefix of this pipeline's own; None: local directories. The oracle and the scenarios read and damage the
    # store's own files (its filesystem backend), the pipeline goes through S3 with the store's credentials.
    store: Any = None
    merge_server: Any = None  # the product's warm merge server of this pipeline (tests/support/merge_server.py)
    # A Spark standalone cluster (tests/support/spark_cluster.Cluster) the merges are submitted to (with
    # real_spark); None: spark-submit runs them on local[2].
    cluster: Any = None
    name: str = ""
    database: str = ""
    zk_root: str = ""
    runs: list[CliResult] = field(default_factory=list)
    _running: list[Running] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.created_at = time.time()
        tag = uuid.uuid4().hex[:6]
        self.name = self.name or f"f{self.seed}_{tag}"
        self.database = self.database or f"fault_{self.seed}_{tag}"
        self.zk_root = self.zk_root or f"/cdc-faults-{tag}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / "pipelines.json"
        self._storage()
        self.conn = self.services.root_connect()
        with self.conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{self.database}` CHARACTER SET utf8mb4")
        self.start = self.source_end()
        self.write_config()
        self.workload = Workload(self.seed, self.database, ddl=self.ddl, ddl_every=self.ddl_every, tables=self.tables)
        self.workload.create(self.conn)
        self.shadow = Shadow(self.services, self.workload)
        lenient = (self.schema_changes or {}).get("mode") == "lenient"
        self.oracle = Oracle(self.services, self.workload, self.shadow, self.name, self.zk_client, self.zk_root,
                             self.lake, self.staging, lenient=lenient)
        self._n = 0
        self._clock_offset = 0.0  # seconds the next run's lease clock runs ahead (let_next_run_take_lease)

    def _storage(self) -> None:
        """Where the staging area and the lake are: `lake_url`/`staging_url` for the pipeline's configuration,
        `lake`/`staging` the local files the oracle and the scenarios read (the store's own, with a store)."""
        if self.store is not None:
            from tests.support.object_store import BUCKET

            files = self.store.dir / "data" / BUCKET / self.name
            self.lake, self.staging = files / "lake", files / "staging"
            self.lake_url, self.staging_url = self.store.url(self.name, "lake"), self.store.url(self.name, "staging")
            self._store_connection = self.store.connection
        else:
            self.lake = self.workdir / "lake"
            self.staging = self.workdir / "staging"
            self.lake.mkdir(exist_ok=True)
            self.staging.mkdir(exist_ok=True)
            self.lake_url, self.staging_url = str(self.lake), str(self.staging)

    def storage_config(self, spark: dict[str, Any] | None = None) -> dict[str, Any]:
        """The pipeline configuration's storage keys, and its `spark:` section (`spark`, plus the cluster's
        connection when merges go to one)."""
        spark = dict(spark or {})
        if self.cluster is not None:
            spark.update({"conn_id": CLUSTER_CONN_ID,
                          "conf": {"spark.executor.memory": "512m", "spark.cores.max": "2"}})
        return {"staging_root": self.staging_url, "lake_root": self.lake_url,
                **({"object_store": {"conn_id": STORE_CONN_ID}} if self.store is not None else {}),
                **({"spark": spark} if spark else {})}

    def close(self) -> None:
        if self.merge_server is not None:
            self.merge_server.close()
        for running in self._running:  # a test that failed mid-run must not leave a run behind
            if running.proc.poll() is None:
                running.cont()
                running.kill()
                running.proc.wait()
        self.oracle.close()
        self.shadow.close()
        with contextlib.suppress(Exception):
            with self.conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            self.conn.close()
        with contextlib.suppress(Exception):
            self.zk_client.delete(self.zk_root, recursive=True)

    # ---------------------------------------------------------------------------------- source

    def reconnect(self) -> None:
        """After a MariaDB restart."""
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn = self.services.root_connect()
        self.shadow.reconnect(self.services)

    def source_end(self) -> dict[str, Any]:
        return dict(self.services.binlog_end())

    def write(self, transactions: int, tables: tuple[str, ...] | None = None) -> None:
        self.workload.run(self.conn, transactions, None if self.ddl == DDL_ALL else tables or self.tables)

    # ------------------------------------------------------------------------------ the pipeline

    def write_config(self, **overrides: Any) -> None:
        pipeline = {
            "name": self.name,
            "source": {"conn_id": CONN_ID},
            "tables": {"include": [f"{self.database}.*"]},
            "start": self.start,
            "zookeeper": {"hosts": self.services.zk_hosts, "root": self.zk_root},
            "lease_seconds": self.lease_seconds,
            **self.storage_config(),
            "schedule": None,
            "retries": 1,
            "caps": self.caps,
            # The workload writes zero and partial dates (workload.py): land them as NULL knowingly
            # (the default, refuse, would fail the window; docs/type-map.md).
            "zero_dates": "null",
            **({"schema_changes": self.schema_changes} if self.schema_changes else {}),
            **overrides,
        }
        self.config_path.write_text(json.dumps({"pipelines": [pipeline]}, indent=2))

    def connections(self) -> dict[str, Any]:
        """conn_id -> the server it names, for the CLI's environment (a group pipeline has one per source)."""
        return {CONN_ID: self.services}

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
        env.update({
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")]),
            "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYTHONUNBUFFERED": "1",
        })
        for conn_id, s in self.connections().items():
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({
                "conn_type": "mysql", "host": s.mysql_host, "port": s.mysql_port, "login": s.mysql_user,
                "password": s.mysql_password,
            })
        if self.store is not None:
            env[f"AIRFLOW_CONN_{STORE_CONN_ID.upper()}"] = self._store_connection
        if self.cluster is not None:
            env[f"AIRFLOW_CONN_{CLUSTER_CONN_ID.upper()}"] = self.cluster.connection
        if self.merge_address and not self.real_spark:
            env["CDC_MERGE_SERVER"] = self.merge_address
        env.update(extra or {})
        return env

    def start_cli(self, *cdc_args: str, fault: str | None = None, action: str | None = None,
                  extra_env: dict[str, str] | None = None) -> Running:
        self._n += 1
        extra = dict(extra_env or {})
        marker = None
        if fault:
            marker = self.workdir / f"fault-{self._n}.fired"
            extra.update({"CDC_FAULT": fault, "CDC_FAULT_ONCE": str(marker)})
            if action:
                extra["CDC_FAULT_ACTION"] = action
        if self._clock_offset:  # for this run only (let_next_run_take_lease)
            extra.setdefault("CDC_FAULT_CLOCK_OFFSET", f"{self._clock_offset:.3f}")
            self._clock_offset = 0.0
        args = [sys.executable, "-m", "tests.faults.cli_shim", "--config", str(self.config_path), *cdc_args]
        running = Running(args, self.env(extra), self.workdir, marker)
        self._running.append(running)
        return running

    def cli(self, *cdc_args: str, fault: str | None = None, kill_after: float | None = None,
            extra_env: dict[str, str] | None = None, timeout: float = 1800) -> CliResult:
        r = self.start_cli(*cdc_args, fault=fault, extra_env=extra_env).finish(timeout=timeout, kill_after=kill_after)
        self.runs.append(r)
        return r

    def run(self, windows: int | None = None, **kw: Any) -> CliResult:
        return self.cli("run", self.name, "--max-windows", str(windows or self.windows_per_run), **kw)

    def start_run(self, windows: int | None = None, **kw: Any) -> Running:
        return self.start_cli("run", self.name, "--max-windows", str(windows or self.windows_per_run), **kw)

    def lease(self) -> Any:
        return self.oracle.coordinator.read_lease()

    def let_next_run_take_lease(self) -> None:
        """Make sure the next run can take the lease, without sleeping until a crashed run's lease expires.

        A dead holder (a killed run) needs nothing: the next CLI run breaks its lease itself, as in production
        (cdc_core.model.holders). A live one (a paused zombie) is taken over by running the next run's clock
        past the lease's expiry (`CDC_FAULT_CLOCK_OFFSET`, cdc_core.model.faults.clock): what a clock running
        ahead does, which can only fence the holder early."""
        self._clock_offset = 0.0
        lease = self.lease()
        if lease is None or lease.expired(time.time()):
            return
        verdict, _reason = holders.judge_holder(holders.ProcessIdentity.from_dict(lease.process))
        if verdict == "dead":  # exactly when the next CLI run breaks it itself (Pipeline.acquire, break_dead)
            return
        self._clock_offset = lease.expires_at - time.time() + 0.5

    def check(self, label: str, *, final: bool = False) -> None:
        deadline = time.monotonic() + 60
        while not self.zk_client.connected:  # right after a ZooKeeper restart
            if time.monotonic() > deadline:
                raise AssertionError("the oracle's ZooKeeper client did not reconnect")
            time.sleep(0.1)
        self.oracle.check(label, final=final)

    def drain(self, label: str, max_runs: int = 60, transient: int = 3) -> int:
        """Clean runs until one ends with an empty window (the cursor at the source's end); checks each.

        Runs failing with a source/coordination error (a service just restarted) are retried up to
        `transient` times. Returns how many runs it took.
        """
        failures = 0
        for i in range(1, max_runs + 1):
            self.let_next_run_take_lease()
            r = self.run()
            self.check(f"{label}: clean run {i} (rc {r.rc})")
            if r.rc == RC_OK:
                if r.windows and r.windows[-1]["empty"]:
                    return i
                continue
            failures += 1
            if r.rc not in (RC_SOURCE, RC_COORDINATION, RC_SKIPPED) or failures > transient:
                raise AssertionError(f"{label}: a clean run failed:\n{r.explain()}")
            time.sleep(1)
        raise AssertionError(f"{label}: not caught up after {max_runs} runs")

    def finish(self, label: str) -> None:
        """Drain, then the final oracle: the lake equals the real source and the cursor is at its end."""
        self.drain(label)
        self.check(f"{label}: final", final=True)
        # At the source's end: its last transaction (the binlog may hold a later non-transaction event,
        # e.g. MariaDB's asynchronous binlog checkpoint).
        with self.conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            last = str(cur.fetchone()[0])
        cursor = self.oracle.coordinator.read_cursor()
        assert cursor.position is not None
        assert gtid_seq(cursor.position) == int(last.split(",", 1)[0].rsplit("-", 1)[1]), (
            f"{label}: drained, but the cursor {cursor.position.label()} is not after the source's last "
            f"transaction {last}"
        )
