"""The initial load against the real MariaDB, ZooKeeper, Spark+Delta (issue 9's acceptance):

- every mapped type (NULLs and edge values) stages from a snapshot chunk exactly as from the binlog;
- chunk bounds partition tables with composite, BIGINT UNSIGNED, string (case-insensitive collation),
  DATETIME, DECIMAL, BINARY, ENUM and nullable full-row keys: every row read once, none skipped;
- a writer thread updates, deletes, inserts and re-keys rows in chunks already read and not yet read
  (and between a chunk's watermark and its read) while the snapshot runs: after the snapshot and the
  following stream windows each Delta table equals its source table, without duplicates;
- a `cdc` process SIGKILLed half-way through staging a chunk (and a run that crashed between merge
  and ack) resume: the pending chunk is replayed exactly, nothing is loaded twice;
- an empty table gets its (empty) Delta table; a table added to the include list later is loaded with
  `cdc snapshot --table`.

Merges run in-process on the module's Spark session (the job's own `merge_window`), except where a
test says otherwise; DAG runs are in tests/e2e.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc_core.capture import snapshot_reads
from cdc_core.capture.binlog import read_changes
from cdc_core.capture.source import SourceParams, TableFilter, connect, describe_tables, inspect_source
from cdc_core.lake import staging
from cdc_core.model import layout, snapshot_state
from cdc_core.model.config import PipelineConfig
from cdc_core.run import snapshot_steps
from cdc_core.run.pipeline import Pipeline
from cdc_core.run.plan import PlannedWindow
from cdc_core.run.verify import compare_table
from spark_apps.merge import merge_window
from tests.support import all_types_mariadb as types_fixture  # the every-type table and rows
from tests.support.source_facts import facts_now

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

CONN_ID = "cdc_source_snapshot_it"


# ------------------------------------------------------------------------------------------ helpers


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def root_db(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET SESSION time_zone = '+00:00'")
    yield conn
    conn.close()


def execute(conn: Any, *statements: str, args: Any = None) -> None:
    with conn.cursor() as cur:
        for s in statements:
            cur.execute(s, args)


class Case:
    """One pipeline over the test's database, ZooKeeper root and directories."""

    def __init__(self, services: Any, db: str, zk_root: str, tmp: Path, zk_client: Any) -> None:
        self.services, self.db, self.zk_root, self.tmp, self.zk_client = services, db, zk_root, tmp, zk_client
        self.name = "snap"
        self.opened: list[Pipeline] = []

    def settings(self, include: list[str], **extra: Any) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": {"conn_id": CONN_ID},
            "tables": {"include": include, **extra.pop("tables", {})},
            "zookeeper": {"hosts": self.services.zk_hosts, "root": self.zk_root},
            "staging_root": str(self.tmp / "staging"),
            "lake_root": str(self.tmp / "lake"),
            "lease_seconds": 60,
            "schedule": None,
            **extra,
        }

    def pipeline(self, include: list[str], **extra: Any) -> Pipeline:
        pc = PipelineConfig.model_validate(self.settings(include, **extra), context={"base_dir": str(self.tmp)})
        p = Pipeline.from_config(pc, SourceParams(**self.services.source_params), zk_client=self.zk_client)
        self.opened.append(p)
        return p

    def write_config(self, include: list[str], **extra: Any) -> Path:
        path = self.tmp / "pipelines.yaml"
        path.write_text(yaml.safe_dump({"pipelines": [self.settings(include, **extra)]}))
        return path

    def cli_env(self) -> dict[str, str]:
        s = self.services
        conn = {"conn_type": "mysql", "host": s.mysql_host, "port": s.mysql_port, "login": s.mysql_user,
                "password": s.mysql_password}
        return {
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn),
        }

    def cli(self, config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cdc_core.cli", "--config", str(config), *args],
            env={**self.cli_env(), **(env or {})}, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
        )

    def close(self) -> None:
        for p in self.opened:
            p.close()


