"""The backfill form, the CLI flags and the first Airflow task against bad input, with real services: every
invalid value fails with a specific error naming the pipeline, the field and the fix, and NOTHING changes:
the pipeline's ZooKeeper subtree (data and versions of every node, the lease included) and the lake and
staging directories are byte-identical before and after.

The pipeline under test has run once (an empty window), so it has a cursor and a window record to keep.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.capture.source import SourceParams
from cdc_core.coordination import LeaseGrant
from cdc_core.model.config import load_config
from cdc_core.model.errors import CdcError, ConfigError, PositionPurged
from cdc_core.run.backfill import check_backfill
from cdc_core.run.pipeline import Pipeline
from tests.support.security import dir_tree, zk_tree

pytestmark = pytest.mark.integration

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="cdc-int-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

CONN_ID = "cdc_source_badinput"
PAST = time.time() - 3600


@dataclass
class Ran:
    pipeline: Pipeline
    config: Path
    database: str
    zk_root: str
    dirs: list[Path]
    services: Any

    def snapshot(self, zk: Any) -> tuple[Any, ...]:
        return (zk_tree(zk, self.zk_root), *(dir_tree(d) for d in self.dirs))


@pytest.fixture(scope="module")
def ran(services: Any, zk_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    """One pipeline for the whole module (every test asserts it leaves it unchanged)."""
    db = "t_" + uuid.uuid4().hex[:10]
    zk_root = "/cdc-test-" + uuid.uuid4().hex[:10]
    tmp_path = tmp_path_factory.mktemp("badinput")
    conn = services.root_connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.orders (id INT PRIMARY KEY, note VARCHAR(20))")
        cur.execute(f"CREATE TABLE `{db}`.other (id INT PRIMARY KEY)")  # exists, but the pipeline does not capture it
        cur.execute("SHOW MASTER STATUS")
        file, offset = cur.fetchone()[:2]
    lake, staging = tmp_path / "lake", tmp_path / "staging"
    lake.mkdir()
    staging.mkdir()
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": "badinput", "source": {"conn_id": CONN_ID}, "tables": {"include": [f"{db}.orders"]},
        "start": {"kind": "file", "file": file, "offset": int(offset)},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root}, "staging_root": str(staging),
        "lake_root": str(lake), "schedule": None,
        "caps": {"max_events": 5_000_000, "max_bytes": 4 * 1024**3, "max_transactions": 1_000_000},
    }]}))
    p = Pipeline.from_config(load_config(config).pipeline("badinput"), SourceParams(**services.source_params))
    try:
        # One window without changes to our tables (other tests' transactions may be in it): a cursor and
        # a window record exist, as on any pipeline that ran.
        done = p.run_cycle("setup", merge=lambda *a: pytest.fail("a window without changes never merges"))
        assert done.windows[0].staged.changes == 0, done
        yield Ran(p, config, db, zk_root, [lake, staging], services)
    finally:
        p.close()
        zk_client.delete(zk_root, recursive=True)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()


def bad_forms(db: str) -> list[tuple[dict[str, Any], type[CdcError], str]]:
    """(form, error class, what the message must say): the form's own words, then the way out."""
    return [
        ({"start_ts": "garbage"}, ConfigError, "backfill start_ts: 'garbage' is not an ISO-8601 timestamp; write e.g."),
        ({"start_ts": ""}, ConfigError, "backfill start_ts is required: the UTC instant to replay from"),
        ({"start_ts": None}, ConfigError, "backfill start_ts is required"),
        ({"start_ts": "2026-11-20T08:00:00"}, ConfigError, "has no timezone; write it in UTC with a Z suffix"),
        ({"start_ts": "1e40"}, ConfigError, "not an ISO-8601 timestamp"),
        ({"start_ts": 1e20}, ConfigError, "is not a usable point in time"),
        ({"start_ts": "2999-01-01T00:00:00Z"}, ConfigError, "start_ts 2999-01-01T00:00:00Z is in the future"),
        ({"start_ts": PAST, "end_ts": "soon"}, ConfigError, "backfill end_ts: 'soon' is not an ISO-8601 timestamp"),
        ({"start_ts": PAST, "end_ts": PAST - 60}, ConfigError, "is not after start_ts"),
        ({"start_ts": PAST, "end_ts": PAST}, ConfigError, "give a later end_ts, or none"),
        ({"start_ts": PAST, "tables": [f"{db}.nope"]}, ConfigError, f"table '{db}.nope' is not captured by this"),
        ({"start_ts": PAST, "tables": [f"{db}.other"]}, ConfigError, f"the pipeline captures: {db}.orders"),
        ({"start_ts": PAST, "tables": ["orders"]}, ConfigError, "tables: 'orders' is not of the form schema.table"),
        ({"start_ts": PAST, "tables": f"{db}.orders"}, ConfigError, "tables must be a list of schema.table names"),
        ({"start_ts": PAST, "tables": [f"{db}.orders", "x.y"]}, ConfigError, "table 'x.y' is not captured"),
    ]


