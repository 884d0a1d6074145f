"""Which ALTER TABLE statements re-read their table because the server may have converted stored values without
row events (cdc_core.model.ddl.conversions); checked against MariaDB by
tests/integration/test_schema_changes_mariadb.py::test_redefinitions_that_convert_stored_values_re_read_the_table."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_core.model.ddl import parse_statement
from cdc_core.model.ddl.conversions import (
    FRACTION,
    IGNORE_REASON,
    SHORT_BINARY,
    STRICT_ALL_TABLES,
    STRICT_TRANS_TABLES,
    TRAILING_SPACE,
    ValueCheck,
    is_strict,
    value_check,
)
from cdc_core.model.schema_changes import MODIFY_COLUMN, RENAME_TABLE, REPLACE_ROWS, SchemaChange
from cdc_core.model.schema_evolution import MODE_FOLLOW, LakeColumn, PlanContext, SchemaState, plan_table

pytestmark = pytest.mark.unit

# MariaDB 10.11's default sql_mode as a query event carries it (STRICT_TRANS_TABLES, ERROR_FOR_DIVISION_BY_ZERO,
# NO_AUTO_CREATE_USER, NO_ENGINE_SUBSTITUTION), read from a real binlog.
MARIADB_DEFAULT_SQL_MODE = 1411383296


def rereads(query: str, *, strict: bool = True) -> list[SchemaChange]:
    parsed = parse_statement(query, "db", strict=strict)
    assert parsed.error is None, parsed.error
    return [c for c in parsed.changes if c.kind == REPLACE_ROWS]


@pytest.mark.parametrize(("query", "reason"), [
    ("ALTER TABLE t MODIFY g INT AS (a * 2) STORED", "computed again"),
    ("ALTER TABLE t CHANGE g h INT AS (a * 2) VIRTUAL", "column 'h' was redefined as int: its values are computed"),
    ("ALTER TABLE t MODIFY id INT NOT NULL AUTO_INCREMENT", "AUTO_INCREMENT"),
    ("ALTER IGNORE TABLE t ADD UNIQUE KEY (a)", IGNORE_REASON),
    ("ALTER IGNORE TABLE t MODIFY s VARCHAR(3)", IGNORE_REASON),
])
def test_a_redefinition_whose_values_the_lake_cannot_test_always_re_reads(query: str, reason: str) -> None:
    (reread,) = rereads(query)
    assert (reread.schema, reread.table) == ("db", "t")
    assert reread.reason is not None and reason in reread.reason


@pytest.mark.parametrize("query", [
    "ALTER TABLE t MODIFY s VARCHAR(3)",  # strict: the server refuses to cut a value
    "ALTER TABLE t MODIFY a INT NOT NULL",  # strict: refused when a NULL is there
    "ALTER TABLE t MODIFY a INT UNSIGNED",  # strict: refused when a value is out of range
    "ALTER TABLE t MODIFY e ENUM('a')",  # strict: refused when a label in use goes
    "ALTER TABLE t MODIFY d DATETIME(6)",
    "ALTER TABLE t MODIFY d DATETIME",  # the lake is tested for fractions (below), not re-read outright
    "ALTER TABLE t MODIFY b CHAR(10)",
    "ALTER TABLE t MODIFY s VARCHAR(50) NOT NULL DEFAULT ''",
    "ALTER TABLE t ADD COLUMN d DATETIME",  # an added column's values are its default's (schema_evolution)
    "ALTER TABLE t ADD UNIQUE KEY (a)",  # strict: refused on duplicates
    "ALTER TABLE t DROP COLUMN d",
])
def test_a_change_the_server_refuses_or_the_lake_can_test_in_strict_mode_does_not(query: str) -> None:
    assert rereads(query) == []


@pytest.mark.parametrize("query", [
    "ALTER TABLE t MODIFY s VARCHAR(3)", "ALTER TABLE t MODIFY a INT NOT NULL", "ALTER TABLE t CHANGE a b INT UNSIGNED",
])
def test_without_a_strict_mode_any_redefinition_re_reads(query: str) -> None:
    (reread,) = rereads(query, strict=False)
    assert reread.reason is not None and "strict sql_mode" in reread.reason
    assert rereads("ALTER TABLE t ADD COLUMN c INT", strict=False) == []


def test_one_re_read_per_statement_after_its_changes_and_before_its_rename() -> None:
    parsed = parse_statement("ALTER TABLE t MODIFY g INT AS (a + 1) STORED, MODIFY id INT AUTO_INCREMENT, RENAME TO u",
                             "db")
    assert [c.kind for c in parsed.changes] == [MODIFY_COLUMN, MODIFY_COLUMN, REPLACE_ROWS, RENAME_TABLE]
    reread = parsed.changes[2]
    assert (reread.table, reread.step) == ("t", 2)
    assert reread.reason is not None and "'g'" in reread.reason and "'id'" in reread.reason
    assert SchemaChange.from_dict(reread.to_dict()) == reread  # the reason travels in the manifest


def test_strict_is_read_from_the_query_events_sql_mode() -> None:
    assert is_strict(MARIADB_DEFAULT_SQL_MODE)
    assert is_strict(STRICT_ALL_TABLES) and is_strict(STRICT_TRANS_TABLES)
    assert not is_strict(0)  # SET sql_mode = ''
    assert not is_strict(None)  # no status variable: the side on which nothing is missed


@pytest.mark.parametrize(("definition", "check"), [
    ("DATETIME", ValueCheck(FRACTION, 0, "")), ("TIMESTAMP(3) NULL", ValueCheck(FRACTION, 3, "")),
    ("TIME(5)", ValueCheck(FRACTION, 5, "")), ("CHAR(10)", ValueCheck(TRAILING_SPACE, 0, "")),
    ("BINARY(4)", ValueCheck(SHORT_BINARY, 4, "")), ("DATETIME(6)", None), ("VARCHAR(3)", None), ("INT", None),
])
def test_what_the_lake_is_tested_for(definition: str, check: ValueCheck | None) -> None:
    (change,) = parse_statement(f"ALTER TABLE t MODIFY c {definition}", "db").changes
    assert change.column is not None
    found = value_check(change.column)
    assert (found.kind, found.size) == (check.kind, check.size) if check else found is None  # type: ignore[union-attr]


def _plan(query: str, columns: list[LakeColumn], holds: bool | None) -> tuple[list[str], SchemaState, list[Any]]:
    seen: list[Any] = []

    def lake_holds(column: LakeColumn, check: ValueCheck) -> bool:
        seen.append((column.name, check.kind, check.size))
        return bool(holds)

    ctx = PlanContext(table="db.t", app_id="p", delete_mode="hard", mode=MODE_FOLLOW,
                      lake_holds=None if holds is None else lake_holds)
    parsed = parse_statement(query, "db")
    changes = [c.placed(version=10, ordinal=0, commit_ts=1.0, query=query) for c in parsed.changes]
    plan = plan_table(ctx, columns, SchemaState(), changes)
    return [why for _, why in plan.reread], plan.state, seen


COLUMNS = [LakeColumn("id", "INT"), LakeColumn("d", "TIMESTAMP_NTZ"), LakeColumn("tm", "BIGINT"),
           LakeColumn("b", "STRING")]


@pytest.mark.parametrize(("query", "looked_at"), [
    ("ALTER TABLE t MODIFY d DATETIME", ("d", FRACTION, 0)),
    ("ALTER TABLE t MODIFY tm TIME(2)", ("tm", FRACTION, 2)),
    ("ALTER TABLE t MODIFY b CHAR(10) NOT NULL", ("b", TRAILING_SPACE, 0)),
    ("ALTER TABLE t CHANGE b c CHAR(10)", ("b", TRAILING_SPACE, 0)),  # the lake's column before the rename
])
def test_the_merge_re_reads_only_when_the_lake_holds_a_value_the_server_converted(
    query: str, looked_at: tuple[str, str, int]
) -> None:
    whys, state, seen = _plan(query, COLUMNS, holds=True)
    assert seen == [looked_at]
    (why,) = whys
    assert f"column {looked_at[0]!r} was redefined" in why and "without row events" in why
    assert state.reread == 10 and not state.sweep  # values converted, no row deleted

    whys, state, seen = _plan(query, COLUMNS, holds=False)
    assert seen == [looked_at] and whys == [] and state.reread == 0  # nothing the conversion changed

    whys, _, _ = _plan(query, COLUMNS, holds=None)  # a plan that cannot look re-reads
    assert len(whys) == 1


def test_a_widening_looks_at_nothing() -> None:
    whys, _, seen = _plan("ALTER TABLE t MODIFY b VARCHAR(50), MODIFY d DATETIME(6)", COLUMNS, holds=True)
    assert (whys, seen) == ([], [])


def test_the_merge_plan_re_reads_with_the_capture_s_reason() -> None:
    whys, state, _ = _plan("ALTER TABLE t MODIFY id INT AUTO_INCREMENT", COLUMNS, holds=False)
    (why,) = whys
    assert "AUTO_INCREMENT" in why and state.reread == 10
