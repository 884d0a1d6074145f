"""Cost per table: windows touching many tables, and initial loads of many small tables, through `cdc run`.

- `windows`: a schema of `--tables-max` tables of 5 columns. After a warm-up (every table created in
  Delta), a window with one changed row in each of k tables (k in `--tables-touched`) is run with
  `cdc --config X run <pipeline>`, timed from process start to exit, `--repeats` times per k in rounds
  (each round runs every k once, so load from other users hits them alike). The CLI's key=value log
  lines and the merge job's report split each run into phases: CLI start (interpreter, imports,
  config), lease + plan, stage, merge (spark-submit: JVM and Spark/Delta session start, then the job's
  own per-table work), ack + release.
- `snapshot`: a new pipeline whose tables (`--snapshot-tables` of them, 100 rows each) are loaded by
  the initial snapshot: `cdc run <pipeline> --max-windows N` until the snapshot is done, timed end to end,
  against the same for a schema of one such table.

Ratios are measured in one run (the same machine load for both sides). `--object-store`: staging and lake
of every pipeline on a private S3Proxy (scripts/object_store.sh), as a production lake would be.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import ROOT, VENV_BIN, SourceInfo, Stat, load_avg, log, ratio, short_error

COLUMNS = "id INT PRIMARY KEY, a INT, b VARCHAR(40), c DOUBLE, d DATETIME"
_LOG_TS = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) \S+ \S+ (.*)$")


def _ts(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def phases(stderr: str, started: float, finished: float) -> dict[str, float]:
    """Split one `cdc run` into phases from its log lines' timestamps (seconds)."""
    events: dict[str, float] = {}
    for line in stderr.splitlines():
        m = _LOG_TS.match(line)
        if not m:
            continue
        ev = m.group(2).split(" ", 1)[0]
        if ev not in events:
            events[ev] = _ts(m.group(1))
    first = min(events.values()) if events else started
    out: dict[str, float] = {"cli_start": first - started}
    acquired = events.get("lease.acquired", first)
    staged = events.get("window.staged") or events.get("snapshot.chunk_staged")
    merging = events.get("window.merging")
    merged = events.get("window.merged")
    if staged:
        out["lease_plan_stage"] = staged - acquired
    if merging and merged:
        out["merge_submit"] = merged - merging
    if merged:
        out["ack_release_exit"] = finished - merged
    return out


class _Schema:
    def __init__(self, si: SourceInfo, tables: int, rows: int = 0) -> None:
        self.si = si
        self.db = f"bench_tables_{uuid.uuid4().hex[:6]}"
        self.names = [f"t{i:04d}" for i in range(tables)]
        self.next_id = {n: rows + 1 for n in self.names}
        conn = si.root_connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{self.db}`")
            for n in self.names:
                cur.execute(f"CREATE TABLE `{self.db}`.`{n}` ({COLUMNS})")
                if rows:
                    cur.executemany(
                        f"INSERT INTO `{self.db}`.`{n}` VALUES (%s, %s, %s, %s, NOW())",
                        [(i, i, f"row {i}", i / 3) for i in range(1, rows + 1)],
                    )
        conn.commit()
        self.conn = conn

    def touch(self, k: int, first: int = 0, change: str = "insert") -> None:
        """One new row in each of k tables from the `first` (wrapping around), one transaction per table;
        `change="delete"`: and the table's previous new row deleted in the same transaction; `change="ddl"`:
        first a column added with a DEFAULT that fills the table's existing rows (a schema change per table)."""
        with self.conn.cursor() as cur:
            for n in [self.names[(first + j) % len(self.names)] for j in range(k)]:
                i = self.next_id[n]
                if change == "ddl":
                    cur.execute(f"ALTER TABLE `{self.db}`.`{n}` ADD COLUMN `x{i}` INT NOT NULL DEFAULT 7")
                cur.execute(f"INSERT INTO `{self.db}`.`{n}` (id, a, b, c, d) VALUES (%s, %s, 'x', 0.5, NOW())", (i, i))
                if change == "delete":
                    cur.execute(f"DELETE FROM `{self.db}`.`{n}` WHERE id = %s", (i - 1,))
                self.conn.commit()
                self.next_id[n] = i + 1

    def drop(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.db}`")
        self.conn.close()


_STORE: Any = None  # --object-store: the running S3Proxy (tests.support.object_store.ObjectStore)
_STORE_CONN = "cdc_s3"


