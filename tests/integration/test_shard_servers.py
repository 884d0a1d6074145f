"""The `shard_servers` fixture (tests/support/shards.py): three MariaDB servers that are distinct CDC sources
(their own server_id, GTID domain, port and binlog), each usable by the replication user, and each one stoppable
and restartable on its own without disturbing the others or losing its data."""

from __future__ import annotations

import uuid
from typing import Any

import pymysql
import pytest

pytestmark = pytest.mark.integration


def query(conn: Any, sql: str) -> tuple[Any, ...]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return tuple(cur.fetchone())


def test_three_distinct_sources_with_row_binlogs(shard_servers: Any) -> None:
    shards = list(shard_servers)
    assert len(shards) == 3
    assert len({s.mysql_port for s in shards}) == 3
    identities = []
    for shard in shards:
        conn = shard.root_connect()
        try:
            port, server_id, domain = query(conn, "SELECT @@port, @@server_id, @@gtid_domain_id")
            assert (port, server_id, domain) == (shard.mysql_port, shard.server_id, shard.gtid_domain_id)
            assert query(conn, "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata") == (
                1, "ROW", "FULL", "FULL")
            # The identity is in the binlog, not only in the variables: a transaction here gets a GTID
            # domain-server_id-seq of this server's own.
            db = "t_" + uuid.uuid4().hex[:10]
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{db}`")
                cur.execute(f"DROP DATABASE `{db}`")
            (gtid_pos,) = query(conn, "SELECT @@gtid_binlog_pos")
            assert any(g.startswith(f"{domain}-{server_id}-") for g in gtid_pos.split(",")), gtid_pos
        finally:
            conn.close()
        identities.append((server_id, domain))
    assert len({sid for sid, _ in identities}) == 3, identities
    assert len({dom for _, dom in identities}) == 3, identities


def test_the_replication_user_reads_every_shard(shard_servers: Any) -> None:
    for shard in shard_servers:
        conn = shard.cdc_connect()
        try:
            (user,) = query(conn, "SELECT CURRENT_USER()")
            assert user == f"{shard.mysql_user}@127.0.0.1"
            with conn.cursor() as cur:
                cur.execute("SHOW MASTER STATUS")  # needs BINLOG MONITOR: what a pipeline plans from
                file, pos = cur.fetchone()[:2]
        finally:
            conn.close()
        assert shard.binlog_end() == {"kind": "file", "file": file, "offset": int(pos)}


def test_a_stopped_shard_leaves_the_others_serving_and_comes_back_with_its_data(shard_servers: Any) -> None:
    first, middle, last = shard_servers
    db = "t_" + uuid.uuid4().hex[:10]
    for shard in shard_servers:  # the same database and row on every shard, each with its own value
        conn = shard.root_connect()
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, note VARCHAR(20))")
            cur.execute(f"INSERT INTO `{db}`.t VALUES (1, %s)", (f"shard {shard.server_id}",))
        conn.close()

    def note(shard: Any) -> str:
        conn = shard.root_connect()
        try:
            return str(query(conn, f"SELECT note FROM `{db}`.t WHERE id = 1")[0])
        finally:
            conn.close()

    others = {s.mysql_port: s.pid("mariadb") for s in (first, last)}
    stopped_pid = middle.pid("mariadb")
    try:
        middle.stop_mariadb()
        assert not middle.running()["mariadb"]
        with pytest.raises(pymysql.err.OperationalError):
            middle.root_connect(connect_timeout=5)
        # The others: the same processes, still answering, their rows intact and writable.
        assert {s.mysql_port: s.pid("mariadb") for s in (first, last)} == others
        for shard in (first, last):
            assert note(shard) == f"shard {shard.server_id}"
            conn = shard.root_connect()
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO `{db}`.t VALUES (2, 'while one was down')")
            conn.close()
    finally:
        middle.start_mariadb()  # whatever happened above, the session's later tests get all three back
        middle.wait_mariadb()

    assert middle.pid("mariadb") not in (None, stopped_pid)
    assert note(middle) == f"shard {middle.server_id}"
    conn = middle.root_connect()
    try:
        assert query(conn, "SELECT @@server_id, @@gtid_domain_id") == (middle.server_id, middle.gtid_domain_id)
    finally:
        conn.close()
    for shard in shard_servers:
        conn = shard.root_connect()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()
