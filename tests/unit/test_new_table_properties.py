"""The properties a new lake table starts with, whichever writer creates it (spark_apps.merge.tables)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def test_new_tables_checkpoint_their_log_every_ten_commits_unless_the_user_says_otherwise() -> None:
    """delta-rs checkpoints every 100 commits by default (Spark every 10); every table the product creates
    says 10, whichever writer creates it, and a table_options property wins."""
    from cdc_core.model.retention import PROP_CHECKPOINT_INTERVAL
    from spark_apps.merge.tables import TableOptions, new_table_properties

    plain = new_table_properties("s.t", {"id"}, TableOptions.from_dict("s.t", {}), {"delta.x": "1"})
    assert plain[PROP_CHECKPOINT_INTERVAL] == "10" and plain["delta.x"] == "1"
    no_dv = new_table_properties("s.t", {"id"}, TableOptions.from_dict("s.t", {}), deletion_vectors=False)
    assert no_dv[PROP_CHECKPOINT_INTERVAL] == "10"
    own = TableOptions.from_dict("s.t", {"properties": {PROP_CHECKPOINT_INTERVAL: "50"}})
    assert new_table_properties("s.t", {"id"}, own)[PROP_CHECKPOINT_INTERVAL] == "50"
