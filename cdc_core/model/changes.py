"""Change records: what the binlog reader produces and staging consumes.

A `TableSchema` is the shape of a source table as the binlog's table-map event describes it
(`binlog_row_metadata=FULL` gives names, signedness, charsets, ENUM/SET labels). A `RowChange` is one
change to one key, already split so that a primary-key change is a delete of the old key followed
by an insert of the new one. A `RowBatch` is many consecutive changes to one table, already in the staged
(Arrow) layout: what the columnar reader (`binlog.read_change_batches`) produces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cdc_core.model.naming import table_id


@dataclass(frozen=True)
class SourceColumn:
    name: str
    mysql_type: str  # normalised declared type, e.g. "bigint unsigned", "decimal(65,30)", "enum('a','b')"
    nullable: bool = True
    # Extra facts the type map needs (charset, fsp, enum/set labels, ...). Keep it small and JSON-able.
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


@dataclass(frozen=True)
class TableSchema:
    schema: str
    table: str
    columns: tuple[SourceColumn, ...]
    key: tuple[str, ...]  # primary key (or unique not-null key, or all columns when configured)

    @property
    def name(self) -> str:
        return table_id(self.schema, self.table)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True, slots=True)
class RowChange:
    op: str  # manifest.OP_INSERT / OP_UPDATE / OP_DELETE
    table: TableSchema  # the schema in force when this change was written
    values: dict[str, Any]  # after image for I/U, before image for D
    version: int  # positions.change_version of the row event's start
    ordinal: int  # strictly increasing within a window
    commit_ts: float  # unix seconds of the transaction's commit
    txn: int | None = None  # the change version of the transaction's first event (None: a snapshot's read)


@dataclass(frozen=True, slots=True)
class RowBatch:
    """Changes to one table in staged form: `batch` has `types.table_codec(table).arrow_schema` (metadata
    columns `_cdc_op`, `_cdc_version`, `_cdc_ordinal`, `_cdc_commit_ts`, `_cdc_txn`, then the source columns, values
    already converted by the type map). Ordinals increase strictly within the batch and from one batch of
    a table to the next; batches of different tables may interleave in any order."""

    table: TableSchema
    batch: pa.RecordBatch
    first_ordinal: int
    last_ordinal: int

    @property
    def rows(self) -> int:
        return int(self.batch.num_rows)
