"""The warm merge option (issue 18): a one-row window end to end through `cdc run`, default vs warm.

One pipeline, one table of 5 columns. After a warm-up (cursor, the Delta table created), each round
inserts one row and runs `cdc --config X run <pipeline>` with the default merge (spark-submit per window),
then inserts one row and runs it again with `CDC_MERGE_SERVER=<address>` (the warm option: the merge goes
to `cdc merge-server <pipeline>`, started once before the rounds and stopped by its PID at the end). Both
are timed from process start to exit, in alternating rounds, so load from other users hits them alike.
The server's start (until it answers a ping) and its first merge (the JVM's own warm-up of the MERGE code
paths, paid once per server) are reported apart and not counted in the rounds.

`python -m bench.warm [--repeats 5]` runs on private services and merges its section into
bench/results.json as `warm` (bench/RESULTS.md: `python -m bench.report`).

`--soak-windows N` instead keeps one merge server through N successive windows (each touching
`--soak-touch` of `--soak-tables` tables, in rotation) and samples its memory every `--soak-every`
windows: the RSS of the server's Python process and of its JVM, and the JVM's live heap after a full GC
(`jcmd GC.run`, then `jstat -gc`). Saved as `warm_soak`: what a long-running server's memory does.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import ROOT, VENV_BIN, SourceInfo, Stat, load_avg, log, ratio, short_error
from bench.tables import _case, _last_report, _Schema, phases, si_binlog_end
from tests.support.ports import free_port

TARGET_RATIO = 0.25


def _start_server(case: Any, address: str, log_path: Path) -> tuple[subprocess.Popen[bytes], float]:
    from cdc_core.lake import merge_client

    env = _env(case, {})
    t0 = time.time()
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [str(VENV_BIN / "cdc"), "--config", str(case.config_path), "merge-server", case.name, "--listen", address],
            env=env, cwd=ROOT, stdout=out, stderr=out,
        )
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"merge server exited: {log_path.read_text()[-800:]}")
        try:
            merge_client.ping(address, timeout=5)
            return proc, time.time() - t0
        except merge_client.MergeServerUnavailable:
            if time.time() - t0 > 900:
                raise RuntimeError("merge server not ready after 900 s") from None
            time.sleep(0.5)


def _stop_server(proc: subprocess.Popen[bytes] | None) -> int | None:
    if proc is None or proc.poll() is not None:
        return None if proc is None else proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=60)


def _env(case: Any, extra: dict[str, str]) -> dict[str, str]:
    from cdc_core.lake import merge_client

    env = {**case.env, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop(merge_client.ADDRESS_ENV, None)
    return {**env, **extra}


def _run_cli(case: Any, extra: dict[str, str]) -> tuple[float, float, float, subprocess.CompletedProcess[str]]:
    cmd = [str(VENV_BIN / "cdc"), "--config", str(case.config_path), "run", case.name]
    t0 = time.time()
    proc = subprocess.run(cmd, env=_env(case, extra), cwd=ROOT, capture_output=True, text=True, timeout=3600,
                          check=False)
    t1 = time.time()
    return t1 - t0, t0, t1, proc


def _one(case: Any, schema: _Schema, env_extra: dict[str, str]) -> dict[str, Any]:
    schema.touch(1)
    secs, t0, t1, proc = _run_cli(case, env_extra)
    if proc.returncode != 0:
        raise RuntimeError(f"cdc run exit {proc.returncode}: {proc.stderr[-600:]}")
    rep = _last_report(case) or {}
    ph = phases(proc.stderr, t0, t1)
    if "merge_submit" in ph and rep.get("seconds") is not None:
        ph["merge_outside_job"] = ph["merge_submit"] - float(rep["seconds"])
        ph["merge_job_tables"] = float(rep["seconds"])
    windows = json.loads(proc.stdout).get("windows", [])
    return {"seconds": round(secs, 2), "load": load_avg(), "phases": {k: round(v, 2) for k, v in ph.items()},
            "changes": sum(w.get("changes", 0) for w in windows)}


@contextlib.contextmanager
def _bench_case(
    si: SourceInfo, workdir: Path, out: dict[str, Any], tables: int, what: str
) -> Iterator[tuple[_Schema, Any, list[subprocess.Popen[bytes]]]]:
    """A schema of `tables` tables and a pipeline case over it; a failure is recorded in `out`, then the
    merge server (put in the yielded list) is stopped by its PID and the schema and ZooKeeper nodes go."""
    from bench.fixed import _zk_cleanup

    schema = _Schema(si, tables)
    case = _case(si, workdir, what[:2] + "_" + uuid.uuid4().hex[:6], schema.db)
    servers: list[subprocess.Popen[bytes]] = []
    try:
        yield schema, case, servers
    except Exception as e:
        out["errors"].append(short_error(e))
        log(f"  {what} failed: {short_error(e)}")
    finally:
        out["server_exit"] = _stop_server(servers[0] if servers else None)
        schema.drop()
        _zk_cleanup(si.zk_hosts, case.zk_root)
    out["load_end"] = load_avg()


def run(si: SourceInfo, workdir: Path, repeats: int) -> dict[str, Any]:
    from cdc_core.lake import merge_client

    out: dict[str, Any] = {"errors": [], "load_start": load_avg(), "repeats": repeats}
    address = f"127.0.0.1:{free_port()}"
    with _bench_case(si, workdir, out, 1, "bw warm") as (schema, case, servers):
        case.write_config(si_binlog_end(si))
        log("warm: warm-up (cursor, then the Delta table created by spark-submit)")
        _run_cli(case, {})
        out["warmup_default"] = _one(case, schema, {})
        log("warm: starting the merge server")
        server, ready = _start_server(case, address, workdir / "merge-server.log")
        servers.append(server)
        out["server_ready_seconds"] = round(ready, 2)
        warm_env = {merge_client.ADDRESS_ENV: address}
        out["first_warm_window"] = _one(case, schema, warm_env)
        runs: dict[str, list[dict[str, Any]]] = {"default": [], "warm": []}
        stats = {k: Stat(unit="s") for k in runs}
        for r in range(repeats):
            for mode, extra in (("default", {}), ("warm", warm_env)):
                log(f"warm: round {r + 1}/{repeats}: {mode}")
                try:
                    one = _one(case, schema, extra)
                except Exception as e:
                    out["errors"].append(f"{mode} round {r + 1}: {short_error(e)}")
                    continue
                if one["changes"] < 1:
                    out["errors"].append(f"{mode} round {r + 1}: the window carried no change")
                    continue
                runs[mode].append(one)
                stats[mode].values.append(one["seconds"])
        out["window_seconds"] = {k: s.to_dict() for k, s in stats.items()}
        out["runs"] = runs
        out["ratio_warm_to_default"] = ratio(stats["warm"].median, stats["default"].median)
        out["target_ratio"] = TARGET_RATIO
        out["served"] = merge_client.ping(address).get("merges")
    return out


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _jvm_child(pid: int) -> int | None:
    """The JVM the server's pyspark launched (a child process running java)."""
    try:
        out = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(pid)], capture_output=True, text=True,
                             check=False).stdout
    except OSError:
        return None
    for line in out.splitlines():
        child, comm = line.split(None, 1)
        if "java" in comm:
            return int(child)
    return None


