"""Issue 34 as a new user found it: one pipeline over a small MariaDB database, one `cdc run` after each DDL
statement, then every lake table compared with its source table, rows and columns (names and types per the
type map: cdc_core.run.verify), and nothing left of a dropped, renamed-away or ghost table.

Real MariaDB (binlog), ZooKeeper, the `cdc` CLI in-process; windows merge on the warm merge server (the merge
job's own code; spark-submit has tests of its own).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from cdc_core.lake import delta_state
from cdc_core.model.ddl import parse_statement
from cdc_core.model.layout import table_uri
from cdc_core.run.verify import compare_table

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]


@pytest.fixture
def pipe(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    name = "ddl_" + uuid.uuid4().hex[:6]
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_DDL", json.dumps(conn))
    pipeline = {
        "name": name, "source": {"conn_id": "cdc_source_ddl"}, "tables": {"include": [f"{source_db}.*"]},
        "start": services.binlog_end(), "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
        "zero_dates": "null",
    }
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    return {"name": name, "config": str(config), "db": source_db, "lake": str(tmp_path / "lake"),
            "services": services}


def sql(p: dict[str, Any], *statements: str) -> None:
    conn = p["services"].root_connect(p["db"])
    with conn.cursor() as cur:
        for s in statements:
            cur.execute(s)
    conn.close()


def run(p: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(["--config", p["config"], "run", p["name"]])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    return json.loads(out)


def source_tables(p: dict[str, Any]) -> list[str]:
    conn = p["services"].root_connect(p["db"])
    with conn.cursor() as cur:
        cur.execute("SHOW TABLES")
        names = sorted(r[0] for r in cur.fetchall())
    conn.close()
    return names


def lake_rows(p: dict[str, Any], table: str) -> int:
    uri = table_uri(p["lake"], p["db"], table)
    if not delta_state.table_exists(uri):
        return 0
    rows = delta_state.read_rows(uri)
    return rows.num_rows


def assert_lake_equals_source(p: dict[str, Any], *, gone: tuple[str, ...] = ()) -> None:
    conn = p["services"].root_connect()
    try:
        for t in source_tables(p):
            if t.startswith("_"):  # an online schema-change tool's table: never captured
                continue
            diff = compare_table(conn, p["db"], t, table_uri(p["lake"], p["db"], t))
            assert diff.equal, diff.summary()
    finally:
        conn.close()
    for t in gone:  # a dropped, renamed-away or ghost table holds no row in the lake
        assert lake_rows(p, t) == 0, f"{t} still has rows in the lake"


def seed(p: dict[str, Any], table: str, rows: int = 50) -> None:
    sql(p, f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
        f"INSERT INTO {table} VALUES " + ", ".join(f"({i}, 'v{i}', {i})" for i in range(rows)))


def test_the_lake_follows_every_statement_of_issue_34(pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    p = pipe
    for t in ("t", "t_ren", "t_drop"):
        seed(p, t)
    run(p, capsys)
    assert_lake_equals_source(p)

    sql(p, "TRUNCATE TABLE t", "INSERT INTO t VALUES (1, 'one', 1)")
    run(p, capsys)
    assert_lake_equals_source(p)
    sql(p, "INSERT INTO t SELECT id, CONCAT('v', id), id FROM t_ren WHERE id > 1")

    sql(p, "ALTER TABLE t ADD COLUMN d INT NOT NULL DEFAULT 7")
    run(p, capsys)
    assert_lake_equals_source(p)

    sql(p, "ALTER TABLE t RENAME COLUMN v TO label", "UPDATE t SET label = 'renamed' WHERE id = 3")
    run(p, capsys)
    assert_lake_equals_source(p)

    sql(p, "ALTER TABLE t MODIFY n BIGINT", "UPDATE t SET n = 4000000000 WHERE id = 4")
    run(p, capsys)
    assert_lake_equals_source(p)

    sql(p, "RENAME TABLE t_ren TO t_ren2", "UPDATE t_ren2 SET v = 'after' WHERE id < 2")
    run(p, capsys)
    assert_lake_equals_source(p, gone=("t_ren",))

    sql(p, "DROP TABLE t_drop")
    run(p, capsys)
    assert_lake_equals_source(p, gone=("t_drop",))

    sql(p, "CREATE TABLE t_drop (id INT PRIMARY KEY, w INT)", "INSERT INTO t_drop VALUES (1, 10)")
    run(p, capsys)
    assert_lake_equals_source(p)

    # gh-ost, as it runs: ghost table, its ALTER, the row copy while the real table keeps changing, the swap
    sql(p, "CREATE TABLE _t_gho LIKE t", "ALTER TABLE _t_gho ADD COLUMN extra INT NOT NULL DEFAULT 5",
        "INSERT INTO _t_gho (id, label, n, d) SELECT id, label, n, d FROM t WHERE id < 20")
    sql(p, "UPDATE t SET label = 'during copy' WHERE id = 5", "UPDATE _t_gho SET label = 'during copy' WHERE id = 5")
    run(p, capsys)  # a window in the middle of the migration
    assert_lake_equals_source(p, gone=("_t_gho",))
    sql(p, "INSERT INTO _t_gho (id, label, n, d) SELECT id, label, n, d FROM t WHERE id >= 20",
        "RENAME TABLE t TO _t_del, _t_gho TO t", "DROP TABLE _t_del", "INSERT INTO t VALUES (500, 'x', 1, 2, 3)")
    run(p, capsys)
    assert_lake_equals_source(p, gone=("_t_gho", "_t_del"))
    assert not Path(table_uri(p["lake"], p["db"], "_t_gho")).exists()


def configure(p: dict[str, Any], **settings: Any) -> None:
    cfg = json.loads(Path(p["config"]).read_text())
    cfg["pipelines"][0].update(settings)
    Path(p["config"]).write_text(json.dumps(cfg))


def run_fails(p: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["--config", p["config"], "run", p["name"]])
    _, err = capsys.readouterr()
    assert code != 0
    return code, err


def test_changes_the_statement_cannot_tell_are_re_read_from_the_source(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """An incompatible type change (the server converted the values), a truncated partition (rows gone
    without row events) and a partition exchanged with a table (both tables' rows change without row events; probed:
    the table the partition went to kept its old rows): the lake re-reads the tables, and the re-read's last chunk
    drops what it did not find."""
    p = pipe
    partitioned = "(id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) " \
                  "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)"
    sql(p, "CREATE TABLE c (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO c VALUES " + ", ".join(f"({i}, '{i:03d}')" for i in range(30)),
        f"CREATE TABLE part {partitioned}", "INSERT INTO part VALUES " + ", ".join(f"({i}, {i})" for i in range(20)),
        f"CREATE TABLE swapped {partitioned}", "INSERT INTO swapped VALUES (1, 1), (2, 2), (15, 15)",
        "CREATE TABLE other (id INT PRIMARY KEY, v INT)", "INSERT INTO other VALUES (5, 50), (6, 60)")
    run(p, capsys)
    assert_lake_equals_source(p)
    sql(p, "ALTER TABLE c MODIFY v INT", "UPDATE c SET v = v + 1000 WHERE id = 1",
        "ALTER TABLE part TRUNCATE PARTITION p0", "INSERT INTO part VALUES (5, 55)",
        "ALTER TABLE swapped EXCHANGE PARTITION p0 WITH TABLE other", "UPDATE other SET v = 9 WHERE id = 1")
    out = run(p, capsys)  # the DDL window, then the re-read's chunks
    assert any(w.get("kind") == "snapshot" for w in out["windows"]), out["windows"]
    assert_lake_equals_source(p)
    assert lake_rows(p, "part") == 11  # the truncated partition's rows are gone (not only not live)
    assert lake_rows(p, "other") == 2


def test_redefinitions_that_convert_stored_values_re_read_the_table(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Column redefinitions whose lake type stays but after which the server holds other values, with no row
    event (cdc_core.model.ddl.conversions): fractional seconds cut, trailing spaces stripped into CHAR, a stored
    generated column computed again, duplicates deleted by ALTER IGNORE TABLE ... ADD UNIQUE, and, in a session
    without a strict sql_mode, strings cut and NULLs turned into NOT NULL's default. Each re-reads its table; a
    widening in strict mode does not, nor a redefinition whose conversion the lake shows changed nothing."""
    p = pipe
    sql(p, "CREATE TABLE conv (id INT PRIMARY KEY, d DATETIME(6), tm TIME(6), b VARCHAR(10), a INT, "
           "g INT AS (a + 1) STORED, s VARCHAR(20), nn INT, w VARCHAR(20), d0 DATETIME(6), ch CHAR(5)) "
           "DEFAULT CHARSET utf8mb4",
        "CREATE TABLE dup (id INT PRIMARY KEY, a INT)",
        "CREATE TABLE lax (id INT PRIMARY KEY, s VARCHAR(20), nn INT)",
        "CREATE TABLE same_w (id INT PRIMARY KEY, d DATETIME(6))")
    run(p, capsys)
    sql(p, "INSERT INTO conv (id, d, tm, b, a, s, nn, w, d0, ch) VALUES "
           "(1, '2020-01-01 10:00:00.999999', '10:00:00.999999', 'ab  ', 1, 'long value', NULL, 'w', "
           "'2020-01-01 10:00:01', 'x'), (2, NULL, NULL, NULL, NULL, NULL, 2, NULL, NULL, NULL)",
        "INSERT INTO dup VALUES (1, 10), (2, 10), (3, 30)",
        "INSERT INTO lax VALUES (1, 'a long value', NULL), (2, 'ok', 2)")
    run(p, capsys)
    assert_lake_equals_source(p)

    # A widening, and redefinitions the lake shows converted nothing (whole seconds, no trailing space): no re-read
    sql(p, "ALTER TABLE conv MODIFY w VARCHAR(50), MODIFY d0 DATETIME, CHANGE ch ch2 CHAR(5) DEFAULT 'y'")
    out = run(p, capsys)
    assert not any(w.get("kind") == "snapshot" for w in out["windows"]), out["windows"]
    assert_lake_equals_source(p)

    # The lake holds values these changed (a fraction, a trailing space), or the window's own rows from before the
    # change do (same_w; they land after the schema phase): the merge looks at both, and re-reads
    sql(p, "ALTER TABLE conv MODIFY d DATETIME, MODIFY tm TIME(2), MODIFY b CHAR(10)",
        "INSERT INTO same_w VALUES (1, '2020-01-01 00:00:00.5')", "ALTER TABLE same_w MODIFY d DATETIME")
    out = run(p, capsys)
    assert any(w.get("kind") == "snapshot" for w in out["windows"]), out["windows"]
    assert_lake_equals_source(p)

    # These re-read whatever the lake holds (the capture says so): an expression, ALTER IGNORE, no strict mode
    sql(p, "ALTER TABLE conv MODIFY g INT AS (a * 10) STORED",
        "ALTER IGNORE TABLE dup ADD UNIQUE KEY (a)")
    conn = p["services"].root_connect(p["db"])
    with conn.cursor() as cur:  # one session without a strict mode
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("ALTER TABLE lax MODIFY s VARCHAR(3), MODIFY nn INT NOT NULL")
    conn.close()
    out = run(p, capsys)
    assert any(w.get("kind") == "snapshot" for w in out["windows"]), out["windows"]
    assert_lake_equals_source(p)
    assert lake_rows(p, "dup") == 2  # the duplicate ALTER IGNORE deleted is gone from the lake too