@pytest.fixture
def case(services: Any, source_db: str, zk_root: str, tmp_path: Path, zk_client: Any) -> Iterator[Case]:
    c = Case(services, source_db, zk_root, tmp_path, zk_client)
    yield c
    c.close()


def in_process_merge(spark: Any, p: Pipeline) -> Callable[..., Any]:
    """The merge step with the job's own function on this module's Spark session (no spark-submit)."""

    def merge(grant: Any, seq: int) -> None:
        manifest = p.manifest(seq)
        wdir = layout.window_dir(p.staging_root, p.name, seq)
        merge_window(spark, manifest, wdir, p.lake_root, p.name, seq, grant.token, delete_mode=p.config.delete_mode)

    return merge


def run_window(p: Pipeline, grant: Any, merge: Callable[..., Any]) -> PlannedWindow:
    step = p.plan(grant)
    staged = p.stage(grant, step.seq)
    if not staged.empty:
        merge(grant, step.seq)
    p.ack(grant, step.seq)
    return step


def source_end(services: Any) -> tuple[int, int]:
    end = services.binlog_end()
    return int(str(end["file"]).rpartition(".")[2]), int(end["offset"])


def run_until_caught_up(
    p: Pipeline, merge: Callable[..., Any], services: Any, holder: str = "test", limit: int = 40
) -> list[dict[str, Any]]:
    """Windows until the snapshot is done and the stream has passed the source's end as of now (the
    binlog is shared with other tests, so "an empty window" may never come)."""
    target = source_end(services)
    done: list[dict[str, Any]] = []
    grant = p.acquire(holder)
    try:
        for _ in range(limit):
            done.append(run_window(p, grant, merge).to_dict())
            cursor = p.coordinator.read_cursor()
            assert cursor.position is not None
            at = (int(cursor.position.file.rpartition(".")[2]), cursor.position.offset)
            if at >= target and not p.coordinator.read_snapshot().active:
                return done
    finally:
        p.release(grant)
    raise AssertionError(f"not caught up after {limit} windows: {[(w['seq'], w['kind']) for w in done]}")


def assert_lake_equals_source(conn: Any, p: Pipeline, db: str, table: str, key: tuple[str, ...]) -> None:
    from cdc_core.lake.delta_state import read_rows

    diff = compare_table(conn, db, table, p.table_uri(db, table), key)
    assert diff.equal, diff.summary()
    rows = read_rows(p.table_uri(db, table), columns=list(key)).to_pylist()  # deletion vectors applied
    keys = [tuple(r[k] for k in key) for r in rows]
    assert len(keys) == len(set(keys)) == diff.source_rows, f"{table}: {len(keys)} lake rows, duplicates or missing"


