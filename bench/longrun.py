"""The long run (issue 39 §3, issue 37 §3): a week of one-minute windows, compressed, through one warm merge
server and housekeeping; every long-lived resource sampled, to show what stays flat and what is bounded.

One pipeline over `--tables` tables on private services (MariaDB + ZooKeeper, scripts/services.sh with their
own directory and ports), lake and staging on local disk. Each window: a few transactions on `--touch`
tables in rotation (two inserts, an update of a live row, every other window a delete), then one
`run_cycle` of the product (lease, plan, stage, merge on the warm server, ack with its after-ack cleanup),
in this process, as one Airflow task would run it (a fresh `PipelineGroup` per window). Every
`--maintain-every` windows (default 1,440: once a "day" of a one-minute schedule) `cdc maintain` runs the
maintenance job (OPTIMIZE, VACUUM, the Delta log) as the maintenance DAG does.

Every `--every` windows a sample:
- ZooKeeper: nodes and bytes under the pipeline's root (a walk), by first-level child;
- staging: bytes, files and staged windows on disk;
- Delta, per table (max and sum): log entries (JSON commits), checkpoints, data files on disk, data files
  in the current version (delta-rs), bytes;
- merge server: its Python RSS, its JVM's RSS and live heap (after a full GC: `jcmd GC.run`, `jstat`);
- open files (/proc/<pid>/fd) and RSS of every long-lived process: the merge server and its JVM, MariaDB,
  ZooKeeper, this driver;
- `cdc status` (a fresh process, as an operator runs it) and `cdc verify` (every table equal to its
  source: the run stops at the first difference), each timed;
- the windows' seconds since the last sample (p50, p95, max).

`--pace` stretches the run so that it lasts long enough for the retention floors (below) to bite: each window
starts at least that many seconds after the previous one started (0.6 s: a one-minute schedule compressed 100x, a
week in 1.7 hours); without it windows follow each other as fast as they land.

Retention is set as short as the product allows (`staging_retention_hours: 1`, window records 1 h, at most
`--records-max`) so that what retention bounds is reached within the run; the bounds are stated in the
results (bench/RESULTS-longrun.md). Results are written after every sample, so a run stopped early
(`--minutes`, or a kill) still leaves its figures.

    python -m bench.longrun --windows 10080 --every 500 --maintain-every 720 --pace 0.6 --minutes 140
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import ROOT, SourceInfo, load_avg, log, now_iso, short_error

VENV_BIN = ROOT / ".venv" / "bin"
OUT_JSON = ROOT / "bench" / "results-longrun.json"
OUT_MD = ROOT / "bench" / "RESULTS-longrun.md"
COLUMNS = "id INT PRIMARY KEY, a INT, b VARCHAR(40), c DOUBLE, d DATETIME"


# ------------------------------------------------------------------------------------------- workload


class Workload:
    """Row changes on `tables` tables; which ids are live is tracked so updates and deletes hit rows."""

    def __init__(self, si: SourceInfo, tables: int, seed: int = 7) -> None:
        self.db = f"bench_longrun_{uuid.uuid4().hex[:6]}"
        self.names = [f"t{i:03d}" for i in range(tables)]
        self.live: dict[str, list[int]] = {n: [] for n in self.names}
        self.next_id = dict.fromkeys(self.names, 1)
        self.rng = random.Random(seed)
        self.conn = si.root_connect()
        with self.conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{self.db}`")
            for n in self.names:
                cur.execute(f"CREATE TABLE `{self.db}`.`{n}` ({COLUMNS})")
        self.conn.commit()
        self.changes = 0

    def window(self, w: int, touch: int) -> int:
        """One transaction on each of `touch` tables (in rotation from window w): returns the row changes."""
        n_changes = 0
        with self.conn.cursor() as cur:
            for j in range(touch):
                n = self.names[(w * touch + j) % len(self.names)]
                live = self.live[n]
                for _ in range(2):
                    i = self.next_id[n]
                    self.next_id[n] = i + 1
                    cur.execute(f"INSERT INTO `{self.db}`.`{n}` VALUES (%s, %s, %s, %s, NOW())",
                                (i, w, f"w{w}", self.rng.random()))
                    live.append(i)
                    n_changes += 1
                if len(live) > 2:
                    k = live[self.rng.randrange(len(live) - 2)]
                    cur.execute(f"UPDATE `{self.db}`.`{n}` SET a = %s, b = %s WHERE id = %s", (w, f"u{w}", k))
                    n_changes += 1
                if w % 2 and len(live) > 4:
                    k = live.pop(self.rng.randrange(len(live) - 2))
                    cur.execute(f"DELETE FROM `{self.db}`.`{n}` WHERE id = %s", (k,))
                    n_changes += 1
                self.conn.commit()
        self.changes += n_changes
        return n_changes

    def drop(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.db}`")
        self.conn.close()


# ------------------------------------------------------------------------------------------- sampling


def _fd_count(pid: int | None) -> int | None:
    if not pid:
        return None
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat)."""
    if not pid:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)
    except (OSError, ValueError, IndexError):
        return None


