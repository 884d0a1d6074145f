"""Demo workload for the embedded set-up: a small shop schema and a few rounds of changes.

python scripts/demo_workload.py reset     # forget the demo pipeline: its ZooKeeper subtree, lake, staging
python scripts/demo_workload.py init      # (re)create schema `demo` with rows (the initial snapshot loads them)
python scripts/demo_workload.py changes   # inserts, updates, deletes, a PK change, a big txn, a DDL
"""

from __future__ import annotations

import os
import sys

import pymysql

SCHEMA = os.environ.get("CDC_DEMO_SCHEMA", "demo")


def connect() -> pymysql.Connection:
    return pymysql.connect(
        host=os.environ.get("CDC_MARIADB_HOST", "127.0.0.1"),
        port=int(os.environ.get("CDC_MARIADB_PORT", "13306")),
        user="root",
        password=os.environ.get("CDC_MARIADB_ROOT_PASSWORD", "root-local-only"),
        autocommit=True,
        charset="utf8mb4",
    )


def init(cur: pymysql.cursors.Cursor) -> None:
    cur.execute(f"DROP DATABASE IF EXISTS `{SCHEMA}`")
    cur.execute(f"CREATE DATABASE `{SCHEMA}` CHARACTER SET utf8mb4")
    cur.execute(f"USE `{SCHEMA}`")
    cur.execute(
        "CREATE TABLE customers (id BIGINT UNSIGNED PRIMARY KEY, name VARCHAR(100) NOT NULL, "
        "email VARCHAR(200), tier ENUM('free','pro','enterprise') NOT NULL DEFAULT 'free', "
        "balance DECIMAL(12,2) NOT NULL DEFAULT 0, created_at DATETIME(6) NOT NULL, "
        "updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))"
    )
    cur.execute(
        "CREATE TABLE orders (order_id INT NOT NULL, line INT NOT NULL, customer_id BIGINT UNSIGNED NOT NULL, "
        "sku CHAR(8) NOT NULL, qty SMALLINT NOT NULL, price DECIMAL(10,2) NOT NULL, note TEXT, "
        "PRIMARY KEY (order_id, line))"
    )
    seed(cur)


def seed(cur: pymysql.cursors.Cursor) -> None:
    """Rows that exist before the pipeline's first run: no binlog the pipeline reads has them, so they
    land through the initial snapshot (`snapshot.on_start`), chunk by chunk, without locks."""
    cur.executemany(
        "INSERT INTO customers (id, name, email, tier, balance, created_at) "
        "VALUES (%s, %s, %s, %s, %s, NOW(6) - INTERVAL %s DAY)",
        [
            (
                i,
                f"Early customer {i}",
                None if i % 9 == 0 else f"early{i}@example.com",
                ["free", "pro", "enterprise"][i % 3],
                round(i * 3.75, 2),
                i % 365,
            )
            for i in range(1, 301)
        ],
    )
    cur.executemany(
        "INSERT INTO orders VALUES (%s,%s,%s,%s,%s,%s,%s)",
        [
            (o, line, 1 + o % 300, f"OLD{o:05d}", 1 + line, o * 1.5 + line, None if o % 4 else "legacy")
            for o in range(1, 151)
            for line in range(4)
        ],
    )


def changes(cur: pymysql.cursors.Cursor, round_no: int) -> None:
    cur.execute(f"USE `{SCHEMA}`")
    base = round_no * 1000
    cur.execute("BEGIN")
    for i in range(1, 51):
        cur.execute(
            "INSERT INTO customers (id, name, email, tier, balance, created_at) VALUES (%s,%s,%s,%s,%s, NOW(6))",
            (
                base + i,
                f"Customer {base + i} 🙂",
                f"c{base + i}@example.com",
                ["free", "pro", "enterprise"][i % 3],
                i * 1.25,
            ),
        )
    cur.execute("COMMIT")
    cur.execute("BEGIN")
    for i in range(1, 201):  # one larger transaction
        cur.execute(
            "INSERT INTO orders VALUES (%s,%s,%s,%s,%s,%s,%s)",
            (base + i // 4, i % 4, base + 1 + i % 50, f"SKU{i:05d}", i % 7 + 1, i * 0.5, None if i % 5 else "gift"),
        )
    cur.execute("COMMIT")
    cur.execute("UPDATE customers SET balance = balance + 10, tier = 'pro' WHERE id % 7 = 0")
    cur.execute("DELETE FROM orders WHERE qty = 3")
    cur.execute("UPDATE customers SET id = id + 500 WHERE id = %s", (base + 2,))  # a primary-key change
    cur.execute("BEGIN")
    cur.execute("DELETE FROM customers WHERE id = %s", (base + 3,))
    cur.execute("ROLLBACK")  # never reaches the binlog


def reset() -> None:
    """Start the demo over: a re-created schema would not match what an earlier demo landed."""
    import shutil
    from pathlib import Path

    from cdc_core.coordination import make_zk_client, pipeline_path
    from cdc_core.model.config import load_config

    pc = load_config().pipeline("demo")
    zk = make_zk_client(pc.zookeeper.hosts)
    try:
        zk.delete(pipeline_path(pc.zookeeper.root, pc.name), recursive=True)
    finally:
        zk.stop()
        zk.close()
    for d in (
        Path(pc.lake_root) / SCHEMA,
        Path(pc.lake_root) / "_cdc_tombstones" / SCHEMA,
        Path(pc.staging_root) / pc.name,
    ):
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else "init"
    if what == "reset":
        reset()
        print("demo workload: reset done")
        return 0
    conn = connect()
    with conn.cursor() as cur:
        if what == "init":
            init(cur)
        elif what == "changes":
            cur.execute(f"SELECT COALESCE(MAX(id), 0) DIV 1000 + 1 FROM `{SCHEMA}`.customers WHERE id < 100000")
            changes(cur, int(cur.fetchone()[0]))
        else:
            print(f"unknown step {what!r}: use reset, init or changes", file=sys.stderr)
            return 2
    conn.close()
    print(f"demo workload: {what} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