def check(p: Pipeline, form: dict[str, Any]) -> dict[str, Any]:
    return check_backfill(p, form.get("start_ts"), form.get("end_ts"), form.get("tables"), dry_run=False)


def test_every_bad_backfill_form_is_refused_specifically_and_changes_nothing(ran: Ran, zk_client: Any) -> None:
    before = ran.snapshot(zk_client)
    for form, err, says in bad_forms(ran.database):
        with pytest.raises(err) as e:
            check(ran.pipeline, form)
        assert "pipeline 'badinput'" in str(e.value) and says in str(e.value), (form, str(e.value))
    # A valid form passes the check (which only reads) and names the concrete captured tables.
    ok = check(ran.pipeline, {"start_ts": time.time() - 5, "tables": [f"{ran.database}.*"]})
    assert ok["tables"] == [f"{ran.database}.orders"]  # never `other`, though the pattern matches it
    assert ran.snapshot(zk_client) == before


def test_a_start_older_than_the_binlogs_is_refused_when_they_were_purged(ran: Ran, zk_client: Any) -> None:
    before = ran.snapshot(zk_client)
    facts = ran.pipeline.source_facts(refresh=True)
    oldest = facts.oldest
    assert oldest is not None
    form = {"start_ts": "2000-01-01T00:00:00Z"}
    if oldest.index > 1:  # something was purged: the changes of 2000 are gone
        with pytest.raises(PositionPurged) as e:
            check(ran.pipeline, form)
        msg = str(e.value)
        assert "2000-01-01" in msg and "before the oldest binlog" in msg and oldest.name in msg and "Start at" in msg
    else:  # nothing was ever purged: replaying "from 2000" starts at the very first binlog
        assert check(ran.pipeline, form)["start"].file == oldest.name
    assert ran.snapshot(zk_client) == before


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.one_of(st.none(), st.text(max_size=30), st.floats(), st.integers(), st.just("2999-01-01T00:00:00Z")),
    end=st.one_of(st.none(), st.text(max_size=30), st.floats(allow_nan=True), st.just("")),
    tables=st.lists(st.text(max_size=20), min_size=1, max_size=3),
)
def test_fuzzed_forms_fail_as_cdc_errors_and_change_nothing(ran: Ran, zk_client: Any, start: Any, end: Any,
                                                            tables: list[str]) -> None:
    before = ran.snapshot(zk_client)
    try:
        check(ran.pipeline, {"start_ts": start, "end_ts": end, "tables": tables})
    except CdcError as e:
        assert "pipeline 'badinput'" in str(e) and len(str(e)) < 2000, str(e)
    assert ran.snapshot(zk_client) == before


# --------------------------------------------------------------------------------------------- CLI


