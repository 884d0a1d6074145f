"""Build staged windows for tests straight from python rows, following `cdc_core.model.manifest`'s contract.

Independent of `cdc_core.lake.staging` on purpose: merge tests control exactly what a window holds
(column subsets per file, type changes between files, explicit versions for replays).

    clock = VersionClock()
    w = WindowBuilder(staging_dir, "orders", seq=1, clock=clock)
    w.file("shop", "orders", key=("id",), columns=[Col("id", pa.int32(), "INT"), Col("note", pa.string(), "STRING")],
           changes=[("I", {"id": 1, "note": "a"}), ("D", {"id": 1, "note": "a"})])
    manifest, window_dir = w.build()

Each change gets the next version from the clock (or an explicit one: `("I", row, version)`), the
next ordinal of the window, and a commit time derived from its version. Consecutive `file()` calls
for one table give separate part files, as a DDL inside a window does in real staging.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_OP,
    COL_ORDINAL,
    COL_VERSION,
    MANIFEST_NAME,
    OP_BEFORE,
    Manifest,
    StagedColumn,
    StagedFile,
    StagedTable,
)
from cdc_core.model.naming import path_component, window_dir_name
from cdc_core.model.positions import BinlogPosition, ServerIdentity, change_version
from cdc_core.model.schema_changes import SchemaChange
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.window_plan import KIND_STREAM, WindowPlan

SERVER = ServerIdentity("mariadb", 1)
BASE_TS = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

META_SCHEMA = [
    pa.field(COL_OP, pa.string(), nullable=False),
    pa.field(COL_VERSION, pa.int64(), nullable=False),
    pa.field(COL_ORDINAL, pa.int64(), nullable=False),
    pa.field(COL_COMMIT_TS, pa.timestamp("us", tz="UTC"), nullable=False),
]


def make_plan(pipeline: str, seq: int, kind: str = KIND_STREAM, events: int = 1) -> WindowPlan:
    start = BinlogPosition("mysql-bin.000001", 4 + seq * 10_000, SERVER)
    end = BinlogPosition("mysql-bin.000001", 4 + seq * 10_000 + 5_000, SERVER)
    return WindowPlan(pipeline, seq, start, end, kind=kind, transactions=max(1, events), events=events)


@dataclass(frozen=True)
class Col:
    name: str
    arrow: pa.DataType
    delta: str
    mysql: str = ""

    def staged(self) -> StagedColumn:
        return StagedColumn(self.name, self.mysql or self.delta.lower(), str(self.arrow), self.delta)


class VersionClock:
    """Increasing change versions (real `change_version` encoding) and matching commit times."""

    def __init__(self, file: str = "mysql-bin.000001", start: int = 1000, step: int = 100) -> None:
        self.file = file
        self.offset = start
        self.step = step

    def __call__(self) -> int:
        self.offset += self.step
        return change_version(0, self.file, self.offset)

    @staticmethod
    def commit_ts(version: int) -> dt.datetime:
        # Distinct, increasing, microsecond-precise and reproducible from the version alone.
        return BASE_TS + dt.timedelta(microseconds=(version & 0xFFFFFFFF) * 1001)


@dataclass
class FileSpec:
    schema: str
    table: str
    key: tuple[str, ...]
    columns: tuple[Col, ...]
    changes: list[tuple[str, dict[str, Any], int]]  # (op, row, version)


@dataclass
class WindowBuilder:
    staging_root: Path | str
    pipeline: str
    seq: int
    clock: VersionClock = field(default_factory=VersionClock)
    kind: str = KIND_STREAM
    files: list[FileSpec] = field(default_factory=list)
    schema_changes: list[SchemaChange] = field(default_factory=list)

    def ddl(self, *changes: SchemaChange) -> WindowBuilder:
        """A DDL statement's typed changes at the next version (after the rows of earlier `file()` calls, before
        those of later ones), as staging records them; a table the window names only in DDL is staged without
        files."""
        version = self.clock()
        ts = VersionClock.commit_ts(version).timestamp()
        for step, c in enumerate(changes):
            self.schema_changes.append(
                replace(c, version=version, ordinal=version, step=step, commit_ts=ts, query=c.query or c.describe())
            )
        return self

    def file(
        self,
        schema: str,
        table: str,
        key: Sequence[str],
        columns: Sequence[Col],
        changes: Iterable[tuple[Any, ...]],
    ) -> WindowBuilder:
        norm = []
        for ch in changes:
            op, row = ch[0], ch[1]
            version = ch[2] if len(ch) > 2 else self.clock()
            norm.append((op, dict(row), version))
        self.files.append(FileSpec(schema, table, tuple(key), tuple(columns), norm))
        return self

    def extend(self, files: Iterable[FileSpec]) -> WindowBuilder:
        """Copy file specs (same rows, same versions): a replay of another window's content."""
        for f in files:
            self.files.append(FileSpec(f.schema, f.table, f.key, f.columns, list(f.changes)))
        return self

    @property
    def window_dir(self) -> str:
        return f"{str(self.staging_root).rstrip('/')}/{path_component(self.pipeline)}/{window_dir_name(self.seq)}"

    def build(self) -> tuple[Manifest, str]:
        wdir = Path(self.window_dir)
        wdir.mkdir(parents=True, exist_ok=True)
        ordinal = 0
        per_table: dict[tuple[str, str], dict[str, Any]] = {}
        for spec in self.files:
            t = per_table.setdefault(
                (spec.schema, spec.table),
                {"key": spec.key, "columns": {}, "files": [], "counts": {"I": 0, "U": 0, "D": 0}},
            )
            t["key"] = spec.key
            for c in spec.columns:
                t["columns"][c.name] = c.staged()  # latest type wins; first appearance keeps its position
            rows, befores = [], []
            for op, row, version in spec.changes:
                if op != OP_BEFORE:  # an update's before image takes its update's (the next) ordinal
                    ordinal += 1
                    t["counts"][op] += 1
                (befores if op == OP_BEFORE else rows).append(
                    {
                        COL_OP: op,
                        COL_VERSION: version,
                        COL_ORDINAL: ordinal + (op == OP_BEFORE),
                        COL_COMMIT_TS: VersionClock.commit_ts(version),
                        **{c.name: row.get(c.name) for c in spec.columns},
                    }
                )
            schema = pa.schema([*META_SCHEMA, *(pa.field(c.name, c.arrow) for c in spec.columns)])
            rel = (
                f"tables/{path_component(spec.schema)}/{path_component(spec.table)}/part-{len(t['files']):05d}.parquet"
            )
            before = _write_file(wdir, rel.removesuffix(".parquet") + ".before.parquet", befores, schema, spec) \
                if befores else None
            t["files"].append(replace(_write_file(wdir, rel, rows, schema, spec), before=before))
        tables = tuple(
            StagedTable(
                schema=s,
                table=n,
                key=t["key"],
                columns=tuple(t["columns"].values()),
                files=tuple(t["files"]),
                inserts=t["counts"]["I"],
                updates=t["counts"]["U"],
                deletes=t["counts"]["D"],
            )
            for (s, n), t in sorted(per_table.items())
        )
        named = {(c.schema, c.table) for c in self.schema_changes if c.table}
        # A LIKE's table too, as staging named it before 2026-12-02 (ddl_events no longer does): the merge must
        # take both manifests.
        named |= {(c.to_schema or c.schema, c.to_table) for c in self.schema_changes if c.to_table}
        osc = SchemaPolicy()  # an online schema-change tool's tables are never staged (ddl_events.DdlStatement.tables)
        named = {(s, n) for s, n in named if osc.osc_role(n) is None}
        ddl_only = tuple(StagedTable(s, n, (), (), ()) for s, n in sorted(named) if (s, n) not in per_table)
        tables = tuple(sorted((*tables, *ddl_only), key=lambda t: (t.schema, t.table)))
        manifest = Manifest(
            plan=make_plan(self.pipeline, self.seq, self.kind, events=ordinal), tables=tables,
            schema_changes=tuple(self.schema_changes),
        )
        (wdir / MANIFEST_NAME).write_text(manifest.to_json())
        return manifest, str(wdir)


def _write_file(wdir: Path, rel: str, rows: list[dict[str, Any]], schema: pa.Schema, spec: FileSpec) -> StagedFile:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf)
    data = buf.getvalue()
    (wdir / rel).parent.mkdir(parents=True, exist_ok=True)
    (wdir / rel).write_bytes(data)
    return StagedFile(rel, len(rows), len(data), hashlib.sha256(data).hexdigest(), tuple(c.name for c in spec.columns))
