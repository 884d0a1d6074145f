"""The staged window's manifest, and the column contract between staging and the Spark merge.

Layout of one staged window (under `<staging_root>/<pipeline>/w<seq:010d>/`):

    manifest.json                      written last: its presence means the window is complete
    tables/<schema>/<table>/part-NNNNN.parquet   (path components encoded by `naming.path_component`)
    tables/<schema>/<table>/part-NNNNN.before.parquet   updates' before images (tables with a change log)

Every staged Parquet row is one change to one key. Besides the source columns it carries:

    _cdc_op          string  'I' insert, 'U' update, 'D' delete. A primary-key change is staged as
                             'D' of the old key followed by 'I' of the new key.
    _cdc_version     int64   `positions.change_version` of the row event's start: orders changes
                             across windows ("only newer wins" in the merge)
    _cdc_ordinal     int64   orders changes within the window (strictly increasing)
    _cdc_commit_ts   timestamp[us, UTC]  the source transaction's commit time

For 'D' rows the source columns hold the before image; for 'I'/'U' the after image. A file's
`columns` lists the source columns present in it (DDL mid-window starts a new file), so a change is
applied with the schema in force when it was written.

A table whose lake table keeps a change log (docs/output-modes.md) also stages each update's before image:
rows with `_cdc_op` 'B' and the version, ordinal, commit time and transaction of their 'U' row, in a companion
file of the same shape (`StagedFile.before`). Only the change log reads them; every other reader of a window
iterates `StagedTable.files` and never sees one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cdc_core.model.errors import StagingError
from cdc_core.model.naming import table_id
from cdc_core.model.schema_changes import SchemaChange
from cdc_core.model.sources import LINEAGE_COLUMNS
from cdc_core.model.window_plan import WindowPlan

MANIFEST_FORMAT = 1
MANIFEST_NAME = "manifest.json"

COL_OP = "_cdc_op"
COL_VERSION = "_cdc_version"
COL_ORDINAL = "_cdc_ordinal"
COL_COMMIT_TS = "_cdc_commit_ts"
# The transaction of a change: the change version of its transaction's first event (GTID or BEGIN), shared by every
# change of one transaction; NULL for rows a snapshot read, and in windows staged before 2026-11-30.
COL_TXN = "_cdc_txn"
STAGED_META_COLUMNS = (COL_OP, COL_VERSION, COL_ORDINAL, COL_COMMIT_TS, COL_TXN)

# Extra metadata columns every Delta table carries (added by the merge job).
COL_WINDOW_SEQ = "_cdc_window_seq"
COL_DELETED = "_cdc_deleted"  # soft-delete mode only
COL_DELETED_AT = "_cdc_deleted_at"  # soft-delete mode only

OP_INSERT, OP_UPDATE, OP_DELETE = "I", "U", "D"
OP_BEFORE = "B"  # an update's before image: staged in the companion file (StagedFile.before) only

# Spark resolves column names case-insensitively, and the merge job names its scratch columns
# `__cdc_*`: a source column spelled like one of these would be overwritten or dropped.
METADATA_COLUMNS = (*STAGED_META_COLUMNS, COL_WINDOW_SEQ, COL_DELETED, COL_DELETED_AT)
SCRATCH_PREFIX = "__cdc_"


def is_reserved_column(name: str) -> bool:
    """True for a source column name the lake tables cannot hold (a metadata or scratch column's name)."""
    low = name.lower()
    return low in METADATA_COLUMNS or low in LINEAGE_COLUMNS or low.startswith(SCRATCH_PREFIX)


@dataclass(frozen=True)
class StagedColumn:
    name: str
    mysql_type: str  # e.g. "bigint unsigned", "decimal(10,2)", "datetime(6)", "enum('a','b')"
    arrow_type: str  # str(pyarrow type), e.g. "decimal128(20, 0)"
    delta_type: str  # Spark SQL DDL type, e.g. "DECIMAL(20,0)", "TIMESTAMP_NTZ"
    nullable: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mysql_type": self.mysql_type,
            "arrow_type": self.arrow_type,
            "delta_type": self.delta_type,
            "nullable": self.nullable,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StagedColumn:
        return cls(d["name"], d["mysql_type"], d["arrow_type"], d["delta_type"], bool(d.get("nullable", True)))


@dataclass(frozen=True)
class StagedFile:
    path: str  # relative to the window directory, '/'-separated
    rows: int
    bytes: int
    sha256: str
    columns: tuple[str, ...]  # source columns present in this file, in order
    # The key its rows were written under (a DDL inside the window may change the table's key, or hand its name
    # to another table: RENAME TABLE a TO c, b TO a). None: the table's (manifests staged before it was recorded).
    key: tuple[str, ...] | None = None
    # The updates' before images of this file's rows (op 'B', same shape and key), for the change log; None: not
    # staged (the table keeps no change log, or the window was staged before they were).
    before: StagedFile | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "rows": self.rows,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "columns": list(self.columns),
        }
        if self.key is not None:
            out["key"] = list(self.key)
        if self.before is not None:
            out["before"] = self.before.to_dict()
        return out

    def with_before(self) -> tuple[StagedFile, ...]:
        """This file and its before-image companion, if any (what a check of the staged bytes covers)."""
        return (self,) if self.before is None else (self, self.before)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StagedFile:
        key, before = d.get("key"), d.get("before")
        return cls(d["path"], int(d["rows"]), int(d["bytes"]), d["sha256"], tuple(d["columns"]),
                   None if key is None else tuple(key), None if before is None else cls.from_dict(before))


