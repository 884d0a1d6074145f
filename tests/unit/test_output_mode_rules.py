"""The output-mode rules a table's options state (cdc_core.model.output_modes): what is accepted, and which
columns a history tracks."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_core.model.output_modes import OutputModes, tracked_columns

pytestmark = pytest.mark.unit


def test_state_alone_is_the_default_and_keeps_nothing_else() -> None:
    modes = OutputModes.parse("shop.t", None, None)
    assert not modes.any and modes.names() == ["state"]


@pytest.mark.parametrize(
    ("outputs", "track", "said"),
    [
        (["history"], None, "outputs must include 'state'"),
        ("history", None, "outputs must be a list"),
        (["state", "log"], None, "unknown outputs ['log']"),
        (["state", "changelog"], ["a"], "track only applies to a history table"),
        (["state", "history"], ["a", ""], "track must list distinct, non-empty column names"),
    ],
)
def test_bad_outputs_say_what_to_write(outputs: object, track: object, said: str) -> None:
    with pytest.raises(ValueError, match=r"'shop\.t': ") as e:
        OutputModes.parse("shop.t", outputs, track)
    assert said in str(e.value)


def test_every_column_but_the_key_is_tracked_unless_the_options_name_some() -> None:
    columns = ["id", "Tier", "visits", "_cdc_source"]
    assert tracked_columns((), columns, ("id",)) == ["Tier", "visits", "_cdc_source"]
    assert tracked_columns(("tier",), columns, ("id",)) == ["Tier"]  # spelled as the table spells it
    with pytest.raises(ValueError, match=r"track names \['email'\], which the table does not have"):
        tracked_columns(("email",), columns, ("id",))


def test_which_schema_changes_a_history_follows_clears_on_or_refuses() -> None:
    from cdc_core.model import schema_changes as sc
    from cdc_core.model.output_modes import clears_rows, not_followed
    from cdc_core.model.schema_window import ROLE_GHOST, ROLE_MOVED_IN, ROLE_MOVED_OUT, ROLE_OWN, ROLE_SWAP

    assert clears_rows(sc.TRUNCATE_TABLE, ROLE_OWN) and clears_rows(sc.DROP_TABLE, ROLE_OWN)
    assert clears_rows(sc.RENAME_TABLE, ROLE_MOVED_OUT) and clears_rows(sc.CREATE_TABLE, ROLE_OWN, replace=True)
    assert not clears_rows(sc.CREATE_TABLE, ROLE_OWN) and not clears_rows(sc.ADD_COLUMN, ROLE_OWN)
    for kind in (sc.ADD_COLUMN, sc.DROP_COLUMN, sc.RENAME_COLUMN, sc.MODIFY_COLUMN, sc.TRUNCATE_TABLE):
        assert not_followed(kind, ROLE_OWN) is None, kind
    assert not_followed(sc.ADD_COLUMN, ROLE_SWAP) is None
    # An online schema-change tool: its swap is followed; each of its ghost's changes is judged as the table's own.
    assert not_followed(sc.RENAME_TABLE, ROLE_SWAP) is None
    for kind in (sc.CREATE_TABLE_LIKE, sc.ADD_COLUMN, sc.MODIFY_COLUMN, sc.DROP_TABLE):
        assert not_followed(kind, ROLE_GHOST) is None, kind
    assert "changes the key" in str(not_followed(sc.PRIMARY_KEY, ROLE_GHOST))
    assert "without row events (truncate table)" in str(not_followed(sc.TRUNCATE_TABLE, ROLE_GHOST))
    assert "changes the key" in str(not_followed(sc.PRIMARY_KEY, ROLE_OWN))
    assert "takes rows another table had (moved in)" in str(not_followed(sc.RENAME_TABLE, ROLE_MOVED_IN))
    assert "without row events (truncate partition)" in str(not_followed(sc.TRUNCATE_PARTITION, ROLE_OWN))


def test_each_output_has_one_place_beside_the_state() -> None:
    from cdc_core.model.layout import changelog_uri, history_uri, output_uri, table_uri

    root = "s3a://lake/cdc"
    assert output_uri(root, "state", "shop", "orders") == table_uri(root, "shop", "orders") == "s3a://lake/cdc/shop/orders"
    assert output_uri(root, "history", "shop", "orders") == history_uri(root, "shop", "orders")
    assert output_uri(root, "changelog", "shop", "orders") == changelog_uri(root, "shop", "orders")
    assert len({output_uri(root, o, "shop", "orders") for o in ("state", "history", "changelog")}) == 3
    with pytest.raises(ValueError, match="one of state, history, changelog"):
        output_uri(root, "audit", "shop", "orders")


def test_the_plan_records_which_tables_stage_before_images_and_routes_find_them(tmp_path: Path) -> None:
    """Source tables whose lake table keeps a change log stage updates' before images: the plan records the lake
    tables (a replayed window stages the same whatever the configuration says by then), and a routed source table
    counts by the lake table it lands in. A plan without the record (older, or no change log) stages none."""
    import dataclasses
    import json

    from cdc_core.capture.source import SourceParams
    from cdc_core.model.config import load_config
    from cdc_core.run.pipeline import Pipeline
    from tests.support.staged_builder import make_plan

    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": "shop", "sources": [{"id": "eu1", "conn_id": "shard_one"}, {"id": "eu2", "conn_id": "shard_two"}],
        "tables": {"include": ["shop_*.orders", "crm.*"]},
        "routes": [{"from": r"shop_[0-9]+\.orders", "to": "shop.orders"}],
        "table_options": {"shop.orders": {"outputs": ["state", "changelog"]},
                          "crm.users": {"outputs": ["state", "changelog"]},
                          "crm.notes": {"outputs": ["state", "history"]}},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
    }]}))
    p = Pipeline(config=load_config(config).pipeline("shop"), source=SourceParams("db1", 3306, "u", "p"),
                 coordinator=None, source_id="eu1")  # type: ignore[arg-type]
    settings = p.capture_settings()
    assert settings["before_images"] == ("crm.users", "shop.orders")
    wanted = p.plan_before_images(dataclasses.replace(make_plan("shop", 1), capture=settings))
    assert wanted is not None
    assert [wanted(s, t) for s, t in (("shop_07", "orders"), ("crm", "users"), ("crm", "notes"), ("shop", "x"))] == [
        True, True, False, False]
    older = {k: v for k, v in settings.items() if k != "before_images"}
    assert p.plan_before_images(dataclasses.replace(make_plan("shop", 1), capture=older)) is None
