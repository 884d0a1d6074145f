"""Connections resolved from AIRFLOW_CONN_<ID> without Airflow, read the way Airflow reads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_core.model.connections import ConnectionInfo, env_var_name, parse_connection, resolve_connection
from cdc_core.model.errors import ConfigError

pytestmark = pytest.mark.unit


def test_json_form() -> None:
    env = {
        "AIRFLOW_CONN_CDC_SOURCE_LOCAL": json.dumps(
            {"conn_type": "mysql", "host": "127.0.0.1", "port": 13306, "login": "cdc", "password": "cdc-local-only"}
        )
    }
    info = resolve_connection("cdc_source_local", env)
    assert (info.host, info.port, info.user, info.password, info.conn_type) == (
        "127.0.0.1", 13306, "cdc", "cdc-local-only", "mysql"
    )


def test_uri_form_unquotes_and_reads_extras() -> None:
    info = parse_connection("x", "mysql://cdc%40corp:p%40ss%3Aw0rd@db1.example:3307/shop?charset=utf8mb4&ssl=1")
    assert info.user == "cdc@corp"
    assert info.password == "p@ss:w0rd"
    assert (info.host, info.port, info.schema) == ("db1.example", 3307, "shop")
    assert dict(info.extra) == {"charset": "utf8mb4", "ssl": "1"}


def test_default_port_and_extra_as_json_string() -> None:
    info = parse_connection("x", '{"conn_type": "mysql", "host": "db1", "extra": "{\\"ssl\\": true}"}')
    assert info.port == 3306
    assert dict(info.extra) == {"ssl": True}
    assert info.password is None and info.user is None


def test_repr_hides_the_password() -> None:
    info = parse_connection("x", "mysql://cdc:topsecret-value@db1:3306?ssl_key_password=alsosecret")
    for text in (repr(info), str(info), f"{info}", str(info.safe_dict()), repr([info])):
        assert "topsecret-value" not in text
        assert "alsosecret" not in text
    assert "password='***'" in repr(info)
    assert info.safe_dict()["password"] == "***"


def test_missing_variable_says_how_to_define_it() -> None:
    with pytest.raises(ConfigError) as exc:
        resolve_connection("orders_db", {})
    msg = str(exc.value)
    assert "connection 'orders_db' is not defined" in msg
    assert "AIRFLOW_CONN_ORDERS_DB=" in msg and '"conn_type":"mysql"' in msg and "mysql://" in msg
    assert env_var_name("orders_db") == "AIRFLOW_CONN_ORDERS_DB"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"conn_type": "mysql", "host": "db1", "user": "cdc"}', "unknown key 'user'; Airflow calls it 'login'"),
        ('{"conn_type": "mysql", "host": "db1", "bogus": 1}', "unknown key 'bogus'"),
        ('{"conn_type": "mysql", "login": "cdc"}', "has no host"),
        ('{"conn_type": "mysql", "host": "db1", "port": "abc"}', "port 'abc' is not a number"),
        ('{"conn_type": "mysql", "host": "db1", "port": 70000}', "port 70000 is out of range"),
        ('{"conn_type": "mysql", "host": "db1", "extra": "{nope"}', "'extra' is not valid JSON"),
        ("{not json", "not valid JSON"),
        ("db1:3306", "expected Airflow's JSON form"),
        ("mysql://db1:port", "the URI's port is not a number"),
    ],
)
def test_malformed_values(value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        resolve_connection("src", {"AIRFLOW_CONN_SRC": value})
    assert expected in str(exc.value)
    assert "(env AIRFLOW_CONN_SRC)" in str(exc.value)


def test_from_fields_is_what_the_dag_glue_uses() -> None:
    info = ConnectionInfo.from_fields(
        "src", conn_type="mysql", host="db1", port=None, login="cdc", password="", schema="", extra=None
    )
    assert (info.port, info.password, info.schema) == (3306, None, None)


def test_same_reading_as_airflow(tmp_path: Path) -> None:
    """Airflow's own Connection parses the same strings into the same fields (run apart: importing
    Airflow configures a process for good)."""
    pytest.importorskip("airflow")
    values = [
        "mysql://cdc%40corp:p%40ss%3Aw0rd@db1.example:3307/shop?charset=utf8mb4",
        '{"conn_type": "mysql", "host": "127.0.0.1", "port": 13306, "login": "cdc", "password": "cdc-local-only"}',
        '{"conn_type": "spark", "host": "local[2]"}',
    ]
    script = (
        "import json, sys\n"
        "from airflow.models.connection import Connection\n"
        "out = []\n"
        "for v in json.loads(sys.argv[1]):\n"
        "    c = Connection.from_json(v, conn_id='x') if v.startswith('{') else Connection(conn_id='x', uri=v)\n"
        "    out.append([c.conn_type, c.host, c.port, c.login, c.password, c.schema or None, c.extra_dejson])\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    proc = subprocess.run(
        [sys.executable, "-c", script, json.dumps(values)], env=env, capture_output=True, text=True, check=True
    )
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for value, airflow_fields in zip(values, theirs, strict=True):
        mine = parse_connection("x", value)
        expected_port = airflow_fields[2] if airflow_fields[2] is not None else mine.port  # we default 3306
        assert [mine.conn_type, mine.host, mine.port, mine.user, mine.password, mine.schema, dict(mine.extra)] == [
            airflow_fields[0], airflow_fields[1], expected_port, *airflow_fields[3:]
        ], value
