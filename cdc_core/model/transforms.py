"""What lands of a table: per-table column projections, PII hashing, masking and truncation, and a row filter,
applied to a window's rows before anything is staged (docs/transforms.md).

The configuration (`transform:` of a pipeline) is a list of rules, each for table patterns; the first rule
whose pattern matches a table is that table's. The staging writer (cdc_core/lake/staging_writer.py) is where
every capture path meets (the columnar decoder, the compiled and Python walks, the library decoder, decode
workers and the snapshot's reads all hand it Arrow rows of a table shape), so the rules are applied there,
once, to each row group before it is written: an excluded, hashed, masked or truncated value never reaches a
staged file, the manifest, the merge or the lake.

- `columns: {exclude: [...]}` or `{include: [...]}`: which columns land. With `include`, a column the source
  adds later does not land either.
- `hash: [...]`: HMAC-SHA-256 of the value's UTF-8 text (numbers and times in their staged text, bytes as
  they are), hex, keyed by the pipeline's hash key (`transform.hash_key`, an environment variable; never the
  configuration). The same value gives the same hash on every path, run and source, so joins keep working.
- `mask: {column: keep_last_4 | fixed | null}`; `truncate: {column: n}` (text and binary columns).
- `filter: "<SQL predicate>"` over the staged row image (before hashing): a change whose row does not pass
  lands as a delete of its key (so a row that leaves the filter is deleted, one that enters it is upserted,
  and a row that never passed is never there), with its other columns NULL. A predicate that is NULL does not
  pass. Supported: comparisons, AND / OR / NOT, IN, BETWEEN, LIKE, IS [NOT] NULL, literals and columns.

A key column may be hashed (deterministic, so the key stays a key) but not excluded, masked or truncated. A
planned window records its rules (`WindowPlan.capture["transform"]`) and the hash key's fingerprint, so a
window re-staged after the configuration changed stages what it staged the first time, or is refused.
"""

from __future__ import annotations

import array
import fnmatch
import hashlib
import hmac
import importlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cdc_core.model.errors import ConfigError
from cdc_core.model.manifest import COL_OP, OP_BEFORE, OP_DELETE, OP_INSERT, OP_UPDATE, is_reserved_column
from cdc_core.model.transform_expressions import (
    columns_of,
    evaluate_filter,
    evaluate_value,
    parse_filter,
    parse_value,
)

_native: Any
try:  # the compiled HMAC kernel (setup.py builds it as cdc_core.model._hmac; optional)
    _native = importlib.import_module("cdc_core.model._hmac")
except ImportError:  # not built (no C compiler): hashlib, the same digests, slower
    _native = None

MaskKind = Literal["keep_last_4", "fixed", "null"]
MASKED = "****"
HASH_TYPE = "char(64)"  # what a hashed column is staged as: its hex digest


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ColumnSelection(_Strict):
    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one(self) -> ColumnSelection:
        if self.include is not None and self.exclude:
            raise ValueError("give `include` or `exclude`, not both")
        if self.include is not None and not self.include:
            raise ValueError("`include` must name at least one column")
        return self


