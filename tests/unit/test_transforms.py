"""The transform rules (cdc_core/model/transforms.py): configuration checks, what each treatment stages, the
filter's semantics, the key rules, the plan's record, and which schema changes may pass."""

from __future__ import annotations

import hashlib
import hmac
import itertools
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cdc_core.model import schema_changes as sc
from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.errors import ConfigError, SchemaConflict
from cdc_core.model.manifest import STAGED_META_COLUMNS
from cdc_core.model.transform_expressions import evaluate_filter, parse_filter
from cdc_core.model.transforms import (
    TransformConfig,
    TransformRule,
    Transforms,
    from_plan,
    resolve,
    schema_change_lands,
    table_transform,
)
from cdc_core.model.types import table_codec

pytestmark = pytest.mark.unit

KEY = b"k" * 32


def shape(*cols: tuple[str, str], key: tuple[str, ...] = ("id",)) -> TableSchema:
    return TableSchema("shop", "customers", tuple(SourceColumn(n, t) for n, t in cols), key)


CUSTOMERS = shape(("id", "int"), ("email", "varchar(100)"), ("phone", "varchar(20)"), ("card", "varchar(19)"),
                  ("note", "text"), ("country", "char(2)"), ("amount", "decimal(8,2)"))


def rows(*changes: tuple[str, dict[str, Any]]) -> pa.Table:
    """A staged row group of CUSTOMERS: (op, values) per change."""
    codec = table_codec(CUSTOMERS)
    cols: dict[str, list[Any]] = {n: [] for n in codec.arrow_schema.names}
    for i, (op, values) in enumerate(changes):
        cols["_cdc_op"].append(op)
        cols["_cdc_version"].append(i)
        cols["_cdc_ordinal"].append(i)
        cols["_cdc_commit_ts"].append(0)
        cols["_cdc_txn"].append(i)
        for c in codec.columns:
            cols[c.name].append(values.get(c.name))
    return pa.table({n: pa.array(v, codec.arrow_schema.field(n).type) for n, v in cols.items()})


