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

import fnmatch
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cdc_core.model.errors import ConfigError
from cdc_core.model.manifest import COL_OP, OP_DELETE, OP_INSERT, OP_UPDATE

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
            parse_filter(v)  # a ConfigError (a ValueError) names what is not supported
        return v

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
    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


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


def resolve(config: TransformConfig, pipeline: str, environ: Mapping[str, str] | None = None) -> Transforms:
    """The configured rules with the hash key read from its environment variable (ConfigError when missing)."""
    if not config.tables:
        return Transforms()
    return Transforms(tuple(config.tables), read_key(config, pipeline, environ) if any(r.hash for r in config.tables)
                      else None)


def read_key(config: TransformConfig, pipeline: str, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The hash key from `hash_key.env` (None when no key is configured); ConfigError when the variable is
    unset or shorter than 16 bytes."""
    if config.hash_key is None:
        return None
    env = os.environ if environ is None else environ
    value = env.get(config.hash_key.env, "")
    if len(value.encode()) < 16:
        raise ConfigError(
            f"pipeline {pipeline!r}: transform.hash_key: environment variable {config.hash_key.env} "
            + ("is not set" if not value else "holds fewer than 16 bytes")
            + " in this process; set it to the pipeline's secret hash key, the same value wherever the pipeline "
            "stages windows (the Airflow workers, the `cdc` command)"
        )
    return value.encode()


def plan_record(config: TransformConfig, pipeline: str) -> dict[str, tuple[str, ...]]:
    """What a new window's plan records of the rules (`WindowPlan.capture["transform"]`); nothing without rules,
    so that plans without transforms keep the bytes they always had."""
    recorded = resolve(config, pipeline).recorded()
    return {"transform": recorded} if recorded else {}


def planned(config: TransformConfig, capture: Mapping[str, Sequence[str]], pipeline: str, seq: int) -> Transforms:
    """The transforms of a stored plan's capture settings, keyed by this process's hash key, which must be the
    one the window was planned with."""
    recorded = capture.get("transform", ())
    if not recorded:
        return Transforms()
    return from_plan(recorded, Transforms(key=read_key(config, pipeline)), pipeline, seq)


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


# -------------------------------------------------------------------------------------------------- the filter

_COMPARE = {"EQ": "equal", "NEQ": "not_equal", "GT": "greater", "GTE": "greater_equal", "LT": "less",
            "LTE": "less_equal"}


def parse_filter(text: str) -> Any:
    """The predicate's syntax tree (sqlglot, MySQL dialect); ConfigError names what is not supported."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(text, read="mysql")
    except Exception as e:
        raise ConfigError(f"filter {text!r} is not a SQL predicate: {e}") from None
    allowed = (exp.And, exp.Or, exp.Not, exp.Paren, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is,
               exp.In, exp.Between, exp.Like, exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean,
               exp.Neg)
    for node in tree.walk():
        if not isinstance(node, allowed):
            raise ConfigError(
                f"filter {text!r}: {node.sql(dialect='mysql')!r} ({type(node).__name__}) is not supported; use "
                "comparisons, AND / OR / NOT, IN, BETWEEN, LIKE and IS [NOT] NULL over columns and literals"
            )
    return tree


def filter_columns(text: str) -> set[str]:
    from sqlglot import exp

    return {c.name for c in parse_filter(text).find_all(exp.Column)}


def _literal(node: Any, like: pa.DataType | None) -> pa.Scalar:
    from sqlglot import exp

    if isinstance(node, exp.Null):
        return pa.scalar(None, like or pa.null())
    if isinstance(node, exp.Boolean):
        return pa.scalar(bool(node.this))
    if isinstance(node, exp.Neg):
        inner = _literal(node.this, like)
        return pc.negate(inner)
    value: Any = node.this if node.is_string else (int(node.this) if node.this.lstrip("-").isdigit()
                                                   else Decimal(node.this))
    scalar = pa.scalar(value)
    if like is not None and not pa.types.is_null(like):
        try:  # '2024-01-01' against a date column, 3 against a decimal, ...
            return scalar.cast(like)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return scalar
    return scalar


def evaluate_filter(tree: Any, table: pa.Table) -> pa.Array:
    """Whether each row passes (NULL: does not)."""
    result = _eval(tree, table)
    if isinstance(result, pa.Scalar):
        result = pa.array([result.as_py()] * table.num_rows, pa.bool_())
    return pc.fill_null(result, False)


def _column(node: Any, table: pa.Table) -> Any:
    name = node.name
    if name not in table.column_names:
        raise ConfigError(f"filter names column {name!r}, which the table does not have")
    return table.column(name)


def _eval(node: Any, table: pa.Table) -> Any:  # noqa: PLR0911 - one answer per kind of node
    from sqlglot import exp

    def operand(n: Any, other: Any = None) -> Any:
        if isinstance(n, exp.Column):
            return _column(n, table)
        if isinstance(n, exp.Paren):
            return _eval(n.this, table)
        like = _column(other, table).type if isinstance(other, exp.Column) else None
        if isinstance(n, exp.Literal | exp.Null | exp.Boolean | exp.Neg):
            return _literal(n, like)
        return _eval(n, table)

    kind = type(node).__name__
    if isinstance(node, exp.Paren):
        return _eval(node.this, table)
    if isinstance(node, exp.And):
        return pc.and_kleene(_eval(node.this, table), _eval(node.expression, table))
    if isinstance(node, exp.Or):
        return pc.or_kleene(_eval(node.this, table), _eval(node.expression, table))
    if isinstance(node, exp.Not):
        return pc.invert(_eval(node.this, table))
    if kind in _COMPARE:
        left, right = operand(node.this, node.expression), operand(node.expression, node.this)
        return getattr(pc, _COMPARE[kind])(left, right)
    if isinstance(node, exp.Is):
        value = operand(node.this)
        if isinstance(node.expression, exp.Null):
            return pc.is_null(value)
        return pc.equal(value, _literal(node.expression, None))
    if isinstance(node, exp.In):
        value = operand(node.this)
        options = pa.array([_literal(o, value.type).as_py() for o in node.expressions], value.type)
        found = pc.is_in(value, value_set=options)
        return pc.if_else(pc.is_null(value), pa.scalar(None, pa.bool_()), found)
    if isinstance(node, exp.Between):
        value = operand(node.this)
        low, high = _literal(node.args["low"], value.type), _literal(node.args["high"], value.type)
        return pc.and_kleene(pc.greater_equal(value, low), pc.less_equal(value, high))
    if isinstance(node, exp.Like):
        value = operand(node.this)
        return pc.match_like(value, node.expression.this)
    if isinstance(node, exp.Column):  # a bare column: its truth value (non-zero)
        value = _column(node, table)
        return value if pa.types.is_boolean(value.type) else pc.not_equal(value, pa.scalar(0).cast(value.type))
    raise ConfigError(f"filter: {node.sql(dialect='mysql')!r} is not supported")


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
        """The staged row group, and how many changes of each operation the filter turned into deletes."""
        moved = {OP_INSERT: 0, OP_UPDATE: 0}
        fail = None
        if self.filter is not None and rows.num_rows:
            passes = evaluate_filter(self.filter, rows)
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
            col = rows.column(c.name)
            if c.make is not None:
                col = c.make(col)
            if fail is not None and c.name not in self.key:
                col = pc.if_else(fail, pa.scalar(None, c.arrow_type), col)  # a filtered-out row: its key only
            arrays.append(col)
            names.append(c.name)
        return pa.table(arrays, names=names), moved


def _hex_hmac(key: bytes) -> Callable[[Any], Any]:
    def make(col: Any) -> Any:
        out: list[str | None] = []
        for v in col.to_pylist():
            if v is None:
                out.append(None)
            else:
                data = v if isinstance(v, bytes | bytearray) else _text(v).encode()
                out.append(hmac.new(key, data, hashlib.sha256).hexdigest())
        return pa.array(out, pa.string())

    return make


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
    if rule.filter is not None:
        missing = sorted(filter_columns(rule.filter) - set(names))
        if missing:
            raise ConfigError(f"{where}: the filter names {missing}, which the table does not have")
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
        named |= filter_columns(rule.filter)
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
    filtered = filter_columns(rule.filter) if rule.filter is not None else set()

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
