"""What a lake table keeps besides the latest state of each row: its history (SCD type 2) and its change log
(docs/output-modes.md). The rules are stated here once; the merge job renders them (spark_apps/merge/outputs.py).

A table's `outputs` option (`table_options`, per lake table) lists `state` (the table as it is today, always
kept: checks, cuts and verify read it), and any of:

- **history**, at `<lake_root>/_cdc.history/<schema>/<table>`: one row per version of a row. A change opens a
  version (`_cdc_valid_from[_version]`) and closes the key's current one (`_cdc_valid_to[_version]` = the
  change's commit time and change version); a delete closes it and opens none. Versions are ordered by
  change version (binlog position), never by wall clock. With `track: [columns]`, a change that leaves every
  tracked column as it was opens no version: it updates the current one in place (the untracked columns take
  the newest value). Without `track`, every column is tracked (a change that changes nothing opens nothing).
  Exactly once: the rows of the touched keys are recomputed from the lake's rows and the window's changes,
  and MERGEd keyed on (key, `_cdc_valid_from_version`), so a replay, a backfill that re-delivers older
  changes, or one that fills a gap, all give the rows an uninterrupted run would.
- **changelog**, at `<lake_root>/_cdc.changelog/<schema>/<table>`: one row per change (append only): the
  row image (the after image of an insert or update, the before image of a delete), `_cdc_op`, the change
  version, its ordinal in the window, its commit time and the window; an update's before image is a row of its
  own with op `B` and its update's version and ordinal (staged beside the changes: manifest.StagedFile.before).
  Inserted once per (key, change version, op): a replay of the window is skipped by its txn, a backfill's
  re-delivered changes match and are not inserted again.

Rows a snapshot loads carry op `S` in both (the row as the snapshot read it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdc_core.model import schema_changes as sc
from cdc_core.model.manifest import COL_COMMIT_TS, COL_OP, COL_ORDINAL, COL_TXN, COL_VERSION, COL_WINDOW_SEQ
from cdc_core.model.schema_window import ROLE_GHOST, ROLE_MOVED_OUT, ROLE_OWN, ROLE_SWAP

OUTPUT_STATE, OUTPUT_HISTORY, OUTPUT_CHANGELOG = "state", "history", "changelog"
OUTPUTS = (OUTPUT_STATE, OUTPUT_HISTORY, OUTPUT_CHANGELOG)

HISTORY_DIR = "_cdc.history"  # a dot: no path_component-encoded schema name has one
CHANGELOG_DIR = "_cdc.changelog"

OP_SNAPSHOT = "S"  # a row a snapshot read (history and changelog `_cdc_op`; an update's before image: OP_BEFORE)
OP_CLEARED = "T"  # a DDL that removed every row (TRUNCATE, DROP TABLE, CREATE OR REPLACE, a rename away)
PROP_OUTPUTS_KEY = "cdc.outputs.key"  # the key a history or change log was created with (JSON list)
# A change log's file statistics must hold its change versions wherever the column sits (cdc_core.lake.
# changelog_append proves a window newer than the log from them): Delta keeps statistics of the first 32 columns
# only by default, and the log's metadata columns follow the row's, so on a wide table they had none.
CHANGELOG_STATS = ("delta.dataSkippingStatsColumns", f"{COL_VERSION},{COL_COMMIT_TS}")

# History columns (besides the key and the row's columns, and `_cdc_op`: the op that opened the version).
COL_VALID_FROM = "_cdc_valid_from"  # the opening change's commit time
COL_VALID_FROM_VERSION = "_cdc_valid_from_version"  # its change version: with the key, the version's identity
COL_VALID_TO = "_cdc_valid_to"  # the closing change's commit time; NULL while current
COL_VALID_TO_VERSION = "_cdc_valid_to_version"
COL_IS_CURRENT = "_cdc_is_current"
COL_LAST_VERSION = "_cdc_last_version"  # the newest change folded into this version (`track`)

HISTORY_COLUMNS: tuple[tuple[str, str], ...] = (
    (COL_OP, "STRING"),
    (COL_VALID_FROM, "TIMESTAMP"),
    (COL_VALID_FROM_VERSION, "BIGINT"),
    (COL_VALID_TO, "TIMESTAMP"),
    (COL_VALID_TO_VERSION, "BIGINT"),
    (COL_IS_CURRENT, "BOOLEAN"),
    (COL_LAST_VERSION, "BIGINT"),
    (COL_WINDOW_SEQ, "BIGINT"),
)
CHANGELOG_COLUMNS: tuple[tuple[str, str], ...] = (
    (COL_OP, "STRING"),
    (COL_VERSION, "BIGINT"),
    (COL_ORDINAL, "BIGINT"),
    (COL_COMMIT_TS, "TIMESTAMP"),
    (COL_TXN, "BIGINT"),
    (COL_WINDOW_SEQ, "BIGINT"),
)


@dataclass(frozen=True)
class OutputModes:
    """A lake table's outputs (`table_options[...].outputs` and `.track`)."""

    history: bool = False
    changelog: bool = False
    track: tuple[str, ...] = ()  # history: the columns whose change opens a version (empty: every column)

    @property
    def any(self) -> bool:
        return self.history or self.changelog

    @classmethod
    def parse(cls, name: str, outputs: object, track: object) -> OutputModes:
        """From a table's options; ValueError saying what to write instead."""
        if outputs is None:
            outputs = [OUTPUT_STATE]
        if not isinstance(outputs, list | tuple) or not all(isinstance(o, str) for o in outputs):
            raise ValueError(f"{name!r}: outputs must be a list of {', '.join(OUTPUTS)}")
        listed = [str(o) for o in outputs]
        unknown = sorted(set(listed) - set(OUTPUTS))
        if unknown:
            raise ValueError(f"{name!r}: unknown outputs {unknown}; each of outputs is one of {', '.join(OUTPUTS)}")
        twice = sorted({o for o in listed if listed.count(o) > 1})
        if twice:
            raise ValueError(f"{name!r}: outputs lists {twice} twice")
        if OUTPUT_STATE not in listed:
            raise ValueError(
                f"{name!r}: outputs must include {OUTPUT_STATE!r}: the state table is what the pipeline's checks, "
                f"consistent cuts and verify read; add it (e.g. outputs: [state, {OUTPUT_HISTORY}])"
            )
        columns = list(track) if isinstance(track, list | tuple) else [] if track is None else [track]
        if not all(isinstance(c, str) and c.strip() for c in columns) or len(set(columns)) != len(columns):
            raise ValueError(f"{name!r}: track must list distinct, non-empty column names")
        if columns and OUTPUT_HISTORY not in listed:
            raise ValueError(f"{name!r}: track only applies to a history table; add {OUTPUT_HISTORY!r} to outputs")
        return cls(OUTPUT_HISTORY in listed, OUTPUT_CHANGELOG in listed, tuple(str(c) for c in columns))

    def names(self) -> list[str]:
        return [OUTPUT_STATE] + [o for o, on in ((OUTPUT_HISTORY, self.history), (OUTPUT_CHANGELOG, self.changelog))
                                 if on]