@contextmanager
def cli_env(ran: Ran) -> Iterator[None]:
    s = ran.services
    conn = {"conn_type": "mysql", "host": s.mysql_host, "port": s.mysql_port, "login": s.mysql_user,
            "password": s.mysql_password}
    name = f"AIRFLOW_CONN_{CONN_ID.upper()}"
    old = os.environ.get(name)
    os.environ[name] = json.dumps(conn)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--from", "garbage"], 2, "error: ConfigError: pipeline 'badinput': backfill start_ts: 'garbage' is not an"),
        (["--from", "2999-01-01T00:00:00Z"], 2, "is in the future"),
        (["--from", "2026-01-01T00:00:00Z", "--until", "2025-01-01T00:00:00Z"], 2, "is not after start_ts"),
        (["--from", "2026-01-01T00:00:00Z", "--table", "nodb.nope"], 2, "table 'nodb.nope' is not captured"),
        (["--from", "2026-01-01T00:00:00Z", "--table", "nope"], 2, "is not of the form schema.table"),
        (["--from", "2026-01-01T00:00:00Z", "--max-windows", "many"], 2, "Invalid value for '--max-windows'"),
        ([], 2, "--from is required"),
    ],
)
def test_cli_backfill_refuses_bad_flags_with_exit_2_and_changes_nothing(
    ran: Ran, zk_client: Any, capsys: pytest.CaptureFixture[str], args: list[str], code: int, says: str
) -> None:
    from cdc_core.cli import main

    before = ran.snapshot(zk_client)
    with cli_env(ran):
        rc = main(["--config", str(ran.config), "backfill", "badinput", *args])
    err = capsys.readouterr().err
    assert rc == code, err
    assert says in err, err
    assert ran.snapshot(zk_client) == before


# ------------------------------------------------------------------------------- the first DAG task


def test_the_backfill_dags_first_task_refuses_a_bad_form_before_taking_the_lease(
    ran: Ran, zk_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowFailException
    from cdc_airflow import hooks, tasks

    class Hook:
        def __init__(self, name: str) -> None:
            assert name == "badinput"

        @contextmanager
        def pipeline(self) -> Iterator[Pipeline]:
            yield ran.pipeline

    monkeypatch.setattr(hooks, "CdcPipelineHook", Hook)
    monkeypatch.setattr(hooks, "pipeline_config", lambda name: ran.pipeline.config)  # its one source
    before = ran.snapshot(zk_client)
    for params, says in [
        ({"start_ts": "garbage"}, "backfill start_ts: 'garbage' is not an ISO-8601 timestamp"),
        ({"start_ts": "2999-01-01T00:00"}, "is in the future"),  # the form's zone-less picker value, read as UTC
        ({"start_ts": "2026-01-01T00:00:00Z", "tables": [f"{ran.database}.other"]}, "is not captured"),
    ]:
        ctx = {"ti": SimpleNamespace(dag_id="cdc_badinput_backfill"), "run_id": "manual__x", "params": params}
        monkeypatch.setattr(tasks, "get_current_context", lambda ctx=ctx: ctx)
        with pytest.raises(AirflowFailException, match=says):  # fails without retries
            tasks.acquire_lease.function("badinput", check_backfill=True)
    assert ran.snapshot(zk_client) == before  # the lease was never taken
    # A valid form goes on to take the lease, as before.
    recent = datetime.fromtimestamp(time.time() - 5, tz=UTC).isoformat()
    ti = SimpleNamespace(dag_id="cdc_badinput_backfill")
    ctx = {"ti": ti, "run_id": "manual__ok", "params": {"start_ts": recent}}
    monkeypatch.setattr(tasks, "get_current_context", lambda: ctx)
    grant = tasks.acquire_lease.function("badinput", check_backfill=True)
    assert grant["holder"] == "cdc_badinput_backfill/manual__ok"
    ran.pipeline.release(LeaseGrant.from_dict(grant))
