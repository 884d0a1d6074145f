"""The window steps report OpenLineage (plugins/cdc_airflow/lineage.py): real `airflow dags test` runs with the
OpenLineage provider's file transport, whose events are read back. The merge and the ack each name the source
tables (MySQL naming) as inputs and the Delta tables (by location) as outputs, with the schema facet, identity
column lineage from the source columns (not from a column a transform hashes), and the rows the window
changed. (A step that changed nothing reports no datasets: tests/unit/test_lineage_facets.py.) Windows merge
on the session's warm merge server: the subject is lineage, not the merge job."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from cdc_core.lake import delta_state
from cdc_core.model import layout
from tests.support.e2e import CdcCase, assert_lake_equals_source, binlog_position, sql

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("warm_merges")]


def completed(events_file: Path, job_suffix: str) -> list[dict[str, Any]]:
    """The COMPLETE run events of jobs named `<dag>.<task>` ending in `job_suffix`, in emission order."""
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("eventType") == "COMPLETE" and e["job"]["name"].endswith(job_suffix)]


def test_merge_and_ack_report_sources_delta_tables_schema_column_lineage_and_rows(
    cdc_case: CdcCase, tmp_path: Path
) -> None:
    case = cdc_case
    events = tmp_path / "openlineage.jsonl"
    env = {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events),
                                                          "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "cdc-test",
           # The hash key as a connection's password, looked up through Airflow (CdcPipelineHook).
           "AIRFLOW_CONN_CDC_TEST_LINEAGE_KEY": json.dumps({"conn_type": "generic", "password": "k" * 32})}
    sql(case.services, case.database,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), n DECIMAL(8,2))",
        "CREATE TABLE u (k VARCHAR(8) PRIMARY KEY, w INT)")
    # u.w is hashed (docs/transforms.md): it lands, but as no copy of the source column.
    case.write_config(binlog_position(case.services), transform={
        "hash_key": {"conn_id": "cdc_test_lineage_key"},
        "tables": [{"match": f"{case.database}.u", "hash": ["w"]}]})
    sql(case.services, case.database,
        "INSERT INTO t VALUES (1, 'a', 1.50), (2, 'b', NULL), (3, 'c', 3.00)", "INSERT INTO u VALUES ('x', 7)")

    first = case.run_pipeline(env=env)
    assert first.state == "success", first.explain()
    assert_lake_equals_source(case, ["t"])

    source_ns = f"mysql://{case.services.mysql_host}:{case.services.mysql_port}"
    t_path = layout.table_uri(str(case.lake), case.database, "t")
    u_path = layout.table_uri(str(case.lake), case.database, "u")
    for step in ("merge_window", "ack_window"):
        [event] = completed(events, f"cdc_{case.name}.{step}")
        assert event["job"]["namespace"] == "cdc-test"
        assert {(d["namespace"], d["name"]) for d in event["inputs"]} == {
            (source_ns, f"{case.database}.t"), (source_ns, f"{case.database}.u")}, step
        outputs = {d["name"]: d for d in event["outputs"]}
        assert set(outputs) == {t_path, u_path} and {d["namespace"] for d in event["outputs"]} == {"file"}, step
        t = outputs[t_path]
        schema = {f["name"]: f["type"] for f in t["facets"]["schema"]["fields"]}
        assert {k: schema[k] for k in ("id", "v", "n")} == {"id": "integer", "v": "string", "n": "decimal(8,2)"}
        assert all(name.startswith("_cdc_") for name in set(schema) - {"id", "v", "n"}), schema
        lineage = t["facets"]["columnLineage"]["fields"]
        assert set(lineage) == {"id", "v", "n"}, lineage  # the product's _cdc_* columns have no source column
        for column, entry in lineage.items():
            [source] = entry["inputFields"]
            assert (source["namespace"], source["name"], source["field"]) == (source_ns, f"{case.database}.t", column)
            assert source["transformations"][0]["subtype"] == "IDENTITY"
        assert t["outputFacets"]["outputStatistics"]["rowCount"] == 3, step
        assert outputs[u_path]["outputFacets"]["outputStatistics"]["rowCount"] == 1, step
        assert set(outputs[u_path]["facets"]["columnLineage"]["fields"]) == {"k"}, step  # w is hashed: no copy
    u_rows = delta_state.read_rows(u_path, columns=["k", "w"]).to_pylist()
    assert u_rows == [{"k": "x", "w": hmac.new(b"k" * 32, b"7", hashlib.sha256).hexdigest()}]

    # The second window changes two rows of t only (an update, a delete): only t, with those two rows.
    sql(case.services, case.database, "UPDATE t SET v = 'z' WHERE id = 1", "DELETE FROM t WHERE id = 2")
    second = case.run_pipeline(env=env)
    assert second.state == "success", second.explain()
    assert_lake_equals_source(case, ["t"])
    for step in ("merge_window", "ack_window"):
        event = completed(events, f"cdc_{case.name}.{step}")[-1]
        assert [d["name"] for d in event["inputs"]] == [f"{case.database}.t"], step
        [output] = event["outputs"]
        assert output["name"] == t_path and output["outputFacets"]["outputStatistics"]["rowCount"] == 2, step
