"""The capture user's grants, on the real MariaDB: a user with exactly the documented minimum (REPLICATION SLAVE,
BINLOG MONITOR, SELECT on the captured schema only) passes the check; each missing grant is named, with the
exact GRANT statement to run, and running that statement as an administrator is all it takes to pass. The
pipeline runs the check at first contact, so the operator sees this message instead of a bare "access denied"
or a table that information_schema silently hides. (A full cycle as such a user: test_hostile_names.py.)
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from cdc_core.capture.source import SourceParams, check_privileges, connect
from cdc_core.model.errors import SourceError
from tests.support.security import least_privilege_grants, mariadb_user
from tests.support.source_facts import run_sql

pytestmark = pytest.mark.integration


def params(services: Any, user: Any) -> SourceParams:
    return SourceParams(services.mysql_host, services.mysql_port, user.name, user.password)


def check(services: Any, user: Any, schemas: list[str]) -> None:
    conn = connect(params(services, user))
    try:
        check_privileges(conn, "orders", schemas)
    finally:
        conn.close()


def grant_statements(message: str) -> list[str]:
    tail = message.split("Run as an administrator: ", 1)[1]
    return [s.strip() + ";" for s in tail.split(";") if s.strip().startswith("GRANT")]


@pytest.mark.parametrize(
    ("grants", "lacks"),
    [
        ({"slave": False}, ["REPLICATION SLAVE (to read the binlog)"]),
        ({"monitor": False}, ["BINLOG MONITOR (to list binlogs"]),
        ({"select": False}, ["SELECT on '{db}' (to describe the captured tables)"]),
        ({"slave": False, "monitor": False, "select": False},
         ["REPLICATION SLAVE", "BINLOG MONITOR", "SELECT on '{db}'"]),
    ],
    ids=["no-replication-slave", "no-binlog-monitor", "no-select-on-schema", "nothing"],
)
def test_each_missing_grant_is_named_with_the_exact_grant_to_run(
    services: Any, source_db: str, grants: dict[str, bool], lacks: list[str]
) -> None:
    db = source_db  # t_<hex>: its `_` is a GRANT wildcard, so the statement must escape it
    base = least_privilege_grants([db] if grants.get("select", True) else [],
                                  monitor=grants.get("monitor", True), slave=grants.get("slave", True))
    if not grants.get("select", True):
        base.append("SELECT ON `mysql`.`db`")  # SELECT elsewhere does not count
    with mariadb_user(services, base) as user:
        with pytest.raises(SourceError) as e:
            check(services, user, [db])
        msg = str(e.value)
        assert f"pipeline 'orders': the capture user {user.name}@127.0.0.1" in msg, msg
        for want in lacks:
            assert want.format(db=db) in msg, msg
        statements = grant_statements(msg)
        assert statements, msg
        for s in statements:
            assert s.endswith(f"TO '{user.name}'@'127.0.0.1';"), s
            assert "SELECT ON *.*" not in s, "least privilege: SELECT on the captured schemas only"
        if not grants.get("select", True):
            assert f"GRANT SELECT ON `{db.replace('_', chr(92) + '_')}`.* TO" in msg, msg
        if not grants.get("slave", True) or not grants.get("monitor", True):
            assert re.search(r"GRANT (REPLICATION SLAVE|BINLOG MONITOR)(, BINLOG MONITOR)? ON \*\.\* TO", msg), msg
        run_sql(services, *statements)  # exactly what the message says ...
        check(services, user, [db])  # ... and nothing else is missing


def test_the_documented_minimum_passes_and_a_wildcard_grant_is_read_as_the_server_reads_it(
    services: Any, source_db: str
) -> None:
    with mariadb_user(services, least_privilege_grants([source_db])) as user:
        check(services, user, [source_db])
    # An unescaped `t_x` grant covers `t_x` too (it is a LIKE pattern on the server).
    with mariadb_user(services, ["REPLICATION SLAVE, BINLOG MONITOR ON *.*", f"SELECT ON `{source_db}`.*"]) as user:
        check(services, user, [source_db])
        with pytest.raises(SourceError, match=r"SELECT on 'other_db'"):
            check(services, user, [source_db, "other_db"])


def test_the_pipeline_names_the_missing_grant_at_first_contact(
    services: Any, source_db: str, zk_client: Any, zk_root: str, tmp_path: Any
) -> None:
    from cdc_core.model.config import load_config
    from cdc_core.run.pipeline import Pipeline

    cfg = tmp_path / "pipelines.yaml"
    cfg.write_text(
        "pipelines:\n  - name: lp\n    source: {conn_id: x}\n"
        f"    tables: {{include: ['{source_db}.*']}}\n"
        f"    zookeeper: {{hosts: '{services.zk_hosts}', root: '{zk_root}'}}\n"
    )
    with mariadb_user(services, least_privilege_grants([source_db], monitor=False)) as user:
        p = Pipeline.from_config(load_config(cfg).pipeline("lp"), params(services, user), zk_client=zk_client)
        try:
            with pytest.raises(SourceError, match=r"lacks BINLOG MONITOR .* GRANT BINLOG MONITOR ON \*\.\* TO"):
                p.resolve(None)  # what planning does first
        finally:
            p.close()
    assert not zk_client.exists(zk_root)  # nothing was written
