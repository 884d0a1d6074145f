"""The pipelines file: a valid file loads with defaults merged; every kind of mistake is refused with a
message naming the file, the pipeline, the key path and the problem."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cdc_core.model.config import PipelineConfig, load_config, parse_utc_timestamp
from cdc_core.model.config.loader import config_path
from cdc_core.model.config.pipelines import CdcConfig
from cdc_core.model.errors import ConfigError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

MINIMAL_PIPELINE = """
  - name: {name}
    source: {{conn_id: src}}
    tables: {{include: ["shop.*"]}}
"""


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Messages show the file relative to the working directory: run where the files are.
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str, name: str = "pipelines.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


def load_error(tmp_path: Path, text: str) -> str:
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    return str(exc.value)


def one_pipeline(tmp_path: Path, extra: str = "", defaults: str = "") -> str:
    """A file with one pipeline 'orders' whose entry gets `extra` lines (indented like its keys)."""
    body = "pipelines:\n  - name: orders\n    source: {conn_id: src}\n    tables: {include: [\"shop.*\"]}\n"
    body += textwrap.indent(textwrap.dedent(extra).strip("\n"), "    ") + "\n" if extra else ""
    head = "defaults:\n" + textwrap.indent(textwrap.dedent(defaults).strip("\n"), "  ") + "\n" if defaults else ""
    return head + body


# ------------------------------------------------------------------------------------ valid files


def test_shipped_local_config_loads() -> None:
    cfg = load_config(ROOT / "config" / "pipelines.local.yaml")
    demo = cfg.pipeline("demo")
    assert cfg.names == ["demo"]
    assert demo.source.conn_id == "cdc_source_local"
    assert demo.tables.include == ["demo.*"]
    assert demo.start.kind == "current"
    assert demo.zookeeper.hosts == "127.0.0.1:22181"
    # Relative roots are relative to the file's directory: config/../.local/... = <repo>/.local/...
    assert demo.staging_root == str(ROOT / ".local" / "staging")
    assert demo.lake_root == str(ROOT / ".local" / "lake")
    assert demo.window_caps().max_events == 200_000


def test_defaults_merge_into_pipelines_key_by_key(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        defaults:
          zookeeper: {hosts: "zk1:2181,zk2:2181/chroot", root: /cdc, auth_env: CDC_ZK_AUTH}
          lease_seconds: 300
          staging_root: staging
          lake_root: s3a://bucket/lake
          spark: {conn_id: spark_cluster, conf: {spark.executor.memory: 2g, spark.sql.ansi.enabled: true}}
          caps: {max_events: 1000}
          schedule: "@hourly"
          delete_mode: soft
          table_options:
            shop.orders: {partition_by: [region], properties: {delta.appendOnly: false}}
        pipelines:
          - name: orders
            source: {conn_id: shop_db}
            tables: {include: ["shop.orders", "shop.order_*"], exclude: ["shop.order_tmp"], full_row_key: ["shop.log"]}
            caps: {max_bytes: 1048576}
            spark: {conf: {spark.executor.memory: 4g}}
            table_options:
              shop.orders: {change_data_feed: true}
            start: {kind: gtid, gtid: "0-1-42"}
          - name: audit-2
            source: {conn_id: audit_db}
            tables: {include: ["audit.*"]}
            schedule: null
            continue_while_behind: false
            staging_root: /abs/staging
            start: {kind: timestamp, at: 2026-11-20T08:00:00+02:00}
        """,
    )
    cfg = load_config(p)
    assert isinstance(cfg, CdcConfig)
    assert cfg.names == ["orders", "audit-2"]
    orders = cfg.pipeline("orders")
    assert isinstance(orders, PipelineConfig)
    # nested mappings merge key by key
    assert orders.caps.model_dump() == {"max_events": 1000, "max_bytes": 1048576, "max_transactions": 50_000}
    assert orders.spark.conf == {"spark.executor.memory": "4g", "spark.sql.ansi.enabled": "true"}
    assert orders.spark.conn_id == "spark_cluster"
    assert orders.spark.shuffle_partitions == 2  # built-in default
    assert orders.table_options == {
        "shop.orders": {
            "partition_by": ["region"], "change_data_feed": True, "properties": {"delta.appendOnly": "false"}
        }
    }
    assert orders.zookeeper.auth_env == "CDC_ZK_AUTH"
    assert orders.lease_seconds == 300
    assert orders.delete_mode == "soft"
    assert orders.schedule == "@hourly"
    assert orders.staging_root == str(tmp_path / "staging")
    assert orders.lake_root == "s3a://bucket/lake"
    assert orders.tables.exclude == ["shop.order_tmp"]
    assert orders.start.spec_kwargs() == {"kind": "gtid", "gtid": "0-1-42"}
    assert orders.continue_while_behind is True  # built-in default: a pipeline behind catches up at once
    audit = cfg.pipeline("audit-2")
    assert audit.schedule is None
    assert audit.continue_while_behind is False
    assert audit.staging_root == "/abs/staging"
    assert audit.table_options["shop.orders"]["change_data_feed"] is False  # the default's entry, untouched
    assert audit.start.at == datetime(2026, 11, 20, 6, 0, tzinfo=UTC)
    assert audit.start.spec_kwargs() == {"kind": "timestamp", "at": datetime(2026, 11, 20, 6, tzinfo=UTC).timestamp()}
    # table options are plain dicts: the merge job gets them as JSON
    assert json.loads(json.dumps(orders.table_options)) == orders.table_options