@dataclass(frozen=True)
class StagedTable:
    schema: str
    table: str
    key: tuple[str, ...]  # key columns (primary key, unique not-null key, or the full row if configured)
    columns: tuple[StagedColumn, ...]  # union over the window, in source order, latest type
    files: tuple[StagedFile, ...]
    inserts: int = 0
    updates: int = 0
    deletes: int = 0

    @property
    def name(self) -> str:
        return table_id(self.schema, self.table)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def has_before_images(self) -> bool:
        return any(f.before is not None for f in self.files)

    def with_before_images(self) -> StagedTable:
        """This table with its files' before-image companions read as files of their own (what the change log
        lands: 'B' rows next to the changes); itself when it has none."""
        befores = tuple(f.before for f in self.files if f.before is not None)
        return replace(self, files=(*self.files, *befores)) if befores else self

    def with_files(self, kept: Sequence[StagedFile]) -> StagedTable:
        """This table with only the files `kept` (the rows that land in one lake table of a window with renames),
        their columns and the key they were written under (StagedFile.key); with none, named only: no files,
        no columns, no key."""
        if not self.files or len(kept) == len(self.files):
            return self
        if not kept:
            return replace(self, key=(), columns=(), files=(), inserts=0, updates=0, deletes=0)
        keys = {f.key for f in kept}
        key = next(iter(keys)) if len(keys) == 1 and None not in keys else self.key
        names = {c for f in kept for c in f.columns}
        # The counts stay the table's: they only ever over-state what may be deleted (may_have_deletes).
        return replace(self, key=key or self.key, columns=tuple(c for c in self.columns if c.name in names),
                       files=tuple(kept))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "table": self.table,
            "key": list(self.key),
            "columns": [c.to_dict() for c in self.columns],
            "files": [f.to_dict() for f in self.files],
            "inserts": self.inserts,
            "updates": self.updates,
            "deletes": self.deletes,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StagedTable:
        return cls(
            schema=d["schema"],
            table=d["table"],
            key=tuple(d["key"]),
            columns=tuple(StagedColumn.from_dict(c) for c in d["columns"]),
            files=tuple(StagedFile.from_dict(f) for f in d["files"]),
            inserts=int(d.get("inserts", 0)),
            updates=int(d.get("updates", 0)),
            deletes=int(d.get("deletes", 0)),
        )


@dataclass(frozen=True)
class SchemaEvent:
    """A DDL statement seen in the window, in binlog order (its text; `Manifest.schema_changes` holds what it
    does, typed)."""

    ordinal: int
    schema: str
    query: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"ordinal": self.ordinal, "schema": self.schema, "query": self.query, "version": self.version}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SchemaEvent:
        return cls(int(d["ordinal"]), d["schema"], d["query"], int(d["version"]))


@dataclass(frozen=True)
class Manifest:
    plan: WindowPlan
    tables: tuple[StagedTable, ...] = ()
    ddl: tuple[SchemaEvent, ...] = ()
    # The typed schema changes of the captured tables, in binlog order (docs/schema-changes.md). Absent from
    # manifests staged before schema changes were typed: the merge then has nothing to apply.
    schema_changes: tuple[SchemaChange, ...] = ()
    # Deterministic content only: re-staging the same plan must give the same manifest bytes.
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def before_images(self) -> int:
        """Updates' before images staged beside the changes (tables with a change log)."""
        return sum(f.before.rows for t in self.tables for f in t.files if f.before is not None)

    def table(self, name: str) -> StagedTable:
        for t in self.tables:
            if t.name == name:
                return t
        raise StagingError(f"window {self.plan.label()} has no staged table {name!r}")

    def to_dict(self) -> dict[str, Any]:
        d = {
            "format": MANIFEST_FORMAT,
            "plan": self.plan.to_dict(),
            "tables": [t.to_dict() for t in self.tables],
            "ddl": [e.to_dict() for e in self.ddl],
            "info": self.info,
        }
        if self.schema_changes:  # windows without DDL keep the bytes they always had
            d["schema_changes"] = [c.to_dict() for c in self.schema_changes]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        if d.get("format") != MANIFEST_FORMAT:
            raise StagingError(
                f"unsupported manifest format {d.get('format')!r} (this version reads {MANIFEST_FORMAT})"
            )
        return cls(
            plan=WindowPlan.from_dict(d["plan"]),
            tables=tuple(StagedTable.from_dict(t) for t in d["tables"]),
            ddl=tuple(SchemaEvent.from_dict(e) for e in d.get("ddl", [])),
            schema_changes=tuple(SchemaChange.from_dict(c) for c in d.get("schema_changes", [])),
            info=dict(d.get("info") or {}),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        return cls.from_dict(json.loads(text))
