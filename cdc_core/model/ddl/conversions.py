"""ALTER TABLE actions after which the server may have rewritten stored values without a row event.

A column type change converts every stored value in place, and the binlog has only the statement. Where the
lake's type changes too, the merge sees it (`cdc_core.model.schema_evolution`: a cast the lake can compute,
else a re-read). Where the lake's type stays (VARCHAR(10) -> VARCHAR(3) and DATETIME(6) -> DATETIME are one
Delta type each), the values may still have changed, and only the source has them:

- under a strict sql_mode (STRICT_TRANS_TABLES or STRICT_ALL_TABLES, the servers' default) the server refuses
  an ALTER that would cut a string, turn a NULL into NOT NULL's implicit default, drop an ENUM label in use or
  put a value out of range; it still, without a warning, cuts fractional seconds to a smaller precision, strips
  trailing spaces into CHAR, pads BINARY with zero bytes, computes generated columns again and numbers zeros in a
  column made AUTO_INCREMENT;
- without a strict mode, and under ALTER IGNORE TABLE, every one of those becomes a silent conversion; ALTER
  IGNORE TABLE ... ADD UNIQUE also deletes the duplicate rows.

The parser cannot see the column's type before the statement, so it cannot tell DATETIME(6) -> DATETIME from
DATETIME -> DATETIME. Two answers:
- what the lake can test for (fractions beyond the new precision, trailing spaces into CHAR, short values into
  BINARY: `value_check`) the merge tests on the lake table's values before the change, and re-reads the table
  only if one would have changed (cdc_core.model.schema_evolution);
- the rest (no strict mode, ALTER IGNORE, a generated column's expression, AUTO_INCREMENT) re-read the table
  from the source always: the parser adds a `REPLACE_ROWS` with the reason after the statement's changes. The
  server rebuilds the table for each of these, so the re-read costs about what the statement cost the source.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cdc_core.model.schema_changes import MODIFY_COLUMN, REPLACE_ROWS, ColumnSpec, SchemaChange

# sql_mode bits in a query event's status variables (MySQL's and MariaDB's sql_mode.h)
STRICT_TRANS_TABLES = 1 << 21
STRICT_ALL_TABLES = 1 << 22

IGNORE_REASON = ("ALTER IGNORE TABLE deletes the rows a new unique key finds duplicate and converts values that do "
                 "not fit, without row events")

_TEMPORAL = re.compile(r"^(datetime|timestamp|time)(?:\((\d)\))?$")
_FIXED = re.compile(r"^(char|binary)\((\d+)\)$")


def is_strict(sql_mode: int | None) -> bool:
    """Whether a statement ran under a strict sql_mode; unknown (a query event without the status variable)
    counts as not strict, the side on which nothing is missed."""
    return sql_mode is not None and bool(sql_mode & (STRICT_TRANS_TABLES | STRICT_ALL_TABLES))


FRACTION = "fraction"  # DATETIME / TIMESTAMP / TIME(p): values with more than p fractional digits change
TRAILING_SPACE = "trailing_space"  # CHAR: values that end in a space change
SHORT_BINARY = "short_binary"  # BINARY(n): values shorter than n bytes change


@dataclass(frozen=True)
class ValueCheck:
    """A strict-mode conversion the lake can test for: the server changed a stored value only if the lake holds
    one that `kind` finds (a fraction beyond `size` digits, a trailing space, fewer than `size` bytes). The merge
    looks (cdc_core.model.schema_evolution `PlanContext.lake_holds`) and re-reads the table only then."""

    kind: str
    size: int
    reason: str


def value_check(column: ColumnSpec) -> ValueCheck | None:
    """What a redefinition as `column` converts under a strict sql_mode, when the lake can test for it."""
    kind = column.mysql_type.lower()
    temporal = _TEMPORAL.match(kind)
    if temporal is not None and int(temporal.group(2) or 0) < 6:
        digits = int(temporal.group(2) or 0)
        return ValueCheck(FRACTION, digits, f"the server cut (MySQL: rounded) stored fractional seconds to {digits} "
                                            "digits without row events")
    fixed = _FIXED.match(kind)
    if fixed is not None and fixed.group(1) == "char":
        return ValueCheck(TRAILING_SPACE, 0, "the server stripped trailing spaces from the values moved into CHAR "
                                             "without row events")
    if fixed is not None:
        return ValueCheck(SHORT_BINARY, int(fixed.group(2)), "the server padded the values moved into BINARY with "
                                                             "zero bytes without row events")
    return None


def conversion_reason(column: ColumnSpec, *, strict: bool) -> str | None:
    """Why stored values of a column redefined as `column` may differ from the lake's whatever the lake holds,
    or None (`value_check` covers the conversions the lake can test for)."""
    if not strict:
        return ("it ran without a strict sql_mode (or as ALTER IGNORE), under which the server converts values "
                "that do not fit the new definition (cut strings, NULL to the implicit default, unknown ENUM labels "
                "to '', values out of range to the nearest limit) without row events")
    if column.generated is not None:
        return "its values are computed again by the new expression"
    if column.auto_increment:
        return "the server numbers the column's zero and NULL values when it becomes AUTO_INCREMENT"
    return None


def with_value_rereads(
    changes: Sequence[SchemaChange], target: tuple[str, str], *, strict: bool, ignore: bool
) -> list[SchemaChange]:
    """`changes` (one ALTER TABLE's, without its rename) and, after them, a re-read of the table when the
    statement may have changed stored values without row events."""
    if ignore:
        reasons = [IGNORE_REASON]
    else:
        reasons = [
            f"column {c.column.name!r} was redefined as {c.column.mysql_type}: {why}"
            for c in changes if c.kind == MODIFY_COLUMN and c.column is not None
            and (why := conversion_reason(c.column, strict=strict)) is not None
        ]
    if not reasons:
        return list(changes)
    return [*changes, SchemaChange(REPLACE_ROWS, *target, reason="; ".join(reasons))]
