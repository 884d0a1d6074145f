"""Capture figures: staging a binlog range, ours against two references, interleaved in the same run.

For each workload (a binlog range holding only its table's inserts, in files of their own):

- stock:       the plain python-mysql-replication loop (BinLogStreamReader, resume_stream, non-blocking,
               only_schemas = the workload's database, every row's values touched); over at most
               `stock_max_rows` rows of the range (its rate does not depend on the length: ~25 µs per
               value), stopped there;
- mysqlbinlog: `mysqlbinlog --base64-output=DECODE-ROWS -v` over the binlog files on disk with
               --start-position/--stop-position, `### INSERT/UPDATE/DELETE` lines of the table counted;
- ours:        the stage step of a window planned over exactly the range: `read_change_batches` (with
               the product's default decode workers) + `stage_window` to Parquet, from the server;
- ours_hashed: the same stage with 5 non-key columns hashed (transforms: HMAC-SHA-256), the capture cost
               of a transform;
- ours_before: (update workloads, `before_images=True`) the same stage with the updates' before images
               staged too, as for a table whose lake table keeps a change log;
- ours_read:   the same without staging (decoding only), to attribute the time;
- ours_inline / ours_workers: the other worker setting than the default, to show what it buys
               (these two for workloads of at most `extras_max_rows` rows: they double the run time).

Each round runs every variant once, so load from other users of the machine hits them alike; figures
are medians over the rounds. Rates are rows of the workload's table per second of wall time.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import SourceInfo, Stat, log, ratio, short_error
from bench.workloads import Workload

HASHED_COLUMNS = 5  # columns hashed in the `ours_hashed` variant


def _pos_key(file: str, offset: int) -> tuple[int, int]:
    return (int(file.rpartition(".")[2]), offset)


# ---------------------------------------------------------------------------------------- stock


def stock_loop(si: SourceInfo, wl: Workload, max_rows: int) -> int:
    """The library's own loop over [start, end), up to `max_rows` rows of the workload's table."""
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
            if rows >= max_rows:
                break
    finally:
        stream.close()
    return rows


# ---------------------------------------------------------------------------------- mysqlbinlog


def mysqlbinlog_count(si: SourceInfo, wl: Workload) -> int:
    files = [str(si.binlog_dir / f) for f in wl.files]
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


class Ours:
    """Plan once per workload (timed separately), then read (+ stage) the planned window."""

    def __init__(self, si: SourceInfo, wl: Workload) -> None:
        from cdc_core.capture.source import TableFilter, connect, describe_tables, inspect_source

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
        self.plan: Any = None

    def schemas(self, schema: str, table: str) -> Any:
        from cdc_core.capture.source import TableFilter

        name = f"{schema}.{table}"
        if name not in self._schemas:
            conn = self._connect(self.params)
            try:
                self._schemas.update(self._describe(conn, TableFilter(include=(name,)), "bench"))
            finally:
                conn.close()
        return self._schemas.get(name)

    def make_plan(self) -> Any:
        from cdc_core.capture.binlog import BinlogScanner
        from cdc_core.model.positions import BinlogPosition
        from cdc_core.model.window_plan import WindowCaps
        from cdc_core.model.windows import plan_window

        wl = self.wl
        start = BinlogPosition(wl.start_file, wl.start_pos, self.identity, gtid=wl.start_gtid)
        scanner = BinlogScanner(self.params, self.identity)
        boundaries = scanner.scan_transactions(
            wl.start_file, wl.start_pos, wl.start_gtid, 0, stop=(wl.end_file, wl.end_pos)
        )
        caps = WindowCaps(max_events=10**12, max_bytes=10**15, max_transactions=10**12)
        plan = plan_window("bench", 1, start, boundaries, caps, now=0.0)
        if (plan.end.file, plan.end.offset) != (wl.end_file, wl.end_pos):
            raise RuntimeError(
                f"the planned window ends at {plan.end.label()}, not at the workload's end {wl.end_file}:{wl.end_pos}"
            )
        self.plan = plan
        return plan

    def batches(self, workers: int | None, before_images: bool = False) -> Any:
        from cdc_core.capture.binlog import read_change_batches

        return read_change_batches(
            self.params, self.identity, self.plan, self.table_filter, self.schemas, workers=workers,
            before_images=(lambda schema, table: True) if before_images else None,
        )

    def read_only(self, workers: int | None) -> int:
        from cdc_core.model.changes import RowBatch

        return sum(b.rows for b in self.batches(workers) if isinstance(b, RowBatch))

    def stage(self, staging_root: str, workers: int | None, transforms: Any = None, before_images: bool = False) -> int:
        from cdc_core.lake.staging import stage_window

        batches = self.batches(workers, before_images)
        return int(stage_window(self.plan, batches, staging_root, transforms=transforms).changes)

    def hashing(self, columns: int) -> Any:
        """Transforms that hash the table's first `columns` non-key columns (docs/transforms.md)."""
        from cdc_core.model.transforms import TransformRule, Transforms

        table = self.schemas(self.wl.db, self.wl.table)
        names = [c.name for c in table.columns if c.name not in table.key][:columns]
        return Transforms((TransformRule(match=[table.name], hash=names),), b"bench-hash-key-0123456789abcdef")


