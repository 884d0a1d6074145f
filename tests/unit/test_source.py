"""Pure parts of the source layer: readiness checks over synthetic facts, table filters, the column-type
vocabulary, and keeping the password out of every string."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_core.capture.source import (
    SourceFacts,
    SourceParams,
    TableFilter,
    check_binlog_filters,
    check_cdc_ready,
    column_attrs,
    mariadb_gtid_state,
    normalise_column_type,
    parse_labels,
    quote_labels,
    source_error_from,
)
from cdc_core.model.errors import SourceError
from cdc_core.model.positions import BinlogFile, ServerIdentity, SourceEnd

pytestmark = pytest.mark.unit

READY = SourceFacts(
    identity=ServerIdentity("mariadb", 1),
    version="10.11.19-MariaDB-log",
    binlogs=(BinlogFile("mysql-bin.000001", 1000),),
    end=SourceEnd("mysql-bin.000001", 1000, "0-1-5"),
    gtid_executed="0-1-5",
    gtid_purged="",
    log_bin=True,
    binlog_format="ROW",
    binlog_row_image="FULL",
    binlog_row_metadata="FULL",
    address="db1:3306",
)


def test_ready_source_passes() -> None:
    check_cdc_ready(READY, "orders")


@pytest.mark.parametrize(
    ("change", "line"),
    [
        ({"log_bin": False}, "`log_bin=mysql-bin`"),
        ({"binlog_format": "MIXED"}, "`binlog_format=ROW`"),
        ({"binlog_row_image": "MINIMAL"}, "`binlog_row_image=FULL`"),
        ({"binlog_row_metadata": "MINIMAL"}, "`binlog_row_metadata=FULL`"),
        ({"binlog_row_metadata": None}, "upgrade the server"),
    ],
)
def test_each_unready_setting_names_its_my_cnf_line(change: dict[str, object], line: str) -> None:
    with pytest.raises(SourceError) as e:
        check_cdc_ready(replace(READY, **change), "orders")  # type: ignore[arg-type]
    msg = str(e.value)
    assert line in msg and "[mariadbd]" in msg and "orders" in msg and "db1:3306" in msg


def test_all_problems_are_reported_at_once_and_mysql_gets_its_section() -> None:
    facts = replace(
        READY, identity=ServerIdentity("mysql", 3, "u"), binlog_format="STATEMENT", binlog_row_metadata="MINIMAL"
    )
    with pytest.raises(SourceError) as e:
        check_cdc_ready(facts, "orders")
    msg = str(e.value)
    assert "binlog_format=ROW" in msg and "binlog_row_metadata=FULL" in msg and "[mysqld]" in msg


def test_password_never_shows() -> None:
    p = SourceParams("db1", 3306, "cdc", "s3cret-pw")
    assert "s3cret-pw" not in repr(p) and "s3cret-pw" not in str(p) and "s3cret-pw" not in f"{p}"
    assert p.pymysql_kwargs()["password"] == "s3cret-pw"
    err = source_error_from(Exception(1045, "Access denied for user 'cdc'@'x' (using password: YES)"), p)
    assert "s3cret-pw" not in str(err) and "'cdc'" in str(err) and "db1:3306" in str(err)
    assert "unreachable" in str(source_error_from(Exception(2003, "Can't connect"), p))


def test_table_filter() -> None:
    f = TableFilter(include=("shop.*", "crm.customers"), exclude=("shop.tmp_*",))
    assert f.matches("shop", "orders") and f.matches("crm", "customers")
    assert not f.matches("shop", "tmp_x") and not f.matches("crm", "leads") and not f.matches("Shop", "orders")
    assert f.literal_includes() == (("crm", "customers"),)
    assert f.literal_schemas() == ("shop", "crm")
    assert TableFilter(("s*.t",)).literal_schemas() is None
    assert f.may_match_schema("shop") and not f.may_match_schema("other")


@pytest.mark.parametrize(
    ("column_type", "expected"),
    [
        ("int(11)", "int"),
        ("int(10) unsigned", "int unsigned"),
        ("tinyint(1)", "tinyint"),
        ("bigint(20) unsigned zerofill", "bigint unsigned"),
        ("smallint(6)", "smallint"),
        ("mediumint(8) unsigned", "mediumint unsigned"),
        ("bigint unsigned", "bigint unsigned"),  # MySQL 8.0.19+ already drops widths
        ("decimal(10,2)", "decimal(10,2)"),
        ("decimal(10,2) unsigned", "decimal(10,2) unsigned"),
        ("float", "float"),
        ("float(7,3)", "float"),
        ("double(10,2)", "double"),
        ("datetime(6)", "datetime(6)"),
        ("datetime", "datetime"),
        ("timestamp(3)", "timestamp(3)"),
        ("time(6)", "time(6)"),
        ("year(4)", "year"),
        ("char(10)", "char(10)"),
        ("varchar(255)", "varchar(255)"),
        ("binary(16)", "binary(16)"),
        ("varbinary(20)", "varbinary(20)"),
        ("longtext", "longtext"),
        ("json", "json"),
        ("bit(5)", "bit(5)"),
        ("enum('A','b''c')", "enum('A','b''c')"),
        ("SET('X','y')", "set('X','y')"),
    ],
)
def test_column_type_vocabulary(column_type: str, expected: str) -> None:
    assert normalise_column_type(column_type) == expected


def test_labels_round_trip_like_information_schema() -> None:
    assert parse_labels("enum('a','b''c','d\\\\e')") == ("a", "b'c", "d\\e")
    assert quote_labels(("a", "b'c", "d\\e")) == "'a','b''c','d\\\\e'"
    assert column_attrs("set('x','y')", "utf8mb4") == (("charset", "utf8mb4"), ("labels", ("x", "y")))
    assert column_attrs("varbinary(3)", None) == (("charset", "binary"),)
    assert column_attrs("int unsigned", None) == ()


@given(st.lists(st.text(min_size=0, max_size=6), min_size=1, max_size=5))
def test_labels_round_trip_any_text(labels: list[str]) -> None:
    assert parse_labels(f"enum({quote_labels(labels)})") == tuple(labels)


def test_mariadb_binlog_state_reduces_to_one_gtid_per_domain() -> None:
    assert str(mariadb_gtid_state("0-1-10,0-2-12,1-1-3")) == "0-2-12,1-1-3"
    assert str(mariadb_gtid_state("[]")) == ""


def test_cascading_foreign_keys_are_read_from_show_create_table() -> None:
    from cdc_core.capture.tables import cascading_keys

    ddl = (
        "CREATE TABLE `child` (\n  `id` int(11) NOT NULL,\n  `pid` int(11) DEFAULT NULL,\n  `o` int(11),\n"
        "  PRIMARY KEY (`id`),\n"
        "  CONSTRAINT `fk_plain` FOREIGN KEY (`o`) REFERENCES `other` (`id`),\n"
        "  CONSTRAINT `fk``odd` FOREIGN KEY (`pid`, `o`) REFERENCES `shop`.`parent` (`id`, `x`) ON UPDATE SET NULL,\n"
        "  CONSTRAINT `fk_both` FOREIGN KEY (`pid`) REFERENCES `parent` (`id`) ON DELETE CASCADE ON UPDATE RESTRICT,\n"
        "  CONSTRAINT `fk_no` FOREIGN KEY (`o`) REFERENCES `p` (`id`) ON DELETE NO ACTION ON UPDATE NO ACTION\n"
        ") ENGINE=InnoDB"
    )
    assert cascading_keys(ddl, "db") == [
        "fk`odd: ON UPDATE SET NULL from shop.parent",
        "fk_both: ON DELETE CASCADE from db.parent",
    ]


@pytest.mark.parametrize(("filters", "include", "refused"), [
    ({"binlog_ignore_db": ("shop",)}, ("shop.*",), "shop"),
    ({"binlog_ignore_db": ("shop",)}, ("*.orders",), "shop"),  # a pattern that may match it
    ({"binlog_do_db": ("other",)}, ("shop.orders", "other.t"), "shop"),
    ({"binlog_ignore_db": ("other",)}, ("shop.*",), None),
    ({"binlog_do_db": ("shop",)}, ("shop.*",), None),
    ({"binlog_do_db": ("shop",)}, ("*.orders",), None),  # warned: the patterns name no schema
    ({}, ("shop.*",), None),
])
def test_a_binlog_filter_that_leaves_out_a_captured_schema_is_refused(
    filters: dict[str, tuple[str, ...]], include: tuple[str, ...], refused: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    facts = replace(READY, **filters)  # type: ignore[arg-type]
    if refused is None:
        check_binlog_filters(facts, TableFilter(include), "orders")
        assert ("filters its binlog" in caplog.text) == bool(filters)
        return
    with pytest.raises(SourceError) as e:
        check_binlog_filters(facts, TableFilter(include), "orders")
    assert f"captured schemas {refused} (binlog_do_db / binlog_ignore_db)" in str(e.value)
    assert "Remove the filter from my.cnf" in str(e.value)


def test_a_binlog_filter_is_warned_about_once_per_setting(caplog: pytest.LogCaptureFixture) -> None:
    """A run reads the source's facts several times (each refresh); the warning came with every read."""
    facts = replace(READY, binlog_ignore_db=("audit_" + uuid.uuid4().hex[:6],))
    for _ in range(3):
        check_binlog_filters(facts, TableFilter(("shop.*",)), "once")
    assert caplog.text.count("filters its binlog") == 1
    check_binlog_filters(replace(facts, binlog_ignore_db=("other",)), TableFilter(("shop.*",)), "once")
    assert caplog.text.count("filters its binlog") == 2
