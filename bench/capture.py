"""Capture figures: decoding a binlog range, ours against two references, in the same run.

For each workload (a binlog range holding only its inserts, plus whatever other users of the shared
server wrote meanwhile):

- stock:       the plain python-mysql-replication loop (BinLogStreamReader, resume_stream, non-blocking,
               only_schemas = the workload's database, every row's values touched), stopped at the end;
- mysqlbinlog: `mysqlbinlog --base64-output=DECODE-ROWS -v` over the binlog files on disk with
               --start-position/--stop-position, `### INSERT/UPDATE/DELETE` lines of the table counted;
- ours:        `cdc_core.binlog.read_changes` + `cdc_core.staging.stage_window` to Parquet (the stage
               step of a window planned over exactly the range); plus, to attribute the time,
               `read_changes` alone and the planning scan (`BinlogScanner.scan_transactions` +
               `plan_window`).

Rates are rows of the workload's table per second of wall time.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import BINLOG_DIR, SourceInfo, log, rate, ratio, repeat, short_error
from bench.workloads import Workload


def _pos_key(file: str, offset: int) -> tuple[int, int]:
    return (int(file.rpartition(".")[2]), offset)


# ---------------------------------------------------------------------------------------- stock


def stock_loop(si: SourceInfo, wl: Workload) -> int:
    """The library's own loop over [start, end); returns the rows of the workload's table seen."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import RotateEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    stream = BinLogStreamReader(
        connection_settings={"host": si.host, "port": si.port, "user": si.user, "passwd": si.password},
        server_id=random.randint(2_000_000_001, 2_100_000_000),
        resume_stream=True,
        blocking=False,
        log_file=wl.start_file,
        log_pos=wl.start_pos,
        is_mariadb=False,
        only_schemas=[wl.db],
        enable_logging=False,
    )
    end = _pos_key(wl.end_file, wl.end_pos)
    current = wl.start_file
    rows = 0
    try:
        for ev in stream:
            pk = ev.packet
            if pk.log_pos == 0:  # artificial events
                if isinstance(ev, RotateEvent):
                    current = ev.next_binlog
                continue
            if _pos_key(current, pk.log_pos - pk.event_size) >= end:
                break
            if isinstance(ev, RotateEvent):
                current = ev.next_binlog
                continue
            if isinstance(ev, (WriteRowsEvent, DeleteRowsEvent)):
                mine = ev.table == wl.table
                for row in ev.rows:
                    for _v in row["values"].values():
                        pass
                    rows += mine
            elif isinstance(ev, UpdateRowsEvent):
                mine = ev.table == wl.table
                for row in ev.rows:
                    for _v in row["before_values"].values():
                        pass
                    for _v in row["after_values"].values():
                        pass
                    rows += mine
    finally:
        stream.close()
    return rows


# ---------------------------------------------------------------------------------- mysqlbinlog