def test_all_start_kinds(tmp_path: Path) -> None:
    cases = {
        "{kind: current}": {"kind": "current"},
        "{kind: gtid, gtid: '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5'}": {
            "kind": "gtid", "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"
        },
        "{kind: file, file: mysql-bin.000042, offset: 1337}": {
            "kind": "file", "file": "mysql-bin.000042", "offset": 1337
        },
        "{kind: file, file: mysql-bin.000042}": {"kind": "file", "file": "mysql-bin.000042", "offset": 4},
        "{kind: file_timestamp, file: mysql-bin.000042, at: '2026-11-20T08:00:00Z'}": {
            "kind": "file_timestamp", "file": "mysql-bin.000042", "at": 1795161600.0
        },
        "{kind: timestamp, at: 2026-11-20T08:00:00Z}": {"kind": "timestamp", "at": 1795161600.0},
    }
    for start, expected in cases.items():
        p = write(tmp_path, one_pipeline(tmp_path, f"start: {start}"))
        assert load_config(p).pipeline("orders").start.spec_kwargs() == expected, start


def test_start_spec_builds_the_resolvers_value(tmp_path: Path) -> None:
    resolver = pytest.importorskip("cdc_core.capture.resolver")
    p = write(tmp_path, one_pipeline(tmp_path, "start: {kind: timestamp, at: 2026-11-20T08:00:00Z}"))
    spec = load_config(p).pipeline("orders").start_spec()
    assert isinstance(spec, resolver.StartSpec)
    assert spec.kind == "timestamp"


def test_path_from_env_and_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write(tmp_path, one_pipeline(tmp_path), name="mine.yaml")
    monkeypatch.setenv("CDC_CONFIG", str(p))
    assert config_path() == p
    assert load_config().names == ["orders"]
    assert config_path(tmp_path / "other.yaml") == tmp_path / "other.yaml"  # the argument wins
    monkeypatch.delenv("CDC_CONFIG")
    monkeypatch.chdir(tmp_path)  # the default is the current directory's, never the installed package's
    assert config_path() == tmp_path / "config" / "pipelines.yaml"
    assert config_path(environ={"CDC_CONFIG": str(p)}) == p


def test_missing_default_file_names_every_way_to_give_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDC_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_config()
    msg = str(e.value)
    assert msg.startswith("config/pipelines.yaml: configuration file not found (the path is the default")
    assert "--config FILE or CDC_CONFIG=FILE" in msg
    monkeypatch.setenv("CDC_CONFIG", str(tmp_path / "gone.yaml"))
    with pytest.raises(ConfigError, match=r"gone\.yaml: configuration file not found \(the path is \$CDC_CONFIG\)"):
        load_config()


def test_parse_utc_timestamp_forms() -> None:
    assert parse_utc_timestamp("2026-11-20T08:00:00Z") == 1795161600.0
    assert parse_utc_timestamp("2026-11-20T09:00:00+01:00") == 1795161600.0
    assert parse_utc_timestamp(datetime(2026, 11, 20, 8, tzinfo=UTC)) == 1795161600.0
    assert parse_utc_timestamp(1795161600) == 1795161600.0
    assert parse_utc_timestamp("1795161600") == 1795161600.0
    for bad in ("2026-11-20T08:00:00", "2026-11-20", "yesterday", datetime(2026, 11, 20), True):
        with pytest.raises(ConfigError, match="start_ts"):
            parse_utc_timestamp(bad, what="start_ts")


# --------------------------------------------------------------------------------------- rejections


