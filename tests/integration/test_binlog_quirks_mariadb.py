"""What servers write to the binlog beyond plain transactions, through `cdc run` (both readers) and `cdc verify`.

- XA (two-phase) transactions land as the source commits them (cdc_core.capture.binlog.xa): a prepared one that
  is rolled back lands nothing, one committed later lands at its commit, and while one is prepared and open no
  window ends after it (the lake must not hold rows the source may still roll back).
- A binlog_checksum switched (CRC32 -> NONE -> CRC32) leaves files of both kinds: each is read by its own
  Format_description, whatever the setting when the reader connects.
- With log_bin_compress, MariaDB writes long statements and row events compressed (cdc_core.capture.binlog.
  compressed): they land like plain ones (they used to be passed over as unknown events).

Real MariaDB + ZooKeeper: the fault suite's private pair (tests/faults/services.py), because both change what the
whole server's binlog holds (an open prepared XA transaction holds back every pipeline reading it; the checksum
and compression are global settings). Merges on the warm merge server.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from tests.support.cli import private_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]


@pytest.fixture
def case(private_services: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    ps = private_services
    db = "quirk_" + uuid.uuid4().hex[:8]
    root = ps.root_connect()
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"INSERT INTO `{db}`.t VALUES (10, 'before')")  # before the start: not captured
    root.close()
    pipeline = private_pipeline(ps, db, tmp_path, monkeypatch, prefix="quirk", caps={"max_transactions": 2})
    config = tmp_path / "pipelines.yaml"
    yield ps, db, pipeline, config
    root = ps.root_connect()
    with root.cursor() as cur:
        cur.execute("XA RECOVER")
        for _fmt, glen, _blen, data in cur.fetchall():  # a failed test's prepared transactions: roll them back
            cur.execute(f"XA ROLLBACK X'{bytes(data[:glen]).hex()}',X'{bytes(data[glen:]).hex()}'")
        cur.execute("SET GLOBAL binlog_checksum = 'CRC32'")  # as the services run them
        cur.execute("SET GLOBAL log_bin_compress = OFF")
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    root.close()


def verify(config: Path, capsys: pytest.CaptureFixture[str], name: str) -> str:
    """`cdc verify`: "" when the lake equals the source, else what differs."""
    code = main(["--config", str(config), "verify", name])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return "" if code == 0 else out


def cdc(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code = main(["--config", str(config), *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("decoder", ["columnar", "library"])
def test_prepared_xa_transactions_land_at_their_commit_and_never_when_rolled_back(
    case: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, decoder: str
) -> None:
    ps, db, pipeline, config = case
    config.write_text(json.dumps({"pipelines": [{**pipeline, "decoder": decoder}]}))
    name = pipeline["name"]
    holder, other = ps.root_connect(db), ps.root_connect(db)
    try:
        with holder.cursor() as a, other.cursor() as b:
            b.execute("INSERT INTO t VALUES (1, 'plain')")
            b.execute("XA START 'gone'")  # prepared, then rolled back: its rows are in the binlog, not the table
            b.execute("INSERT INTO t VALUES (3, 'rolled')")
            b.execute("UPDATE t SET v = 'rolled' WHERE id = 1")
            b.execute("XA END 'gone'")
            b.execute("XA PREPARE 'gone'")
            b.execute("XA ROLLBACK 'gone'")
            a.execute("XA START 'open'")  # prepared and left open across a run
            a.execute("INSERT INTO t VALUES (2, 'xa')")
            a.execute("DELETE FROM t WHERE id = 10")
            a.execute("XA END 'open'")
            a.execute("XA PREPARE 'open'")
            b.execute("INSERT INTO t VALUES (4, 'after')")  # committed after the open prepare
            b.execute("XA START 'one'")
            b.execute("INSERT INTO t VALUES (5, 'one')")
            b.execute("XA END 'one'")
            b.execute("XA COMMIT 'one' ONE PHASE")  # never prepared: an ordinary transaction

            held = cdc(config, capsys, "run", name)
            # Windows of at most 2 transactions. The first takes row 1 and the rolled-back group, and goes on past
            # its cap to that group's outcome (3 transactions, 1 change); the next stops before the open one.
            assert [(w["transactions"], w["changes"]) for w in held["windows"]] == [(3, 1), (0, 0)], held
            why = [r.getMessage() for r in caplog.records if r.name == "cdc.plan"]
            assert len(why) == 1 and "before an XA transaction prepared at" in why[0] and "XA RECOVER" in why[0], why
            status = cdc(config, capsys, "status", name)
            assert status["lag"]["bytes"] > 0, status
            assert verify(config, capsys, name)  # differs: the lake holds row 1, not yet 4 and 5

            a.execute("XA COMMIT 'open'")
            b.execute("UPDATE t SET v = 'later' WHERE id = 2")
        ran = cdc(config, capsys, "run", name)
        # The open one's group, two ordinary transactions (4, 5) and its commit in one window (its two rows at
        # the commit), then the update.
        assert [(w["transactions"], w["changes"]) for w in ran["windows"]] == [(4, 4), (1, 1)], ran
        assert not verify(config, capsys, name)  # 1, 2 (its update after the commit), 4, 5; not 3, and 10 deleted
    finally:
        holder.close()
        other.close()


@pytest.mark.parametrize("decoder", ["columnar", "library"])
def test_files_written_with_and_without_checksums_are_each_read_as_written(
    case: Any, capsys: pytest.CaptureFixture[str], decoder: str
) -> None:
    ps, db, pipeline, config = case
    config.write_text(json.dumps({"pipelines": [{**pipeline, "decoder": decoder}]}))
    name = pipeline["name"]
    conn = ps.root_connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1, 'crc32')")
            cur.execute("SET GLOBAL binlog_checksum = 'NONE'")  # takes effect in a new file
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("INSERT INTO t VALUES (2, 'none')")
            cur.execute("UPDATE t SET v = 'none too' WHERE id = 1")
            cur.execute("DELETE FROM t WHERE id = 10")  # the row from before the start
            cur.execute("ALTER TABLE t ADD COLUMN w INT DEFAULT 4")
        # Connected while NONE is the setting, reading files of both kinds.
        ran = cdc(config, capsys, "run", name)
        assert sum(w["changes"] for w in ran["windows"]) == 4, ran
        assert not verify(config, capsys, name)
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL binlog_checksum = 'CRC32'")
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("INSERT INTO t VALUES (3, 'crc again', 5)")
            cur.execute("UPDATE t SET w = 6 WHERE id = 2")
    finally:
        conn.close()
    ran = cdc(config, capsys, "run", name)
    assert sum(w["changes"] for w in ran["windows"]) == 2, ran
    assert not verify(config, capsys, name)


@pytest.mark.parametrize("decoder", ["columnar", "library"])
def test_compressed_statements_and_row_events_land_like_plain_ones(
    case: Any, capsys: pytest.CaptureFixture[str], decoder: str
) -> None:
    ps, db, pipeline, config = case
    config.write_text(json.dumps({"pipelines": [{**pipeline, "decoder": decoder, "caps": {}}]}))
    conn = ps.root_connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL log_bin_compress_min_len = 10")  # (the default, 256, leaves short ones plain)
            cur.execute("SET GLOBAL log_bin_compress = ON")
            cur.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
            cur.execute("ALTER TABLE t ADD COLUMN body TEXT, ADD COLUMN n INT DEFAULT 7")  # a compressed statement
            cur.execute("UPDATE t SET body = REPEAT('b', 3000) WHERE id = 2")
            cur.execute("DELETE FROM t WHERE id = 10")
            cur.execute("INSERT INTO t (id, v, body) SELECT seq, 'many', REPEAT('m', seq) FROM seq_100_to_600")
            cur.execute("SET GLOBAL log_bin_compress = OFF")
            cur.execute("SHOW MASTER STATUS")
            cur.execute("SHOW BINLOG EVENTS IN %s", (cur.fetchone()[0],))
            kinds = {str(row[2]) for row in cur.fetchall()}
        assert {"Query_compressed", "Write_rows_compressed_v1", "Update_rows_compressed_v1"} <= kinds, kinds
    finally:
        conn.close()
    ran = cdc(config, capsys, "run", pipeline["name"])
    assert sum(w["changes"] for w in ran["windows"]) == 2 + 1 + 1 + 501, ran
    assert not verify(config, capsys, pipeline["name"])
