"""Bad input, fuzzed: any value in any configuration key, and any timestamp a form or flag may send, is
either accepted or refused with a ConfigError whose every line names the file, the pipeline and the key,
and never echoes a credential. Nothing else may escape (no KeyError, TypeError, OverflowError, ...).
"""

from __future__ import annotations

import copy
import math
from datetime import UTC, date, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cdc_core.model.config import load_config, parse_utc_timestamp
from cdc_core.model.errors import ConfigError

pytestmark = pytest.mark.unit

BASE: dict[str, Any] = {"name": "orders", "source": {"conn_id": "src"}, "tables": {"include": ["shop.*"]}}
KEYS: list[tuple[str, ...]] = [
    ("name",), ("source",), ("source", "conn_id"), ("tables",), ("tables", "include"), ("tables", "exclude"),
    ("tables", "full_row_key"), ("start",), ("start", "kind"), ("start", "at"), ("start", "gtid"), ("start", "file"),
    ("start", "offset"), ("zookeeper",), ("zookeeper", "hosts"), ("zookeeper", "root"), ("zookeeper", "auth_env"),
    ("lease_seconds",), ("staging_root",), ("lake_root",), ("spark",), ("spark", "conn_id"),
    ("spark", "shuffle_partitions"), ("spark", "driver_memory"), ("spark", "conf"), ("caps",), ("caps", "max_events"),
    ("caps", "max_bytes"), ("caps", "max_transactions"), ("schedule",), ("delete_mode",),
    ("timestamp_fallback_seconds",), ("retries",), ("staging_retention_hours",), ("table_options",), ("lake_rot",),
]
NEAR_MISSES = [
    "", " ", "-1", "0", "1e309", "shop.*", "shop", "a.b.c", "`a.b`.*", "`a", "@hourly", "@never", "* * * * *",
    "*/10 * * *", "/x", "/x/", "x", "s3://bucket/lake", "nope://x", "2026-01-01T00:00:00Z", "2026-01-01", "0-1-42",
    "mysql-bin.000001", "mysql-bin", "127.0.0.1:2181", "host", "hard", "soft", "1g", "lots", "orders\n", "🙂",
    "a" * 300,
]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(), st.text(max_size=30),
    st.sampled_from(NEAR_MISSES),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=6,
)


def mutated(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    entry = copy.deepcopy(BASE)
    node = entry
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value
    return {"pipelines": [entry]}


def load(tmp_path: Path, doc: Any) -> Any:
    p = tmp_path / "pipelines.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return load_config(p)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # messages show the file relative to the working directory


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(KEYS), values)
@example(("name",), "orders\n")  # `$` in a regex accepts a trailing newline: refused
@example(("zookeeper", "root"), "/cdc\n")
@example(("start", "at"), float("inf"))
@example(("tables", "include"), ["`shop.x`.*", "shop.`a b`"])
def test_any_value_in_any_key_is_accepted_or_refused_clearly(tmp_path: Path, key: tuple[str, ...], value: Any) -> None:
    try:
        cfg = load(tmp_path, mutated(key, value))
    except ConfigError as e:
        lines = str(e).splitlines()
        assert lines, "an empty error"
        for line in lines:
            assert line.startswith("pipelines.yaml: "), line
            who = "pipeline " if key[0] == "name" else "pipeline 'orders'"  # a bad name is shown as given
            assert who in line or "pipelines[0]" in line or "pipelines:" in line, line
        top = key[0] if key[0] != "lake_rot" else "lake_rot: unknown key (did you mean 'lake_root'?)"
        assert top in str(e), (key, str(e))
        return
    p = cfg.pipeline(cfg.names[0])
    assert p.name == cfg.names[0] and "\n" not in p.name
    assert p.tables.include and all(isinstance(t, str) for t in p.tables.include)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (("zookeeper", "auth_env"), "cdc:S3CRET-zk-pass"),  # the credential instead of the variable's name
        (("lake_root",), "s3://AKIAXYZ:S3CRET-zk-pass@bucket/lake"),
        (("staging_root",), "abfs://user:S3CRET-zk-pass@container/x"),
        (("source", "password"), "S3CRET-zk-pass"),
        (("zookeeper", "password"), "S3CRET-zk-pass"),
        (("spark", "conf"), {"spark.hadoop.fs.s3a.secret.key": "S3CRET-zk-pass"}),
    ],
)
def test_a_credential_in_the_file_is_refused_without_being_echoed(
    tmp_path: Path, key: tuple[str, ...], value: Any
) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, mutated(key, value))
    assert "S3CRET" not in str(e.value), str(e.value)
    assert key[0] in str(e.value)


def test_a_table_pattern_names_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, mutated(("tables", "include"), ["my.db.orders"]))
    assert "pipelines.yaml: pipeline 'orders': tables.include: 'my.db.orders' is not of the form" in str(e.value)
    assert "`my.db`.`order items`" in str(e.value)  # how to quote a name with dots
    cfg = load(tmp_path, mutated(("tables", "include"), ["`my.db`.orders", "`a b`.`c``d`"]))
    assert cfg.pipeline("orders").tables.include == ["`my.db`.orders", "`a b`.`c``d`"]


def test_table_options_are_keyed_by_table_id(tmp_path: Path) -> None:
    cfg = load(tmp_path, mutated(("table_options",), {"`shop`.`orders`": {}, "`a.b`.c": {"change_data_feed": True}}))
    assert set(cfg.pipeline("orders").table_options) == {"shop.orders", "`a.b`.c"}  # what the merge job looks up
    with pytest.raises(ConfigError, match="name one table exactly"):
        load(tmp_path, mutated(("table_options",), {"shop.ord*": {}}))


# ------------------------------------------------------------------------------------------ timestamps

zones = st.sampled_from([None, UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=12, minutes=30))])
timestamps = st.one_of(
    st.text(max_size=40),
    st.from_regex(
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?)?(Z|[+-][0-9]{2}:?[0-9]{2})?",
        fullmatch=True,
    ),
    st.from_regex(r"[0-9]{1,25}(\.[0-9]{0,5})?", fullmatch=True),
    st.floats(), st.integers(min_value=-(2**80), max_value=2**80), st.booleans(), st.none(),
    st.datetimes(timezones=zones), st.dates(), st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(timestamps)
@example("9999-12-31T23:59:59-14:00")
@example("0001-01-01T00:00:00+14:00")
@example("nan")
@example("x" * 10_000)
def test_any_timestamp_parses_to_a_finite_instant_or_a_config_error(value: Any) -> None:
    try:
        seconds = parse_utc_timestamp(value, what="pipeline 'orders': backfill start_ts")
    except ConfigError as e:
        msg = str(e)
        assert msg.startswith("pipeline 'orders': backfill start_ts: "), msg
        assert "e.g. " in msg or "such as " in msg, msg  # says what a valid value looks like
        assert len(msg) < 400, "a huge input is not echoed whole"
        return
    assert isinstance(seconds, float) and math.isfinite(seconds)


def test_naive_and_date_only_timestamps_are_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"has no timezone; write it in UTC with a Z suffix, e\.g\. 2026-11-20T08"):
        parse_utc_timestamp("2026-11-20T08:00:00", "start_ts")
    with pytest.raises(ConfigError, match=r"is a date without a time and timezone; write e\.g\. 2026-11-20T00:00:00Z"):
        parse_utc_timestamp(date(2026, 11, 20), "start_ts")
    with pytest.raises(ConfigError, match="not a usable point in time"):
        parse_utc_timestamp(float("nan"), "start_ts")