def test_example_message_format(tmp_path: Path) -> None:
    msg = load_error(tmp_path, one_pipeline(tmp_path, "caps: {max_events: -1}"))
    assert msg == "pipelines.yaml: pipeline 'orders': caps.max_events: must be > 0 (got -1)"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("caps: {max_evnts: 5}", "pipeline 'orders': caps.max_evnts: unknown key (did you mean 'max_events'?)"),
        ("colour: blue", "pipeline 'orders': colour: unknown key"),
        ("start: {kind: current, when: now}", "start.when: unknown key; allowed here: kind, gtid, file, offset, at"),
        ("spark: {conf: {spark.x: 1}, master: yarn}", "spark.master: unknown key; allowed here: conn_id, shuffle_"),
        ("lease_seconds: 0", "pipeline 'orders': lease_seconds: must be > 0 (got 0)"),
        ("lease_seconds: '600'", "pipeline 'orders': lease_seconds: must be an integer (got '600')"),
        ("retries: -1", "pipeline 'orders': retries: must be >= 0 (got -1)"),
        ("continue_while_behind: 'yes'", "pipeline 'orders': continue_while_behind: must be true or false"),
        ("delete_mode: purge", "pipeline 'orders': delete_mode: must be one of 'hard' or 'soft' (got 'purge')"),
        ("schedule: every hour", "pipeline 'orders': schedule: must be a 5-field cron expression"),
        ("schedule: '@fortnightly'", "pipeline 'orders': schedule: unknown preset"),
        ("spark: {shuffle_partitions: 0}", "spark.shuffle_partitions: must be > 0 (got 0)"),
        ("spark: {driver_memory: lots}", "spark.driver_memory: must be a JVM memory size"),
        ("spark: {conf: {executor.memory: 2g}}", "spark.conf: Spark configuration keys start with 'spark.'"),
        ("zookeeper: {root: cdc/}", "zookeeper.root: must be an absolute ZooKeeper path"),
        ("zookeeper: {hosts: 'zk1'}", "zookeeper.hosts: expected host:port"),
        ("zookeeper: {auth_env: 'cdc:s3cret'}", "zookeeper.auth_env: must be the NAME of an environment variable"),
        ("lake_root: 's3://AKIA:abc@bucket/lake'", "lake_root: the URL embeds credentials"),
        ("lake_root: 'nosuch://bucket/lake'", "lake_root: 'nosuch' is not a storage protocol"),
        ("staging_root: ''", "staging_root: must not be empty"),
        ("table_options: {shop.orders: {partition_by: [a], zorder: [b]}}", "['shop.orders'].zorder: unknown key"),
        ("table_options: {shop.orders: {change_data_feed: maybe}}", "change_data_feed: must be true or false"),
        ("table_options: {orders: {}}", "table_options: 'orders' is not of the form schema.table"),
        ("table_options: {shop.*: {}}", "'shop.*': table options name one table exactly"),
        ("table_options: {shop.orders: {partition_by: [a, a]}}", "partition_by must list distinct"),
        ("table_options: {shop.orders: {outputs: [history]}}", "outputs must include 'state'"),
        ("table_options: {shop.orders: {outputs: [state, scd2]}}", "unknown outputs ['scd2']; each of outputs is one"),
        ("table_options: {shop.orders: {outputs: [state, history, history]}}", "outputs lists ['history'"),
        ("table_options: {shop.orders: {outputs: [state, changelog], track: [tier]}}",
         "track only applies to a history table"),
        ("table_options: {shop.orders: {outputs: [state, history], track: [tier, tier]}}", "track must list distinct"),
        ("start: {kind: yesterday}", "start.kind: must be one of 'current', 'gtid', 'file', 'file_timestamp' or 't"),
        ("start: {kind: gtid}", "start: kind 'gtid' needs gtid"),
        ("start: {kind: gtid, gtid: 'not-a-gtid'}", "start.gtid: malformed MariaDB GTID"),
        ("start: {kind: file, offset: 4}", "start: kind 'file' needs file"),
        ("start: {kind: file, file: binlog}", "start.file: binlog file name 'binlog' has no numeric suffix"),
        ("start: {kind: file, file: mysql-bin.000001, offset: 2}", "start.offset: must be >= 4 (got 2)"),
        ("start: {kind: file_timestamp, file: mysql-bin.000001}", "start: kind 'file_timestamp' needs at"),
        ("start: {kind: current, gtid: '0-1-2'}", "start: kind 'current' takes nothing else; remove gtid"),
        ("start: {kind: timestamp, at: '2026-11-20T08:00:00'}", "start.at: '2026-11-20T08:00:00' has no timezone"),
        ("start: {kind: timestamp, at: 2026-11-20 08:00:00}", "start.at: '2026-11-20T08:00:00' has no timezone"),
        ("start: {kind: timestamp, at: 2026-11-20}", "start.at: '2026-11-20' is a date without a time and timezone"),
        ("start: {kind: timestamp, at: 'soon'}", "start.at: 'soon' is not an ISO-8601 timestamp"),
    ],
)
def test_rejections(tmp_path: Path, extra: str, expected: str) -> None:
    msg = load_error(tmp_path, one_pipeline(tmp_path, extra))
    assert msg.startswith("pipelines.yaml: pipeline 'orders': "), msg
    assert len(msg.splitlines()) == 1, msg
    assert expected in msg, msg


