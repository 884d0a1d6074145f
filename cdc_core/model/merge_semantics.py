"""The merge's meaning, stated once: what a window's changes do to a lake table, whichever writer lands it.

Two writers land windows: the Spark MERGE (spark_apps/merge_window.py) and, for small local tables,
delta-rs (cdc_core/lake/small_writer.py). Both render their statements from this module, so the clauses,
the metadata columns, the delete modes and the version rule exist in one place (docs/merge.md):

- **Which window a table holds.** Every commit of window `seq` carries the Delta `txn` action
  (app id = the pipeline or `<pipeline>.<source>`, version = seq); a table holds the window once that
  app id's last txn version is >= seq (`holds_window`).
- **Only newer wins.** A change applies to a lake row only when its `_cdc_version` is >= the row's
  (`>=`: re-applying the identical change is harmless, and a backfill can repair a damaged row).
- **The clause table** (`merge_clauses`), per delete mode:

  - hard: matched, a delete, newer -> DELETE; matched, newer -> UPDATE SET *; not matched, not a
    delete -> INSERT *.
  - soft: matched, a delete, newer -> UPDATE the metadata columns, `_cdc_deleted` = true,
    `_cdc_deleted_at` = its commit time (the row keeps its last image: it is its own tombstone);
    matched, newer -> UPDATE SET *; not matched -> INSERT * (a delete of a row the lake never saw lands
    as a tombstone row).

  Keys are compared NULL-safe (`IS NOT DISTINCT FROM`). Into a table without rows the MERGE's outcome is
  its not-matched clause alone (`insert_condition`), which the writers may run as an append.
- **Tombstones** (hard deletes): before the MERGE, each staged change that is a delete appends one row, its
  key and its `_cdc_version`, to the table's tombstone table (`tombstone_rows`), so that a replayed or
  backfilled older window cannot bring the row back.
- **Derived metadata columns** (`DERIVED_COLUMNS`): `_cdc_window_seq` = the window, and in soft mode
  `_cdc_deleted` = the change is a delete, `_cdc_deleted_at` = its commit time when it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_DELETED,
    COL_DELETED_AT,
    COL_OP,
    COL_VERSION,
    COL_WINDOW_SEQ,
    OP_DELETE,
)

DELETE_HARD, DELETE_SOFT = "hard", "soft"
DELETE_MODES = (DELETE_HARD, DELETE_SOFT)

# How one table of a window ended (the merge report's `status`).
STATUS_COMMITTED = "committed"
STATUS_ALREADY = "already committed"
STATUS_EMPTY = "empty"
# A table the window only names in DDL and the lake never had (a truncate or drop of a table never landed, a
# CREATE TABLE before its first rows): no lake table, no asset event, no checkpoint row.
STATUS_NO_TABLE = "no table"

# The Delta types of the metadata columns every lake table carries (Spark SQL DDL names), in order.
_METADATA_COMMON: tuple[tuple[str, str], ...] = (
    (COL_OP, "STRING"),
    (COL_VERSION, "BIGINT"),
    (COL_COMMIT_TS, "TIMESTAMP"),
    (COL_WINDOW_SEQ, "BIGINT"),
)
_METADATA_SOFT: tuple[tuple[str, str], ...] = ((COL_DELETED, "BOOLEAN"), (COL_DELETED_AT, "TIMESTAMP"))

# Metadata columns the writers compute rather than read from the staged window: column -> derivation.
DERIVE_WINDOW_SEQ = "window_seq"  # the window's seq
DERIVE_IS_DELETE = "is_delete"  # _cdc_op = 'D'
DERIVE_DELETE_TS = "delete_commit_ts"  # _cdc_commit_ts when a delete, else NULL


def check_delete_mode(delete_mode: str) -> str:
    if delete_mode not in DELETE_MODES:
        raise ValueError(f"delete mode must be one of {', '.join(DELETE_MODES)}, got {delete_mode!r}")
    return delete_mode


def metadata_columns(delete_mode: str) -> tuple[tuple[str, str], ...]:
    """(name, Delta type) of the metadata columns a lake table carries in `delete_mode`, in order."""
    check_delete_mode(delete_mode)
    return _METADATA_COMMON + (_METADATA_SOFT if delete_mode == DELETE_SOFT else ())


def derived_columns(delete_mode: str) -> tuple[tuple[str, str], ...]:
    """(column, derivation) of the metadata columns computed when a window lands (module docstring)."""
    check_delete_mode(delete_mode)
    out = [(COL_WINDOW_SEQ, DERIVE_WINDOW_SEQ)]
    if delete_mode == DELETE_SOFT:
        out += [(COL_DELETED, DERIVE_IS_DELETE), (COL_DELETED_AT, DERIVE_DELETE_TS)]
    return tuple(out)


def holds_window(landed: int | None, seq: int) -> bool:
    """Whether a table whose last txn version for the app id is `landed` already holds window `seq`."""
    return landed is not None and int(landed) >= seq


@dataclass(frozen=True)
class TombstoneRows:
    """The rows a hard-delete window appends to a table's tombstone table: the staged changes whose `op_column`
    is `op`, projected to `columns` (the key, then the change version), in that order."""

    op_column: str
    op: str
    columns: tuple[str, ...]


def tombstone_rows(key: Sequence[str]) -> TombstoneRows:
    """The tombstone rule both writers render (module docstring)."""
    return TombstoneRows(COL_OP, OP_DELETE, (*key, COL_VERSION))


# ------------------------------------------------------------------------------------------- dialects


@dataclass(frozen=True)
class Dialect:
    """How a writer's SQL spells identifiers (Spark SQL: backticks; DataFusion, under delta-rs: double quotes)."""

    name: str
    quote: Callable[[str], str]


