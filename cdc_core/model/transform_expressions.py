"""The small SQL expression language of transform rules (docs/transforms.md): row filters (predicates) and
computed columns (values), parsed with sqlglot in the MySQL dialect and evaluated with Arrow compute kernels
over a row group as staged (docs/type-map.md). Anything outside the documented set is refused when the
configuration is loaded, never guessed at.

- predicates: comparisons, AND / OR / NOT, IN, BETWEEN, LIKE, IS [NOT] NULL;
- values: columns, literals, + - * /, CAST(x AS CHAR | SIGNED | UNSIGNED | DECIMAL(p,s) | DOUBLE | DATE |
  DATETIME), CONCAT(...), COALESCE(...) / IFNULL(a, b), YEAR / MONTH / DAY / HOUR / MINUTE(x), DATE(x),
  LOWER(x), UPPER(x).

NULL follows SQL: an operation on NULL is NULL (CONCAT too), a predicate that is NULL does not pass.
Comparisons are exact (no collation: 'de' is not 'DE').
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.model.errors import ConfigError

_COMPARE = {"EQ": "equal", "NEQ": "not_equal", "GT": "greater", "GTE": "greater_equal", "LT": "less",
            "LTE": "less_equal"}
_ARITHMETIC = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide"}
_DATE_PARTS = {"Year": "year", "Month": "month", "Day": "day", "DayOfMonth": "day", "Hour": "hour",
               "Minute": "minute"}
_CASE = {"Lower": "utf8_lower", "Upper": "utf8_upper"}


def _value_nodes() -> tuple[type, ...]:
    from sqlglot import exp

    return (exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.Neg, exp.Paren, exp.Cast,
            exp.DataType, exp.DataTypeParam, exp.Concat, exp.Coalesce, exp.Year, exp.Month, exp.Day,
            exp.DayOfMonth, exp.Hour, exp.Minute, exp.TsOrDsToDate, exp.Add, exp.Sub, exp.Mul, exp.Div,
            exp.Lower, exp.Upper)


def _predicate_nodes() -> tuple[type, ...]:
    from sqlglot import exp

    return (exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Is, exp.In,
            exp.Between, exp.Like)


def _parse(text: str, what: str, allowed: tuple[type, ...], help_text: str) -> Any:
    import sqlglot

    try:
        tree = sqlglot.parse_one(text, read="mysql")
    except Exception as e:
        raise ConfigError(f"{what} {text!r} is not a SQL expression: {e}") from None
    for node in tree.walk():
        if not isinstance(node, allowed):
            raise ConfigError(
                f"{what} {text!r}: {node.sql(dialect='mysql')!r} ({type(node).__name__}) is not supported; use "
                f"{help_text} (docs/transforms.md)"
            )
    return tree


PREDICATE_HELP = "comparisons, AND / OR / NOT, IN, BETWEEN, LIKE and IS [NOT] NULL over columns and values"
VALUE_HELP = ("columns, literals, + - * /, CAST, CONCAT, COALESCE / IFNULL, YEAR / MONTH / DAY / HOUR / MINUTE, "
              "DATE, LOWER, UPPER")


def parse_filter(text: str) -> Any:
    """A row filter's syntax tree; ConfigError names what is not supported."""
    return _parse(text, "filter", _predicate_nodes() + _value_nodes(), f"{PREDICATE_HELP}; values: {VALUE_HELP}")


def parse_value(text: str) -> Any:
    """A computed column's syntax tree; ConfigError names what is not supported."""
    return _parse(text, "computed column", _value_nodes(), VALUE_HELP)


def columns_of(tree: Any) -> set[str]:
    from sqlglot import exp

    return {c.name for c in tree.find_all(exp.Column)}


def evaluate_filter(tree: Any, table: pa.Table) -> pa.Array:
    """Whether each row passes (NULL: does not)."""
    result = _predicate(tree, table)
    if isinstance(result, pa.Scalar):
        result = pa.array([result.as_py()] * table.num_rows, pa.bool_())
    return pc.fill_null(result, False)


def evaluate_value(tree: Any, table: pa.Table) -> Any:
    """A computed column's values for each row (an Array or ChunkedArray of the table's length)."""
    result = _value(tree, table)
    if isinstance(result, pa.Scalar):
        return pa.array([result.as_py()] * table.num_rows, result.type if result.type != pa.null() else pa.null())
    return result


def _column(node: Any, table: pa.Table) -> Any:
    name = node.name
    if name not in table.column_names:
        raise ConfigError(f"the expression names column {name!r}, which the table does not have")
    return table.column(name)


def _literal(node: Any, like: pa.DataType | None) -> pa.Scalar:  # noqa: PLR0911 - one per kind of literal
    from sqlglot import exp

    if isinstance(node, exp.Null):
        return pa.scalar(None, like or pa.null())
    if isinstance(node, exp.Boolean):
        return pa.scalar(bool(node.this))
    if isinstance(node, exp.Neg):
        return pc.negate(_literal(node.this, like))
    if isinstance(node, exp.Paren):
        return _literal(node.this, like)
    text = node.this
    value: Any = text if node.is_string else (int(text) if text.lstrip("-").isdigit() else Decimal(text))
    scalar = pa.scalar(value)
    if like is not None and not pa.types.is_null(like):
        try:  # '2024-01-01' against a date column, 3 against a decimal, ...
            return scalar.cast(like)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return scalar
    return scalar