def mysqlbinlog_count(wl: Workload) -> int:
    files = [str(BINLOG_DIR / f) for f in wl.files]
    pattern = f"^### (INSERT INTO|UPDATE|DELETE FROM) `{wl.db}`.`{wl.table}`"
    cmd = (
        f"mysqlbinlog --base64-output=DECODE-ROWS -v --start-position={wl.start_pos} --stop-position={wl.end_pos} "
        + " ".join(f"'{f}'" for f in files)
        + f" | grep -c -E '{pattern}'"
    )
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, check=False)
    if p.returncode not in (0, 1):  # grep -c exits 1 on zero matches
        raise RuntimeError(f"mysqlbinlog failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    return int(p.stdout.strip() or 0)


# ------------------------------------------------------------------------------------------ ours


def ours_available() -> str | None:
    """None when cdc_core's reader, planner and staging import; else why not."""
    try:
        import cdc_core.binlog  # noqa: F401
        import cdc_core.staging  # noqa: F401
        import cdc_core.windows  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import problem means "not available yet"
        return short_error(e)
    return None


class Ours:
    """Plan once per workload (timed separately), then read (+ stage) the planned window."""

    def __init__(self, si: SourceInfo, wl: Workload, staging_parent: Path) -> None:
        from cdc_core.source import TableFilter, connect, describe_tables, inspect_source

        self.si = si
        self.wl = wl
        self.params = si.params()
        conn = connect(self.params)
        try:
            self.identity = inspect_source(conn).identity
        finally:
            conn.close()
        self.table_filter = TableFilter(include=(f"{wl.db}.{wl.table}",))
        self._schemas: dict[str, Any] = {}
        self._describe = describe_tables
        self._connect = connect
        self.staging_parent = staging_parent
        self.plan: Any = None

    def schemas(self, schema: str, table: str) -> Any:
        from cdc_core.source import TableFilter

        name = f"{schema}.{table}"
        if name not in self._schemas:
            conn = self._connect(self.params)
            try:
                self._schemas.update(self._describe(conn, TableFilter(include=(name,)), "bench"))
            finally:
                conn.close()
        return self._schemas.get(name)

    def make_plan(self) -> Any:
        from cdc_core.binlog import BinlogScanner
        from cdc_core.positions import BinlogPosition
        from cdc_core.window_plan import WindowCaps
        from cdc_core.windows import plan_window

        wl = self.wl
        start = BinlogPosition(wl.start_file, wl.start_pos, self.identity, gtid=wl.start_gtid)
        scanner = BinlogScanner(self.params, self.identity)
        boundaries = scanner.scan_transactions(wl.start_file, wl.start_pos, wl.start_gtid, 0, stop=(wl.end_file, wl.end_pos))
        caps = WindowCaps(max_events=10**12, max_bytes=10**15, max_transactions=10**12)
        plan = plan_window("bench", 1, start, boundaries, caps, now=0.0)
        if (plan.end.file, plan.end.offset) != (wl.end_file, wl.end_pos):
            raise RuntimeError(
                f"the planned window ends at {plan.end.label()}, not at the workload's end {wl.end_file}:{wl.end_pos}"
            )
        self.plan = plan
        return plan

    def read_only(self) -> int:
        from cdc_core.binlog import read_changes
        from cdc_core.changes import RowChange

        n = 0
        for ch in read_changes(self.params, self.identity, self.plan, self.table_filter, self.schemas):
            if isinstance(ch, RowChange):
                n += 1
        return n

    def read_and_stage(self, staging_root: str) -> int:
        from cdc_core.binlog import read_changes
        from cdc_core.staging import stage_window

        changes = read_changes(self.params, self.identity, self.plan, self.table_filter, self.schemas)
        manifest = stage_window(self.plan, changes, staging_root)
        return int(manifest.changes)


# ------------------------------------------------------------------------------------ the figure


def measure(si: SourceInfo, wl: Workload, repeats: int, long_run: float, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"workload": wl.to_dict(), "errors": []}
    rows = wl.rows

    log(f"capture {wl.label}: stock python-mysql-replication")
    secs, seen = repeat(lambda i: stock_loop(si, wl), repeats, long_run)
    out["stock_rows_per_s"] = rate(rows, secs).to_dict()
    out["stock_seconds"] = secs.to_dict()
    if any(s != rows for s in seen):
        out["errors"].append(f"stock loop saw {seen} rows of the table, expected {rows}")

    log(f"capture {wl.label}: mysqlbinlog")
    secs, seen = repeat(lambda i: mysqlbinlog_count(wl), repeats, long_run)
    out["mysqlbinlog_rows_per_s"] = rate(rows, secs).to_dict()
    out["mysqlbinlog_seconds"] = secs.to_dict()
    if any(s != rows for s in seen):
        out["errors"].append(f"mysqlbinlog printed {seen} row lines of the table, expected {rows}")

    why = ours_available()
    if why is not None:
        out["ours"] = f"not available ({why})"
        return out
    try:
        ours = Ours(si, wl, workdir)
        log(f"capture {wl.label}: ours, planning scan")
        secs, _ = repeat(lambda i: ours.make_plan(), repeats, long_run)
        out["ours_plan_seconds"] = secs.to_dict()
        out["ours_plan_rows_per_s"] = rate(rows, secs).to_dict()
        out["plan"] = {"transactions": ours.plan.transactions, "events": ours.plan.events, "bytes": ours.plan.bytes}

        log(f"capture {wl.label}: ours, read_changes only")
        secs, seen = repeat(lambda i: ours.read_only(), repeats, long_run)
        out["ours_read_rows_per_s"] = rate(rows, secs).to_dict()
        if any(s != rows for s in seen):
            out["errors"].append(f"read_changes yielded {seen} row changes, expected {rows}")

        log(f"capture {wl.label}: ours, read_changes + stage_window")
        roots: list[str] = []

        def before(i: int) -> None:
            roots.append(tempfile.mkdtemp(prefix="stage-", dir=workdir))

        def after(i: int) -> None:
            shutil.rmtree(roots[-1], ignore_errors=True)

        secs, seen = repeat(lambda i: ours.read_and_stage(roots[-1]), repeats, long_run, before=before, after=after)
        out["ours_rows_per_s"] = rate(rows, secs).to_dict()
        out["ours_seconds"] = secs.to_dict()
        if any(s != rows for s in seen):
            out["errors"].append(f"stage_window staged {seen} changes, expected {rows}")
    except Exception as e:  # noqa: BLE001 - record and carry on with the other figures
        out["ours"] = f"failed: {short_error(e)}"
        log(f"  ours failed: {short_error(e)}")
        return out

    ours_med = out["ours_rows_per_s"].get("median")
    out["ratio_ours_to_stock"] = ratio(ours_med, out["stock_rows_per_s"].get("median"))
    out["ratio_ours_to_mysqlbinlog"] = ratio(ours_med, out["mysqlbinlog_rows_per_s"].get("median"))
    out["ratio_read_to_stock"] = ratio(out["ours_read_rows_per_s"].get("median"), out["stock_rows_per_s"].get("median"))
    return out


def run(
    si: SourceInfo, db: str, sizes: list[int], widths: list[int], txn_sizes: list[int], repeats: int,
    long_run: float, workdir: Path,
) -> dict[str, Any]:
    from bench.workloads import generate

    conn = si.root_connect()
    results = []
    workloads: list[Workload] = []
    try:
        serial = 0
        for n in sizes:
            for w in widths:
                for t in txn_sizes:
                    serial += 1
                    log(f"capture: generating {n} rows, {w} cols, {t}-row txns")
                    t0 = time.perf_counter()
                    wl = generate(conn, db, w, t, n, serial)
                    log(f"  generated in {time.perf_counter() - t0:.1f}s: {wl.start_file}:{wl.start_pos} .. "
                        f"{wl.end_file}:{wl.end_pos}")
                    workloads.append(wl)
                    results.append(measure(si, wl, repeats, long_run, workdir))
    finally:
        conn.close()
    return {"workloads": results, "_workloads": workloads}