def test_a_type_change_between_rows_of_a_tables_first_window_lands(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A table the lake does not have yet, whose first window holds rows before and after a type change the lake
    cannot compute (VARCHAR -> INT; DATETIME -> TIMESTAMP in a session at +05:00): the lake table starts with the
    older rows' types, the change applies, the table is re-read. (Probed: the window failed for good, exit 7,
    "staged file ... holds string but the window's type is int".)"""
    p = pipe
    sql(p, "CREATE TABLE first (id INT PRIMARY KEY, v VARCHAR(10), d DATETIME)")
    configure(p, start=p["services"].binlog_end())  # its CREATE is before the pipeline's start
    sql(p, "INSERT INTO first VALUES (1, '12', '2020-01-01 10:00:00'), (2, NULL, NULL)",
        "ALTER TABLE first MODIFY v INT", "SET SESSION time_zone = '+05:00'",
        "ALTER TABLE first MODIFY d TIMESTAMP NULL",
        "INSERT INTO first VALUES (3, 5, '2020-01-01 10:00:00')")
    out = run(p, capsys)
    assert any(w.get("kind") == "snapshot" for w in out["windows"]), out["windows"]
    assert_lake_equals_source(p)


def test_a_key_column_renamed_in_a_tables_first_window_lands(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A table the lake does not have yet, whose first window renames its key column (CHANGE id id2, also to a
    wider type) between rows. (Probed: the merge failed on every retry, exit 8, "No match for FieldRef.Name(id2)":
    the window's facts read every staged file by the table's newest key, which the older file does not have.)"""
    p = pipe
    sql(p, "CREATE TABLE kr (id INT PRIMARY KEY, v INT)", "CREATE TABLE kw (id INT PRIMARY KEY, v INT)")
    configure(p, start=p["services"].binlog_end())
    sql(p, "INSERT INTO kr VALUES (1, 1), (2, 2)", "ALTER TABLE kr CHANGE id id2 INT", "INSERT INTO kr VALUES (3, 3)",
        "UPDATE kr SET v = 7 WHERE id2 = 1", "DELETE FROM kr WHERE id2 = 2",
        "INSERT INTO kw VALUES (1, 1), (2, 2)", "ALTER TABLE kw CHANGE id id2 BIGINT",
        "INSERT INTO kw VALUES (5000000000, 3)", "UPDATE kw SET v = 7 WHERE id2 = 1")
    run(p, capsys)
    assert_lake_equals_source(p)