def _pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def zk_usage(hosts: str, root: str) -> dict[str, Any]:
    """Nodes and data bytes under `root`, in all and by first-level child."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts)
    zk.start(timeout=15)
    try:
        by_child: dict[str, list[int]] = {}

        def walk(path: str) -> tuple[int, int]:
            _data, stat = zk.get(path)
            nodes, size = 1, stat.dataLength
            for c in zk.get_children(path):
                n, b = walk(f"{path}/{c}")
                nodes += n
                size += b
            return nodes, size

        total_nodes, total_bytes = 1, 0
        for pipeline_child in zk.get_children(root):
            path = f"{root}/{pipeline_child}"
            for c in zk.get_children(path):
                n, b = walk(f"{path}/{c}")
                by_child.setdefault(c, [0, 0])
                by_child[c][0] += n
                by_child[c][1] += b
                total_nodes += n
                total_bytes += b
            total_nodes += 1
        return {"nodes": total_nodes, "bytes": total_bytes,
                "by_child": {k: {"nodes": v[0], "bytes": v[1]} for k, v in sorted(by_child.items())}}
    finally:
        zk.stop()
        zk.close()


def dir_usage(root: Path) -> dict[str, int]:
    files = size = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            try:
                size += os.stat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:
                pass
    return {"files": files, "bytes": size}


def staging_usage(root: Path) -> dict[str, int]:
    out = dir_usage(root)
    out["windows"] = sum(1 for p in root.rglob("w*") if p.is_dir() and p.name[1:].isdigit())
    return out


def lake_usage(lake: Path) -> dict[str, Any]:
    """Per Delta table under `lake`: log entries, checkpoints, data files on disk and in the current version."""
    from deltalake import DeltaTable

    tables = []
    for log_dir in sorted(lake.rglob("_delta_log")):
        table = log_dir.parent
        entries = sum(1 for p in log_dir.iterdir() if p.suffix == ".json")
        checkpoints = sum(1 for p in log_dir.iterdir() if ".checkpoint" in p.name)
        data = [p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts]
        try:
            active = len(DeltaTable(str(table)).file_uris())
        except Exception:
            active = -1
        tables.append({"table": str(table.relative_to(lake)), "log_entries": entries, "checkpoints": checkpoints,
                       "data_files": len(data), "active_files": active,
                       "bytes": sum(p.stat().st_size for p in data)})

    def agg(k: str) -> dict[str, int]:
        vals = [t[k] for t in tables] or [0]
        return {"max": max(vals), "sum": sum(vals)}

    largest = sorted(tables, key=lambda t: (-t["log_entries"], -t["data_files"]))[:3]
    return {"tables": len(tables), **{k: agg(k) for k in ("log_entries", "checkpoints", "data_files",
                                                            "active_files", "bytes")}, "largest": largest}


def _timed_cli(config: Path, env: dict[str, str], *args: str, timeout: float = 1800) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run([str(VENV_BIN / "cdc"), "--config", str(config), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 2), "exit": proc.returncode}
    if proc.returncode != 0:
        out["error"] = (proc.stderr or proc.stdout)[-800:]
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3)


# ------------------------------------------------------------------------------------------- the run


def longrun(si: SourceInfo, services_dir: Path, workdir: Path, args: Any) -> dict[str, Any]:
    from bench.fixed import _zk_cleanup
    from bench.tables import _case, si_binlog_end
    from bench.warm import _jvm_child, _live_heap_mb, _rss_mb, _start_server, _stop_server
    from cdc_core.cli import run_failure, source_params_for
    from cdc_core.lake import merge_client
    from cdc_core.model.config import load_config
    from cdc_core.model.holders import this_process
    from cdc_core.run.group import PipelineGroup
    from tests.support.ports import free_port

    out: dict[str, Any] = {
        "command": "python -m bench.longrun " + " ".join(sys.argv[1:]), "started": now_iso(),
        "load_start": load_avg(), "settings": vars(args).copy(), "samples": [], "maintenance": [], "errors": [],
    }
    wl = Workload(si, args.tables)
    case = _case(si, workdir, "lr_" + uuid.uuid4().hex[:6], wl.db)
    overrides: dict[str, Any] = {
        "staging_retention_hours": 1,
        "maintenance": {"window_records_retention_hours": 1, "window_records_keep": 100,
                        "window_records_max": args.records_max, "vacuum_retention_hours": 2,
                        "log_retention_hours": 2, "txn_retention_hours": 2},
    }
    if args.parallelism is not None:
        overrides["spark"] = {"merge_parallelism": args.parallelism}
    case.write_config(si_binlog_end(si), **overrides)
    out["config"] = overrides
    address = f"127.0.0.1:{free_port()}"
    server = None
    env = {**os.environ, **case.env, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop(merge_client.ADDRESS_ENV, None)
    deadline = time.monotonic() + args.minutes * 60
    t_start = time.monotonic()
    try:
        server, ready = _start_server(case, address, workdir / "merge-server.log")
        out["server_ready_seconds"] = round(ready, 2)
        jvm = _jvm_child(server.pid)
        os.environ.update(case.env)
        os.environ[merge_client.ADDRESS_ENV] = address
        cfg = load_config(str(case.config_path)).pipeline(case.name)
        holder = f"bench/longrun/{os.getpid()}"
        window_secs: list[float] = []
        landed = 0
        pids = {"mariadb": _pidfile(services_dir / "mariadb" / "mariadb.pid"),
                "zookeeper": _pidfile(services_dir / "zookeeper" / "zookeeper.pid"),
                "merge_server": server.pid, "merge_server_jvm": jvm, "driver": os.getpid()}
        out["pids"] = pids

        def sample(w: int) -> None:
            s: dict[str, Any] = {"window": w, "elapsed_s": round(time.monotonic() - t_start, 1),
                             "elapsed_min": round((time.monotonic() - t_start) / 60, 1),
                                 "load": load_avg()[0], "changes": wl.changes}
            s["windows_s"] = {"p50": _pct(window_secs, 0.5), "p95": _pct(window_secs, 0.95),
                              "max": round(max(window_secs), 3) if window_secs else None, "n": len(window_secs)}
            window_secs.clear()
            s["zookeeper"] = zk_usage(si.zk_hosts, case.zk_root)
            s["staging"] = staging_usage(case.staging)
            s["lake"] = lake_usage(case.lake)
            s["merge_server"] = {"merges": merge_client.ping(address).get("merges"),
                                 "python_rss_mb": _rss_mb(server.pid), "jvm_rss_mb": _rss_mb(jvm) if jvm else None,
                                 "jvm_live_heap_mb": _live_heap_mb(jvm) if jvm else None}
            s["open_files"] = {k: _fd_count(p) for k, p in pids.items()}
            s["rss_mb"] = {k: _rss_mb(p) if p else None for k, p in pids.items()}
            s["cpu_s"] = {k: _cpu_seconds(p) for k, p in pids.items()}
            s["cpu_s"]["merge_server_total"] = round((s["cpu_s"]["merge_server"] or 0)
                                                     + (s["cpu_s"]["merge_server_jvm"] or 0), 1)
            s["status"] = _timed_cli(case.config_path, env, "status", case.name, timeout=300)
            s["verify"] = _timed_cli(case.config_path, env, "verify", case.name, timeout=900)
            out["samples"].append(s)
            log(f"longrun: window {w}: zk {s['zookeeper']['nodes']} nodes/{s['zookeeper']['bytes']} B, staging "
                f"{s['staging']['windows']} windows/{s['staging']['bytes']} B, lake log max "
                f"{s['lake']['log_entries']['max']} files max {s['lake']['data_files']['max']} active max "
                f"{s['lake']['active_files']['max']}, server rss {s['merge_server']['python_rss_mb']}+"
                f"{s['merge_server']['jvm_rss_mb']} MB heap {s['merge_server']['jvm_live_heap_mb']} MB, fds "
                f"{s['open_files']}, status {s['status']['seconds']} s, verify exit {s['verify']['exit']}, "
                f"windows p50 {s['windows_s']['p50']} s")
            if s["verify"]["exit"] != 0 or s["status"]["exit"] != 0:
                raise RuntimeError(f"window {w}: verify exit {s['verify']['exit']}, status exit "
                                   f"{s['status']['exit']}: {s['verify'].get('error') or s['status'].get('error')}")
            save(out)

        next_start = time.monotonic()
        for w in range(1, args.windows + 1):
            if time.monotonic() > deadline:
                out["stopped"] = f"--minutes {args.minutes} reached after {w - 1} windows"
                break
            if args.pace and w > 1:
                time.sleep(max(0.0, next_start - time.monotonic()))
            next_start = time.monotonic() + args.pace
            expected = wl.window(w, args.touch)
            t0 = time.perf_counter()
            g = PipelineGroup.open(cfg, lambda s: source_params_for(cfg, s))
            try:
                result = g.run_cycle(holder, max_windows=1, until_caught_up=True, process=this_process(),
                                     break_dead=True)
            finally:
                g.close()
            window_secs.append(time.perf_counter() - t0)
            failure = run_failure(result)
            if failure is not None:
                raise failure
            changes = sum(x.get("changes", 0) for x in result.to_dict().get("windows", []))
            if changes != expected:
                out["errors"].append(f"window {w}: {changes} changes landed, {expected} made")
            out["windows_landed"] = landed = w
            if args.maintain_every and w % args.maintain_every == 0:
                m = _timed_cli(case.config_path, env, "maintain", case.name, timeout=1800)
                m["window"] = w
                out["maintenance"].append(m)
                log(f"longrun: maintenance after window {w}: exit {m['exit']} in {m['seconds']} s")
                if m["exit"] != 0:
                    out["errors"].append(f"maintenance after window {w}: {m.get('error')}")
            if w == 1 or w % args.every == 0:
                sample(w)
        if landed and (not out["samples"] or out["samples"][-1]["window"] != landed):
            sample(landed)
        out["windows_landed"] = landed
    except Exception as e:
        out["errors"].append(short_error(e, 2000))
        log(f"longrun failed: {short_error(e, 2000)}")
    except KeyboardInterrupt as e:
        out["stopped"] = f"interrupted ({e}) after {out.get('windows_landed', 0)} windows"
    finally:
        out["server_exit"] = _stop_server(server)
        out["finished"] = now_iso()
        out["load_end"] = load_avg()
        out["seconds"] = round(time.monotonic() - t_start, 1)
        save(out)
        wl.drop()
        _zk_cleanup(si.zk_hosts, case.zk_root)
    return out


# ------------------------------------------------------------------------------------------- results


def _series(samples: list[dict[str, Any]], path: str) -> list[Any]:
    vals = []
    for s in samples:
        v: Any = s
        for k in path.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        vals.append(v)
    return vals


ROWS = (  # (label, path in a sample)
    ("minutes since the start", "elapsed_min"),
    ("ZooKeeper nodes", "zookeeper.nodes"),
    ("ZooKeeper bytes", "zookeeper.bytes"),
    ("staged windows", "staging.windows"),
    ("staging bytes", "staging.bytes"),
    ("Delta log entries, max per table", "lake.log_entries.max"),
    ("Delta checkpoints, max per table", "lake.checkpoints.max"),
    ("data files on disk, max per table", "lake.data_files.max"),
    ("data files in the current version, max per table", "lake.active_files.max"),
    ("lake bytes, all tables", "lake.bytes.sum"),
    ("merge server Python RSS, MB", "merge_server.python_rss_mb"),
    ("merge server JVM RSS, MB", "merge_server.jvm_rss_mb"),
    ("merge server JVM live heap, MB", "merge_server.jvm_live_heap_mb"),
    ("open files: merge server", "open_files.merge_server"),
    ("open files: its JVM", "open_files.merge_server_jvm"),
    ("open files: MariaDB", "open_files.mariadb"),
    ("open files: ZooKeeper", "open_files.zookeeper"),
    ("open files: driver", "open_files.driver"),
    ("RSS, MB: ZooKeeper", "rss_mb.zookeeper"),
    ("RSS, MB: MariaDB", "rss_mb.mariadb"),
    ("RSS, MB: driver", "rss_mb.driver"),
    ("CPU seconds so far: merge server + its JVM", "cpu_s.merge_server_total"),
    ("CPU seconds so far: driver (the windows' Python)", "cpu_s.driver"),
    ("`cdc status`, s", "status.seconds"),
    ("`cdc verify`, s", "verify.seconds"),
    ("window p50, s", "windows_s.p50"),
    ("window p95, s", "windows_s.p95"),
)


def render(out: dict[str, Any]) -> str:
    samples = out.get("samples") or []
    lines = [
        "# The long run (bench/longrun.py, issues 39 §3 and 37 §3)",
        "",
        f"`{out.get('command')}`, {out.get('started')} to {out.get('finished')}; load average "
        f"{out.get('load_start')} at start, {out.get('load_end')} at end. Windows landed: "
        f"{out.get('windows_landed')}; {out.get('stopped') or ''} Errors: {out.get('errors') or 'none'}.",
        "",
    ]
    if not samples:
        return "\n".join(lines) + "\n"
    lines += ["| after window | " + " | ".join(str(s["window"]) for s in samples) + " |",
              "|---|" + "---|" * len(samples)]
    for label, path in ROWS:
        vals = _series(samples, path)
        lines.append(f"| {label} | " + " | ".join("-" if v is None else str(v) for v in vals) + " |")
    lines += ["", "Maintenance runs (`cdc maintain`): "
              + (", ".join(f"after window {m['window']}: exit {m['exit']}, {m['seconds']} s"
                           for m in out.get("maintenance") or []) or "none"), ""]
    return "\n".join(lines) + "\n"


def save(out: dict[str, Any]) -> None:
    OUT_JSON.write_text(json.dumps(out, indent=1, default=str) + "\n")
    OUT_MD.write_text(render(out))


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shutil
    import signal
    import tempfile

    from bench.common import PrivateServices

    p = argparse.ArgumentParser(prog="python -m bench.longrun", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--windows", type=int, default=10_080, help="windows to land (10,080: a week at one a minute)")
    p.add_argument("--every", type=int, default=500, help="windows between samples")
    p.add_argument("--tables", type=int, default=20)
    p.add_argument("--touch", type=int, default=3, help="tables changed per window, in rotation")
    p.add_argument("--maintain-every", type=int, default=1440, help="windows between `cdc maintain` runs (0: none)")
    p.add_argument("--records-max", type=int, default=1000, help="maintenance.window_records_max")
    p.add_argument("--parallelism", type=int, default=None,
                   help="spark.merge_parallelism (merge and maintenance writer threads; default: the product's)")
    p.add_argument("--pace", type=float, default=0.0,
                   help="seconds from one window's start to the next's at least (0: back to back)")
    p.add_argument("--minutes", type=float, default=600, help="stop after this many minutes, whatever is left")
    p.add_argument("--mariadb-port", type=int, default=13309)
    p.add_argument("--zk-port", type=int, default=22197)
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # a kill still stops the server and services it started
    services_dir = ROOT / ".local" / "bench-longrun-services"
    private = PrivateServices(services_dir, args.mariadb_port, args.zk_port)
    workdir = Path(tempfile.mkdtemp(prefix="cdc-bench-longrun-", dir=ROOT / ".local"))
    si = private.start()
    try:
        out = longrun(si, services_dir, workdir, args)
    finally:
        private.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    log(f"longrun: {out.get('windows_landed')} windows, errors: {out.get('errors')}")
    return 0 if not out.get("errors") else 1


if __name__ == "__main__":
    raise SystemExit(main())
