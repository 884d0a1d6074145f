"""`python -m bench.freshness`: how long after a commit on the source a row is visible in the lake, under the real
scheduler (issue 37 §4). Never part of the test suite.

The production shape on one machine, every service private (own directories and ports, stopped by PID):
- MariaDB and ZooKeeper (scripts/services.sh), PostgreSQL (scripts/postgres.sh) as Airflow's metadata database,
  S3Proxy (scripts/object_store.sh) holding staging and lake;
- Airflow's API server, scheduler (LocalExecutor) and DAG processor (tests/support/real_airflow.py); the pipeline
  DAG unpaused on a one-minute schedule with `continue_while_behind` (a run that ends behind the source triggers
  the next at once);
- `--merge warm`: a warm merge server (`cdc merge-server`, spark.merge_server.address) lands each window;
  `--merge spark-submit`: one spark-submit per window.

Workload: `--rate` rows/s over `--tables` tables for `--minutes`: every `--tick` seconds one transaction per table
inserts its share of rows (ids ascending per table), and the time its COMMIT returned is the rows' commit time.
A reader polls every table's Delta log on the store every `--poll` seconds (delta-rs; the largest id from the
files' statistics, no data read): a row is visible from the first poll that finds its id. Latency = first seen
- commit; the poll interval bounds the error (reported). After the workload the bench waits until every row is
visible (`--drain-minutes`), then reports p50/p95/p99 and the CPU seconds of each component over the workload
(its processes and their children, from /proc).

    python -m bench.freshness [--tables 50] [--rate 1000] [--minutes 20] [--merge warm|spark-submit]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT, PrivateServices, load_avg, log, machine_info, now_iso

POSTGRES = ROOT / "scripts" / "postgres.sh"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------------ CPU


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text[text.rfind(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(stat.parent.name))
    return kids


def _cpu(pid: int) -> tuple[float, float]:
    """(own utime+stime, reaped children's cutime+cstime) of `pid` in seconds; zeros once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0, 0.0
    f = text[text.rfind(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK, (int(f[13]) + int(f[14])) / CLK_TCK


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds of the trees under `roots`: each live process's own time, plus what the roots' reaped
    children used (a task process LocalExecutor forked and waited for is in the scheduler's cutime)."""
    kids = _children_map()
    total, seen, todo = 0.0, set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        own, reaped = _cpu(pid)
        total += own + reaped
        todo.extend(kids.get(pid, []))
    return total


def _pids_of(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False).stdout
    return [int(x) for x in out.split()]


# --------------------------------------------------------------------------------------------- workload


@dataclass
class Ledger:
    """Per table: the commits (largest id of the transaction, commit time) and what the reader has seen."""

    commits: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    rows_per_commit: dict[str, list[int]] = field(default_factory=dict)
    latencies: list[tuple[float, int]] = field(default_factory=list)  # (seconds, rows)
    next_unseen: dict[str, int] = field(default_factory=dict)  # index into commits
    lock: threading.Lock = field(default_factory=threading.Lock)

    def committed(self, table: str, max_id: int, rows: int, at: float) -> None:
        with self.lock:
            self.commits.setdefault(table, []).append((max_id, at))
            self.rows_per_commit.setdefault(table, []).append(rows)

    def seen(self, table: str, max_id: int, at: float) -> None:
        with self.lock:
            commits = self.commits.get(table, [])
            i = self.next_unseen.get(table, 0)
            while i < len(commits) and commits[i][0] <= max_id:
                self.latencies.append((at - commits[i][1], self.rows_per_commit[table][i]))
                i += 1
            self.next_unseen[table] = i

    def pending(self) -> int:
        with self.lock:
            return sum(len(c) - self.next_unseen.get(t, 0) for t, c in self.commits.items())


def generate(si: Any, db: str, tables: list[str], rate: float, tick: float, until: float, ledger: Ledger,
             stop: threading.Event) -> dict[str, Any]:
    """Steady inserts: per tick one transaction per table with its share of `rate`."""
    conn = si.root_connect(db)
    conn.autocommit(False)
    per_table = rate * tick / len(tables)
    carry = dict.fromkeys(tables, 0.0)
    next_id = dict.fromkeys(tables, 1)
    behind = 0
    t_next = time.time()
    payload = "x" * 24
    try:
        with conn.cursor() as cur:
            while time.time() < until and not stop.is_set():
                for t in tables:
                    carry[t] += per_table
                    n = int(carry[t])
                    if n == 0:
                        continue
                    carry[t] -= n
                    first = next_id[t]
                    cur.executemany(f"INSERT INTO `{t}` (id, tagged_at, v) VALUES (%s, NOW(6), %s)",
                                    [(i, payload) for i in range(first, first + n)])
                    conn.commit()
                    next_id[t] = first + n
                    ledger.committed(t, first + n - 1, n, time.time())
                t_next += tick
                delay = t_next - time.time()
                if delay > 0:
                    time.sleep(delay)
                else:
                    behind += 1
    finally:
        conn.close()
    return {"rows": sum(v - 1 for v in next_id.values()), "ticks_behind": behind}


def read_lake(uris: dict[str, str], options: dict[str, str], poll: float, ledger: Ledger, stop: threading.Event,
              stats: dict[str, Any]) -> None:
    """Poll each table's log; on a new version, the largest id from the files' statistics."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    tables: dict[str, Any] = {}
    versions: dict[str, int] = {}
    polls = 0
    while not stop.is_set():
        started = time.time()
        for name, uri in uris.items():
            try:
                if name not in tables:
                    tables[name] = DeltaTable(uri, storage_options=options)
                else:
                    tables[name].update_incremental()
            except Exception as e:  # not created yet (or the store is busy): the next pass tries again
                stats["read_errors"] = stats.get("read_errors", 0) + 1
                stats["last_read_error"] = str(e)[:200]
                continue
            dt = tables[name]
            version = dt.version()
            if versions.get(name) == version:
                continue
            versions[name] = version
            adds = pa.table(dt.get_add_actions(flatten=True))
            col = adds.column("max.id") if "max.id" in adds.column_names else None
            if col is None or len(col) == 0:
                continue
            ledger.seen(name, int(pc.max(col).as_py() or 0), time.time())
        polls += 1
        stats["poll_seconds_max"] = max(stats.get("poll_seconds_max", 0.0), time.time() - started)
        stop.wait(max(0.0, poll - (time.time() - started)))
    stats["polls"] = polls


def percentiles(latencies: list[tuple[float, int]]) -> dict[str, float]:
    """p50/p95/p99/max of row latencies (each commit's latency weighted by its rows)."""
    ordered = sorted(latencies)
    total = sum(n for _, n in ordered)
    out: dict[str, float] = {}
    for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
        want, acc = q * total, 0
        for sec, n in ordered:
            acc += n
            if acc >= want:
                out[name] = round(sec, 1)
                break
    out["max"] = round(ordered[-1][0], 1) if ordered else 0.0
    out["mean"] = round(sum(s * n for s, n in ordered) / total, 1) if total else 0.0
    return out


# ---------------------------------------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.tables import si_binlog_end
    from cdc_core.lake import object_store
    from cdc_core.model.connections import parse_connection
    from cdc_core.model.naming import path_component
    from tests.support.merge_server import ServerProcess
    from tests.support.object_store import ObjectStore
    from tests.support.ports import free_port
    from tests.support.real_airflow import real_airflow

    work = ROOT / ".local" / f"bench-freshness-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    private = PrivateServices(work / "services", args.mariadb_port, args.zk_port)
    si = private.start()
    store = ObjectStore()
    pg_env = {**os.environ, "CDC_POSTGRES_DIR": str(work / "postgres"), "CDC_POSTGRES_PORT": str(free_port())}
    server: ServerProcess | None = None
    out: dict[str, Any] = {"params": {k: v for k, v in vars(args).items() if k not in ("out", "key")},
                           "load_start": load_avg(), "machine": machine_info()}
    try:
        store.start()
        subprocess.run([str(POSTGRES), "start"], env=pg_env, check=True, capture_output=True, text=True)
        pg_url = subprocess.run([str(POSTGRES), "url"], env=pg_env, check=True, capture_output=True,
                                text=True).stdout.strip()
        db = "fresh_" + uuid.uuid4().hex[:6]
        tables = [f"t{i:03d}" for i in range(args.tables)]
        conn = si.root_connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            for t in tables:
                cur.execute(f"CREATE TABLE `{db}`.`{t}` (id BIGINT PRIMARY KEY, tagged_at DATETIME(6), v VARCHAR(32))")
        conn.close()
        name = "fresh"
        lake = store.url(name, "lake")
        source_conn = {"conn_type": "mysql", "host": si.host, "port": si.port, "login": si.user,
                       "password": si.password}
        spark: dict[str, Any] = {"merge_parallelism": 4}
        if args.merge == "warm":
            address = f"127.0.0.1:{free_port()}"
            spark["merge_server"] = {"address": address}
        config = work / "pipelines.json"
        config.write_text(json.dumps({"pipelines": [{
            "name": name, "source": {"conn_id": "cdc_source_fresh"}, "tables": {"include": [f"{db}.*"]},
            "start": si_binlog_end(si), "snapshot": {"on_start": False},
            "zookeeper": {"hosts": si.zk_hosts, "root": f"/bench-fresh-{uuid.uuid4().hex[:6]}"},
            "staging_root": store.url(name, "staging"), "lake_root": lake, "object_store": {"conn_id": "cdc_s3"},
            "schedule": "* * * * *", "continue_while_behind": True, "retries": 2, "spark": spark,
        }]}, indent=1))
        env = {"CDC_CONFIG": str(config), "AIRFLOW_CONN_CDC_SOURCE_FRESH": json.dumps(source_conn),
               "AIRFLOW_CONN_CDC_S3": store.connection, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg_url,
               "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
               # One pipeline's tasks run one after another: 8 worker processes, not the default 32.
               "AIRFLOW__CORE__PARALLELISM": "8"}
        if args.merge == "warm":
            server = ServerProcess(str(config), name, spark["merge_server"]["address"], work,
                                   base_env={**os.environ, **env})
            server.start()
            log(f"freshness: warm merge server ready on {server.address}")
        storage = object_store.Storage(object_store.from_connection(parse_connection("cdc_s3", store.connection)))
        uris = {t: f"{lake}/{path_component(db)}/{path_component(t)}" for t in tables}
        ledger = Ledger()
        stop_reader, stop_gen = threading.Event(), threading.Event()
        reader_stats: dict[str, Any] = {}
        dag_id = f"cdc_{name}"
        with real_airflow(env) as airflow:
            airflow.login()
            airflow.wait_for_dags([dag_id])
            status, body = airflow.api(f"dags/{dag_id}", {"is_paused": False}, method="PATCH")
            assert status == 200, body
            log(f"freshness: Airflow up, {dag_id} unpaused; {args.rate} rows/s over {args.tables} tables for "
                f"{args.minutes} min ({args.merge})")
            components = {
                "airflow": [p.pid for p in airflow.procs.values()],
                "merge_server": [server.proc.pid] if server is not None and server.proc is not None else [],
                "mariadb": _pids_of(f"mariadbd.*{args.mariadb_port}") or _pids_of("mariadbd"),
                "zookeeper": _pids_of(f"zookeeper.*{work / 'services'}") or _pids_of("zookeeper"),
                "postgres": _pids_of(f"postgres.*{work / 'postgres'}"),
                "object_store": _pids_of(f"s3proxy.*{store.dir}"),
            }
            cpu0 = {k: tree_cpu(v) for k, v in components.items()}
            bench0 = _cpu(os.getpid())[0]
            t0 = time.time()
            reader = threading.Thread(target=read_lake, args=(uris, storage.delta_rs_options(lake) or {},
                                                               args.poll, ledger, stop_reader, reader_stats))
            reader.start()
            gen_out: dict[str, Any] = {}
            until = t0 + args.minutes * 60
            gen = threading.Thread(target=lambda: gen_out.update(
                generate(si, db, tables, args.rate, args.tick, until, ledger, stop_gen)))
            gen.start()
            while gen.is_alive():
                gen.join(timeout=60)
                log(f"freshness: {int(time.time() - t0)} s, {len(ledger.latencies)} commits visible, "
                    f"{ledger.pending()} pending; load {load_avg()}")
            workload_end = time.time()
            deadline = workload_end + args.drain_minutes * 60
            while ledger.pending() and time.time() < deadline:
                time.sleep(2)
            drained = time.time()
            stop_reader.set()
            reader.join()
            cpu1 = {k: tree_cpu(v) for k, v in components.items()}
            bench1 = _cpu(os.getpid())[0]
            runs = airflow.runs(dag_id)
        durations = []
        for r in runs:
            if r.get("start_date") and r.get("end_date"):
                from datetime import datetime

                s = datetime.fromisoformat(r["start_date"].replace("Z", "+00:00"))
                e = datetime.fromisoformat(r["end_date"].replace("Z", "+00:00"))
                durations.append((e - s).total_seconds())
        seconds = workload_end - t0
        out.update(
            latency_seconds=percentiles(ledger.latencies),
            poll_seconds=args.poll,
            reader=reader_stats,
            workload={**gen_out, "seconds": round(seconds, 1), "rows_per_second": round(gen_out.get("rows", 0)
                                                                                     / max(seconds, 1e-9), 1)},
            unseen_commits=ledger.pending(),
            drain_seconds=round(drained - workload_end, 1),
            dag_runs={"count": len(runs), "states": sorted({str(r.get("state")) for r in runs}),
                      "run_types": sorted({str(r.get("run_type")) for r in runs}),
                      "seconds_p50": round(statistics.median(durations), 1) if durations else None,
                      "seconds_max": round(max(durations), 1) if durations else None},
            cpu_seconds={**{k: round(cpu1[k] - cpu0[k], 1) for k in components},
                         "bench_generator_and_reader": round(bench1 - bench0, 1)},
            cpu_share_of_two_cores={k: round((cpu1[k] - cpu0[k]) / (2 * (drained - t0)), 3) for k in components},
            merge_server_rss_mb=_rss_mb(server),
            load_end=load_avg(),
        )
        return out
    finally:
        if server is not None:
            server.close()
        subprocess.run([str(POSTGRES), "stop"], env=pg_env, check=False, capture_output=True, text=True)
        store.stop()
        private.stop()
        subprocess.run(["rm", "-rf", str(work), str(store.dir)], check=False)


def _rss_mb(server: Any) -> float | None:
    """The warm server's resident memory, its JVM included."""
    if server is None or server.proc is None:
        return None
    total = 0
    for pid in [server.proc.pid, *server.jvms]:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return round(total / 1024, 1)


def main(argv: list[str] | None = None) -> int:
    from bench.__main__ import save_section

    p = argparse.ArgumentParser(prog="python -m bench.freshness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", type=int, default=50)
    p.add_argument("--rate", type=float, default=1000.0, help="rows per second over all tables")
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--tick", type=float, default=1.0, help="seconds between one table's transactions")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between the reader's passes over the tables")
    p.add_argument("--drain-minutes", type=float, default=10.0)
    p.add_argument("--merge", choices=("warm", "spark-submit"), default="warm")
    p.add_argument("--mariadb-port", type=int, default=13319)
    p.add_argument("--zk-port", type=int, default=22195)
    p.add_argument("--out", default=str(ROOT / "bench" / "results.json"))
    p.add_argument("--key", default=None, help="section name (default freshness_<merge>)")
    args = p.parse_args(argv)
    started = now_iso()
    section = run(args)
    section.update(command="python -m bench.freshness " + " ".join(argv if argv is not None else sys.argv[1:]),
                   started=started, finished=now_iso())
    save_section(args.out, args.key or f"freshness_{args.merge.replace('-', '_')}", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