def _is_constant(node: Any) -> bool:
    from sqlglot import exp

    return isinstance(node, exp.Literal | exp.Null | exp.Boolean) or (
        isinstance(node, exp.Neg | exp.Paren) and _is_constant(node.this))


def _operands(a: Any, b: Any, table: pa.Table) -> tuple[Any, Any]:
    """Two operands, a constant one typed like the other side."""
    if _is_constant(a) and not _is_constant(b):
        right = _value(b, table)
        return _literal(a, right.type), right
    left = _value(a, table)
    if _is_constant(b):
        return left, _literal(b, left.type)
    return left, _value(b, table)


def _predicate(node: Any, table: pa.Table) -> Any:  # noqa: PLR0911 - one answer per kind of node
    from sqlglot import exp

    kind = type(node).__name__
    if isinstance(node, exp.Paren):
        return _predicate(node.this, table)
    if isinstance(node, exp.And):
        return pc.and_kleene(_predicate(node.this, table), _predicate(node.expression, table))
    if isinstance(node, exp.Or):
        return pc.or_kleene(_predicate(node.this, table), _predicate(node.expression, table))
    if isinstance(node, exp.Not):
        return pc.invert(_predicate(node.this, table))
    if kind in _COMPARE:
        return getattr(pc, _COMPARE[kind])(*_operands(node.this, node.expression, table))
    if isinstance(node, exp.Is):
        value = _value(node.this, table)
        if isinstance(node.expression, exp.Null):
            return pc.is_null(value)
        return pc.equal(value, _literal(node.expression, None))
    if isinstance(node, exp.In):
        value = _value(node.this, table)
        options = pa.array([_literal(o, value.type).as_py() for o in node.expressions], value.type)
        return pc.if_else(pc.is_null(value), pa.scalar(None, pa.bool_()), pc.is_in(value, value_set=options))
    if isinstance(node, exp.Between):
        value = _value(node.this, table)
        low, high = _literal(node.args["low"], value.type), _literal(node.args["high"], value.type)
        return pc.and_kleene(pc.greater_equal(value, low), pc.less_equal(value, high))
    if isinstance(node, exp.Like):
        return pc.match_like(_value(node.this, table), node.expression.this)
    value = _value(node, table)  # a bare value: its truth (non-zero)
    return value if pa.types.is_boolean(value.type) else pc.not_equal(value, pa.scalar(0).cast(value.type))


def _cast_target(node: Any) -> pa.DataType:
    from sqlglot import exp

    to = node.args["to"]
    t = to.this
    T = exp.DataType.Type
    if t in (T.CHAR, T.VARCHAR, T.TEXT, T.NCHAR, T.NVARCHAR):
        return pa.string()
    if t in (T.BIGINT, T.INT, T.SMALLINT, T.TINYINT, T.UBIGINT, T.UINT):
        return pa.int64()
    if t in (T.DOUBLE, T.FLOAT):
        return pa.float64()
    if t == T.DATE:
        return pa.date32()
    if t in (T.DATETIME, T.TIMESTAMP):
        return pa.timestamp("us")
    if t == T.DECIMAL:
        params = [int(p.this.this) for p in to.expressions] or [10, 0]
        return pa.decimal128(params[0], params[1] if len(params) > 1 else 0)
    raise ConfigError(f"CAST to {to.sql(dialect='mysql')} is not supported; use CHAR, SIGNED, UNSIGNED, "
                      "DECIMAL(p,s), DOUBLE, DATE or DATETIME")


def _as_date(value: Any) -> Any:
    if pa.types.is_date(value.type):
        return value
    return pc.cast(value, pa.date32())


def _value(node: Any, table: pa.Table) -> Any:  # noqa: PLR0911 - one answer per kind of node
    from sqlglot import exp

    kind = type(node).__name__
    if isinstance(node, exp.Column):
        return _column(node, table)
    if _is_constant(node):
        return _literal(node, None)
    if isinstance(node, exp.Paren):
        return _value(node.this, table)
    if kind in _ARITHMETIC:
        return getattr(pc, _ARITHMETIC[kind])(*_operands(node.this, node.expression, table))
    if isinstance(node, exp.Cast):
        return pc.cast(_value(node.this, table), _cast_target(node))
    if isinstance(node, exp.Concat):
        parts = [pc.cast(_value(e, table), pa.string()) for e in node.expressions]
        return pc.binary_join_element_wise(*parts, "")
    if isinstance(node, exp.Coalesce):
        first = _value(node.this, table)
        rest = [_literal(e, first.type) if _is_constant(e) else _value(e, table) for e in node.expressions]
        return pc.coalesce(first, *rest)
    if isinstance(node, exp.TsOrDsToDate):
        return _as_date(_value(node.this, table))
    if kind in _DATE_PARTS:
        return getattr(pc, _DATE_PARTS[kind])(_value(node.this, table))
    if kind in _CASE:
        return getattr(pc, _CASE[kind])(_value(node.this, table))
    if isinstance(node, _predicate_nodes()):
        return _predicate(node, table)
    raise ConfigError(f"{node.sql(dialect='mysql')!r} is not supported")
