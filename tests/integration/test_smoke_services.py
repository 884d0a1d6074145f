"""Each service is real: MariaDB writes a binlog with column names, ZooKeeper commits a transaction,
Spark writes a Delta table with jars from the local cache."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_mariadb_binlog_has_column_names(services, source_db):
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import WriteRowsEvent

    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("CREATE TABLE smoke (id INT PRIMARY KEY, label VARCHAR(20))")
        cur.execute("INSERT INTO smoke VALUES (1, 'héllo 🙂')")
    stream = BinLogStreamReader(
        connection_settings=services.source_params, server_id=4242, blocking=False,
        resume_stream=True, log_file=file, log_pos=pos, only_schemas=[source_db], only_events=[WriteRowsEvent],
    )
    rows = [r["values"] for ev in stream for r in ev.rows]
    stream.close()
    assert rows == [{"id": 1, "label": "héllo 🙂"}]


def test_zookeeper_accepts_a_transaction(zk_client, zk_root):
    zk_client.ensure_path(zk_root)
    tx = zk_client.transaction()
    tx.create(f"{zk_root}/a", b"1")
    tx.create(f"{zk_root}/b", b"2")
    results = tx.commit()
    assert not any(isinstance(r, Exception) for r in results)
    assert zk_client.get(f"{zk_root}/b")[0] == b"2"


def test_spark_writes_a_delta_table_with_local_jars(spark, lake_dir: Path):
    jars = spark.conf.get("spark.jars")
    assert ".cache/ivy/jars" in jars or "ivy" in jars
    assert "spark.jars.packages" not in dict(spark.sparkContext.getConf().getAll())
    path = str(lake_dir / "smoke")
    spark.range(3).write.format("delta").save(path)
    assert (lake_dir / "smoke" / "_delta_log").is_dir()
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == [0, 1, 2]