def test_a_table_renamed_in_its_first_window_takes_the_changes_before_the_rename(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A table the lake does not have yet gets rows, an ADD COLUMN with a default, a MODIFY that cuts fractions,
    and a rename, all in one window. (Probed: the ack failed for good, "Delta does not hold it for t", since the
    renamed-away name never became a lake table; the new name lacked the added column and kept the fractions.)"""
    p = pipe
    sql(p, "CREATE TABLE early (id INT PRIMARY KEY, v VARCHAR(10), d DATETIME(6))")
    configure(p, start=p["services"].binlog_end())
    sql(p, "INSERT INTO early VALUES (1, 'a', '2020-01-01 00:00:00.5'), (2, 'b', '2020-01-01 00:00:00')",
        "ALTER TABLE early ADD COLUMN c INT DEFAULT 7", "UPDATE early SET c = 8 WHERE id = 2",
        "ALTER TABLE early MODIFY d DATETIME", "RENAME TABLE early TO later",
        "INSERT INTO later (id, v) VALUES (3, 'c')")
    run(p, capsys)
    assert_lake_equals_source(p, gone=("early",))


def test_a_rename_swap_with_tables_the_lake_does_not_have_yet(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`RENAME TABLE a TO tmp, b TO a, tmp TO b` where the lake has not got b yet (its first rows are in the
    swap's window), or neither table (with an ADD COLUMN on a before the swap), or neither table with the same
    columns and rows written under both names on both sides of the swap. (Probed: a lost b's rows, since the
    rename found no lake table to carry; in the first-window case a took b's shape for the ADD COLUMN and b kept
    a's old columns; with the same columns, each name's one staged file held rows of both tables and the rows
    from before the swap were lost.) Then a MODIFY of the new a: a widening (a4; probed: b took a's BIGINT) or a
    conversion (a5; probed: the window failed, "int in a5 but string in b5")."""
    p = pipe
    sql(p, "CREATE TABLE a1 (id INT PRIMARY KEY, v INT)", "CREATE TABLE b1 (k VARCHAR(5) PRIMARY KEY, w VARCHAR(5))",
        "CREATE TABLE a2 (id INT PRIMARY KEY, v INT)", "CREATE TABLE b2 (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE a3 (id INT PRIMARY KEY, v INT)", "CREATE TABLE b3 (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE a4 (id INT PRIMARY KEY, v INT)", "CREATE TABLE b4 (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE a5 (id INT PRIMARY KEY, v VARCHAR(10))", "CREATE TABLE b5 (id INT PRIMARY KEY, v VARCHAR(10))")
    configure(p, start=p["services"].binlog_end())
    sql(p, "INSERT INTO a2 VALUES (1, 1), (2, 2)",
        "INSERT INTO a1 VALUES (1, 1)", "INSERT INTO b1 VALUES ('x', 'y')", "ALTER TABLE a1 ADD COLUMN c INT DEFAULT 4",
        "RENAME TABLE a1 TO tmp1, b1 TO a1, tmp1 TO b1", "INSERT INTO a1 VALUES ('z', 'z')",
        "INSERT INTO b1 VALUES (2, 2, 2)",
        "INSERT INTO a3 VALUES (1, 1), (2, 2), (3, 3)", "INSERT INTO b3 VALUES (10, 10)",
        "RENAME TABLE a3 TO tmp3, b3 TO a3, tmp3 TO b3", "INSERT INTO a3 VALUES (12, 12)",
        "DELETE FROM b3 WHERE id = 1", "UPDATE b3 SET v = 5 WHERE id = 2",
        "INSERT INTO a4 VALUES (1, 1), (2, 2)", "INSERT INTO b4 VALUES (7, 7)",
        "RENAME TABLE a4 TO tmp4, b4 TO a4, tmp4 TO b4", "ALTER TABLE a4 MODIFY v BIGINT",
        "INSERT INTO a4 VALUES (8, 8000000000)", "DELETE FROM b4 WHERE id = 1",
        "INSERT INTO a5 VALUES (1, '1'), (2, 'x')", "INSERT INTO b5 VALUES (7, '7')",
        "RENAME TABLE a5 TO tmp5, b5 TO a5, tmp5 TO b5", "ALTER TABLE a5 MODIFY v INT",
        "INSERT INTO a5 VALUES (8, 8)", "UPDATE b5 SET v = '5' WHERE id = 1")
    run(p, capsys)
    sql(p, "INSERT INTO b2 VALUES (1, 10), (3, 30)", "RENAME TABLE a2 TO tmp2, b2 TO a2, tmp2 TO b2",
        "INSERT INTO a2 VALUES (4, 40)")
    run(p, capsys)
    assert_lake_equals_source(p, gone=("tmp1", "tmp2", "tmp3", "tmp4", "tmp5"))


def test_a_column_dropped_and_added_again_with_rows_on_both_sides_in_one_window(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """An update, DROP COLUMN s, ADD COLUMN s ... DEFAULT 'z', an insert: the update's image and the insert have
    the same columns, so one staged file holds both. (Probed: the lake kept the update's old s, since the file was
    translated from its newest change only.)"""
    p = pipe
    sql(p, "CREATE TABLE readd (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
        "INSERT INTO readd VALUES (1, 1, 'a'), (2, 2, 'b')")
    run(p, capsys)
    sql(p, "UPDATE readd SET v = 5 WHERE id = 2", "ALTER TABLE readd DROP COLUMN s",
        "ALTER TABLE readd ADD COLUMN s VARCHAR(10) DEFAULT 'z'", "INSERT INTO readd (id) VALUES (3)",
        "UPDATE readd SET s = 'y' WHERE id = 1")
    run(p, capsys)
    assert_lake_equals_source(p)


def test_alters_logged_in_two_phases_apply_once_at_commit_and_not_when_rolled_back(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """binlog_alter_two_phase: each ALTER is logged at its start (START ALTER) and again at its COMMIT or ROLLBACK
    ALTER, with the same text. (Probed: `RENAME COLUMN a TO b, ADD COLUMN a` applied twice renamed the new a onto
    b, and the merge failed on every retry; a rolled-back ALTER changed the lake alone.)"""
    import pymysql

    p = pipe
    sql(p, "CREATE TABLE two (id INT PRIMARY KEY, a INT, d INT)", "INSERT INTO two VALUES (1, 1, 1), (2, 2, 1)")
    run(p, capsys)
    sql(p, "SET SESSION binlog_alter_two_phase = 1", "UPDATE two SET a = 7 WHERE id = 2",
        "ALTER TABLE two RENAME COLUMN a TO b, ADD COLUMN a INT DEFAULT 5", "INSERT INTO two VALUES (3, 3, 3, 3)")
    with pytest.raises(pymysql.err.IntegrityError):  # duplicate d: the server logs START and ROLLBACK ALTER
        sql(p, "SET SESSION binlog_alter_two_phase = 1", "ALTER TABLE two ADD COLUMN z INT DEFAULT 1, ADD UNIQUE (d)")
    sql(p, "SET SESSION binlog_alter_two_phase = 1", "ALTER TABLE two DROP COLUMN d",
        "INSERT INTO two VALUES (4, 4, 4)")
    run(p, capsys)
    assert_lake_equals_source(p)
    lake = delta_state.read_rows(table_uri(p["lake"], p["db"], "two")).column_names
    assert [c for c in lake if not c.startswith("_cdc")] == ["id", "b", "a"]


def test_statements_that_were_no_ops_at_the_source_change_nothing_in_the_lake(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`IF [NOT] EXISTS` forms the server only warns about. (Probed: ADD COLUMN IF NOT EXISTS of a column of another
    type, and CHANGE COLUMN IF EXISTS of a missing one, stopped the merge on every retry.)"""
    p = pipe
    sql(p, "CREATE TABLE noop (id INT PRIMARY KEY, a BIGINT, b VARCHAR(10))", "INSERT INTO noop VALUES (1, 1, 'x')")
    run(p, capsys)
    sql(p, "UPDATE noop SET a = 2", "ALTER TABLE noop ADD COLUMN IF NOT EXISTS a INT DEFAULT 77",
        "ALTER TABLE noop ADD COLUMN IF NOT EXISTS b INT", "ALTER TABLE noop CHANGE COLUMN IF EXISTS nope n2 INT",
        "ALTER TABLE noop MODIFY COLUMN IF EXISTS nope BIGINT", "ALTER TABLE noop RENAME COLUMN IF EXISTS nope TO n3",
        "ALTER TABLE noop DROP COLUMN IF EXISTS nope", "ALTER TABLE noop CHANGE COLUMN IF EXISTS b bb VARCHAR(12)",
        "INSERT INTO noop VALUES (2, 5, 'y')")
    run(p, capsys)
    assert_lake_equals_source(p)


def test_a_table_created_again_with_fewer_columns_loses_the_others(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """DROP TABLE, then CREATE TABLE of the same name with fewer columns, in the window after the table landed and
    inside one window. (Probed: the lake kept the old table's column `v`: the reset counted as done because every
    new column was there.)"""
    p = pipe
    sql(p, "CREATE TABLE again (id INT PRIMARY KEY, v INT, w VARCHAR(5))", "INSERT INTO again VALUES (1, 1, 'x')")
    run(p, capsys)
    sql(p, "DROP TABLE again", "CREATE TABLE again (id INT PRIMARY KEY, w VARCHAR(5))",
        "INSERT INTO again VALUES (5, 'y')",
        "CREATE TABLE twice (id INT PRIMARY KEY, v INT)", "INSERT INTO twice VALUES (1, 1)", "DROP TABLE twice",
        "CREATE TABLE twice (id INT PRIMARY KEY)", "INSERT INTO twice VALUES (2)")
    run(p, capsys)
    assert_lake_equals_source(p)


def test_application_time_period_tables_land(pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """MariaDB's application-time periods (probed: the CREATE stopped the window, UnsupportedDdl, "primary key
    part 'p without overlaps' is not a column"): the key is the id and the period's columns, a DELETE or UPDATE
    FOR PORTION OF splits rows (row events), and adding or dropping a period changes no row."""
    p = pipe
    sql(p, "CREATE TABLE price (id INT, s DATE, e DATE, v INT, PERIOD FOR p (s, e), "
           "PRIMARY KEY (id, p WITHOUT OVERLAPS))",
        "CREATE TABLE plain_p (id INT PRIMARY KEY, s DATE, e DATE)",
        "INSERT INTO price VALUES (1, '2020-01-01', '2020-12-31', 1), (2, '2020-01-01', '2021-01-01', 2)",
        "DELETE FROM price FOR PORTION OF p FROM '2020-03-01' TO '2020-04-01' WHERE id = 1",
        "UPDATE price FOR PORTION OF p FROM '2020-06-01' TO '2020-07-01' SET v = 5",
        "ALTER TABLE plain_p ADD PERIOD FOR q (s, e)", "INSERT INTO plain_p VALUES (1, '2020-01-01', '2020-02-01')",
        "ALTER TABLE plain_p DROP PERIOD FOR q")
    run(p, capsys)
    assert_lake_equals_source(p)
    assert lake_rows(p, "price") == 7  # id 1: two pieces after the delete, the later one in three after the update


def test_refuse_mode_and_an_unparseable_statement_stop_the_window_until_skipped(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    p = pipe
    seed(p, "r", 5)
    seed(p, "ok", 5)
    run(p, capsys)
    configure(p, schema_changes={"tables": {f"{p['db']}.r": "refuse"}})  # (its CREATE TABLE would be refused too)
    sql(p, "ALTER TABLE r ADD COLUMN x INT", "INSERT INTO ok VALUES (100, 'a', 1)")
    code, err = run_fails(p, capsys)
    assert code == 7 and "schema_changes mode refuse" in err and "schema_changes.skip" in err, err
    position = err.split("the statement at ", 1)[1].split(" ", 1)[0]
    assert lake_rows(p, "ok") == 5  # nothing of the window landed
    configure(p, schema_changes={"tables": {f"{p['db']}.r": "refuse"}, "skip": [position]})
    run(p, capsys)
    assert lake_rows(p, "ok") == 6

    # A session logging statements instead of rows: the rows it changed are in no row event.
    sql(p, "SET SESSION binlog_format = 'STATEMENT'", "INSERT INTO ok VALUES (101, 'stmt', 1)")
    sql(p, "INSERT INTO ok VALUES (102, 'row', 1)")
    code, err = run_fails(p, capsys)
    assert code == 7 and "logged as a statement" in err and f"{p['db']}.ok" in err and "binlog_format" in err, err
    logged = err.split("the statement at ", 1)[1].split(" ", 1)[0]
    assert lake_rows(p, "ok") == 6  # nothing of the window landed
    configure(p, schema_changes={"tables": {f"{p['db']}.r": "refuse"}, "skip": [position, logged]})
    run(p, capsys)
    assert lake_rows(p, "ok") == 7  # as told: row 102 landed, 101 is for the operator to repair (a snapshot)

    # LOAD DATA logged as a statement is an Execute_load_query event, which the library does not read (probed: its
    # rows were lost without a word); refused the same way.
    data = Path(p["config"]).parent / "rows.csv"
    data.write_text("103,loaded,1\n104,loaded,2\n")
    conn = p["services"].root_connect(p["db"], local_infile=True)
    with conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute(f"LOAD DATA LOCAL INFILE '{data}' INTO TABLE ok FIELDS TERMINATED BY ','")
    conn.close()
    code, err = run_fails(p, capsys)
    assert code == 7 and "logged as a statement" in err and "LOAD DATA LOCAL INFILE" in err, err
    assert lake_rows(p, "ok") == 7
    loaded = err.split("the statement at ", 1)[1].split(" ", 1)[0]
    configure(p, schema_changes={"tables": {f"{p['db']}.r": "refuse"}, "skip": [position, logged, loaded]})
    run(p, capsys)

    # A statement the parser refuses (making a captured table system-versioned); the run's first contact with the
    # source now refuses the table itself first (SystemVersionedTable, exit 3, not retried).
    assert parse_statement("ALTER TABLE ok ADD SYSTEM VERSIONING", p["db"]).error is not None
    sql(p, "ALTER TABLE ok ADD SYSTEM VERSIONING")
    code, err = run_fails(p, capsys)
    assert code == 3 and f"system-versioned (WITH SYSTEM VERSIONING): {p['db']}.ok" in err, err


def test_ddl_on_an_excluded_table_changes_nothing(pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    p = pipe
    configure(p, tables={"include": [f"{p['db']}.*"], "exclude": [f"{p['db']}.x"]})
    seed(p, "x", 5)
    seed(p, "kept", 5)
    run(p, capsys)
    sql(p, "TRUNCATE TABLE x", "ALTER TABLE x ADD COLUMN y INT DEFAULT 1", "DROP TABLE x",
        "INSERT INTO kept VALUES (9, 'nine', 9)")
    out = run(p, capsys)
    assert not Path(table_uri(p["lake"], p["db"], "x")).exists()
    assert lake_rows(p, "kept") == 6
    assert all(w.get("kind", "stream") != "snapshot" for w in out["windows"])


def test_lenient_keeps_what_follow_would_drop_or_rename(
    pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    p = pipe
    configure(p, schema_changes={"mode": "lenient"})
    seed(p, "l", 5)
    run(p, capsys)
    sql(p, "ALTER TABLE l RENAME COLUMN v TO label", "ALTER TABLE l DROP COLUMN n",
        "INSERT INTO l VALUES (7, 'seven')")
    run(p, capsys)
    conn = p["services"].root_connect()
    try:  # the source's columns all there, with its values; the lake's extra ones kept (compare_table's rule)
        diff = compare_table(conn, p["db"], "l", table_uri(p["lake"], p["db"], "l"), kept_columns=True)
    finally:
        conn.close()
    assert diff.equal, diff.summary()
    rows = {r["id"]: r for r in delta_state.read_rows(table_uri(p["lake"], p["db"], "l")).to_pylist()}
    assert rows[1]["v"] == "v1" and rows[1]["n"] == 1 and rows[7]["v"] is None and rows[7]["label"] == "seven"


def test_ddl_during_a_chunked_snapshot_keeps_it_exact(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Tables loaded chunk by chunk (10 rows a chunk) while their schema changes between the chunks: a rename,
    an added column with a default, a widening, a truncate, a table renamed half-way through its load."""
    p = {"db": source_db, "services": services, "lake": str(tmp_path / "lake"), "name": "snap_" + uuid.uuid4().hex[:6]}
    for t in ("s", "tr", "mv"):
        seed(p, t, 45)
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_SNAP", json.dumps(conn))
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": p["name"], "source": {"conn_id": "cdc_source_snap"}, "tables": {"include": [f"{source_db}.*"]},
        "start": {"kind": "current"}, "snapshot": {"on_start": True, "chunk_rows": 10, "max_tables_per_window": 1},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root}, "staging_root": str(tmp_path / "staging"),
        "lake_root": p["lake"], "schedule": None,
    }]}))
    p["config"] = str(config)

    def one(*statements: str) -> None:
        if statements:
            sql(p, *statements)
        code = main(["--config", p["config"], "run", p["name"], "--max-windows", "2"])
        _, err = capsys.readouterr()
        assert code == 0, err[-3000:]

    one()
    one("ALTER TABLE s RENAME COLUMN v TO label", "UPDATE s SET label = 'moved' WHERE id = 40")
    one("ALTER TABLE s ADD COLUMN d INT NOT NULL DEFAULT 3", "TRUNCATE TABLE tr", "INSERT INTO tr VALUES (1, 'x', 1)")
    one("ALTER TABLE s MODIFY n BIGINT", "RENAME TABLE mv TO mv2")
    one("UPDATE mv2 SET n = -1 WHERE id = 44", "DELETE FROM s WHERE id = 41")
    run(p, capsys)  # until the snapshot is done and the stream caught up
    assert_lake_equals_source(p, gone=("mv",))


