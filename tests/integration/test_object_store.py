"""Staging and lake on an S3-compatible object store (issue 20 §2): S3Proxy, a real S3 server, started by
scripts/object_store.sh on a free loopback port; credentials from an Airflow connection of type aws.

`cdc run` stages every window into s3://cdc/staging (manifest PUT last: a store has no rename), the merge job
writes Delta through s3a, the ack's checkpoint goes through delta-rs, and the lake equals the source. The
secret never shows in the YAML, a command line of any process started meanwhile, the CLI's output or logs,
or any object the pipeline wrote. Then the store is restarted between stage and merge: the staged window
is replayed from the store, acked once, and nothing is lost or duplicated; `cdc maintain` (staging cleanup,
OPTIMIZE, VACUUM, the checkpoints table) then works on the store and the lake still equals the source.

Real MariaDB, ZooKeeper, Spark (local[2]) and S3Proxy.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_core.model.layout import table_uri
from tests.support.cli import cdc, cli_pipeline, write
from tests.support.object_store import ObjectStore, commit_engines, fs_for, running_object_store

pytestmark = pytest.mark.integration

TABLE_DDL = (
    "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(12,2), ts DATETIME(6), b BLOB, j JSON)"
)


@pytest.fixture(scope="module")
def store() -> Iterator[ObjectStore]:
    with running_object_store() as s:
        yield s


@pytest.fixture
def pipeline(services: Any, source_db: str, zk_root: str, tmp_path: Path, store: ObjectStore) -> dict[str, Any]:
    return cli_pipeline(
        services, source_db, zk_root, tmp_path, prefix="s3", ddl=TABLE_DDL,
        settings=lambda name: {"staging_root": store.url(name, "staging"), "lake_root": store.url(name, "lake"),
                               "object_store": {"conn_id": "cdc_s3"}},
        env={"AIRFLOW_CONN_CDC_S3": store.connection},
    )


class CommandLineWatch:
    """Every command line of every process on the machine, sampled while a block runs: the secret must
    never be on one (spark-submit and the JVMs it starts included)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for proc in Path("/proc").iterdir():
                try:
                    self.seen.add((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    continue
            self._stop.wait(0.1)

    def __enter__(self) -> CommandLineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_the_pipeline_lands_on_the_object_store_through_a_store_restart_and_never_shows_the_secret(
    services: Any, store: ObjectStore, pipeline: dict[str, Any]
) -> None:
    p, db = pipeline, pipeline["db"]
    # 1. A window of every kind of change over several types lands on the store.
    write(services, db,
          "INSERT INTO t SELECT seq, CONCAT('v', seq), seq / 7, '2026-01-02 03:04:05.123456' + INTERVAL seq SECOND,"
          " UNHEX(HEX(seq)), JSON_OBJECT('k', seq) FROM seq_1_to_3000",
          "UPDATE t SET v = NULL, j = NULL WHERE id % 7 = 0", "DELETE FROM t WHERE id % 11 = 0",
          "INSERT INTO t (id, v, b) VALUES (5001, '', '')")
    with CommandLineWatch() as watch:
        ran = cdc(p, "run", p["name"])
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert any("spark-submit" in c or "SparkSubmit" in c for c in watch.seen), "the watch saw no spark-submit"
    verified = cdc(p, "verify", p["name"])
    assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]
    assert "equal" in verified.stdout and "differ" not in verified.stdout
    staged = store.objects(f"{p['name']}/staging")
    assert any(k.endswith("manifest.json") for k in staged), staged
    assert not any(".tmp-" in k for k in staged), staged  # written in place: no temp dirs on a store
    lake = store.objects(f"{p['name']}/lake")
    assert any("/_delta_log/" in k for k in lake) and any(k.endswith(".parquet") for k in lake), lake
    assert any(k.startswith("_cdc.meta/") for k in lake), "no checkpoints table"
    # ~3,000 rows, under spark.small_table_rows: the merge job found that the store honours conditional writes,
    # and delta-rs created the table and landed the window, as on local disk (issue 37 §1).
    assert commit_engines(store, table_uri(store.url(p["name"], "lake"), db, "t")) == ["delta-rs", "delta-rs"]
    secret = store.secret
    assert secret not in Path(p["config"]).read_text()
    assert not [c for c in watch.seen if secret in c], "the secret was on a command line"
    assert secret not in ran.stdout + ran.stderr + verified.stdout + verified.stderr

    # 2. The next window is staged, then the process dies and the store restarts before the merge.
    write(services, db, "UPDATE t SET v = 'second', d = d + 1 WHERE id <= 1500",
          "INSERT INTO t (id, v) SELECT seq, 'new' FROM seq_6001_to_6300", "DELETE FROM t WHERE id % 5 = 0")
    killed = cdc(p, "run", p["name"], env={"CDC_FAULT": "after_stage"})  # SIGKILL once the window is staged
    assert killed.returncode == -9, killed.stderr[-3000:]
    fs = fs_for(store)
    manifests = sorted(k for k in fs.find(f"cdc/{p['name']}/staging") if k.endswith("manifest.json"))
    assert len(manifests) == 2, manifests  # the second window is staged, not merged
    store.stop()
    down = cdc(p, "status", p["name"])  # the store is down: status still answers from ZooKeeper
    assert down.returncode == 0, down.stderr[-3000:]
    store.start()

    again = cdc(p, "run", p["name"])
    assert again.returncode == 0, again.stderr[-4000:]
    assert "replay" in again.stderr, again.stderr[-3000:]  # the staged window, not a new read
    windows = json.loads(again.stdout)["windows"]
    assert windows[0]["seq"] == 2 and windows[0]["recovered"] == "replay", windows
    # Other tests write to the shared MariaDB meanwhile: the run may go on with windows holding none of t's changes.
    assert all(w["changes"] == 0 for w in windows[1:]), windows
    versions = cdc(p, "versions", p["name"])
    assert versions.returncode == 0, versions.stderr[-3000:]
    assert json.loads(versions.stdout)["window"] == 2  # the last window that changed the lake
    status = cdc(p, "status", p["name"])
    assert status.returncode == 0, status.stderr[-3000:]
    assert json.loads(status.stdout)["cursor"]["seq"] == windows[-1]["seq"]  # each window acked once

    # 3. Maintenance on the store: cleanup lists staging through fsspec, the Spark job OPTIMIZEs and VACUUMs the
    # table through s3a, the checkpoints table is compacted through delta-rs.
    maintained = cdc(p, "maintain", p["name"])
    assert maintained.returncode == 0, maintained.stderr[-4000:]
    record = json.loads(maintained.stdout)
    assert record["status"] == "ok" and not record["errors"], record
    assert [t["status"] for t in record["tables"]] and all(t["status"] == "ok" for t in record["tables"]), record
    verified = cdc(p, "verify", p["name"])
    assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]
    assert "equal" in verified.stdout and "differ" not in verified.stdout
    leaked = [str(f) for f in store.files() if secret.encode() in f.read_bytes()]
    assert not leaked, f"the secret is in objects the pipeline wrote: {leaked}"