def apply(rule: TransformRule, table: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    t = table_transform(rule, KEY, CUSTOMERS.name, table_codec(CUSTOMERS).columns, CUSTOMERS.key)
    return t.apply(table, STAGED_META_COLUMNS)


def test_each_treatment_stages_what_it_says_and_nothing_in_the_clear() -> None:
    rule = TransformRule(match=["shop.customers"], columns={"exclude": ["note"]}, hash=["email"],
                         mask={"card": "keep_last_4", "phone": "null"}, truncate={"country": 1})
    out, moved = apply(rule, rows(("I", {"id": 1, "email": "a@x.io", "phone": "+49 170", "card": "4111111111111111",
                                         "note": "secret", "country": "DE", "amount": Decimal("1.50")}),
                                  ("U", {"id": 2, "email": None, "card": "12", "country": None})))
    assert moved == {"I": 0, "U": 0}
    assert out.column_names == [*STAGED_META_COLUMNS, "id", "email", "phone", "card", "country", "amount"]
    got = out.to_pylist()
    assert got[0]["email"] == hmac.new(KEY, b"a@x.io", hashlib.sha256).hexdigest()
    assert got[1]["email"] is None  # NULL stays NULL
    assert [r["phone"] for r in got] == [None, None]
    assert [r["card"] for r in got] == ["************1111", "**"]
    assert [r["country"] for r in got] == ["D", None]
    assert got[0]["amount"] == Decimal("1.50") and out.schema.field("phone").type == pa.string()


def test_hashes_are_deterministic_and_keyed() -> None:
    rule = TransformRule(match=["shop.*"], hash=["email", "amount"])
    one = apply(rule, rows(("I", {"id": 1, "email": "a@x.io", "amount": Decimal("2.00")})))[0].to_pylist()[0]
    two = apply(rule, rows(("U", {"id": 9, "email": "a@x.io", "amount": Decimal("2.00")})))[0].to_pylist()[0]
    assert (one["email"], one["amount"]) == (two["email"], two["amount"])
    assert one["amount"] == hmac.new(KEY, b"2.00", hashlib.sha256).hexdigest()
    other = table_transform(rule, b"o" * 32, CUSTOMERS.name, table_codec(CUSTOMERS).columns, ("id",))
    assert other.apply(rows(("I", {"id": 1, "email": "a@x.io"})), STAGED_META_COLUMNS)[0].to_pylist()[0]["email"] \
        != one["email"]


def test_a_row_outside_the_filter_lands_as_a_delete_of_its_key_alone() -> None:
    rule = TransformRule(match=["shop.customers"], filter="country = 'DE' AND amount > 1")
    out, moved = apply(rule, rows(
        ("I", {"id": 1, "country": "DE", "amount": Decimal("5"), "email": "in@x"}),  # passes
        ("I", {"id": 2, "country": "FR", "amount": Decimal("5"), "email": "out@x"}),  # never in: a delete
        ("U", {"id": 3, "country": "DE", "amount": None, "email": "null@x"}),  # NULL predicate: does not pass
        ("U", {"id": 4, "country": "DE", "amount": Decimal("2"), "email": "moved-in@x"}),  # moves in: upsert
        ("D", {"id": 5, "country": "FR", "amount": Decimal("1"), "email": "gone@x"}),  # a delete stays one
    ))
    got = out.to_pylist()
    assert [(r["_cdc_op"], r["id"]) for r in got] == [("I", 1), ("D", 2), ("D", 3), ("U", 4), ("D", 5)]
    assert moved == {"I": 1, "U": 1}
    assert got[1]["email"] is None and got[1]["country"] is None and got[2]["email"] is None  # key only
    assert got[4]["email"] == "gone@x"  # a real delete keeps its image (soft deletes keep the last image)


def test_an_updates_before_image_outside_the_filter_is_dropped_and_is_hashed_like_the_row() -> None:
    """A before image (op B, change-log tables) shows the row as it was in the filtered set: one outside it (the
    update moved the row in) is not staged at all; one inside it is hashed and masked like every row."""
    rule = TransformRule(match=["shop.customers"], filter="country = 'DE'", hash=["email"])
    out, moved = apply(rule, rows(
        ("B", {"id": 1, "country": "DE", "email": "old@x"}), ("U", {"id": 1, "country": "DE", "email": "new@x"}),
        ("B", {"id": 2, "country": "FR", "email": "fr@x"}), ("U", {"id": 2, "country": "DE", "email": "de@x"}),
        ("B", {"id": 3, "country": "DE", "email": "de3@x"}), ("U", {"id": 3, "country": "FR", "email": "fr3@x"}),
    ))
    got = out.to_pylist()
    assert [(r["_cdc_op"], r["id"]) for r in got] == [("B", 1), ("U", 1), ("U", 2), ("B", 3), ("D", 3)]
    assert moved == {"I": 0, "U": 1}
    assert got[0]["email"] == hmac.new(KEY, b"old@x", hashlib.sha256).hexdigest()
    assert got[3]["email"] == hmac.new(KEY, b"de3@x", hashlib.sha256).hexdigest() and got[4]["email"] is None


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("country IN ('DE', 'AT')", [True, False, False]),
        ("country IS NULL", [False, False, True]),
        ("NOT (country = 'DE')", [False, True, False]),
        ("email LIKE '%@x.io'", [True, False, False]),
        ("amount BETWEEN 1 AND 2.5", [True, False, False]),
        ("id >= 2 OR country = 'DE'", [True, True, True]),
        ("amount <> -3", [True, True, False]),
    ],
)
def test_filter_predicates(predicate: str, expected: list[bool]) -> None:
    table = rows(("I", {"id": 1, "country": "DE", "email": "a@x.io", "amount": Decimal("1.5")}),
                 ("I", {"id": 2, "country": "FR", "email": "b@y.io", "amount": Decimal("7")}),
                 ("I", {"id": 3}))
    assert evaluate_filter(parse_filter(predicate), table).to_pylist() == expected


@pytest.mark.parametrize("predicate", ["SUBSTRING_INDEX(email, '@', -1) = 'a'", "id = (SELECT 1)", "a +", "id = @v"])
def test_an_unsupported_filter_is_a_configuration_error(predicate: str) -> None:
    with pytest.raises((ConfigError, ValidationError), match="filter"):
        TransformRule(match=["shop.t"], filter=predicate)


