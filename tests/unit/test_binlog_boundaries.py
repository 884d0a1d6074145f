"""Pure parts of the binlog reader: transaction boundaries from event sequences of both flavors, and table
schemas from table-map metadata (including the missing-metadata error)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from cdc_core.capture.binlog.stream import StreamEvent
from cdc_core.capture.binlog.table_maps import SchemaBuilder, binlog_column_type
from cdc_core.capture.binlog.transactions import TxnAssembler
from cdc_core.capture.source import SourceParams
from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.errors import SourceError
from cdc_core.model.positions import ServerIdentity
from cdc_core.model.windows import TxnBoundary

pytestmark = pytest.mark.unit

MARIA = ServerIdentity("mariadb", 1)
MYSQL = ServerIdentity("mysql", 7, "3e11fa47-71ca-11e1-9e33-c80aa9429562")
UUID = MYSQL.server_uuid


def feed(asm: TxnAssembler, events: list[tuple[Any, ...]], file: str = "mysql-bin.000003") -> list[TxnBoundary]:
    out, offset = [], 4
    for kind, size, *rest in events:
        kw = dict(rest[0]) if rest else {}
        ev = StreamEvent(kind, file, offset, offset + size, kw.pop("ts", 100), **kw)
        offset += size
        b = asm.feed(ev)
        if b is not None:
            out.append(b)
    return out


def test_mariadb_dml_ddl_and_gtid_list_header() -> None:
    asm = TxnAssembler(MARIA, epoch=2, start_gtid=None)
    got = feed(asm, [
        ("header", 252),
        ("gtid_list", 29, {"gtid": "0-1-10,0-2-4"}),
        ("other", 43),  # Binlog_checkpoint
        ("gtid", 42, {"gtid": "0-1-11"}),
        ("tablemap", 50), ("rows", 60), ("rows", 60), ("commit", 31, {"ts": 111}),
        ("gtid", 42, {"gtid": "0-1-12", "standalone": True}),
        ("query", 90, {"query": "ALTER TABLE t ADD c INT", "schema": "db", "ts": 112}),
        ("gtid", 42, {"gtid": "0-1-13"}),
        ("tablemap", 50), ("rows", 60), ("commit", 69, {"query": "COMMIT", "ts": 113}),  # MyISAM: COMMIT query
        ("gtid", 42, {"gtid": "0-1-14"}), ("tablemap", 50),  # never committed within the stream: not reported
    ])
    assert [b.gtid for b in got] == ["0-1-11", "0-1-12", "0-1-13"]
    dml, ddl, myisam = got
    assert (dml.start_offset, dml.end.offset, dml.events, dml.bytes) == (328, 571, 5, 243)
    assert dml.start_gtid == "0-1-10" and dml.end.gtid == "0-1-11" and dml.end.commit_ts == 111.0
    assert dml.end.epoch == 2 and not dml.is_ddl and dml.prev_commit_ts is None
    assert ddl.is_ddl and ddl.events == 2 and ddl.start_offset == dml.end.offset and ddl.prev_commit_ts == 111.0
    assert myisam.end.gtid == "0-1-13" and not myisam.is_ddl
    assert ddl.start_position().gtid == "0-1-11" and ddl.start_position().commit_ts == 111.0


def test_mysql_begin_commit_ddl_and_anonymous_gtids() -> None:
    asm = TxnAssembler(MYSQL, epoch=0, start_gtid=f"{UUID}:1-5")
    got = feed(asm, [
        ("gtid", 65, {"gtid": f"{UUID}:6"}), ("begin", 70, {"query": "BEGIN"}),
        ("tablemap", 50), ("rows", 60), ("commit", 31),
        ("gtid", 65, {"gtid": f"{UUID}:7"}), ("query", 90, {"query": "CREATE TABLE x (a INT)"}),
    ])
    assert [b.end.gtid for b in got] == [f"{UUID}:1-6", f"{UUID}:1-7"]
    assert got[0].events == 5 and not got[0].is_ddl and got[1].is_ddl

    anon = TxnAssembler(MYSQL, epoch=0, start_gtid=None)  # gtid_mode OFF: anonymous GTID events
    got = feed(anon, [
        ("gtid_list", 31, {"gtid": ""}),  # empty Previous_gtids: no GTID state adopted
        ("gtid", 65), ("begin", 70, {"query": "BEGIN"}), ("rows", 60), ("commit", 31),
        ("query", 80, {"query": "DROP TABLE x"}),  # very old servers: a bare statement is its own transaction
    ])
    assert [(b.gtid, b.end.gtid, b.is_ddl) for b in got] == [(None, None, False), (None, None, True)]


def col(t: int, name: str | None, **kw: Any) -> Any:
    base = {"type": t, "name": name, "unsigned": False, "collation_name": None, "enum_values": None, "set_values": None}
    return SimpleNamespace(**{**base, **kw})


def tablemap(columns: list[Any], pk: list[int], nullable: list[bool]) -> Any:
    mask = bytearray((len(columns) + 7) // 8)
    for i, n in enumerate(nullable):
        if n:
            mask[i // 8] |= 1 << (i % 8)
    om = SimpleNamespace(simple_primary_key_list=pk, primary_keys_with_prefix={})
    return SimpleNamespace(schema="db", table="t", columns=columns, null_bitmask=bytes(mask), optional_metadata=om)


def test_schema_from_table_map_metadata() -> None:
    cols = [
        col(FIELD_TYPE.LONGLONG, "id", unsigned=True),
        col(FIELD_TYPE.VARCHAR, "name", max_length=1020, collation_name="utf8mb4_unicode_ci"),
        col(FIELD_TYPE.STRING, "code", max_length=16, collation_name="binary"),
        col(FIELD_TYPE.ENUM, "e", enum_values=["", "a", "it's"], collation_name="utf8mb4_general_ci"),
        col(FIELD_TYPE.BLOB, "doc", length_size=4, collation_name="utf8mb4_bin"),
        col(FIELD_TYPE.DATETIME2, "at", fsp=3),
        col(FIELD_TYPE.NEWDECIMAL, "amount", precision=12, decimals=2),
        col(FIELD_TYPE.BIT, "flags", bits=5),
        col(FIELD_TYPE.YEAR, "y", unsigned=True),
    ]
    builder = SchemaBuilder("mariadb", None, SourceParams("h", 1, "u", "p"), "orders")
    schema = builder.build(tablemap(cols, [0], [False, True, True, True, True, True, True, True, True]))
    assert schema.key == ("id",)
    assert [(c.name, c.mysql_type, c.nullable) for c in schema.columns] == [
        ("id", "bigint unsigned", False),
        ("name", "varchar(255)", True),
        ("code", "binary(16)", True),
        ("e", "enum('a','it''s')", True),
        ("doc", "longtext", True),
        ("at", "datetime(3)", True),
        ("amount", "decimal(12,2)", True),
        ("flags", "bit(5)", True),
        ("y", "year", True),
    ]
    assert schema.columns[3].attrs == (("charset", "utf8mb4"), ("labels", ("a", "it's")))
    assert schema.columns[2].attrs == (("charset", "binary"),)


def test_mariadb_json_and_missing_key_come_from_the_callback() -> None:
    known = TableSchema("db", "t", (SourceColumn("a", "int", False), SourceColumn("doc", "json")), ("a",))
    builder = SchemaBuilder("mariadb", lambda s, t: known, SourceParams("h", 1, "u", "p"), "orders")
    cols = [col(FIELD_TYPE.LONG, "a"), col(FIELD_TYPE.BLOB, "doc", length_size=4, collation_name="utf8mb4_bin")]
    schema = builder.build(tablemap(cols, [], [False, True]))
    assert schema.key == ("a",) and schema.columns[1].mysql_type == "json" and schema.columns[1].attrs == ()


def test_columns_without_names_ask_for_full_row_metadata() -> None:
    builder = SchemaBuilder("mariadb", None, SourceParams("h", 1, "u", "p"), "orders")
    with pytest.raises(SourceError, match="binlog_row_metadata=FULL"):
        builder.build(tablemap([col(FIELD_TYPE.LONG, None)], [0], [False]))
    with pytest.raises(SourceError, match="binlog_row_metadata=FULL"):
        builder.build(tablemap([col(FIELD_TYPE.LONG, "UNKNOWN_COL0")], [0], [False]))


def test_binlog_types_for_text_lengths_and_charsets() -> None:
    def t(*args: Any, **kw: Any) -> tuple[str, str | None]:
        mysql_type, charset, _ = binlog_column_type(col(*args, **kw), "mariadb")
        return mysql_type, charset

    assert t(FIELD_TYPE.STRING, "c", max_length=40, collation_name="utf8mb4_unicode_ci") == ("char(10)", "utf8mb4")
    assert t(FIELD_TYPE.STRING, "c", max_length=5, collation_name="latin1_swedish_ci") == ("char(5)", "latin1")
    assert t(FIELD_TYPE.VARCHAR, "c", max_length=30, collation_name="utf8mb3_general_ci") == ("varchar(10)", "utf8mb3")
    assert t(FIELD_TYPE.BLOB, "b", length_size=1, collation_name="binary") == ("tinyblob", "binary")
    assert t(FIELD_TYPE.JSON, "j") == ("json", None)
    assert t(FIELD_TYPE.SET, "s", set_values=["x", "y"], collation_name="utf8mb4_bin")[0] == "set('x','y')"