def _backticks(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _double_quotes(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


SPARK = Dialect("spark", _backticks)
DATAFUSION = Dialect("datafusion", _double_quotes)


# -------------------------------------------------------------------------------------------- clauses

ACTION_DELETE = "delete"
ACTION_UPDATE_ALL = "update_all"  # every target column from the source row
ACTION_UPDATE = "update"  # the listed columns only
ACTION_INSERT_ALL = "insert_all"


@dataclass(frozen=True)
class Clause:
    """One WHEN clause of the MERGE (target alias `t`, source alias `s`)."""

    matched: bool
    condition: str | None
    action: str
    sets: tuple[tuple[str, str], ...] = ()  # (target column, quoted; source expression) for ACTION_UPDATE


Names = Callable[[str], str]  # a metadata column's spelling in the target table (delta-rs keeps the table's case)


def _same(name: str) -> str:
    return name


def key_condition(key: Sequence[str], dialect: Dialect, names: Names = _same) -> str:
    """The MERGE's ON: every key column equal, NULL-safe (a full-row key may hold NULLs)."""
    q = dialect.quote
    return " AND ".join(f"(t.{q(names(k))} IS NOT DISTINCT FROM s.{q(names(k))})" for k in key)


def newer_condition(dialect: Dialect, names: Names = _same) -> str:
    """Only newer wins: the change's version is at least the row's (a row without one takes any change)."""
    v = dialect.quote(names(COL_VERSION))
    return f"(t.{v} IS NULL OR s.{v} >= t.{v})"


def is_delete_condition(dialect: Dialect, names: Names = _same) -> str:
    return f"s.{dialect.quote(names(COL_OP))} = '{OP_DELETE}'"


def insert_condition(delete_mode: str, dialect: Dialect, names: Names = _same) -> str | None:
    """The not-matched clause's condition: what a window adds to a table that has no row for the key."""
    if check_delete_mode(delete_mode) == DELETE_HARD:
        return f"s.{dialect.quote(names(COL_OP))} <> '{OP_DELETE}'"
    return None


def merge_clauses(delete_mode: str, dialect: Dialect, names: Names = _same) -> tuple[Clause, ...]:
    """The MERGE's WHEN clauses for `delete_mode`, in order (the table in the module docstring)."""
    check_delete_mode(delete_mode)
    q = dialect.quote
    newer = newer_condition(dialect, names)
    delete = f"{is_delete_condition(dialect, names)} AND {newer}"
    if delete_mode == DELETE_HARD:
        return (
            Clause(True, delete, ACTION_DELETE),
            Clause(True, newer, ACTION_UPDATE_ALL),
            Clause(False, insert_condition(delete_mode, dialect, names), ACTION_INSERT_ALL),
        )
    sets = tuple((q(names(c)), f"s.{q(names(c))}") for c in (COL_OP, COL_VERSION, COL_COMMIT_TS, COL_WINDOW_SEQ))
    sets += ((q(names(COL_DELETED)), "true"), (q(names(COL_DELETED_AT)), f"s.{q(names(COL_COMMIT_TS))}"))
    return (
        # The row stays as the tombstone: only metadata changes, the source columns keep the last image.
        Clause(True, delete, ACTION_UPDATE, sets),
        Clause(True, newer, ACTION_UPDATE_ALL),
        Clause(False, insert_condition(delete_mode, dialect, names), ACTION_INSERT_ALL),
    )


def spark_merge_sql(target: str, source: str, key: Sequence[str], delete_mode: str) -> str:
    """The Spark SQL MERGE of a window into a lake table (`target`: e.g. delta.`<uri>`; `source`: a view)."""
    parts = [
        f"MERGE WITH SCHEMA EVOLUTION INTO {target} AS t USING {source} AS s ON {key_condition(key, SPARK)}",
    ]
    for c in merge_clauses(delete_mode, SPARK):
        when = "WHEN MATCHED" if c.matched else "WHEN NOT MATCHED"
        if c.condition:
            when += f" AND {c.condition}"
        if c.action == ACTION_DELETE:
            parts.append(f"{when} THEN DELETE")
        elif c.action == ACTION_UPDATE_ALL:
            parts.append(f"{when} THEN UPDATE SET *")
        elif c.action == ACTION_UPDATE:
            parts.append(f"{when} THEN UPDATE SET " + ", ".join(f"t.{col} = {expr}" for col, expr in c.sets))
        else:
            parts.append(f"{when} THEN INSERT *")
    return " ".join(parts)


# ------------------------------------------------------------------- derived tables (group pipelines)

GONE = "__cdc_gone"  # a touched key whose base has no row left: deleted from the derived table


def spark_derive_sql(target: str, source: str, key: Sequence[str], columns: Sequence[str]) -> str:
    """A derived table's MERGE (docs/group-pipelines.md): the touched keys take their rows recomputed from the
    base, or go. No version test: the base already decided every source's order. Spark only (a derived table
    is never small-table work: its rows come from a Spark read of the base)."""
    q = SPARK.quote
    sets = ", ".join(f"t.{q(c)} = s.{q(c)}" for c in columns)
    names = ", ".join(q(c) for c in columns)
    values = ", ".join(f"s.{q(c)}" for c in columns)
    return (
        f"MERGE INTO {target} AS t USING {source} AS s ON {key_condition(key, SPARK)} "
        f"WHEN MATCHED AND s.{GONE} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED AND NOT s.{GONE} THEN INSERT ({names}) VALUES ({values})"
    )