def tracked_columns(track: Sequence[str], columns: Sequence[str], key: Sequence[str]) -> list[str]:
    """The columns whose change opens a history version: `track` (as the table spells them), or every column
    but the key. A tracked column the table does not have is an error naming the table's columns."""
    by_lower = {c.lower(): c for c in columns}
    if not track:
        keys = {k.lower() for k in key}
        return [c for c in columns if c.lower() not in keys]
    missing = [c for c in track if c.lower() not in by_lower]
    if missing:
        raise ValueError(
            f"track names {missing}, which the table does not have (its columns: {', '.join(columns)}); "
            "fix table_options[...].track"
        )
    return [by_lower[c.lower()] for c in track]


# Schema changes a history and change log follow: their columns follow the rows (a new column appears with the
# first change that has it; a dropped or renamed one stays, NULL from then on), and what removes every row
# closes every version (history) and is one `T` row (change log). Defaults that fill existing rows change no
# version: the history shows the values the binlog showed.
_COLUMN_KINDS = frozenset({sc.ADD_COLUMN, sc.DROP_COLUMN, sc.RENAME_COLUMN, sc.MODIFY_COLUMN, sc.SET_DEFAULT,
                           sc.DROP_DEFAULT, sc.CREATE_TABLE, sc.CREATE_TABLE_LIKE})
_CLEARING_KINDS = frozenset({sc.TRUNCATE_TABLE, sc.DROP_TABLE})
_GHOST_MECHANICS = frozenset({sc.CREATE_TABLE, sc.CREATE_TABLE_LIKE, sc.DROP_TABLE, sc.RENAME_TABLE})


def clears_rows(kind: str, role: str, *, replace: bool = False) -> bool:
    """A schema change after which the table holds no row (cdc_core.model.schema_window roles)."""
    if role == ROLE_MOVED_OUT:
        return True
    return role == ROLE_OWN and (kind in _CLEARING_KINDS or (kind == sc.CREATE_TABLE and replace))


def not_followed(kind: str, role: str, *, replace: bool = False) -> str | None:
    """Why a history and change log cannot follow this schema change (None: they do). An online schema-change
    tool's changes to its ghost table apply to the real table at the swap: each is judged as the table's own when
    the ghost records it (the window that alters the ghost), and the swap (a RENAME TABLE) carries them over."""
    swap = role == ROLE_SWAP and kind == sc.RENAME_TABLE
    mechanics = role == ROLE_GHOST and kind in _GHOST_MECHANICS  # the ghost made or abandoned: nothing changes
    if swap or mechanics or clears_rows(kind, role, replace=replace):
        return None
    if role == ROLE_GHOST:
        role = ROLE_OWN
    if role in (ROLE_OWN, ROLE_SWAP) and kind in _COLUMN_KINDS:
        return None
    if kind == sc.PRIMARY_KEY:
        return "it changes the key their versions and changes are identified by"
    if role not in (ROLE_OWN, ROLE_SWAP):
        return f"the table takes rows another table had ({role.replace('_', ' ')}), which they do not record"
    return f"it changes rows without row events ({kind.replace('_', ' ')}), which they do not record"