def select_all(conn: Any, table: str, order: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}` ORDER BY {order}")
        return list(cur.fetchall())


# ----------------------------------------------------------------------------- types, no Spark


def test_every_type_stages_from_a_chunk_exactly_as_from_the_binlog(
    params: SourceParams, root_db: Any, source_db: str, staging_dir: Path
) -> None:
    execute(root_db, types_fixture.DDL)
    before = facts_now(params)
    for row in types_fixture.ROWS:
        types_fixture.insert(root_db, row)
    after = facts_now(params)
    name = f"{source_db}.all_types"

    binlog_plan = types_fixture.window(params, before, after)
    items = read_changes(params, after.identity, binlog_plan, TableFilter((name,)), types_fixture.schemas_from(params))
    from_binlog = staging.stage_window(binlog_plan, items, str(staging_dir / "binlog"))

    conn = connect(params)
    try:
        table = describe_tables(conn, TableFilter((name,)), "it")[name]
        identity = inspect_source(conn).identity
    finally:
        conn.close()
    progress = snapshot_state.TableProgress(name, chunk_rows=100)
    plan = snapshot_reads.plan_next_chunk_from_source(
        params, identity, epoch=0, pipeline="it", seq=7, progress=progress, table=table, now=time.time()
    )
    spec = snapshot_state.chunk_of(plan)
    assert spec.last and spec.upper == [3] and plan.start >= types_fixture.start_of(after)
    from_chunk = staging.stage_window(plan, snapshot_reads.read_chunk(params, plan, table), str(staging_dir / "chunk"))

    a = staging.read_table_changes(str(staging_dir / "binlog"), from_binlog, name).to_pylist()
    b = staging.read_table_changes(str(staging_dir / "chunk"), from_chunk, name).to_pylist()
    assert from_chunk.table(name).columns == from_binlog.table(name).columns
    assert len(a) == len(b) == 3
    for x, y in zip(a, b, strict=True):
        assert y["_cdc_op"] == "I" and y["_cdc_version"] == spec.version
        for col in types_fixture.COLUMNS:
            assert x[col] == y[col], f"id {x['id']} column {col}: binlog {x[col]!r}, snapshot {y[col]!r}"
    assert all(r["_cdc_version"] < spec.version for r in a)  # the binlog's inserts are older than the chunk
    selected = types_fixture.select_rows(root_db)
    for r in b:
        types_fixture.assert_same(r, selected[r["id"]], f"snapshot row {r['id']}")


# --------------------------------------------------------------------------- bounds, no Spark

KEY_TABLES = {
    # name: (DDL, rows as SQL values, ORDER BY for the check)
    "comp": (
        "CREATE TABLE comp (a INT NOT NULL, b VARCHAR(8) NOT NULL, v INT, PRIMARY KEY (a, b))",
        [f"({i // 4}, 'k{i % 4}', {i})" for i in range(23)],
    ),
    "ubig": (
        "CREATE TABLE ubig (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, v INT)",
        [f"({v}, 1)" for v in (0, 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 3, 2**64 - 2, 2**64 - 1)],
    ),
    "str": (  # case-insensitive collation, unicode, spaces and quotes in keys
        "CREATE TABLE str (k VARCHAR(20) NOT NULL PRIMARY KEY, v INT) COLLATE utf8mb4_unicode_ci",
        [f"('{k}', 1)" for k in ("a", "B", "c d", "Éclat", "eclair", "z''", "ÿy", "中", "🙂", "x\\\\y", "M")],
    ),
    "moment": (
        "CREATE TABLE moment (at DATETIME(6) NOT NULL, n DECIMAL(10,3) NOT NULL, h BINARY(2) NOT NULL, v INT, "
        "PRIMARY KEY (at, n, h))",
        [f"('2024-01-0{1 + i % 3} 10:00:00.{i:06d}', {i % 2}.125, x'{i % 3:02x}ff', {i})" for i in range(10)],
    ),
    "enumkey": (
        "CREATE TABLE enumkey (e ENUM('zz','b','a') NOT NULL, n INT NOT NULL, PRIMARY KEY (e, n))",
        [f"('{e}', {n})" for e in ("zz", "b", "a") for n in range(3)],
    ),
    "nokey": (  # no primary key: configured as full_row_key, with NULLs in the key columns
        "CREATE TABLE nokey (a INT NULL, b VARCHAR(4) NULL)",
        ["(NULL, NULL)", "(NULL, 'x')", "(1, NULL)", "(1, 'x')", "(1, 'y')", "(2, NULL)", "(NULL, 'a')", "(3, 'z')"],
    ),
    "empty": ("CREATE TABLE empty (id INT PRIMARY KEY)", []),
}


def test_chunk_bounds_read_every_row_once_for_every_kind_of_key(
    params: SourceParams, root_db: Any, source_db: str
) -> None:
    for ddl, rows in KEY_TABLES.values():
        execute(root_db, ddl)
    for table, (_, rows) in KEY_TABLES.items():
        if rows:
            execute(root_db, f"INSERT INTO `{table}` VALUES {', '.join(rows)}")
    conn = connect(params)
    try:
        tables = describe_tables(conn, TableFilter((f"{source_db}.*",)), "it", (f"{source_db}.nokey",))
        identity = inspect_source(conn).identity
    finally:
        conn.close()
    for table in KEY_TABLES:
        name = f"{source_db}.{table}"
        schema = tables[name]
        request = snapshot_state.TableRequest(name, None, 3)
        state = snapshot_state.with_requests(snapshot_state.SnapshotState(), [request], now=1.0, by="it")
        got: list[tuple[Any, ...]] = []
        for seq in range(1, 50):
            cur = state.current()
            if cur is None:
                break
            plan = snapshot_reads.plan_next_chunk_from_source(
                params, identity, epoch=0, pipeline="it", seq=seq, progress=cur, table=schema, now=1.0
            )
            snapshot_state.check_chunk("it", state, plan)
            chunk = snapshot_reads.read_chunk(params, plan, schema)
            rows = [tuple(c.values[n] for n in schema.column_names) for c in chunk]
            assert len(rows) <= 3, f"{table}: chunk {seq} read {len(rows)} rows"
            got += rows
            state = snapshot_state.after_ack(state, plan, len(rows), now=2.0)
        else:
            raise AssertionError(f"{table}: the snapshot never finished")
        with root_db.cursor() as c:
            c.execute("SET SESSION time_zone = '+00:00'")
            c.execute(f"SELECT {snapshot_reads.select_list(schema)} FROM `{table}`")
            norm = snapshot_reads.select_normaliser
            expected = [tuple(norm(col)(v) if norm(col) and v is not None else v
                              for col, v in zip(schema.columns, r, strict=True)) for r in c.fetchall()]
        assert sorted(got, key=repr) == sorted(expected, key=repr), f"{table}: chunks read {got}, table has {expected}"
        chunks = state.table(name).chunks  # type: ignore[union-attr]
        assert chunks == max(1, -(-len(expected) // 3)), f"{table}: {chunks} chunks for {len(expected)} rows"


# ------------------------------------------------------------------- the race, through Delta

RACE_DDL = (
    "CREATE TABLE race (tenant BIGINT UNSIGNED NOT NULL, code VARCHAR(12) NOT NULL, v INT NOT NULL, "
    "note VARCHAR(40) NULL, PRIMARY KEY (tenant, code))"
)
TOP = 2**64 - 1


def race_key(i: int) -> tuple[int, str]:
    return TOP - (i // 10) * 3, f"c{i % 10:02d}"  # gaps between tenants: inserts land inside chunks


class Writer(threading.Thread):
    """Random single-row changes (update, delete, insert, key change) over the whole key range."""

    def __init__(self, services: Any, db: str, n: int) -> None:
        super().__init__(daemon=True)
        self.conn = services.root_connect(db)
        self.stop_event = threading.Event()
        self.rng = random.Random(9)
        self.n = n
        self.ops = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self.stop_event.is_set():
                    tenant, code = race_key(self.rng.randrange(self.n))
                    op = self.rng.random()
                    if op < 0.45:
                        cur.execute("UPDATE race SET v = v + 1, note = %s WHERE tenant = %s AND code = %s",
                                    (f"w{self.ops}", tenant, code))
                    elif op < 0.65:
                        cur.execute("DELETE FROM race WHERE tenant = %s AND code = %s", (tenant, code))
                    elif op < 0.85:
                        cur.execute("INSERT IGNORE INTO race VALUES (%s, %s, 0, 'new')", (tenant - 1, code))
                    else:
                        cur.execute("UPDATE IGNORE race SET code = %s WHERE tenant = %s AND code = %s",
                                    (code + "x", tenant, code))
                    self.ops += 1
                    time.sleep(0.05)  # ~20 changes a second: concurrency, not volume
        except BaseException as e:  # surfaced by the test
            self.error = e
        finally:
            self.conn.close()

    def progress(self, changes: int, timeout: float = 60) -> None:
        """Wait until the writer made `changes` more changes: each pipeline step then races the writer's
        changes, however fast the steps themselves are."""
        want, deadline = self.ops + changes, time.monotonic() + timeout
        while self.ops < want and self.error is None and time.monotonic() < deadline:
            time.sleep(0.01)


def test_concurrent_writes_during_the_snapshot_converge(spark, case: Case, root_db: Any, source_db: str) -> None:  # type: ignore[no-untyped-def]
    n = 600
    execute(root_db, RACE_DDL)
    values = ", ".join(f"({race_key(i)[0]}, '{race_key(i)[1]}', {i}, NULL)" for i in range(n))
    execute(root_db, f"INSERT INTO race VALUES {values}")
    p = case.pipeline([f"{source_db}.race"], snapshot={"chunk_rows": 350})  # start current: snapshot on start
    merge = in_process_merge(spark, p)
    writer = Writer(case.services, source_db, n)
    writer.start()
    kinds: list[str] = []
    grant = p.acquire("race")
    try:
        for _ in range(40):
            writer.progress(8)
            step = p.plan(grant)
            kinds.append(step.kind)
            if step.kind == "snapshot":
                # Deterministic races on top of the writer's: change rows of this very chunk after its
                # watermark and before its read, of a chunk already read, and of one not read yet.
                spec = snapshot_state.chunk_of(p.coordinator.get_window(step.seq).plan)  # type: ignore[union-attr]
                c = spec.chunk
                done_key, this_key = race_key(0), race_key(c * 350 - 175)
                later_key = race_key(min(n - 1, c * 350 + 175))
                execute(
                    root_db,
                    "UPDATE race SET note = 'after W' WHERE tenant = %s AND code = %s",
                    "DELETE FROM race WHERE tenant = %s AND code = %s",
                    args=this_key,
                )
                execute(root_db, "UPDATE race SET v = -1 WHERE tenant = %s AND code = %s", args=done_key)
                execute(root_db, "DELETE FROM race WHERE tenant = %s AND code = %s", args=later_key)
                execute(root_db, "INSERT IGNORE INTO race VALUES (%s, %s, 7, 'reborn')", args=this_key)
            staged = p.stage(grant, step.seq)
            if not staged.empty:
                merge(grant, step.seq)
            p.ack(grant, step.seq)
            if not p.coordinator.read_snapshot().active:
                break
        ops_during_snapshot = writer.ops
    finally:
        writer.stop_event.set()
        writer.join(30)
        p.release(grant)
    assert writer.error is None, writer.error
    assert ops_during_snapshot > 20, "the writer barely ran while the snapshot did"
    assert kinds.count("snapshot") >= 2 and "stream" in kinds, kinds  # chunks interleaved with the stream
    first_stream = kinds.index("stream")
    assert "snapshot" in kinds[first_stream:], f"the stream only ran after the snapshot: {kinds}"
    run_until_caught_up(p, merge, case.services)
    assert_lake_equals_source(root_db, p, source_db, "race", ("tenant", "code"))
    view = snapshot_state.progress_view(p.coordinator.read_snapshot())
    assert view["tables"][0]["status"] == "done" and view["tables"][0]["chunks_done"] >= 2


# ------------------------------------------------------------------------------ kill and resume


def test_a_killed_snapshot_resumes_without_duplicates(spark, case: Case, root_db: Any, source_db: str) -> None:  # type: ignore[no-untyped-def]
    execute(root_db, "CREATE TABLE k (id BIGINT NOT NULL PRIMARY KEY, s VARCHAR(20) NOT NULL, v INT)")
    execute(root_db, "INSERT INTO k VALUES " + ", ".join(f"({i * 7}, 'row {i}', {i})" for i in range(600)))
    include = [f"{source_db}.k"]
    extra = {"snapshot": {"chunk_rows": 300}, "lease_seconds": 3}
    config = case.write_config(include, **extra)
    p = case.pipeline(include, **extra)
    merge = in_process_merge(spark, p)
    first = p.run_cycle("first", max_windows=1, merge=merge)
    assert [w.planned.kind for w in first.windows] == ["snapshot"]

    # A `cdc run` process dies (SIGKILL) after reading chunk 2's rows, before its manifest exists.
    proc = case.cli(config, "run", case.name, "--max-windows", "3", env={"CDC_FAULT": "mid_stage"})
    assert proc.returncode == -9, proc.stdout[-2000:] + proc.stderr[-3000:]
    pending = p.coordinator.pending_window()
    assert pending is not None and pending.plan.kind == "snapshot"
    assert snapshot_state.chunk_of(pending.plan).chunk == 2
    assert staging.read_manifest(p.staging_root, p.name, pending.seq) is None
    execute(root_db, "UPDATE k SET v = -v WHERE id IN (7, 2100, 4193)", "DELETE FROM k WHERE id IN (14, 2107)")

    # The next run breaks the dead run's lease (its process is gone: cdc_core.model.holders, as `cdc run` does),
    # replays chunk 2 exactly, merges it, and crashes before the ack (simulated: it stops there and gives
    # the lease back).
    grant = p.acquire("second", break_dead=True)
    step = p.plan(grant)
    assert step.seq == pending.seq and step.recovered == "replay"
    assert p.coordinator.get_window(pending.seq).plan == pending.plan  # type: ignore[union-attr]
    p.stage(grant, step.seq)
    merge(grant, step.seq)
    p.release(grant)
    assert p.coordinator.read_snapshot().table(f"{source_db}.k").chunks == 1  # type: ignore[union-attr]

    # Recovery acks the landed chunk (its progress moves in the same multi-op), then the rest runs.
    windows = run_until_caught_up(p, merge, case.services, holder="third")
    assert windows[0]["seq"] == pending.seq + 1
    t = p.coordinator.read_snapshot().table(f"{source_db}.k")
    # chunk 2 was read after id 2107 (in its range) was deleted: its bounds are fixed, its rows are current
    assert t is not None and t.status == "done" and t.chunks == 2 and t.rows == 599
    record = p.coordinator.get_window(pending.seq)
    assert record is not None and record.state == "acked" and record.result.get("recovered")
    assert_lake_equals_source(root_db, p, source_db, "k", ("id",))


def test_a_multi_table_snapshot_window_killed_mid_merge_then_completed(  # type: ignore[no-untyped-def]
    spark, case: Case, root_db: Any, source_db: str
) -> None:
    """Small tables share snapshot windows (up to the chunk's row budget), a big one goes chunk by chunk;
    the real merge job (spark-submit, tables merged concurrently) is SIGKILLed after the first table of a
    multi-table window committed; the next run lands the rest; every lake table equals its source."""
    execute(root_db, "CREATE TABLE a_big (id INT PRIMARY KEY, v VARCHAR(20))")
    execute(root_db, "INSERT INTO a_big VALUES " + ", ".join(f"({i}, 'big {i}')" for i in range(1, 151)))
    small = [f"b{i}" for i in range(1, 6)]
    for t in small:
        execute(root_db, f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(20))")
        execute(root_db, f"INSERT INTO {t} VALUES " + ", ".join(f"({i}, '{t} {i}')" for i in range(1, 11)))
    execute(root_db, "CREATE TABLE c_empty (id INT PRIMARY KEY, v VARCHAR(20))")
    tables = ["a_big", *small, "c_empty"]
    include = [f"{source_db}.*"]
    extra = {"snapshot": {"chunk_rows": 100}, "lease_seconds": 3, "spark": {"merge_parallelism": 3}}
    config = case.write_config(include, **extra)
    p = case.pipeline(include, **extra)

    # `cdc run` with the real job: a_big chunk 1 (100 rows) lands alone; the next snapshot window holds
    # a_big's last 50 rows and b1..b5 (10 each): its job is killed once its first table committed.
    proc = case.cli(config, "run", case.name, "--max-windows", "6", env={"CDC_FAULT": "mid_merge"})
    assert proc.returncode == 8, proc.stdout[-2000:] + proc.stderr[-3000:]
    pending = p.coordinator.pending_window()
    assert pending is not None and pending.plan.kind == "snapshot"
    specs = snapshot_state.chunks_of(pending.plan)
    assert [(s.table, s.chunk, s.last) for s in specs] == [(f"{source_db}.a_big", 2, True)] + [
        (f"{source_db}.{t}", 1, True) for t in small
    ]
    versions = p.landed(p.manifest(pending.seq))
    landed = [t for t in ("a_big", *small) if (versions.get(f"{source_db}.{t}") or 0) >= pending.seq]
    assert 1 <= len(landed) < 6, landed  # killed mid-window: some tables committed, not all
    progress = p.coordinator.read_snapshot()
    assert progress.table(f"{source_db}.a_big").chunks == 1  # type: ignore[union-attr]
    assert progress.table(f"{source_db}.b1").chunks == 0  # type: ignore[union-attr]
    execute(root_db, "UPDATE a_big SET v = 'changed' WHERE id IN (1, 140)", "DELETE FROM b2 WHERE id = 3")
    execute(root_db, "INSERT INTO b5 VALUES (99, 'late')")

    # The next run replays the window exactly (the tables that committed are skipped), then the rest.
    p.release(p.acquire("probe", break_dead=True))  # the killed run's lease: broken, its process is gone
    run_until_caught_up(p, in_process_merge(spark, p), case.services, holder="second")
    record = p.coordinator.get_window(pending.seq)
    assert record is not None and record.state == "acked" and record.plan == pending.plan
    state = p.coordinator.read_snapshot()
    rows = {t: state.table(f"{source_db}.{t}") for t in tables}
    assert all(r is not None and r.status == "done" for r in rows.values()), rows
    assert rows["a_big"].chunks == 2 and rows["a_big"].rows == 150  # type: ignore[union-attr]
    assert [rows[t].rows for t in small] == [10] * 5  # type: ignore[union-attr]
    for t in tables:
        assert_lake_equals_source(root_db, p, source_db, t, ("id",))


# ------------------------------------------- types with NULLs, an empty table, a table added later


def test_types_an_empty_table_and_a_table_added_later(spark, case: Case, root_db: Any, source_db: str) -> None:  # type: ignore[no-untyped-def]
    execute(root_db, types_fixture.DDL, "CREATE TABLE nothing (id INT PRIMARY KEY, x VARCHAR(3))",
            "CREATE TABLE later (id INT PRIMARY KEY, label VARCHAR(20) NULL)")
    for row in types_fixture.ROWS:
        types_fixture.insert(root_db, row)
    execute(root_db, "INSERT INTO later VALUES " + ", ".join(f"({i}, {'NULL' if i % 4 else repr(str(i))})"
                                                          for i in range(40)))
    first = [f"{source_db}.all_types", f"{source_db}.nothing"]
    # all_types holds zero dates: landed as NULL knowingly (the default refuses them: test_zero_dates_mariadb.py)
    p = case.pipeline(first, zero_dates="null")
    merge = in_process_merge(spark, p)
    windows = run_until_caught_up(p, merge, case.services)
    assert [w["kind"] for w in windows].count("snapshot") == 1, windows  # both small tables in one window
    assert_lake_equals_source(root_db, p, source_db, "all_types", ("id",))
    assert_lake_equals_source(root_db, p, source_db, "nothing", ("id",))  # an empty Delta table exists

    # `later` joins the include list; its existing rows come from `cdc snapshot --table`.
    execute(root_db, "UPDATE later SET label = 'changed' WHERE id = 3")  # before it is captured: snapshot has it
    both = [*first, f"{source_db}.later"]
    config = case.write_config(both, zero_dates="null")
    proc = case.cli(config, "snapshot", case.name, "--table", f"{source_db}.later", "--max-windows", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["snapshot"]["current"] == f"{source_db}.later" and out["windows"] == []
    p2 = case.pipeline(both, zero_dates="null")
    execute(root_db, "UPDATE later SET label = 'streamed' WHERE id = 5", "DELETE FROM later WHERE id = 6")
    run_until_caught_up(p2, in_process_merge(spark, p2), case.services)
    assert_lake_equals_source(root_db, p2, source_db, "later", ("id",))
    status = case.cli(config, "status", case.name)
    assert status.returncode == 0, status.stderr[-2000:]
    progress = {t["table"]: t for t in json.loads(status.stdout)["snapshot"]["tables"]}
    # 40 rows minus id 6, deleted before the chunk was read (its delete also arrives from the stream)
    assert progress[f"{source_db}.later"]["rows"] == 39 and progress[f"{source_db}.later"]["status"] == "done"
    assert progress[f"{source_db}.nothing"]["rows"] == 0 and progress[f"{source_db}.all_types"]["rows"] == 3



# ------------------------------------------- a snapshot-loaded Delta table deleted, repaired by a snapshot


def test_a_deleted_snapshot_loaded_table_is_repaired_by_a_snapshot(  # type: ignore[no-untyped-def]
    spark, case: Case, root_db: Any, source_db: str
) -> None:
    from cdc_core.lake import delta_state
    from cdc_core.model.errors import LakeError
    from cdc_core.model.lake_registry import LakeRegistry

    execute(root_db, "CREATE TABLE lk (id INT NOT NULL PRIMARY KEY, v INT NOT NULL, s VARCHAR(20) NULL)")
    execute(root_db, "INSERT INTO lk VALUES " + ", ".join(f"({i}, {i}, 'loaded {i}')" for i in range(1, 26)))
    name = f"{source_db}.lk"
    p = case.pipeline([name])  # snapshot on start: the table's first window is a chunk
    merge = in_process_merge(spark, p)
    run_until_caught_up(p, merge, case.services)
    assert_lake_equals_source(root_db, p, source_db, "lk", ("id",))
    first = LakeRegistry.from_dict(p.coordinator.read_lake()).tables[name]
    assert first.first_kind == "snapshot" and first.damaged_at is None

    # The table's directory is deleted; rows change. The next run stops before planning and says how to repair.
    uri = p.table_uri(source_db, "lk")
    shutil.rmtree(uri)
    execute(root_db, "UPDATE lk SET v = -2 WHERE id = 2", "DELETE FROM lk WHERE id = 3")
    seq_before = p.coordinator.read_cursor().seq
    grant = p.acquire("after-delete")
    try:
        with pytest.raises(LakeError) as failed:
            p.plan(grant)
    finally:
        p.release(grant)
    message = str(failed.value)
    assert f"`cdc snapshot {case.name} --table {name}`" in message and "no old binlog" in message, message
    assert f"backfill cannot rebuild {name}" in message, message
    assert p.coordinator.read_cursor().seq == seq_before and p.coordinator.pending_window() is None
    assert LakeRegistry.from_dict(p.coordinator.read_lake()).tables[name].damaged_at == seq_before + 1

    # The snapshot: chunks re-create and fill the table, stream windows keep landing in between.
    grant = p.acquire("repair")
    kinds: list[str] = []
    try:
        snapshot_steps.request(p, grant, [name], chunk_rows=10)
        for i in range(30):
            execute(root_db, "UPDATE lk SET v = v + 100 WHERE id = %s", args=(10 + i % 3,))  # the stream has work
            kinds.append(run_window(p, grant, merge).kind)
            if not p.coordinator.read_snapshot().active:
                break
    finally:
        p.release(grant)
    assert kinds.count("snapshot") >= 3 and "stream" in kinds[kinds.index("snapshot"):], kinds
    run_until_caught_up(p, merge, case.services, holder="after-repair")
    # Rows never changed since the first snapshot are back (they are in no binlog window after it).
    assert_lake_equals_source(root_db, p, source_db, "lk", ("id",))
    entry = LakeRegistry.from_dict(p.coordinator.read_lake()).tables[name]
    assert entry.damaged_at is None and entry.rebuild is None and entry.delta_id == delta_state.table_id(uri)
    assert entry.delta_id != first.delta_id