def test_configuration_errors_say_what_to_fix() -> None:
    with pytest.raises(ValidationError, match="both `hash` and `mask`"):
        TransformRule(match=["s.t"], hash=["a"], mask={"a": "fixed"})
    with pytest.raises(ValidationError, match="not both"):
        TransformRule(match=["s.t"], columns={"include": ["a"], "exclude": ["b"]})
    with pytest.raises(ValidationError, match=r"not in `columns\.include`"):
        TransformRule(match=["s.t"], columns={"include": ["id"]}, hash=["email"])
    with pytest.raises(ValidationError, match="no key is configured"):
        TransformConfig(tables=[{"match": "s.t", "hash": ["a"]}])
    with pytest.raises(ValidationError, match="keep_last_4"):
        TransformRule(match=["s.t"], mask={"a": "scramble"})
    config = TransformConfig(hash_key={"env": "PII_KEY"}, tables=[{"match": "s.t", "hash": ["a"]}])
    with pytest.raises(ConfigError, match="PII_KEY is not set"):
        resolve(config, "p", environ={})
    with pytest.raises(ConfigError, match="fewer than 16 bytes"):
        resolve(config, "p", environ={"PII_KEY": "short"})


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"columns": {"exclude": ["id"]}}, "cannot be excluded"),
        ({"mask": {"id": "fixed"}}, "cannot be masked"),
        ({"columns": {"include": ["email"]}}, "not in columns.include"),
        ({"truncate": {"amount": 3}}, "not text or binary"),
        ({"filter": "missing = 1"}, "does not have"),
    ],
)
def test_rules_that_cannot_apply_to_the_table_are_refused(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        table_transform(TransformRule(match=["shop.*"], **rule), KEY, CUSTOMERS.name,
                        table_codec(CUSTOMERS).columns, CUSTOMERS.key)


def test_a_hashed_key_stays_a_key() -> None:
    rule = TransformRule(match=["shop.*"], hash=["id"])
    out, _ = apply(rule, rows(("I", {"id": 7})))
    assert out.to_pylist()[0]["id"] == hmac.new(KEY, b"7", hashlib.sha256).hexdigest()


def test_a_plan_records_the_rules_and_the_keys_fingerprint_never_the_key() -> None:
    config = TransformConfig(hash_key={"env": "K"}, tables=[{"match": "s.t", "hash": ["a"]}])
    planned = resolve(config, "p", environ={"K": "x" * 20})
    recorded = planned.recorded()
    assert not any("x" * 20 in r for r in recorded)
    again = from_plan(recorded, Transforms(key=b"x" * 20), "p", 3)
    assert again.rules == planned.rules and again.key == b"x" * 20
    with pytest.raises(ConfigError, match="window 3 was planned with the hash key"):
        from_plan(recorded, Transforms(key=b"y" * 20), "p", 3)


def change(kind: str, **kw: Any) -> sc.SchemaChange:
    return sc.SchemaChange(kind=kind, schema="shop", table="customers", query="ALTER TABLE ...", **kw)


def test_schema_changes_of_columns_that_do_not_land_are_dropped_and_those_that_defeat_a_rule_refused() -> None:
    rule = TransformRule(match=["shop.*"], columns={"exclude": ["note"]}, hash=["email"], filter="country = 'DE'")
    spec = sc.ColumnSpec
    assert not schema_change_lands(rule, change(sc.ADD_COLUMN, column=spec("note", "text")))
    assert schema_change_lands(rule, change(sc.ADD_COLUMN, column=spec("city", "text")))
    assert not schema_change_lands(rule, change(sc.DROP_COLUMN, name="note"))
    assert schema_change_lands(rule, change(sc.DROP_COLUMN, name="email"))  # the lake drops the hashes too
    for bad in (change(sc.RENAME_COLUMN, name="email", new_name="mail"),
                change(sc.MODIFY_COLUMN, name="email", column=spec("email", "varchar(200)")),
                change(sc.RENAME_COLUMN, name="note", new_name="remarks"),  # an excluded column would land
                change(sc.DROP_COLUMN, name="country"),  # the filter's column
                change(sc.CONVERT_CHARSET, charset="utf8mb4"),
                change(sc.RENAME_TABLE, to_schema="other", to_table="people")):
        with pytest.raises(SchemaConflict, match="transform"):
            schema_change_lands(rule, bad, None)
    included = TransformRule(match=["shop.*"], columns={"include": ["id", "email"]})
    assert not schema_change_lands(included, change(sc.ADD_COLUMN, column=spec("ssn", "text")))


def test_computed_columns_land_after_the_source_columns_with_their_types() -> None:
    rule = TransformRule(match=["shop.*"], hash=["email"], filter="id <> 3", compute={
        "label": "CONCAT(country, '-', CAST(id AS CHAR))",
        "amount_cents": "CAST(amount * 100 AS SIGNED)",
        "country_or_none": "COALESCE(country, 'none')",
        "domainless": "LOWER(CONCAT('ID', id))",
    })
    t = table_transform(rule, KEY, CUSTOMERS.name, table_codec(CUSTOMERS).columns, CUSTOMERS.key)
    assert [(c.name, c.delta_type) for c in t.columns[-4:]] == [
        ("label", "STRING"), ("amount_cents", "BIGINT"), ("country_or_none", "STRING"), ("domainless", "STRING")]
    out, _ = t.apply(rows(("I", {"id": 1, "country": "DE", "amount": Decimal("1.25")}),
                          ("U", {"id": 2, "country": None, "amount": None}),
                          ("U", {"id": 3, "country": "XX", "amount": Decimal("9")})), STAGED_META_COLUMNS)
    got = out.to_pylist()
    assert [(r["label"], r["amount_cents"], r["country_or_none"], r["domainless"]) for r in got] == [
        ("DE-1", 125, "DE", "id1"),
        (None, None, "none", "id2"),  # CONCAT with a NULL is NULL, as in SQL
        (None, None, None, None),  # filtered out: a delete of the key alone
    ]


def test_date_parts_and_dates() -> None:
    from datetime import date, datetime

    events = shape(("id", "int"), ("at", "datetime(6)"), ("day", "date"))
    rule = TransformRule(match=["shop.*"], compute={"y": "YEAR(at)", "m": "MONTH(day)", "h": "HOUR(at)",
                                                    "d": "DATE(at)"})
    codec = table_codec(events)
    t = table_transform(rule, None, events.name, codec.columns, events.key)
    table = pa.table({"_cdc_op": pa.array(["I"], codec.arrow_schema.field(0).type), "_cdc_version": [1],
                      "_cdc_ordinal": [1], "_cdc_commit_ts": [0], "_cdc_txn": [1],
                      "id": [1], "at": pa.array([datetime(2026, 11, 29, 13, 5)], codec.arrow_schema.field("at").type),
                      "day": pa.array([date(2026, 2, 3)], codec.arrow_schema.field("day").type)})
    table = table.cast(codec.arrow_schema)
    out, _ = t.apply(table, STAGED_META_COLUMNS)
    row = out.to_pylist()[0]
    assert (row["y"], row["m"], row["h"], row["d"]) == (2026, 2, 13, date(2026, 11, 29))


@pytest.mark.parametrize(
    ("compute", "message"),
    [
        ({"email": "UPPER(email)"}, "name of a source column"),
        ({"x": "missing + 1"}, "does not have"),
    ],
)
def test_computed_columns_that_cannot_apply_are_refused(compute: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        table_transform(TransformRule(match=["shop.*"], compute=compute), KEY, CUSTOMERS.name,
                        table_codec(CUSTOMERS).columns, CUSTOMERS.key)


@pytest.mark.parametrize("expression", ["SUBSTRING_INDEX(email, '@', -1)", "NOW()", "CAST(a AS JSON)"])
def test_an_unsupported_computed_column_is_a_configuration_error(expression: str) -> None:
    with pytest.raises((ConfigError, ValidationError)):
        table_transform(TransformRule(match=["shop.*"], compute={"x": expression}), KEY, CUSTOMERS.name,
                        table_codec(CUSTOMERS).columns, CUSTOMERS.key)


# --------------------------------------------------------------------- the filter against a reference model


DML = st.lists(
    st.tuples(st.sampled_from(["insert", "update", "delete"]), st.integers(1, 4), st.sampled_from(["DE", "FR", None]),
              st.sampled_from(["a@x", "b@y", None])),
    min_size=1, max_size=30,
)


def land(lake: dict[Any, tuple[int, dict[str, Any] | None]], window: pa.Table) -> None:
    """The merge's meaning (cdc_core.model.merge_semantics) on plain values: per key, a change applies only when
    its version is >= what the lake holds for the key (a row or a hard delete's tombstone)."""
    for r in window.to_pylist():
        held = lake.get(r["id"])
        if held is not None and r["_cdc_version"] < held[0]:
            continue
        lake[r["id"]] = (r["_cdc_version"], None if r["_cdc_op"] == "D" else r)


@settings(max_examples=150, deadline=None)
@given(DML, st.lists(st.integers(1, 29), max_size=5), st.integers(0, 3))
def test_the_lake_holds_exactly_the_source_rows_that_pass_the_filter_shaped_through_replays(
    dml: list[tuple[str, int, str | None, str | None]], cuts: list[int], replay: int
) -> None:
    """Random inserts, updates and deletes in windows (cut anywhere), each staged through the rule and landed by
    the merge's version rule; an older window replayed after newer ones changes nothing. The lake equals the
    source filtered and shaped, row for row."""
    rule = TransformRule(match=["shop.*"], hash=["email"], filter="country = 'DE'")
    t = table_transform(rule, KEY, CUSTOMERS.name, table_codec(CUSTOMERS).columns, CUSTOMERS.key)
    source: dict[int, dict[str, Any]] = {}
    changes: list[tuple[str, dict[str, Any]]] = []
    for kind, key, country, email in dml:
        row = {"id": key, "country": country, "email": email}
        if kind == "insert" and key not in source:
            source[key] = row
            changes.append(("I", row))
        elif kind == "update" and key in source:
            source[key] = row
            changes.append(("U", row))
        elif kind == "delete" and key in source:
            changes.append(("D", source.pop(key)))
    bounds = sorted({0, len(changes), *(c for c in cuts if c < len(changes))})
    windows = [t.apply(rows(*changes[a:b]), STAGED_META_COLUMNS)[0] if b > a else None
               for a, b in itertools.pairwise(bounds)]
    versions = 0
    staged = []
    for w in windows:  # versions increase across windows, as binlog positions do
        if w is None:
            continue
        n = w.num_rows
        staged.append(w.set_column(1, "_cdc_version", pa.array(range(versions, versions + n), w.column(1).type)))
        versions += n
    lake: dict[Any, tuple[int, dict[str, Any] | None]] = {}
    for w in staged:
        land(lake, w)
    if staged:
        land(lake, staged[min(replay, len(staged) - 1)])  # a replay of an older window
    landed = {k: (r["country"], r["email"]) for k, (_, r) in lake.items() if r is not None}
    expected = {k: (r["country"], None if r["email"] is None else hmac.new(KEY, r["email"].encode(),
                                                                        hashlib.sha256).hexdigest())
                for k, r in source.items() if r["country"] == "DE"}
    assert landed == expected


def test_the_hash_key_comes_from_an_environment_variable_or_a_connections_password() -> None:
    import json

    from cdc_core.model.transforms import read_key

    with pytest.raises(ValidationError, match="one of them"):
        TransformConfig(hash_key={"env": "K", "conn_id": "pii"}, tables=[{"match": "s.t", "hash": ["a"]}])
    by_conn = TransformConfig(hash_key={"conn_id": "pii_key"}, tables=[{"match": "s.t", "hash": ["a"]}])
    conn = json.dumps({"conn_type": "generic", "password": "p" * 24})
    assert read_key(by_conn, "p", environ={"AIRFLOW_CONN_PII_KEY": conn}) == b"p" * 24
    with pytest.raises(ConfigError, match="connection 'pii_key' is not defined"):
        read_key(by_conn, "p", environ={})
    short = json.dumps({"conn_type": "generic", "password": "short"})
    with pytest.raises(ConfigError, match="password of connection 'pii_key' holds fewer than 16 bytes"):
        read_key(by_conn, "p", environ={"AIRFLOW_CONN_PII_KEY": short})
    # A plan whose rules hash nothing needs no key, even when the configured one is missing.
    plain = resolve(TransformConfig(hash_key={"env": "MISSING"}, tables=[{"match": "s.t", "mask": {"a": "null"}}]),
                    "p", environ={})
    assert plain.key is None and plain.recorded() == plain.recorded()


def test_a_bad_rule_in_the_file_names_the_file_the_pipeline_and_the_key(tmp_path: Any) -> None:
    import json

    from cdc_core.model.config import load_config

    path = tmp_path / "pipelines.yaml"
    for rule, key, message in (
        ({"match": "s.t", "filter": "id = (SELECT 1)"}, "transform.tables[0].filter", "Subquery"),
        ({"match": "s.t", "compute": {"x": "NOW()"}}, "transform.tables[0].compute", "not supported"),
        ({"match": "s.t", "mask": {"c": "scramble"}}, "transform.tables[0].mask.c", "keep_last_4"),
        ({"match": "s.t", "hash": ["c"]}, "transform", "no key is configured"),
    ):
        path.write_text(json.dumps({"pipelines": [{"name": "shop", "source": {"conn_id": "x"},
                                                   "tables": {"include": ["s.*"]}, "transform": {"tables": [rule]}}]}))
        with pytest.raises(ConfigError) as e:
            load_config(path)
        assert str(path) in str(e.value) and "pipeline 'shop'" in str(e.value), e.value
        assert key in str(e.value) and message in str(e.value), e.value


def test_the_compiled_hmac_kernel_agrees_with_hashlib_on_every_length_and_key() -> None:
    """cdc_core/model/_hmac.c (built by setup.py) against hmac+hashlib: lengths around the block boundaries
    (55, 56, 63, 64, 119, 120, ...), empty values, keys shorter and longer than a block, and a sliced array."""
    import random

    from cdc_core.model import transforms

    if transforms._native is None:
        pytest.skip("the compiled kernel is not built (no C compiler): hashing uses hashlib")
    rnd = random.Random(7)
    values = [bytes(rnd.randrange(256) for _ in range(n)) for n in [*range(0, 200), 1000, 4096]]
    native = transforms._native
    backends = ["portable", *(["openssl"] if native.backend() == "openssl" else [])]
    try:
        for backend, key in itertools.product(backends, (b"k" * 16, b"x" * 64, bytes(range(200)))):
            native.set_backend(backend)  # OpenSSL's block function where found, and the portable one
            make = transforms._hex_hmac(key)
            got = make(pa.array(values, pa.binary())).to_pylist()
            assert got == [hmac.new(key, v, hashlib.sha256).hexdigest() for v in values], backend
            sliced = pa.array(values, pa.binary()).slice(50, 60)  # an array with an offset
            assert make(sliced).to_pylist() == [hmac.new(key, v, hashlib.sha256).hexdigest() for v in values[50:110]]
    finally:
        native.set_backend(backends[-1])
    text = pa.array(["a@x.io", None, "a@x.io", "ü"])
    assert transforms._hex_hmac(KEY)(text).to_pylist() == [
        hmac.new(KEY, b"a@x.io", hashlib.sha256).hexdigest(), None,
        hmac.new(KEY, b"a@x.io", hashlib.sha256).hexdigest(), hmac.new(KEY, "ü".encode(), hashlib.sha256).hexdigest()]


def test_without_the_compiled_kernel_hashing_gives_the_same_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.model import transforms

    values = pa.array(["a@x.io", None, "b@y.io", "a@x.io"])
    expected = [None if v is None else hmac.new(KEY, v.encode(), hashlib.sha256).hexdigest()
                for v in values.to_pylist()]
    monkeypatch.setattr(transforms, "_native", None)
    assert transforms._hex_hmac(KEY)(values).to_pylist() == expected
