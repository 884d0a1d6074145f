"""One writer per Delta table, as an operator meets it: two pipelines of one config file capture the same source
table into one lake root. `cdc validate` refuses the file naming both; if they run anyway, the second pipeline's
merge is refused before it writes, its cursor does not move, and the first pipeline's table is left as it was
(same Delta version, same rows, still recorded for the first pipeline).

Real MariaDB, ZooKeeper and spark-submit (two merge jobs).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core.cli import main
from cdc_core.lake import delta_state
from cdc_core.model.errors import LakeError
from cdc_core.model.lake_writers import WRITER_PROPERTY, writer_pipeline
from cdc_core.model.naming import path_component

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]  # windows merge on a warm server


def cdc(config: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["--config", config, *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip().startswith("{") else out), err


def rows(table_uri: str) -> list[dict[str, Any]]:
    return sorted(delta_state.read_rows(table_uri, columns=["id", "v"]).to_pylist(), key=lambda r: r["id"])


def test_second_pipeline_into_one_lake_table_is_refused_and_changes_nothing(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_ONE_WRITER", json.dumps(conn))
    root = services.root_connect(source_db)
    with root.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    start = services.binlog_end()
    suffix = uuid.uuid4().hex[:6]
    first, second = f"first_{suffix}", f"second_{suffix}"

    def pipeline(name: str, include: str) -> dict[str, Any]:
        return {
            "name": name, "source": {"conn_id": "cdc_source_one_writer"}, "tables": {"include": [include]},
            "start": start, "snapshot": {"on_start": False},
            "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
            "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
        }

    config = tmp_path / "pipelines.yaml"
    pipelines = [pipeline(first, f"{source_db}.t"), pipeline(second, f"{source_db}.*")]
    config.write_text(json.dumps({"pipelines": pipelines}))

    code, out, err = cdc(str(config), capsys, "validate")
    assert code == 2, (out, err)
    assert repr(first) in err and repr(second) in err and f"{source_db}.t" in err

    with root.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    code, _, err = cdc(str(config), capsys, "run", first)
    assert code == 0, err
    table_uri = str(tmp_path / "lake" / path_component(source_db) / "t")
    landed_version = DeltaTable(table_uri).version()
    assert rows(table_uri) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]

    with root.cursor() as cur:
        cur.execute("UPDATE t SET v = 'z' WHERE id = 1")
    root.close()
    code, out, err = cdc(str(config), capsys, "run", second)
    assert code == LakeError.exit_code, (out, err)
    assert "refusing to merge" in err and repr(first) in err and repr(second) in err
    code, status, err = cdc(str(config), capsys, "status", second)
    assert code == 0, err
    assert (status["cursor"] or {}).get("seq") in (None, 0)  # nothing acked
    assert DeltaTable(table_uri).version() == landed_version  # not one commit: the table is as it was
    assert rows(table_uri) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    # ... still recorded for its owner, so the owner's next window lands as any window does. (Running it
    # would cost a third merge job and prove nothing the version check does not: the refused job wrote no
    # commit, and the second pipeline's lease, cursor and registry are nodes of its own.)
    writer = DeltaTable(table_uri).metadata().configuration.get(WRITER_PROPERTY)
    assert writer_pipeline(writer) == first, writer