def test_pt_online_schema_change_with_triggers(pipe: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """pt-online-schema-change's sequence: a `_t_new` copy altered, triggers that mirror changes of the real
    table into it while rows are copied in chunks, the atomic swap, the old table and the triggers dropped."""
    p = pipe
    seed(p, "pt", 30)
    run(p, capsys)
    sql(p, "CREATE TABLE `_pt_new` LIKE `pt`",
        "ALTER TABLE `_pt_new` ADD COLUMN score DECIMAL(6,2) NOT NULL DEFAULT '1.50', MODIFY n BIGINT",
        "CREATE TRIGGER `pt_osc_ins` AFTER INSERT ON `pt` FOR EACH ROW "
        "REPLACE INTO `_pt_new` (id, v, n) VALUES (NEW.id, NEW.v, NEW.n)",
        "CREATE TRIGGER `pt_osc_upd` AFTER UPDATE ON `pt` FOR EACH ROW "
        "REPLACE INTO `_pt_new` (id, v, n) VALUES (NEW.id, NEW.v, NEW.n)",
        "CREATE TRIGGER `pt_osc_del` AFTER DELETE ON `pt` FOR EACH ROW DELETE IGNORE FROM `_pt_new` WHERE id = OLD.id",
        "INSERT LOW_PRIORITY IGNORE INTO `_pt_new` (id, v, n) SELECT id, v, n FROM `pt` WHERE id < 15",
        "UPDATE pt SET v = 'during' WHERE id IN (3, 20)", "DELETE FROM pt WHERE id = 4",
        "INSERT INTO pt VALUES (100, 'new', 100)")
    run(p, capsys)
    assert_lake_equals_source(p, gone=("_pt_new",))
    sql(p, "INSERT LOW_PRIORITY IGNORE INTO `_pt_new` (id, v, n) SELECT id, v, n FROM `pt` WHERE id >= 15",
        "RENAME TABLE `pt` TO `_pt_old`, `_pt_new` TO `pt`", "DROP TABLE IF EXISTS `_pt_old`",
        "DROP TRIGGER IF EXISTS `pt_osc_ins`", "DROP TRIGGER IF EXISTS `pt_osc_upd`",
        "DROP TRIGGER IF EXISTS `pt_osc_del`", "UPDATE pt SET score = 9.25 WHERE id = 5")
    run(p, capsys)
    assert_lake_equals_source(p, gone=("_pt_new", "_pt_old"))