# ------------------------------------------------------------------------------------ the figure


def measure(
    si: SourceInfo,
    wl: Workload,
    repeats: int,
    long_run: float,
    workdir: Path,
    stock_max_rows: int,
    extras_max_rows: int = 200_000,
    before_images: bool = False,
) -> dict[str, Any]:
    from cdc_core.capture.binlog.columnar_reader import decode_workers

    out: dict[str, Any] = {"workload": wl.to_dict(), "errors": []}
    rows = wl.rows
    try:
        ours = Ours(si, wl)
        t0 = time.perf_counter()
        ours.make_plan()
        out["plan_seconds"] = round(time.perf_counter() - t0, 3)
        out["plan"] = {"transactions": ours.plan.transactions, "events": ours.plan.events, "bytes": ours.plan.bytes}
    except Exception as e:
        out["errors"].append(f"planning failed: {short_error(e)}")
        return out
    default_workers = decode_workers(ours.plan)
    other_workers = 0 if default_workers else 2
    other_name = "ours_inline" if default_workers else "ours_workers"
    out["default_decode_workers"] = default_workers
    stock_rows = min(rows, stock_max_rows)

    def stage_run(workers: int | None, transforms: Any = None, before: bool = False) -> int:
        root = tempfile.mkdtemp(prefix="stage-", dir=workdir)
        try:
            return ours.stage(root, workers, transforms, before)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    hashed = ours.hashing(HASHED_COLUMNS)

    variants: list[tuple[str, Any, int]] = [
        ("stock", lambda: stock_loop(si, wl, stock_max_rows), stock_rows),
        ("mysqlbinlog", lambda: mysqlbinlog_count(si, wl), rows),
        ("ours", lambda: stage_run(None), rows),
        # The capture cost of a transform: the same stage with HASHED_COLUMNS columns hashed (issue 36).
        ("ours_hashed", lambda: stage_run(None, hashed), rows),
    ]
    if before_images:  # the capture cost of a change log: the updates' before images staged too
        variants.append(("ours_before", lambda: stage_run(None, before=True), rows))
    if rows <= extras_max_rows:  # attribution variants: small workloads only (they double the run time)
        variants += [
            ("ours_read", lambda: ours.read_only(None), rows),
            (other_name, lambda: stage_run(other_workers), rows),
        ]
    secs: dict[str, Stat] = {name: Stat(unit="s") for name, _, _ in variants}
    for r in range(repeats):
        longest = 0.0
        for name, fn, expected in variants:
            log(f"capture {wl.label}: round {r + 1}/{repeats}: {name}")
            t0 = time.perf_counter()
            try:
                seen = fn()
            except Exception as e:
                out["errors"].append(f"{name}: {short_error(e)}")
                log(f"  {name} failed: {short_error(e)}")
                continue
            took = time.perf_counter() - t0
            longest = max(longest, took)
            secs[name].values.append(took)
            if seen != expected:
                out["errors"].append(f"{name} saw {seen} rows of the table, expected {expected}")
        if longest > long_run and r + 1 < repeats:
            log(f"  a run took {longest:.0f}s > {long_run:.0f}s: no more rounds for this workload")
            break
    counted = {name: n for name, _, n in variants}
    for name, stat in secs.items():
        out[f"{name}_seconds"] = stat.to_dict()
        out[f"{name}_rows_per_s"] = Stat([counted[name] / s for s in stat.values], "rows/s").to_dict()
    out["stock_rows_measured"] = stock_rows
    med = {name: out[f"{name}_rows_per_s"].get("median") for name, _, _ in variants}
    out["ratio_ours_to_stock"] = ratio(med["ours"], med["stock"])
    out["ratio_ours_to_mysqlbinlog"] = ratio(med["ours"], med["mysqlbinlog"])
    if other_name in med:
        out[f"ratio_{other_name}_to_ours"] = ratio(med[other_name], med["ours"])
    out["hashed_columns"] = HASHED_COLUMNS
    out["hashing_cost"] = ratio(med["ours"], med["ours_hashed"])  # time with hashing / time without
    if before_images:
        out["before_images_cost"] = ratio(med["ours"], med["ours_before"])  # time with before images / without
    return out


def run(
    si: SourceInfo,
    db: str,
    sizes: list[int],
    widths: list[int],
    txn_sizes: list[int],
    repeats: int,
    long_run: float,
    workdir: Path,
    stock_max_rows: int,
    purge: bool = False,
) -> dict[str, Any]:
    from bench.workloads import drop_workload, generate

    conn = si.root_connect()
    results = []
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        serial = 0
        for n in sizes:
            for w in widths:
                for t in txn_sizes:
                    serial += 1
                    log(f"capture: generating {n} rows, {w} cols, {t}-row txns")
                    wl = generate(conn, db, w, t, n, serial)
                    log(
                        f"  generated in {wl.gen_seconds:.1f}s: {wl.start_file}:{wl.start_pos} .. "
                        f"{wl.end_file}:{wl.end_pos}"
                    )
                    results.append(measure(si, wl, repeats, long_run, workdir, stock_max_rows))
                    drop_workload(conn, wl, purge=purge)
    finally:
        conn.close()
    return {"workloads": results}