@pytest.mark.parametrize(
    ("tables", "expected"),
    [
        ("{include: [orders]}", "tables.include: 'orders' is not of the form schema.table"),
        ("{include: [a.b.c]}", "tables.include: 'a.b.c' is not of the form schema.table"),
        ("{include: []}", "tables.include: must not be empty"),
        ("{include: ['a.b'], exclude: ['x']}", "tables.exclude: 'x' is not of the form schema.table"),
        ("{include: ['a.b'], full_row_key: ['x y.z']}", "tables.full_row_key: 'x y.z' is not of the form"),
        ("{exclude: ['a.b']}", "tables.include: required key is missing"),
        ("[a.b]", "tables: must be a mapping"),
        ("{include: [a.b]}\n    source: {conn_id: src, host: db1}", "source.host: unknown key; allowed here: conn_id"),
    ],
)
def test_table_patterns(tmp_path: Path, tables: str, expected: str) -> None:
    source = "" if "source:" in tables else "    source: {conn_id: src}\n"
    text = f"pipelines:\n  - name: orders\n{source}    tables: {tables}\n"
    msg = load_error(tmp_path, text)
    assert f"pipeline 'orders': {expected}" in msg, msg


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "pipelines:\n  - name: orders\n    source: {conn_id: src, password: hunter2}\n"
            "    tables: {include: [a.b]}\n",
            "pipeline 'orders': source.password: secrets do not belong in the configuration file; put the source's "
            "credentials in the Airflow connection named by source.conn_id",
        ),
        (
            "defaults:\n  spark: {conf: {spark.hadoop.fs.s3a.secret.key: abc}}\npipelines:"
            + MINIMAL_PIPELINE.format(name="a"),
            "defaults: spark.conf['spark.hadoop.fs.s3a.secret.key']: secrets do not belong",
        ),
        (
            "defaults:\n  zookeeper: {password: x}\npipelines:" + MINIMAL_PIPELINE.format(name="a"),
            "defaults: zookeeper.password: secrets do not belong",
        ),
        (
            "pipelines:\n  - name: orders\n    source: {conn_id: src}\n    tables: {include: [a.b]}\n"
            "    table_options: {a.b: {properties: {my.client_secret: x}}}\n",
            "pipeline 'orders': table_options['a.b'].properties['my.client_secret']: secrets do not belong",
        ),
    ],
)
def test_password_looking_keys_are_refused(tmp_path: Path, text: str, expected: str) -> None:
    msg = load_error(tmp_path, text)
    assert expected in msg, msg
    assert "hunter2" not in msg and "abc" not in msg.split(":")[-1]


def test_secret_is_reported_and_the_rest_still_validated(tmp_path: Path) -> None:
    msg = load_error(
        tmp_path,
        "pipelines:\n  - name: orders\n    source: {conn_id: src, password: hunter2}\n"
        "    tables: {include: [orders]}\n",
    )
    lines = msg.splitlines()
    assert any("source.password: secrets do not belong" in line for line in lines)
    assert any("tables.include: 'orders' is not of the form schema.table" in line for line in lines)
    assert "hunter2" not in msg


def test_duplicate_pipeline_names(tmp_path: Path) -> None:
    msg = load_error(tmp_path, "pipelines:" + MINIMAL_PIPELINE.format(name="a") + MINIMAL_PIPELINE.format(name="a"))
    assert "pipeline 'a': duplicate pipeline name (also pipelines[0]); names must be unique" in msg


@pytest.mark.parametrize("name", ["Orders", "has space", "x" * 65, "dots.not.allowed", "''"])
def test_bad_pipeline_names(tmp_path: Path, name: str) -> None:
    msg = load_error(tmp_path, "pipelines:" + MINIMAL_PIPELINE.format(name=name))
    assert "name: must be 1-64 characters of a-z, 0-9, _ and -" in msg, msg


