"""A stored window replays exactly: re-staging it after the configuration changed reads the same tables, and
the library decoder (`decoder: library`) stages it byte for byte as the columnar one does.

Real MariaDB and ZooKeeper; no Spark (the window is staged, not merged).
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture.source import SourceParams
from cdc_core.model.config import load_config
from cdc_core.run.pipeline import Pipeline

pytestmark = pytest.mark.integration


def test_restaging_after_a_config_change_reads_the_planned_tables_with_either_decoder(
    services: Any, source_db: str, zk_root: str, tmp_path: Path
) -> None:
    name = "replay_" + uuid.uuid4().hex[:6]
    config = tmp_path / "pipelines.yaml"

    def write(exclude: list[str], decoder: str = "columnar") -> Pipeline:
        config.write_text(json.dumps({"pipelines": [{
            "name": name, "source": {"conn_id": "unused"}, "start": start,
            "tables": {"include": [f"{source_db}.*"], "exclude": exclude},
            "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
            "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
            "decoder": decoder,
        }]}))
        return Pipeline.from_config(load_config(config).pipeline(name), SourceParams(**services.source_params))

    start = services.binlog_end()
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v TEXT)")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, v TEXT)")
        cur.execute("INSERT INTO a VALUES (1, 'x'), (2, 'y')")
        cur.execute("INSERT INTO b VALUES (1, 'z')")
        cur.execute("UPDATE a SET v = NULL WHERE id = 2")
        cur.execute("DELETE FROM b WHERE id = 1")
    conn.close()

    with write([]) as p:
        grant = p.acquire("run-1")
        seq = p.plan(grant).seq
        first = p.stage(grant, seq)
        manifest = p.manifest(seq).to_dict()
    assert sorted(first.tables) == [f"{source_db}.a", f"{source_db}.b"]

    # The operator now excludes b, and the staged copy is lost before the merge: the stored window is
    # re-staged as planned (with b), not re-planned, so a zombie and its successor stage the same thing.
    shutil.rmtree(first.window_dir)
    with write([f"{source_db}.b"]) as p:
        again = p.stage(grant, seq)
        assert p.manifest(seq).to_dict() == manifest
    assert sorted(again.tables) == sorted(first.tables)

    # The library's row-by-row decoding (the escape hatch around a columnar decoding defect) stages the
    # same window byte for byte: the manifest holds every file's checksum.
    shutil.rmtree(first.window_dir)
    with write([], decoder="library") as p:
        p.stage(grant, seq)
        assert p.manifest(seq).to_dict() == manifest
        p.release(grant)


@pytest.mark.usefixtures("warm_merges")  # the window merges on the session's warm merge server
def test_the_ack_decides_by_delta_and_never_reads_the_staged_files_again(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge step verified the staged files (size and sha256) before Spark read them; the ack, a task of
    its own under Airflow, reads the manifest and Delta's log only: on an object store, verifying again would
    download the whole window a second time (issue 37 §2). A staged file damaged after the merge does not stop
    the ack, because Delta holds the window; a window Delta does not hold is refused as before."""
    from cdc_core.lake import delta_state, staging_store
    from cdc_core.model.errors import LakeError

    name = "ackread_" + uuid.uuid4().hex[:6]
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": name, "source": {"conn_id": "unused"}, "start": services.binlog_end(),
        "tables": {"include": [f"{source_db}.*"]},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
    }]}))
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v TEXT)")
        cur.execute("INSERT INTO a VALUES (1, 'x'), (2, 'y')")
        cur.execute("UPDATE a SET v = 'z' WHERE id = 2")
    conn.close()

    def pipeline() -> Pipeline:
        return Pipeline.from_config(load_config(config).pipeline(name), SourceParams(**services.source_params))

    with pipeline() as p:
        grant = p.acquire("run-1")
        seq = p.plan(grant).seq
        staged = p.stage(grant, seq)
        with pytest.raises(LakeError, match="Delta does not hold it"):
            p.ack(grant, seq)  # not merged yet: refused, whatever the files say
        assert p.merge_locally(grant, seq).merged

    # A new process (the ack task): nothing verified yet; the staged data file is then damaged.
    monkeypatch.setattr(staging_store, "_VERIFIED", set())
    [data_file] = [f for f in Path(staged.window_dir).rglob("*.parquet")]
    data_file.write_bytes(b"damaged after the merge")
    hashed: list[str] = []
    real_verify = staging_store.verify_files
    monkeypatch.setattr(staging_store, "verify_files", lambda *a, **k: hashed.append("x") or real_verify(*a, **k))
    with pipeline() as p:
        acked = p.ack(grant, seq)
        assert acked.cursor is not None and not acked.already
        assert p.coordinator.read_cursor().position is not None
        p.release(grant)
    assert hashed == []  # no staged file was read again
    uri = p.table_uri(source_db, "a")
    assert delta_state.last_txn_version(uri, name) == seq
    rows = delta_state.read_rows(uri, columns=["id", "v"]).to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == [(1, "x"), (2, "z")]
