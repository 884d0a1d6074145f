"""MariaDB 11.4, the current long-term release, as a source: what it writes differently from Debian's 10.11.

- A transaction's events reach the binlog without their position (binlog_legacy_event_pos=OFF, 11.4's default):
  their end_log_pos is 0, as only the artificial events at a dump's start had before. The stream took them for
  those and dropped them: a window of three transactions staged 0 changes and acked. Now the stream places each
  right after the one before (cdc_core.capture.binlog.stream), with the Annotate_rows events the dump otherwise
  leaves out asked for (compat._request_annotate_rows), so every position is the file's.
- A statement that names a charset without a collation carries the collation 11.4 chose in a query-event status
  variable (Q_CHARACTER_SET_COLLATIONS) the binlog library does not know: the stream stopped at it
  (compat.patch_query_status_vars).
- Its online ALTER (ALGORITHM=COPY, LOCK=NONE) lets other sessions write while it copies; under
  binlog_alter_two_phase those rows sit between START ALTER and COMMIT ALTER, which both carry the statement.
- Collations have ids above 255 (utf8mb4_uca1400_ai_ci, 11.4's default for utf8mb4, is 2304), which the binlog
  library does not know: text columns landed as bytes. The server's own collation ids are now read at connect
  (compat.learn_collations).

Real MariaDB 11.4 (scripts/mariadb_release.sh, from Maven Central; services.sh with CDC_MARIADB_BASEDIR), the
shared ZooKeeper, merges on the warm merge server.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture.binlog.stream import ROWS_LIBRARY, ROWS_RAW, random_replica_server_id, stream_events
from cdc_core.capture.source import SourceParams
from cdc_core.cli import main
from tests.conftest import ROOT, XDIST_WORKER
from tests.faults.services import PrivateServices
from tests.support import source_facts
from tests.support.source_facts import throwaway_database

pytestmark = pytest.mark.integration

RELEASE = ROOT / "scripts" / "mariadb_release.sh"
# Fixed like the private pair's (13317 + 10 N) and the shards' (13340 + 10 N + i), clear of both.
PORT = int(os.environ.get("CDC_RELEASE_MARIADB_PORT", "13319"))
_ROWS_EVENT_TYPES = ("Write_rows_v1", "Update_rows_v1", "Delete_rows_v1")


@pytest.fixture(scope="module")
def release_server() -> Iterator[PrivateServices]:
    basedir = Path(subprocess.run([str(RELEASE), "basedir"], check=True, capture_output=True, text=True).stdout.strip())
    if not (basedir / "bin" / "mariadbd").exists():
        pytest.fail(f"no MariaDB release in {basedir}: run scripts/setup.sh (or scripts/mariadb_release.sh fetch)")
    n = int(XDIST_WORKER.removeprefix("gw")) if XDIST_WORKER else 0
    ps = PrivateServices(directory=ROOT / ".local" / f"private-{basedir.name}{f'-gw{n}' if n else ''}",
                         mariadb_port=PORT + 10 * n, with_zookeeper=False, basedir=basedir, server_id=11,
                         ports_env="CDC_RELEASE_MARIADB_PORT")
    if not any(ps.running().values()):
        shutil.rmtree(ps.directory, ignore_errors=True)
    ps.start()
    yield ps
    ps.stop_all()


@pytest.fixture
def db(release_server: PrivateServices) -> Iterator[str]:
    with throwaway_database(release_server, "rel_") as name:
        yield name


def run_sql(ps: PrivateServices, db: str, *statements: str) -> None:
    source_facts.run_sql(ps, *statements, database=db)


WORKLOAD = (
    "INSERT INTO t VALUES (1, 'eins', 'é', 'ab', 'b', 'ü', '{\"k\": [1]}', '2024-02-29 10:00:00.5', 1.25),"
    " (2, 'zwei', 'ß', 'cd', 'a', 'ö', NULL, '2020-01-01', -3)",
    "BEGIN",
    "INSERT INTO t (id, a, e) VALUES (3, 'drei', 'x'), (4, 'vier', 'y')",
    "UPDATE t SET a = CONCAT(a, '!'), h = 'Ω' WHERE id IN (1, 3)",
    "DELETE FROM t WHERE id = 2",
    "INSERT INTO m VALUES (1, 'myisam in a transaction')",
    "COMMIT",
    "INSERT INTO big SELECT seq, REPEAT('r', 60) FROM seq_1_to_3000",  # past the binlog cache: a temporary file
    "UPDATE big SET v = 'u' WHERE id % 7 = 0",
    # A charset without a collation: 11.4 writes the collation it chose into the query event
    # (Q_CHARACTER_SET_COLLATIONS), a status variable the binlog library did not know (the stream stopped).
    "CREATE TABLE c (id INT PRIMARY KEY, v VARCHAR(10)) CHARACTER SET utf8mb4",
    "INSERT INTO c VALUES (1, 'ç')",
    "ALTER TABLE c ADD COLUMN w VARCHAR(5) CHARACTER SET utf8mb4 DEFAULT 'é'",
)


def create_tables(ps: PrivateServices, db: str) -> None:
    run_sql(
        ps, db,
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(20), e TEXT, f CHAR(3) COLLATE utf8mb4_0900_ai_ci,"
        " g ENUM('a', 'b') COLLATE utf8mb4_uca1400_as_cs, h VARCHAR(5) CHARACTER SET ucs2 COLLATE ucs2_uca1400_ai_ci,"
        " j JSON, d DATETIME(6), n DECIMAL(10, 2)) COLLATE utf8mb4_uca1400_ai_ci",
        "CREATE TABLE m (id INT PRIMARY KEY, v VARCHAR(40)) ENGINE=MyISAM",
        "CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(80))",
    )


@pytest.mark.parametrize("rows", [ROWS_RAW, ROWS_LIBRARY])
def test_the_stream_places_every_event_where_the_binlog_file_has_it(
    release_server: PrivateServices, db: str, rows: str
) -> None:
    ps = release_server
    create_tables(ps, db)
    start = ps.binlog_end()
    run_sql(ps, db, *WORKLOAD)
    conn = ps.root_connect()
    with conn.cursor() as cur:
        cur.execute("SELECT @@binlog_legacy_event_pos, @@binlog_annotate_row_events")
        assert cur.fetchone() == (0, 1)  # the release's defaults: what this test is about
        cur.execute(f"SHOW BINLOG EVENTS IN '{start['file']}' FROM {start['offset']}")
        in_file = {r[1]: r[2] for r in cur.fetchall()}  # start offset -> event type
    conn.close()
    assert "Annotate_rows" in in_file.values()
    params = SourceParams(ps.mysql_host, ps.mysql_port, ps.mysql_user, ps.mysql_password)
    seen = [
        ev for ev in stream_events(params, str(start["file"]), int(start["offset"]),
                                   server_id=random_replica_server_id(), rows=rows)
        if ev.end != 0 and ev.file == start["file"]
    ]
    assert [ev.start for ev in seen if ev.start not in in_file] == []
    ends = {ev.start: ev.end for ev in seen}
    starts = sorted(in_file)
    assert all(ends[a] == b for a, b in itertools.pairwise(starts) if a in ends)
    assert sum(ev.kind == "rows" for ev in seen) == sum(t in _ROWS_EVENT_TYPES for t in in_file.values()) > 0


@pytest.mark.usefixtures("warm_merges")
@pytest.mark.parametrize("decoder", ["columnar", "library"])
def test_a_pipeline_on_the_release_lands_exactly(
    release_server: PrivateServices, services: Any, db: str, decoder: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    ps = release_server
    create_tables(ps, db)
    conn_id = "cdc_source_release"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "mysql", "host": ps.mysql_host, "port": ps.mysql_port, "login": ps.mysql_user,
         "password": ps.mysql_password}))
    name = f"rel_{uuid.uuid4().hex[:6]}"
    pipeline = {
        "name": name, "source": {"conn_id": conn_id}, "tables": {"include": [f"{db}.*"]},
        "start": ps.binlog_end(), "snapshot": {"on_start": False}, "decoder": decoder,
        "zookeeper": {"hosts": services.zk_hosts, "root": f"/cdc-release-{uuid.uuid4().hex[:8]}"},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
    }
    config = tmp_path / "pipelines.json"
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    run_sql(ps, db, *WORKLOAD)
    assert main(["--config", str(config), "run", name]) == 0, capsys.readouterr().err
    windows = json.loads(capsys.readouterr().out)["windows"]
    assert sum(w["changes"] for w in windows) == 2 + 2 + 2 + 1 + 1 + 3000 + 3000 // 7 + 1
    assert main(["--config", str(config), "verify", name]) == 0, capsys.readouterr().out


@pytest.mark.usefixtures("warm_merges")
def test_an_online_alter_logged_in_two_phases_lands_with_the_rows_written_while_it_ran(
    release_server: PrivateServices, services: Any, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """11.4's online ALTER (ALGORITHM=COPY, LOCK=NONE) under binlog_alter_two_phase: START ALTER, then other
    sessions' rows in the table's old shape, then COMMIT ALTER with the same statement. The lake applies it once, at
    the COMMIT (applied at both, the rename below renamed the new column onto the old one: the merge failed)."""
    ps = release_server
    conn_id = "cdc_source_release_online"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "mysql", "host": ps.mysql_host, "port": ps.mysql_port, "login": ps.mysql_user,
         "password": ps.mysql_password}))
    run_sql(ps, db, "CREATE TABLE o (id INT PRIMARY KEY, v INT, pad VARCHAR(60) DEFAULT (REPEAT('p', 60)))")
    name = f"rel_{uuid.uuid4().hex[:6]}"
    config = tmp_path / "pipelines.json"
    config.write_text(json.dumps({"pipelines": [{
        "name": name, "source": {"conn_id": conn_id}, "tables": {"include": [f"{db}.*"]},
        "start": ps.binlog_end(), "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": f"/cdc-release-{uuid.uuid4().hex[:8]}"},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
    }]}))
    run_sql(ps, db, "INSERT INTO o (id, v) SELECT seq, seq FROM seq_1_to_150000")
    altered = threading.Event()

    def alter() -> None:
        try:
            run_sql(ps, db, "SET SESSION binlog_alter_two_phase = 1",
                    "ALTER TABLE o RENAME COLUMN v TO v2, ADD COLUMN v INT NOT NULL DEFAULT 7,"
                    " ALGORITHM=COPY, LOCK=NONE")
        finally:
            altered.set()

    thread = threading.Thread(target=alter)
    thread.start()
    watch = ps.root_connect(db)
    with watch.cursor() as cur:  # the copy has begun (the START ALTER is written as it begins)
        for _ in range(200):
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'ALTER TABLE o %'")
            if cur.fetchone()[0] or altered.is_set():
                break
            time.sleep(0.02)
    watch.close()
    n = 0
    while not altered.is_set() and n < 200:  # other sessions' rows while the copy runs (the old shape until it ends)
        n += 1
        run_sql(ps, db, f"INSERT INTO o (id) VALUES ({1_000_000 + n})", f"UPDATE o SET pad = 'u' WHERE id = {n}")
    thread.join()
    run_sql(ps, db, "INSERT INTO o (id, v2, v) VALUES (2000000, 1, 2)")
    conn = ps.root_connect(db)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        cur.execute(f"SHOW BINLOG EVENTS IN '{cur.fetchone()[0]}'")
        events = [(str(r[2]), str(r[5])) for r in cur.fetchall()]
    conn.close()
    start = next(i for i, (kind, info) in enumerate(events) if kind == "Gtid" and "START ALTER" in info)
    commit = next(i for i, (kind, info) in enumerate(events) if kind == "Gtid" and "COMMIT ALTER" in info)
    assert any(kind in _ROWS_EVENT_TYPES for kind, _ in events[start:commit]), "no row written while the ALTER ran"
    assert main(["--config", str(config), "run", name]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["--config", str(config), "verify", name]) == 0, capsys.readouterr().out