def test_duplicate_yaml_keys(tmp_path: Path) -> None:
    msg = load_error(tmp_path, one_pipeline(tmp_path, "lease_seconds: 10\nlease_seconds: 20"))
    assert "pipelines.yaml" in msg and "duplicate key 'lease_seconds'" in msg


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    msg = load_error(tmp_path, "pipelines:\n  - name: [unclosed\n")
    assert "pipelines.yaml" in msg and "line" in msg and "invalid YAML" in msg


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"configuration file not found.*CDC_CONFIG"):
        load_config(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "pipelines: must be a non-empty list"),
        ("pipelines: []\n", "pipelines: must be a non-empty list"),
        ("- a\n- b\n", "the top level must be a mapping"),
        ("pipeline:\n  - name: a\n", "pipeline: unknown top-level key (did you mean 'pipelines'?)"),
        ("defaults: 3\n" + "pipelines:" + MINIMAL_PIPELINE.format(name="a"), "defaults: must be a mapping"),
        ("pipelines:\n  - just-a-string\n", "pipelines[0]: must be a mapping"),
        ("pipelines:\n  - tables: {include: [a.b]}\n", "pipelines[0]: name: required key is missing"),
    ],
)
def test_file_shape(tmp_path: Path, text: str, expected: str) -> None:
    msg = load_error(tmp_path, text)
    assert expected in msg, msg


def test_defaults_errors_are_reported_once(tmp_path: Path) -> None:
    text = "defaults:\n  caps: {max_events: 0}\npipelines:" + "".join(MINIMAL_PIPELINE.format(name=n) for n in "ab")
    msg = load_error(tmp_path, text)
    assert msg.count("caps.max_events: must be > 0 (got 0)") == 1
    assert "defaults: caps.max_events" in msg


def test_every_problem_is_listed(tmp_path: Path) -> None:
    text = (
        "pipelines:"
        + MINIMAL_PIPELINE.format(name="a").replace(
            "conn_id: src", "conn_id: src}\n    delete_mode: x\n    caps: {max_bytes: 0"
        )
        + "  - name: b\n    source: {conn_id: src}\n    tables: {include: [nodot]}\n"
    )
    msg = load_error(tmp_path, text)
    assert "pipeline 'a': delete_mode:" in msg
    assert "pipeline 'a': caps.max_bytes: must be > 0" in msg
    assert "pipeline 'b': tables.include:" in msg
    assert len(msg.splitlines()) == 3


def test_unknown_pipeline_lookup(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "pipelines:" + MINIMAL_PIPELINE.format(name="orders")))
    expected = r"no pipeline named 'order' \(did you mean 'orders'\?\); the file declares: orders"
    with pytest.raises(ConfigError, match=expected):
        cfg.pipeline("order")


def test_models_are_immutable(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "pipelines:" + MINIMAL_PIPELINE.format(name="orders")))
    with pytest.raises(Exception, match="frozen"):
        cfg.pipeline("orders").lease_seconds = 1  # type: ignore[misc]


def test_zero_dates_default_to_refuse_null_is_a_choice_and_anything_else_is_refused(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, one_pipeline(tmp_path))).pipeline("orders").zero_dates == "refuse"
    chosen = load_config(write(tmp_path, one_pipeline(tmp_path, defaults="zero_dates: 'null'")))
    assert chosen.pipeline("orders").zero_dates == "null"
    err = load_error(tmp_path, one_pipeline(tmp_path, extra="zero_dates: keep"))
    assert "zero_dates" in err and "refuse" in err and "null" in err


def test_a_table_keeps_its_history_and_change_log_when_its_options_say_so(tmp_path: Path) -> None:
    extra = "table_options: {shop.orders: {outputs: [state, history, changelog], track: [tier]}}"
    cfg = load_config(write(tmp_path, one_pipeline(tmp_path, extra)))
    opts = cfg.pipeline("orders").table_options["shop.orders"]
    assert opts["outputs"] == ["state", "history", "changelog"] and opts["track"] == ["tier"]
    # The merge job reads the same options back (they travel as JSON in its spec).
    from spark_apps.merge.tables import parse_table_options

    modes = parse_table_options(json.dumps({"shop.orders": opts}))["shop.orders"].outputs
    assert (modes.history, modes.changelog, modes.track) == (True, True, ("tier",))
    assert modes.names() == ["state", "history", "changelog"]
