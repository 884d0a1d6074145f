"""The `cdc` command's argument handling and `cdc validate`'s rules, without services: one spelling per concept
(the pipeline as the argument, `--source`, `--max-windows`; the old spellings still work with a warning), the
exit code of a partial failure, and the offline checks of a group pipeline's sources and routes."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from cdc_core import cli
from cdc_core.model import errors
from cdc_core.model.errors import ConfigError, PartialFailure, SourceError
from cdc_core.model.sources import Route, command_target
from cdc_core.model.validation import (
    SourceServer,
    idle_routes,
    landings,
    route_lines,
    routes_missing_literal_includes,
    server_address,
    shared_servers,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "sources", "expected", "warned"),
    [
        ("shop", (), ("shop", ()), False),
        ("shop", ("eu1", "eu2"), ("shop", ("eu1", "eu2")), False),
        ("shop.eu1", (), ("shop", ("eu1",)), True),  # the old spelling still names the source
        ("shop.eu1", ("eu1",), ("shop", ("eu1",)), True),
    ],
)
def test_the_argument_is_the_pipeline_and_the_old_dotted_spelling_warns(
    name: str, sources: tuple[str, ...], expected: tuple[str, tuple[str, ...]], warned: bool
) -> None:
    pipeline, chosen, warning = cli.source_spelling(name, sources)
    assert (pipeline, chosen) == expected
    assert (warning is not None) == warned
    if warning:
        assert "deprecated" in warning and f"`shop --source {chosen[0]}`" in warning


def test_a_source_named_two_ways_differently_is_a_usage_error() -> None:
    with pytest.raises(click.UsageError, match=r"names source 'eu1' but --source says eu2"):
        cli.source_spelling("shop.eu1", ("eu2",))


def test_hints_name_a_source_the_way_the_cli_takes_it() -> None:
    assert command_target("orders") == "orders"
    assert command_target("shop.eu1") == "shop --source eu1"


@pytest.mark.parametrize(
    ("max_windows", "given", "old", "expected", "warned"),
    [
        (100, False, None, 100, False),
        (7, True, None, 7, False),
        (100, False, 3, 3, True),  # only the old name: it is used, with a warning
        (3, True, 3, 3, True),  # both, agreeing
    ],
)
def test_max_windows_and_its_old_name(max_windows: int, given: bool, old: int | None, expected: int,
                                      warned: bool) -> None:
    value, warning = cli.windows_spelling(max_windows, given, old)
    assert value == expected and (warning is not None) == warned
    if warning:
        assert "--windows is deprecated" in warning and "--max-windows" in warning


def test_max_windows_and_windows_disagreeing_is_a_usage_error() -> None:
    with pytest.raises(click.UsageError, match=r"--windows is the old name of --max-windows"):
        cli.windows_spelling(5, True, 3)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [["run", "p"], ["backfill", "p", "--from", "2026-01-01T00:00:00Z"],
                                     ["snapshot", "p"]])
def test_the_old_windows_flag_still_parses_warns_and_is_hidden(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "absent.yaml")  # the command stops at the config, after its arguments were read
    code, _, err = run_cli(capsys, "--config", missing, *command, "--windows", "2")
    assert code == ConfigError.exit_code
    assert "--windows is deprecated: write --max-windows" in err and "configuration file not found" in err
    code, _, err = run_cli(capsys, "--config", missing, *command, "--windows", "2", "--max-windows", "3")
    assert code == 2 and "--windows is the old name of --max-windows" in err
    code, _, err = run_cli(capsys, "--config", missing, *command, "--windows", "many")
    assert code == 2 and "Invalid value for '--windows'" in err
    code, out, _ = run_cli(capsys, *command[:1], "--help")
    assert code == 0 and "--max-windows" in out and "--windows" not in out.replace("--max-windows", "")


def test_per_source_commands_all_take_source(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "status", "resolve", "backfill", "snapshot", "verify", "versions"):
        code, out, _ = run_cli(capsys, command, "--help")
        assert code == 0 and "--source" in out, command


def test_lease_has_show_and_break(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "lease", "--help")
    assert code == 0 and "show" in out and "break" in out


def test_run_failure_tells_a_partial_failure_from_a_total_one() -> None:
    from cdc_core.run.group import GroupRun, SourceFailed
    from cdc_core.run.loop import WindowsRun

    down = SourceError("shard c is down")
    assert cli.run_failure(WindowsRun("shop")) is None
    assert cli.run_failure(GroupRun("shop", {"a": WindowsRun("shop.a")})) is None
    total = GroupRun("shop", {"c": SourceFailed("SourceError: down")}, ("c",), down)
    assert cli.run_failure(total) is down  # keeps its own exit code (3)
    partial = GroupRun("shop", {"a": WindowsRun("shop.a"), "b": WindowsRun("shop.b"),
                                "c": SourceFailed("SourceError: down")}, ("c",), down)
    assert partial.to_dict()["sources"]["c"] == {"error": "SourceError: down"} and partial.to_dict()["failed"] == ["c"]
    got = cli.run_failure(partial)
    assert isinstance(got, PartialFailure) and got.exit_code == 9
    assert "1 of 3 sources failed (c: SourceError: down); a, b landed" in str(got)
    assert "cdc run shop --source c" in str(got)


def test_partial_failure_has_an_exit_code_of_its_own() -> None:
    codes = [cls.exit_code for cls in (errors.CdcError, ConfigError, SourceError, errors.CoordinationError,
                                       errors.Fenced, errors.StagingError, errors.SchemaConflict, errors.LakeError,
                                       errors.LeaseHeld, PartialFailure)]
    assert len(codes) == len(set(codes)), codes


# ------------------------------------------------------------------------------------------ validate


def test_sources_on_one_server_are_found_by_connection_address_or_identity() -> None:
    assert server_address("LocalHost", 3306) == server_address("127.0.0.1", 3306) == "127.0.0.1:3306"
    assert shared_servers("shop", [SourceServer("a", "c1", "db1:3306"), SourceServer("b", "c2", "db2:3306")]) == []
    assert shared_servers("shop", [SourceServer("a", "c1"), SourceServer("b", "c2")]) == []  # unknown: not compared
    same_conn = shared_servers("shop", [SourceServer("a", "c1"), SourceServer("b", "c1")])
    assert len(same_conn) == 1 and "sources 'a' and 'b' read the same connection 'c1'" in same_conn[0]
    same_addr = shared_servers("shop", [SourceServer("a", "c1", "127.0.0.1:3306"), SourceServer("b", "c2", None),
                                        SourceServer("c", "c3", "127.0.0.1:3306")])
    assert len(same_addr) == 1 and "'a' and 'c' read the same server 127.0.0.1:3306" in same_addr[0]
    same_uuid = shared_servers("shop", [SourceServer("a", "c1", "h1:1", "u-1"), SourceServer("b", "c2", "h2:1", "u-1")])
    assert len(same_uuid) == 1 and "server_uuid u-1" in same_uuid[0]


ROUTES = (Route(r"shop_[0-9]+\.(orders)", r"shop.\1"), Route(r"shop_00\.orders", "never.taken"),
          Route(r"crm\.typo", "crm.all", key="primary_key"))


def test_routes_and_where_each_table_lands() -> None:
    assert route_lines(ROUTES)[0] == r"route 1: 'shop_[0-9]+\\.(orders)' -> shop.\1 (key: source)"
    tables = [("shop_01", "orders"), ("shop_00", "orders"), ("crm", "users")]
    lines = [landing.line() for landing in landings(ROUTES, "eu1", tables)]
    assert lines == [
        "source eu1: crm.users -> crm.users (unrouted)",
        "source eu1: shop_00.orders -> shop.orders (route 1)",
        "source eu1: shop_01.orders -> shop.orders (route 1)",
    ]
    # Route 2 only matches what route 1 already takes; route 3 matches nothing captured.
    assert idle_routes(ROUTES, tables) == [1, 2]
    derived = landings(ROUTES, "eu1", [("crm", "typo")])[0]
    assert derived.derived and derived.line().endswith("(route 3, derived: one row per primary key)")
    assert landings(ROUTES, None, [("crm", "typo")])[0].derived is False  # single source: nothing to derive


def test_offline_a_route_is_known_idle_only_when_every_include_is_literal() -> None:
    assert routes_missing_literal_includes(ROUTES, ["shop_00.orders", "crm.users"], []) == [1, 2]
    assert routes_missing_literal_includes(ROUTES, ["shop_00.orders", "crm.typo"], ["crm.typo"]) == [1, 2]
    assert routes_missing_literal_includes(ROUTES, ["shop_*.orders"], []) is None


def group_config(tmp_path: Path, routes: list[dict[str, str]], include: list[str]) -> Path:
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": "shop", "sources": [{"id": "eu1", "conn_id": "shard_one"}, {"id": "eu2", "conn_id": "shard_two"}],
        "tables": {"include": include}, "routes": routes, "staging_root": str(tmp_path / "staging"),
        "lake_root": str(tmp_path / "lake"), "schedule": None,
    }]}))
    return config


def connection(host: str, port: int) -> str:
    return json.dumps({"conn_type": "mysql", "host": host, "port": port, "login": "u", "password": "p"})


def test_validate_offline_prints_routes_and_refuses_two_sources_on_one_host_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = group_config(tmp_path, [{"from": r"shop_[0-9]+\.orders", "to": "shop.orders"}], ["shop_*.orders"])
    monkeypatch.setenv("AIRFLOW_CONN_SHARD_ONE", connection("db1", 3306))
    monkeypatch.delenv("AIRFLOW_CONN_SHARD_TWO", raising=False)  # not at hand: not compared, not an error
    code, out, err = run_cli(capsys, "--config", str(config), "validate")
    assert code == 0, err
    assert "ok: pipeline 'shop'" in out and "sources=['eu1', 'eu2']" in out
    assert r"route 1: 'shop_[0-9]+\\.orders' -> shop.orders (key: source)" in out

    monkeypatch.setenv("AIRFLOW_CONN_SHARD_TWO", connection("LOCALHOST", 3306))
    monkeypatch.setenv("AIRFLOW_CONN_SHARD_ONE", connection("127.0.0.1", 3306))
    code, out, err = run_cli(capsys, "--config", str(config), "validate")
    assert code == ConfigError.exit_code
    assert "sources 'eu1' and 'eu2' read the same server 127.0.0.1:3306" in err and "1 problem(s)" in err


def test_validate_offline_warns_about_a_route_no_literal_include_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = group_config(tmp_path, [{"from": r"shop_[0-9]+\.order", "to": "shop.orders"}], ["shop_00.orders"])
    monkeypatch.delenv("AIRFLOW_CONN_SHARD_ONE", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_SHARD_TWO", raising=False)
    code, _, err = run_cli(capsys, "--config", str(config), "validate")
    assert code == 0, err
    assert "warning: pipeline 'shop': route 1" in err and "takes no included table" in err


def test_config_path_error_is_a_config_error_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDC_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "validate")
    assert code == ConfigError.exit_code and "config/pipelines.yaml: configuration file not found" in err



def test_a_group_pipeline_command_without_a_source_says_how_to_name_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(group_config(tmp_path, [], ["shop_*.orders"]))
    code, _, err = run_cli(capsys, "--config", config, "resolve", "shop")
    assert code == 2
    assert "say which source with --source (its sources: eu1, eu2), e.g. `cdc resolve shop --source eu1`" in err
    code, _, err = run_cli(capsys, "--config", config, "verify", "shop.nope")  # the old spelling, a wrong source
    assert code == ConfigError.exit_code
    assert "'shop.nope' is deprecated: write `shop --source nope`" in err and "has no source 'nope'" in err
