"""Two pipelines on two object stores with different keys, read side by side in one process (issue 35 §3).

Object-store credentials used to be process-wide (fsspec's defaults and delta-rs options set by the last
pipeline opened), so the monitor, which opens every pipeline in a thread pool, could read one pipeline's
store with the other's keys. Now each pipeline's `Storage` (cdc_core.lake.object_store) is passed down to
every call. Here two S3Proxy instances, each with its own generated access key and secret, hold one
pipeline each: a staged window (staging.stage_window), a lake table with the pipeline's window 1 (delta-rs,
txn = pipeline/1) and its checkpoints row (lake_versions.write_window). Then, from threads of this one
process, at the same time:

- the product's readers (staging.read_manifest / verify_window / read_table_changes / list_windows,
  delta_state, lake_versions.load_cut / read_table, housekeeping.discover_tables) each return their own
  pipeline's window and rows;
- the monitor's own function (`collect_statuses`, its thread pool) shows both pipelines' tables;
- a reader given the other pipeline's keys against a store is refused by that store, so the keys are not
  interchangeable and each successful read above used its own pipeline's;
- fsspec's process-wide configuration never received credentials.

Real S3Proxy (two), ZooKeeper and MariaDB (the monitor reads the cursor and the source's end); no Spark.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fsspec.config
import pyarrow as pa
import pytest

from cdc_core.lake import delta_state, lake_versions, object_store, staging
from cdc_core.model.changes import RowChange, SourceColumn, TableSchema
from cdc_core.model.config import load_config
from cdc_core.model.connections import parse_connection
from cdc_core.model.errors import LakeError
from cdc_core.model.layout import table_uri
from cdc_core.model.positions import BinlogPosition, ServerIdentity, change_version
from cdc_core.model.window_plan import WindowPlan
from tests.support.object_store import ObjectStore, running_object_store

pytestmark = pytest.mark.integration

ROWS = 40
ROUNDS = 4


@pytest.fixture(scope="module")
def stores() -> Iterator[tuple[ObjectStore, ObjectStore]]:
    with running_object_store() as a, running_object_store() as b:
        yield a, b


@dataclasses.dataclass(frozen=True)
class Unit:
    """One pipeline as its readers see it."""

    name: str
    db: str
    staging_root: str
    lake_root: str
    storage: object_store.Storage

    @property
    def table(self) -> str:
        return f"{self.db}.t"

    @property
    def table_uri(self) -> str:
        return table_uri(self.lake_root, self.db, "t")


def _land(u: Unit) -> None:
    """A staged window 1 and the lake as after its ack: the table's commit with txn (pipeline, 1) and the
    checkpoints row, written through the pipeline's own storage. Every value carries the pipeline's name."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    server = ServerIdentity("mariadb", 1)
    plan = WindowPlan(u.name, 1, BinlogPosition("mysql-bin.000001", 4, server),
                      BinlogPosition("mysql-bin.000001", 4 + ROWS * 100, server), transactions=1, events=ROWS,
                      bytes=ROWS * 100)
    shape = TableSchema(u.db, "t", (SourceColumn("id", "int", False), SourceColumn("v", "varchar(40)", True)), ("id",))
    base = change_version(0, "mysql-bin.000001", 0)
    changes = [RowChange("I", shape, {"id": i, "v": u.name}, base + 100 + i, i + 1, 1_700_000_000.0)
               for i in range(ROWS)]
    staging.stage_window(plan, iter(changes), u.staging_root, storage=u.storage)
    write_deltalake(
        u.table_uri, pa.table({"id": pa.array(range(ROWS), pa.int32()), "v": [u.name] * ROWS}),
        storage_options=u.storage.delta_rs_options(u.table_uri),
        commit_properties=CommitProperties(app_transactions=[Transaction(u.name, 1)]),
    )
    wrote = lake_versions.write_window(u.lake_root, u.name, 1, lambda: lake_versions.checkpoint_rows(
        u.name, 1, "stream", [lake_versions.TableAtWindow(u.table, u.table_uri, 0, True, inserted=ROWS)],
        cursor="mysql-bin.000001:4004", commit_ts=1_700_000_000.0, acked_at=1_700_000_001.0,
    ), storage=u.storage)
    assert wrote


def _read(u: Unit, start: threading.Barrier) -> dict[str, Any]:
    """Everything the product reads of a pipeline's staging and lake, through its readers."""
    from cdc_core.capture.source import TableFilter
    from cdc_core.run import housekeeping

    start.wait(timeout=60)  # both pipelines' reads start together
    s = u.storage
    manifest = staging.read_manifest(u.staging_root, u.name, 1, storage=s)
    assert manifest is not None, f"{u.name}: no staged window"
    staging.verify_window(u.staging_root, manifest, storage=s)
    staged = staging.read_table_changes(u.staging_root, manifest, u.table, storage=s)
    cut = lake_versions.load_cut(u.lake_root, u.name, storage=s)
    at_cut = lake_versions.read_table(cut, u.table, columns=["v"], storage=s)
    found = housekeeping.discover_tables(u.lake_root, TableFilter(include=(f"{u.db}.*",), exclude=()), storage=s)
    return {
        "windows": staging.list_windows(u.staging_root, u.name, storage=s),
        "manifest": (manifest.plan.pipeline, manifest.changes),
        "staged": set(staged.column("v").to_pylist()),
        "txn": delta_state.last_txn_version(u.table_uri, u.name, storage=s),
        "rows": set(delta_state.read_rows(u.table_uri, storage=s).column("v").to_pylist()),
        "cut": (cut.seq, cut.pick([u.table])[0].version, set(at_cut.column("v").to_pylist())),
        "tables": [t.uri for t in found],
    }