class TransformRule(_Strict):
    """One `transform.tables` entry: what lands of the tables `match` names (patterns like `tables.include`)."""

    match: list[str] = Field(min_length=1)
    columns: ColumnSelection = Field(default_factory=ColumnSelection)
    hash: list[str] = Field(default_factory=list)
    mask: dict[str, MaskKind] = Field(default_factory=dict)
    truncate: dict[str, int] = Field(default_factory=dict)
    filter: str | None = None
    compute: dict[str, str] = Field(default_factory=dict)  # new column -> SQL value expression

    @field_validator("match", mode="before")
    @classmethod
    def _patterns(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("truncate")
    @classmethod
    def _lengths(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {c: n for c, n in v.items() if n < 1}
        if bad:
            raise ValueError(f"lengths must be at least 1, got {bad}")
        return v

    @field_validator("filter")
    @classmethod
    def _filter(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                parse_filter(v)
            except ConfigError as e:  # a ValueError, so that the loader names the file, pipeline and key
                raise ValueError(str(e)) from None
        return v

    @field_validator("compute")
    @classmethod
    def _compute(cls, v: dict[str, str]) -> dict[str, str]:
        for name, expression in v.items():
            if is_reserved_column(name):
                raise ValueError(f"computed column {name!r}: the name is reserved for the lake's own columns")
            try:
                parse_value(expression)
            except ConfigError as e:
                raise ValueError(str(e)) from None
        return v

    def source_columns(self) -> set[str]:
        """Source columns the filter and the computed columns read: a schema change must not move them."""
        used = columns_of(parse_filter(self.filter)) if self.filter is not None else set()
        for expression in self.compute.values():
            used |= columns_of(parse_value(expression))
        return used

    @model_validator(mode="after")
    def _one_treatment_per_column(self) -> TransformRule:
        seen: dict[str, str] = {}
        for what, names in (("hash", self.hash), ("mask", list(self.mask)), ("truncate", list(self.truncate)),
                            ("columns.exclude", self.columns.exclude)):
            for name in names:
                if name in seen:
                    raise ValueError(f"column {name!r} is in both `{seen[name]}` and `{what}`: give it one treatment")
                seen[name] = what
        if self.columns.include is not None:
            dropped = sorted(set(seen) - set(self.columns.include))
            if dropped:
                raise ValueError(f"columns {dropped} are transformed but not in `columns.include`: include them")
        return self

    def matches(self, table_name: str) -> bool:
        return any(fnmatch.fnmatchcase(table_name, p) for p in self.match)

    def spec(self) -> str:
        """The rule as recorded in a window's plan (canonical JSON)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


class HashKeyConfig(_Strict):
    """Where the HMAC key is: an environment variable (`env`), or the password of a connection (`conn_id`:
    through Airflow for the DAGs, so a secrets backend serves it; `AIRFLOW_CONN_<ID>` for the `cdc` CLI)."""

    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    conn_id: str | None = None

    @model_validator(mode="after")
    def _one(self) -> HashKeyConfig:
        if (self.env is None) == (self.conn_id is None):
            raise ValueError("give `env: <VARIABLE>` or `conn_id: <connection>` (its password is the key), one of them")
        return self


KeyReader = Callable[[], bytes | None]  # the hash key, read when a rule needs it


class TransformConfig(_Strict):
    """A pipeline's `transform:`."""

    hash_key: HashKeyConfig | None = None
    tables: list[TransformRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _key_when_hashing(self) -> TransformConfig:
        if any(r.hash for r in self.tables) and self.hash_key is None:
            raise ValueError(
                "rules hash columns but no key is configured: set `hash_key: {env: <VARIABLE>}` and put a secret "
                "of at least 16 bytes in that environment variable (never in this file)"
            )
        return self


# ------------------------------------------------------------------------------------------- the plan's record


@dataclass(frozen=True)
class Transforms:
    """The rules a window stages with, and the hash key (None when no rule hashes)."""

    rules: tuple[TransformRule, ...] = ()
    key: bytes | None = None

    def __bool__(self) -> bool:
        return bool(self.rules)

    def rule_for(self, table_name: str) -> TransformRule | None:
        for r in self.rules:
            if r.matches(table_name):
                return r
        return None

    def recorded(self) -> tuple[str, ...]:
        """What a plan records: each rule's JSON, and the key's fingerprint (never the key)."""
        out = tuple(r.spec() for r in self.rules)
        return (*out, f"key:{key_fingerprint(self.key)}") if self.key is not None else out


def key_fingerprint(key: bytes) -> str:
    return hmac.new(key, b"cdc transform key fingerprint", hashlib.sha256).hexdigest()[:16]


def resolve(config: TransformConfig, pipeline: str, environ: Mapping[str, str] | None = None,
            key: KeyReader | None = None) -> Transforms:
    """The configured rules with the hash key (`key`, else `read_key`; ConfigError when it is missing)."""
    if not config.tables:
        return Transforms()
    if not any(r.hash for r in config.tables):
        return Transforms(tuple(config.tables))
    return Transforms(tuple(config.tables), key() if key is not None else read_key(config, pipeline, environ))


def read_key(config: TransformConfig, pipeline: str, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The hash key as the CLI reads it: the variable `hash_key.env` names, or the password of the connection
    `hash_key.conn_id` from `AIRFLOW_CONN_<ID>` (None when no key is configured)."""
    from cdc_core.model.connections import resolve_connection

    found = config.hash_key
    if found is None:
        return None
    if found.conn_id is not None:
        return checked_key(resolve_connection(found.conn_id, environ).password or "", pipeline,
                           f"the password of connection {found.conn_id!r}")
    env = os.environ if environ is None else environ
    return checked_key(env.get(found.env or "", ""), pipeline, f"environment variable {found.env}")


def checked_key(value: str, pipeline: str, where: str) -> bytes:
    """The key's bytes; ConfigError when it is empty or shorter than 16 bytes."""
    if len(value.encode()) < 16:
        raise ConfigError(
            f"pipeline {pipeline!r}: transform.hash_key: {where} "
            + ("is not set" if not value else "holds fewer than 16 bytes")
            + " in this process; set it to the pipeline's secret hash key, the same value wherever the pipeline "
            "stages windows (the Airflow workers, the `cdc` command)"
        )
    return value.encode()


def plan_record(config: TransformConfig, pipeline: str, key: KeyReader | None = None) -> dict[str, tuple[str, ...]]:
    """What a new window's plan records of the rules (`WindowPlan.capture["transform"]`); nothing without rules,
    so that plans without transforms keep the bytes they always had."""
    recorded = resolve(config, pipeline, key=key).recorded()
    return {"transform": recorded} if recorded else {}


def planned(
    config: TransformConfig, plan: Any, capture_now: Callable[[], Mapping[str, Sequence[str]]], pipeline: str,
    key: KeyReader | None = None,
) -> Transforms:
    """The transforms a stored plan was planned with (its `capture["transform"]`; a plan recorded before plans
    had capture settings: `capture_now()`), keyed by this process's hash key, which must be the one the window
    was planned with."""
    recorded = (plan.capture or capture_now()).get("transform", ())
    if not recorded:
        return Transforms()
    if not any(r.startswith("key:") for r in recorded):  # no rule of the plan hashes: no key needed
        return from_plan(recorded, Transforms(), pipeline, plan.seq)
    current = Transforms(key=key() if key is not None else read_key(config, pipeline))
    return from_plan(recorded, current, pipeline, plan.seq)


def recorded_rules(recorded: Sequence[str]) -> tuple[TransformRule, ...]:
    """The rules a plan recorded (`Transforms.recorded`), without the key."""
    return tuple(TransformRule.model_validate_json(s) for s in recorded if not s.startswith("key:"))


def from_plan(recorded: Sequence[str], current: Transforms, pipeline: str, seq: int) -> Transforms:
    """The transforms a stored plan was planned with: its recorded rules, keyed by the current key, which must
    be the key it was planned with (a window stages exactly what it staged the first time)."""
    rules = recorded_rules(recorded)
    prints = [s.removeprefix("key:") for s in recorded if s.startswith("key:")]
    if prints and (current.key is None or key_fingerprint(current.key) != prints[0]):
        raise ConfigError(
            f"pipeline {pipeline!r}: window {seq} was planned with the hash key whose fingerprint is {prints[0]}, "
            "and the key in this process differs (or is missing): restore that key to finish the window, then "
            "rotate keys between windows (docs/transforms.md, key rotation)"
        )
    return Transforms(rules, current.key if prints else None)


# ------------------------------------------------------------------------------------ one table shape's transform


@dataclass(frozen=True)
class OutputColumn:
    """A staged column after the transform: its name, staged types, and how its values are made."""

    name: str
    mysql_type: str
    arrow_type: pa.DataType
    delta_type: str
    nullable: bool
    make: Callable[[Any], Any] | None = None  # the source column's Arrow values -> staged values; None: as is
    computed: bool = False  # `make` takes the whole row group (a computed column)


@dataclass(frozen=True)
class TableTransform:
    """A rule applied to one table shape: the staged columns, and `apply` for each row group."""

    table: str
    columns: tuple[OutputColumn, ...]
    key: tuple[str, ...]
    filter: Any = None
    sensitive: frozenset[str] = frozenset()  # columns whose clear values must never appear in a message

    def arrow_schema(self, meta_fields: Sequence[pa.Field]) -> pa.Schema:
        return pa.schema([*meta_fields, *(pa.field(c.name, c.arrow_type, nullable=True) for c in self.columns)])

    def apply(self, rows: pa.Table, meta_names: Sequence[str]) -> tuple[pa.Table, dict[str, int]]:
        """The staged row group, and how many changes of each operation the filter turned into deletes. An update's
        before image (op 'B') that fails the filter is dropped: the row was not in the filtered set before it."""
        moved = {OP_INSERT: 0, OP_UPDATE: 0}
        fail = None
        if self.filter is not None and rows.num_rows:
            passes = evaluate_filter(self.filter, rows)
            outside = pc.and_(pc.invert(passes), pc.equal(rows.column(COL_OP), OP_BEFORE))
            if pc.any(outside).as_py():
                kept = pc.invert(outside)
                rows, passes = rows.filter(kept), passes.filter(kept)
            fail = pc.and_(pc.invert(passes), pc.not_equal(rows.column(COL_OP), OP_DELETE))
            if pc.any(fail).as_py():
                for op in moved:
                    moved[op] = int(pc.sum(pc.and_(fail, pc.equal(rows.column(COL_OP), op))).as_py() or 0)
            else:
                fail = None
        arrays: list[Any] = []
        names: list[str] = []
        for name in meta_names:
            col = rows.column(name)
            if name == COL_OP and fail is not None:
                col = pc.if_else(fail, pa.scalar(OP_DELETE, col.type), col)
            arrays.append(col)
            names.append(name)
        for c in self.columns:
            if c.computed and c.make is not None:
                col = c.make(rows)
            else:
                col = rows.column(c.name)
                if c.make is not None:
                    col = c.make(col)
            if fail is not None and c.name not in self.key:
                col = pc.if_else(fail, pa.scalar(None, c.arrow_type), col)  # a filtered-out row: its key only
            arrays.append(col)
            names.append(c.name)
        return pa.table(arrays, names=names), moved


def _computed(tree: Any) -> Callable[[Any], Any]:
    def make(rows: Any) -> Any:
        return evaluate_value(tree, rows)

    return make


def computed_types(kind: pa.DataType, name: str, where: str) -> tuple[str, str]:  # noqa: PLR0911 - one per type
    """The staged (MySQL-like, Delta) types of a computed column from its Arrow type."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "longtext", "STRING"
    if pa.types.is_boolean(kind):
        return "boolean", "BOOLEAN"
    if pa.types.is_integer(kind):
        return "bigint", "BIGINT" if kind.bit_width == 64 else "INT"
    if pa.types.is_floating(kind):
        return "double", "DOUBLE"
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})", f"DECIMAL({kind.precision},{kind.scale})"
    if pa.types.is_date(kind):
        return "date", "DATE"
    if pa.types.is_timestamp(kind):
        return ("timestamp(6)", "TIMESTAMP") if kind.tz else ("datetime(6)", "TIMESTAMP_NTZ")
    raise ConfigError(f"{where}: computed column {name!r} is of type {kind}, which does not land; CAST it")


def _hex_hmac(key: bytes) -> Callable[[Any], Any]:
    """HMAC-SHA-256 (RFC 2104) of each value, hex: of its bytes for a binary column, else of the UTF-8 of its
    text as Arrow writes it. By the compiled kernel (cdc_core/model/_hmac.c) when it is built, else by hashlib
    from the key's precomputed pads, once per distinct value of the row group."""
    block = key if len(key) <= 64 else hashlib.sha256(key).digest()
    block = block.ljust(64, b"\0")
    ipad, opad = bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)
    inner, outer = hashlib.sha256(ipad), hashlib.sha256(opad)

    def one(data: bytes) -> str:
        i = inner.copy()
        i.update(data)
        o = outer.copy()
        o.update(i.digest())
        return o.hexdigest()

    def make(col: Any) -> Any:
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        t = col.type
        if not (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)):
            try:  # the value's text, Arrow's (one kernel, not one Python call per value)
                col = pc.cast(col, pa.string())
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a nested type: its JSON text
                col = pa.array([None if v is None else _text(v) for v in col.to_pylist()], pa.string())
        col = pc.cast(col, pa.binary())  # the UTF-8 bytes (a fixed-size or large binary: plain binary)
        if _native is not None:  # every value in C (a NULL's empty slot too), then the NULLs put back
            n, first = len(col), col.offset
            hexes = _native.hmac_sha256_hex(ipad, opad, col.buffers()[1][4 * first:4 * (first + n + 1)],
                                            col.buffers()[2] or b"")
            hashed = pa.Array.from_buffers(pa.string(), n, [None, _hex_offsets(n), pa.py_buffer(hexes)])
            return pc.if_else(pc.is_null(col), pa.scalar(None, pa.string()), hashed) if col.null_count else hashed
        encoded = pc.dictionary_encode(col)  # in Python: each distinct value of the row group hashed once
        hashed = pa.array([one(v) for v in encoded.dictionary.to_pylist()], pa.string())
        return pc.take(hashed, encoded.indices)

    return make


def _hex_offsets(n: int) -> pa.Buffer:
    return pa.py_buffer(array.array("i", range(0, 64 * (n + 1), 64)).tobytes())


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if hasattr(v, "isoformat"):
        return str(v.isoformat())
    if isinstance(v, list | dict):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def _mask(kind: str) -> Callable[[Any], Any]:
    def make(col: Any) -> Any:
        if kind == "null":
            return pa.nulls(len(col), col.type)
        out: list[str | None] = []
        for v in col.to_pylist():
            if v is None:
                out.append(None)
            elif kind == "fixed":
                out.append(MASKED)
            else:
                s = v.hex() if isinstance(v, bytes | bytearray) else _text(v)
                out.append("*" * max(0, len(s) - 4) + s[-4:] if len(s) > 4 else "*" * len(s))
        return pa.array(out, pa.string())

    return make


def _truncate(n: int, arrow_type: pa.DataType) -> Callable[[Any], Any]:
    def make(col: Any) -> Any:
        if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
            return pc.binary_slice(col, 0, n)
        return pc.utf8_slice_codeunits(col, 0, n)

    return make


def table_transform(  # noqa: PLR0912 - one branch per treatment
    rule: TransformRule, key: bytes | None, table: str, columns: Sequence[Any], table_key: Sequence[str]
) -> TableTransform:
    """`rule` for one table shape; `columns`: the shape's column codecs (name, mysql_type, arrow_type,
    delta_type, nullable). ConfigError for a rule that cannot apply to the table."""
    names = [c.name for c in columns]
    where = f"transform rule for {table!r} ({', '.join(rule.match)})"
    for k in table_key:
        for what, named in (("excluded", rule.columns.exclude), ("masked", rule.mask), ("truncated", rule.truncate)):
            if k in named:
                raise ConfigError(f"{where}: key column {k!r} cannot be {what} (rows are merged by it); hash it, "
                                  "or drop the treatment")
        if rule.columns.include is not None and k not in rule.columns.include:
            raise ConfigError(f"{where}: key column {k!r} is not in columns.include (rows are merged by it): add it")
    missing = sorted(rule.source_columns() - set(names))
    if missing:
        raise ConfigError(f"{where}: the filter or a computed column names {missing}, which the table does not have")
    clash = sorted(set(rule.compute) & set(names))
    if clash:
        raise ConfigError(f"{where}: computed column(s) {clash} have the name of a source column: rename them")
    out = []
    for c in columns:
        if c.name in rule.columns.exclude or (rule.columns.include is not None and c.name not in rule.columns.include):
            continue
        if c.name in rule.hash:
            assert key is not None
            out.append(OutputColumn(c.name, HASH_TYPE, pa.string(), "STRING", c.nullable, _hex_hmac(key)))
        elif c.name in rule.mask:
            kind = rule.mask[c.name]
            if kind == "null":
                out.append(OutputColumn(c.name, c.mysql_type, c.arrow_type, c.delta_type, True, _mask(kind)))
            else:
                out.append(OutputColumn(c.name, "varchar", pa.string(), "STRING", c.nullable, _mask(kind)))
        elif c.name in rule.truncate:
            t = c.arrow_type
            if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                    or pa.types.is_large_binary(t)):
                raise ConfigError(f"{where}: truncate: column {c.name!r} is {c.mysql_type}, not text or binary")
            cut = _truncate(rule.truncate[c.name], t)
            out.append(OutputColumn(c.name, c.mysql_type, t, c.delta_type, c.nullable, cut))
        else:
            out.append(OutputColumn(c.name, c.mysql_type, c.arrow_type, c.delta_type, c.nullable))
    empty = pa.table({c.name: pa.array([], c.arrow_type) for c in columns})
    for name, expression in rule.compute.items():
        tree = parse_value(expression)
        kind = evaluate_value(tree, empty).type
        mysql_type, delta_type = computed_types(kind, name, where)
        out.append(OutputColumn(name, mysql_type, kind, delta_type, True, _computed(tree), computed=True))
    sensitive = {*rule.hash, *rule.mask, *rule.truncate, *rule.columns.exclude}
    if rule.columns.include is not None:
        sensitive |= set(names) - set(rule.columns.include)
    filt = parse_filter(rule.filter) if rule.filter is not None else None
    return TableTransform(table, tuple(out), tuple(table_key), filt, frozenset(sensitive))


def transformed_columns(rule: TransformRule) -> set[str]:
    """Columns whose treatment a schema change could defeat (renamed, retyped, refilled): every column the
    rule names."""
    named = {*rule.hash, *rule.mask, *rule.truncate, *rule.columns.exclude, *(rule.columns.include or ())}
    if rule.filter is not None:
        named |= columns_of(parse_filter(rule.filter))
    return named


def schema_change_lands(  # noqa: PLR0911 - one answer per kind of change
    rule: TransformRule, change: Any, target_rule: TransformRule | None = None
) -> bool:
    """Whether a schema change of a transformed table goes on to the lake (False: it concerns only a column
    that does not land, and is dropped). A change that would defeat the rule raises SchemaConflict, which stops
    the window with what to do: one that adds, renames or retypes a hashed, masked, truncated or filtered
    column; renames a column into or out of what lands; drops a filtered column; re-encodes hashed or masked
    text; renames the table to one another rule (or none) matches."""
    from cdc_core.model import schema_changes as sc
    from cdc_core.model.errors import SchemaConflict

    treated = {*rule.hash, *rule.mask, *rule.truncate}
    filtered = rule.source_columns()

    def lands(column: str) -> bool:
        if column in rule.columns.exclude:
            return False
        return rule.columns.include is None or column in rule.columns.include

    def refuse(why: str) -> SchemaConflict:
        return SchemaConflict(
            f"table {change.table_name}: the statement {change.query[:200]!r} {why}, which the table's transform "
            f"rule ({', '.join(rule.match)}) depends on: transforms do not follow such changes. Update the rule to "
            "the table's new shape (rules name the columns' new names), or exclude the table, then re-run the "
            "window (nothing of it has been staged; docs/transforms.md)"
        )

    kind = change.kind
    new = change.column.name if change.column is not None else change.new_name
    old = change.name
    if kind == sc.ADD_COLUMN:
        if new is None or not lands(new):
            return False
        if new in treated | filtered:
            raise refuse(f"adds column {new!r}")
        return True
    if kind == sc.DROP_COLUMN:
        if old in filtered:
            raise refuse(f"drops column {old!r}")
        return old is None or lands(old)
    if kind in (sc.RENAME_COLUMN, sc.MODIFY_COLUMN):
        after = new or old
        if old is not None and after is not None and lands(old) != lands(after):
            raise refuse(f"renames column {old!r} to {after!r} across what lands")
        if old is not None and not lands(old):
            return False
        touched = {n for n in (old, after) if n} & (treated | filtered)
        if touched:
            raise refuse(f"changes column {sorted(touched)[0]!r}")
        return True
    if kind in (sc.SET_DEFAULT, sc.DROP_DEFAULT):  # future inserts only: the lake's rows do not change
        return old is None or lands(old)
    if kind == sc.CONVERT_CHARSET and (rule.hash or rule.mask or rule.truncate):
        raise refuse("re-encodes the table's text columns")
    if kind == sc.RENAME_TABLE and target_rule != rule:
        raise refuse(f"renames the table to {change.target_name}, which another transform rule (or none) matches")
    return True