def _live_heap_mb(jvm: int) -> float | None:
    """The JVM's heap in use right after a full GC (what it retains), from jstat's old + young gen use."""
    subprocess.run(["jcmd", str(jvm), "GC.run"], capture_output=True, check=False, timeout=120)
    out = subprocess.run(["jstat", "-gc", str(jvm)], capture_output=True, text=True, check=False, timeout=60).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    if len(rows) < 2:
        return None
    gc = dict(zip(rows[0], rows[1], strict=False))
    try:
        used_kb = sum(float(gc[k]) for k in ("S0U", "S1U", "EU", "OU"))
    except (KeyError, ValueError):
        return None
    return round(used_kb / 1024, 1)


def soak(si: SourceInfo, workdir: Path, windows: int, tables: int, touch: int, every: int) -> dict[str, Any]:
    """One merge server through `windows` successive windows; its memory sampled every `every` windows."""
    from cdc_core.lake import merge_client

    out: dict[str, Any] = {"errors": [], "load_start": load_avg(), "windows": windows, "tables": tables,
                           "touch": touch, "samples": []}
    address = f"127.0.0.1:{free_port()}"
    with _bench_case(si, workdir, out, tables, "bs soak") as (schema, case, servers):
        case.write_config(si_binlog_end(si))
        server, ready = _start_server(case, address, workdir / "merge-server.log")
        servers.append(server)
        out["server_ready_seconds"] = round(ready, 2)
        jvm = _jvm_child(server.pid)
        warm_env = {merge_client.ADDRESS_ENV: address}
        secs = Stat(unit="s")
        for w in range(windows):
            schema.touch(touch, first=w * touch)
            one = _one(case, schema, warm_env)
            if one["changes"] < touch:
                out["errors"].append(f"window {w + 1}: {one['changes']} changes, expected {touch}")
            secs.values.append(one["seconds"])
            if w == 0 or (w + 1) % every == 0 or w + 1 == windows:
                sample = {"window": w + 1, "merges": merge_client.ping(address).get("merges"),
                          "python_rss_mb": _rss_mb(server.pid),
                          "jvm_rss_mb": _rss_mb(jvm) if jvm else None,
                          "jvm_live_heap_mb": _live_heap_mb(jvm) if jvm else None,
                          "window_seconds": one["seconds"], "load": load_avg()[0]}
                out["samples"].append(sample)
                log(f"soak: {sample}")
        out["window_seconds"] = secs.to_dict()
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shutil
    import tempfile

    from bench.common import PrivateServices, now_iso, source_info

    p = argparse.ArgumentParser(prog="python -m bench.warm", description=__doc__)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--shared", action="store_true", help="use the running scripts/services.sh services (CDC_* env)")
    p.add_argument("--mariadb-port", type=int, default=13316)
    p.add_argument("--zk-port", type=int, default=22191)
    p.add_argument("--out", default=str(ROOT / "bench" / "results.json"), help="merged into this results file")
    p.add_argument("--key", default=None, help="the section's name in the results file (warm, warm_soak)")
    p.add_argument("--soak-windows", type=int, default=0, help="soak: this many windows through one server")
    p.add_argument("--soak-tables", type=int, default=50)
    p.add_argument("--soak-touch", type=int, default=5, help="soak: tables touched per window (in rotation)")
    p.add_argument("--soak-every", type=int, default=25, help="soak: windows between memory samples")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="cdc-bench-warm-"))
    private = (
        None if args.shared else PrivateServices(ROOT / ".local" / "bench-services", args.mariadb_port, args.zk_port)
    )
    si = private.start() if private is not None else source_info()
    try:
        t0 = time.perf_counter()
        started = now_iso()
        if args.soak_windows:
            section = soak(si, workdir, args.soak_windows, args.soak_tables, args.soak_touch, args.soak_every)
        else:
            section = run(si, workdir, args.repeats)
        section.update(
            command="python -m bench.warm " + " ".join(argv if argv is not None else sys.argv[1:]),
            started=started,
            finished=now_iso(),
            section_seconds=round(time.perf_counter() - t0, 1),
        )
    finally:
        if private is not None:
            private.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    from bench.__main__ import save_section

    save_section(args.out, args.key or ("warm_soak" if args.soak_windows else "warm"), section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