def _expected(u: Unit) -> dict[str, Any]:
    return {"windows": [1], "manifest": (u.name, ROWS), "staged": {u.name}, "txn": 1, "rows": {u.name},
            "cut": (1, 0, {u.name}), "tables": [u.table_uri]}


def test_two_pipelines_on_two_stores_read_concurrently_each_with_its_own_keys(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    stores: tuple[ObjectStore, ObjectStore],
) -> None:
    conf_before = json.dumps(fsspec.config.conf, sort_keys=True, default=str)
    names = ("iso_a", "iso_b")
    conns = {f"cdc_s3_{n}": s.connection for n, s in zip(names, stores, strict=True)}
    creds = {n: object_store.from_connection(parse_connection(f"cdc_s3_{n}", conns[f"cdc_s3_{n}"])) for n in names}
    assert creds["iso_a"].access_key != creds["iso_b"].access_key
    assert creds["iso_a"].endpoint_url != creds["iso_b"].endpoint_url

    # The pipelines' configuration, as the monitor reads it ($CDC_CONFIG, connections from AIRFLOW_CONN_*).
    source = services.airflow_connection
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [
        {"name": n, "source": {"conn_id": "cdc_source_iso"}, "tables": {"include": [f"{source_db}.*"]},
         "start": services.binlog_end(), "snapshot": {"on_start": False},
         "zookeeper": {"hosts": services.zk_hosts, "root": zk_root}, "schedule": None,
         "staging_root": s.url(n, "staging"), "lake_root": s.url(n, "lake"), "object_store": {"conn_id": f"cdc_s3_{n}"}}
        for n, s in zip(names, stores, strict=True)
    ]}))
    monkeypatch.setenv("CDC_CONFIG", str(config))
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_ISO", json.dumps(source))
    for conn_id, conn in conns.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", conn)
    cfg = load_config(config)
    units = [
        Unit(n, source_db, str(cfg.pipeline(n).staging_root), str(cfg.pipeline(n).lake_root),
             object_store.Storage(object_store.for_pipeline(cfg.pipeline(n))))
        for n in names
    ]
    assert [u.storage.creds for u in units] == [creds[n] for n in names]

    # 1. Each pipeline lands its window on its own store.
    for u in units:
        _land(u)
    for u, store in zip(units, stores, strict=True):
        other = stores[1] if store is stores[0] else stores[0]
        assert any(k.endswith("manifest.json") for k in store.objects(f"{u.name}/staging"))
        assert other.objects(f"{u.name}") == []  # nothing of it on the other store

    # 2. Both pipelines read at the same time, from threads of this process, several rounds.
    for _ in range(ROUNDS):
        start = threading.Barrier(len(units))
        with ThreadPoolExecutor(max_workers=len(units)) as pool:
            results = list(pool.map(lambda u: _read(u, start), units))
        for u, got in zip(units, results, strict=True):
            assert got == _expected(u), u.name

    # 3. The monitor: its thread pool opens both pipelines (connections through Airflow's lookup) and shows
    #    each one's lake tables, read from its own store.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))  # if Airflow is not imported yet: no ~/airflow
    from cdc_airflow import monitor

    monkeypatch.setattr(monitor, "airflow_dag_states", lambda dag_ids: {})  # no Airflow database here
    statuses = {s["pipeline"]: s for s in monitor.collect_statuses()}
    assert set(statuses) == set(names)
    for u in units:
        st = statuses[u.name]
        assert st["error"] is None, st["error"]
        assert "error" not in st["maintenance"], st["maintenance"]
        (row,) = st["maintenance"]["tables"]
        assert (row["name"], row["kind"], row.get("error")) == (u.table, "table", None), row
        assert (row["version"], row["txn_version"]) == (0, 1), row
    page = json.dumps(statuses, default=str)
    assert not any(c.secret_key in page for c in creds.values())

    # 4. The keys are not interchangeable: each store refuses a reader that brings the other's keys.
    for u, other in ((units[0], units[1]), (units[1], units[0])):
        assert u.storage.creds is not None and other.storage.creds is not None
        crossed = object_store.Storage(dataclasses.replace(
            u.storage.creds, access_key=other.storage.creds.access_key, secret_key=other.storage.creds.secret_key))
        with pytest.raises(PermissionError):
            staging.read_manifest(u.staging_root, u.name, 1, storage=crossed)
        with pytest.raises(PermissionError):
            staging.list_windows(u.staging_root, u.name, storage=crossed)
        with pytest.raises(LakeError, match=r"(?i)forbidden|denied|invalid|403|signature"):
            delta_state.last_txn_version(u.table_uri, u.name, storage=crossed)
        with pytest.raises(LakeError, match=r"(?i)forbidden|denied|invalid|403|signature"):
            lake_versions.load_cut(u.lake_root, u.name, storage=crossed)

    # 5. Nothing process-wide was configured along the way.
    assert json.dumps(fsspec.config.conf, sort_keys=True, default=str) == conf_before
    assert not any(p in fsspec.config.conf for p in object_store.S3_SCHEMES)