def _case(si: SourceInfo, workdir: Path, name: str, db: str) -> Any:
    from bench.fixed import _Services
    from tests.support.e2e import AirflowHome, CdcCase, airflow_env

    home = workdir / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    case = CdcCase(
        name=name,
        database=db,
        zk_root=f"/bench-tables-{uuid.uuid4().hex[:8]}",
        lake=workdir / "lake",
        staging=workdir / "staging",
        config_path=workdir / "pipelines.json",
        airflow=AirflowHome(home=home, env=airflow_env(home)),
        services=_Services(si),
    )
    case.lake.mkdir(parents=True, exist_ok=True)
    case.staging.mkdir(parents=True, exist_ok=True)
    if _STORE is not None:  # every root on the store: a config written later points there
        write = case.write_config
        roots = {"staging_root": _STORE.url(name, "staging"), "lake_root": _STORE.url(name, "lake"),
                 "object_store": {"conn_id": _STORE_CONN}}
        case.write_config = lambda start, **kw: write(start, **{**kw, **roots})
    return case


def _cli(case: Any, *args: str, timeout: float = 3600) -> tuple[float, float, float, subprocess.CompletedProcess[str]]:
    env = {**case.env, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    if _STORE is not None:
        env[f"AIRFLOW_CONN_{_STORE_CONN.upper()}"] = _STORE.connection
    cmd = [str(VENV_BIN / "cdc"), "--config", str(case.config_path), *args]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    t1 = time.time()
    return t1 - t0, t0, t1, proc


def _last_report(case: Any) -> dict[str, Any] | None:
    if _STORE is not None:
        from tests.support.object_store import fs_for

        fs = fs_for(_STORE)
        fs.invalidate_cache()  # reports of acked windows are deleted: never trust a cached listing
        keys = sorted(k for k in fs.find(_STORE.url(case.name, "staging", case.name, "reports").removeprefix("s3://"))
                      if k.rsplit("/", 1)[-1].startswith("w") and k.endswith(".json"))
        try:
            return json.loads(fs.cat(keys[-1])) if keys else None
        except FileNotFoundError:
            return None
    reports = sorted((case.staging / case.name / "reports").glob("w*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(reports[-1].read_text()) if reports else None


def windows(
    si: SourceInfo, workdir: Path, touched: list[int], repeats: int, overrides: dict[str, Any] | None = None,
    change: str = "insert",
) -> dict[str, Any]:
    from bench.fixed import _zk_cleanup

    out: dict[str, Any] = {"errors": [], "tables_touched": touched, "change": change}
    schema = _Schema(si, max(touched))
    case = _case(si, workdir, "bt_" + uuid.uuid4().hex[:6], schema.db)
    try:
        case.write_config(si_binlog_end(si), **(overrides or {}))
        log("tables: warm-up (cursor, then every Delta table created)")
        _cli(case, "run", case.name)
        schema.touch(max(touched))
        secs, _, _, proc = _cli(case, "run", case.name)
        if proc.returncode != 0:
            raise RuntimeError(f"warm-up failed: {proc.stderr[-800:]}")
        out["warmup_create_seconds"] = round(secs, 2)
        stats = {k: Stat(unit="s") for k in touched}
        detail: dict[int, list[dict[str, Any]]] = {k: [] for k in touched}
        for r in range(repeats):
            for k in touched:
                schema.touch(k, change=change)
                log(f"tables: round {r + 1}/{repeats}: window touching {k} tables")
                secs, t0, t1, proc = _cli(case, "run", case.name)
                if proc.returncode != 0:
                    out["errors"].append(f"{k} tables: exit {proc.returncode}: {proc.stderr[-400:]}")
                    continue
                stats[k].values.append(secs)
                rep = _last_report(case) or {}
                per_table = [t.get("seconds", 0.0) for t in (rep.get("tables") or {}).values()]
                steps: dict[str, float] = {}
                for t in (rep.get("tables") or {}).values():
                    for name, v in (t.get("steps") or {}).items():
                        steps[name] = round(steps.get(name, 0.0) + v, 2)
                ph = phases(proc.stderr, t0, t1)
                if "merge_submit" in ph and rep.get("seconds") is not None:
                    ph["merge_job_jvm_session_exit"] = ph["merge_submit"] - float(rep["seconds"])
                    ph["merge_job_tables"] = float(rep["seconds"])
                if rep.get("session_seconds") is not None:
                    ph["merge_job_session_start"] = float(rep["session_seconds"])
                detail[k].append(
                    {
                        "seconds": round(secs, 2),
                        "load": load_avg(),
                        "phases": {p: round(v, 2) for p, v in ph.items()},
                        "tables_in_report": len(per_table),
                        "table_seconds_sum": round(sum(per_table), 2),
                        "table_seconds_max": round(max(per_table), 2) if per_table else None,
                        "table_steps_sum": steps,
                    }
                )
        out["window_seconds"] = {str(k): s.to_dict() for k, s in stats.items()}
        out["runs"] = {str(k): v for k, v in detail.items()}
        lo, hi = min(touched), max(touched)
        out[f"ratio_{hi}_to_{lo}"] = ratio(stats[hi].median, stats[lo].median)
    except Exception as e:
        out["errors"].append(short_error(e))
        log(f"  tables failed: {short_error(e)}")
    finally:
        schema.drop()
        _zk_cleanup(si.zk_hosts, case.zk_root)
    return out


def si_binlog_end(si: SourceInfo) -> dict[str, Any]:
    from bench.fixed import _Services

    return _Services(si).binlog_end()


def snapshot_load(
    si: SourceInfo, workdir: Path, tables: int, rows: int, overrides: dict[str, Any] | None = None,
    through: str = "cli",
) -> dict[str, Any]:
    """Initial load of `tables` tables of `rows` rows, until done: through `cdc run --max-windows N`, or
    (`through="dags"`) through the pipeline's DAG, one `airflow dags test` run after another (SQLite
    Airflow, spark-submit per window: what a scheduler's successive runs do), timed from the first run."""
    from bench.fixed import _zk_cleanup

    out: dict[str, Any] = {"tables": tables, "rows": rows, "errors": [], "through": through}
    schema = _Schema(si, tables, rows)
    case = _case(si, workdir, "bs_" + uuid.uuid4().hex[:6], schema.db)
    try:
        overrides = dict(overrides or {})  # --config may tune the snapshot too (e.g. max_tables_per_window)
        snapshot = {"on_start": True, **overrides.pop("snapshot", {})}
        case.write_config({"kind": "current"}, snapshot=snapshot, **overrides)
        if through == "dags":
            migrate = case.airflow.airflow("db", "migrate", timeout=900)
            if migrate.returncode != 0:
                raise RuntimeError(f"airflow db migrate failed: {migrate.stderr[-800:]}")
        t_start = time.time()
        runs = windows_total = 0
        while True:
            runs += 1
            if through == "dags":
                result = case.run_pipeline()
                if result.state != "success":
                    raise RuntimeError(f"DAG run {result.run_id} {result.state}: {result.tasks}")
                out.setdefault("dag_runs", []).append({"seconds": result.seconds, "tasks": result.tasks})
                windows_total += 1 if result.tasks.get("ack_window") == "success" else 0
            else:
                _, t0, t1, proc = _cli(case, "run", case.name, "--max-windows", "1000")
                if proc.returncode != 0:
                    raise RuntimeError(f"cdc run failed (exit {proc.returncode}): {proc.stderr[-800:]}")
                windows_total += len(json.loads(proc.stdout)["windows"])
                # Where the last `cdc run` went (with one window per run: the whole load).
                ph = phases(proc.stderr, t0, t1)
                rep = _last_report(case) or {}
                if "merge_submit" in ph and rep.get("seconds") is not None:
                    ph["merge_job_jvm_session_exit"] = ph["merge_submit"] - float(rep["seconds"])
                    ph["merge_job_tables"] = float(rep["seconds"])
                out["phases_last_run"] = {k: round(v, 2) for k, v in ph.items()}
            _, _, _, st = _cli(case, "status", case.name)
            status = json.loads(st.stdout) if st.returncode == 0 else {}
            snap = status.get("snapshot") or {}
            if not snap.get("active") or runs > 50:
                break
        out["seconds"] = round(time.time() - t_start, 2)
        out["cli_runs" if through == "cli" else "dag_runs_count"] = runs
        out["windows"] = windows_total
        out["load"] = load_avg()
        if _STORE is not None:
            prefix = f"{case.name}/lake/{schema.db}"
            out["lake_tables"] = len({k.split("/", 1)[0] for k in _STORE.objects(prefix) if "/_delta_log/" in k})
        else:
            lake_db = case.lake / schema.db
            out["lake_tables"] = sum(1 for _ in lake_db.iterdir()) if lake_db.exists() else 0
    except Exception as e:
        out["errors"].append(short_error(e))
        log(f"  snapshot load failed: {short_error(e)}")
    finally:
        schema.drop()
        _zk_cleanup(si.zk_hosts, case.zk_root)
    return out


def run(
    si: SourceInfo,
    workdir: Path,
    touched: list[int],
    repeats: int,
    snapshot_tables: list[int],
    snapshot_rows: int = 100,
    overrides: dict[str, Any] | None = None,
    dag_tables: list[int] | None = None,
    change: str = "insert",
) -> dict[str, Any]:
    out: dict[str, Any] = {"load_start": load_avg()}
    if touched:
        out["windows"] = windows(si, workdir / "windows", touched, repeats, overrides, change)
    loads = {}
    for n in snapshot_tables:
        log(f"tables: initial load of {n} tables x {snapshot_rows} rows")
        loads[str(n)] = snapshot_load(si, workdir / f"snap{n}", n, snapshot_rows, overrides)
    if loads:
        out["snapshot"] = loads
        if len(snapshot_tables) >= 2:
            lo, hi = str(min(snapshot_tables)), str(max(snapshot_tables))
            out["snapshot"][f"ratio_{hi}_to_{lo}"] = ratio(loads[hi].get("seconds"), loads[lo].get("seconds"))
    for n in dag_tables or []:
        log(f"tables: initial load of {n} tables x {snapshot_rows} rows through DAG runs")
        out.setdefault("snapshot_dags", {})[str(n)] = snapshot_load(
            si, workdir / f"snapdag{n}", n, snapshot_rows, overrides, through="dags"
        )
    out["load_end"] = load_avg()
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.tables`: runs on private services, merges its section into bench/results.json."""
    import argparse
    import shutil
    import tempfile

    from bench.common import PrivateServices, now_iso

    p = argparse.ArgumentParser(prog="python -m bench.tables", description=__doc__)
    p.add_argument("--tables-touched", default="1,30,100", help="windows: tables touched per window")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--snapshot-tables", default="1,300", help="initial loads: tables of --snapshot-rows rows")
    p.add_argument("--snapshot-rows", type=int, default=100)
    p.add_argument("--snapshot-dag-tables", default="", help="initial loads through DAG runs (airflow dags test)")
    p.add_argument("--change", choices=("insert", "delete", "ddl"), default="insert",
                   help="windows: each touched table gets a new row, or a new row and its previous new row deleted, "
                   "or a new column with a DEFAULT (filling its rows) and a new row")
    p.add_argument("--config", default="{}", help="JSON overrides of the pipeline config (e.g. spark settings)")
    p.add_argument("--object-store", action="store_true", help="staging and lake on a private S3Proxy")
    p.add_argument("--shared", action="store_true", help="use the running scripts/services.sh services (CDC_* env)")
    p.add_argument("--mariadb-port", type=int, default=13316)
    p.add_argument("--zk-port", type=int, default=22191)
    p.add_argument("--out", default=str(ROOT / "bench" / "results.json"), help="merged into this results file")
    p.add_argument("--key", default="tables", help="the section's name in the results file")
    args = p.parse_args(argv)
    touched = [int(x) for x in args.tables_touched.split(",") if x.strip()]
    snaps = [int(x) for x in args.snapshot_tables.split(",") if x.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="cdc-bench-tables-"))
    from bench.common import source_info

    private = (
        None if args.shared else PrivateServices(ROOT / ".local" / "bench-services", args.mariadb_port, args.zk_port)
    )
    si = private.start() if private is not None else source_info()
    global _STORE  # noqa: PLW0603 - one bench run, one store: read by _case, _cli and _last_report
    if args.object_store:
        from tests.support.object_store import ObjectStore

        _STORE = ObjectStore()
        _STORE.start()
    try:
        t0 = time.perf_counter()
        started = now_iso()
        dag_tables = [int(x) for x in args.snapshot_dag_tables.split(",") if x.strip()]
        section = run(si, workdir, touched, args.repeats, snaps, args.snapshot_rows, json.loads(args.config),
                      dag_tables, args.change)
        section.update(
            command="python -m bench.tables " + " ".join(argv if argv is not None else os.sys.argv[1:]),
            started=started,
            finished=now_iso(),
            section_seconds=round(time.perf_counter() - t0, 1),
        )
    finally:
        if private is not None:
            private.stop()
        if _STORE is not None:
            _STORE.stop()
            shutil.rmtree(_STORE.dir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    from bench.__main__ import save_section

    save_section(args.out, args.key, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
