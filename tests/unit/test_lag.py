"""Lag means changes not yet in the lake (issue 15 §2): pure, over SourceFacts."""

from __future__ import annotations

import dataclasses

import pytest

from cdc_core.capture.lag import lag
from cdc_core.capture.source import SourceEnd, SourceFacts
from cdc_core.model.positions import BinlogFile, BinlogPosition, ServerIdentity

pytestmark = pytest.mark.unit

SERVER = ServerIdentity("mariadb", 1)
# A rotation after the last landed transaction: the new file holds only its header events.
FACTS = SourceFacts(
    identity=SERVER, version="10.11",
    binlogs=(BinlogFile("mysql-bin.000001", 2444), BinlogFile("mysql-bin.000002", 385)),
    end=SourceEnd("mysql-bin.000002", 385, "0-1-11"), gtid_executed="0-1-11", gtid_purged="", log_bin=True,
    binlog_format="ROW", binlog_row_image="FULL", binlog_row_metadata="FULL",
)


def test_bytes_without_a_transaction_are_no_lag_on_a_gtid_source() -> None:
    cursor = BinlogPosition("mysql-bin.000001", 2400, SERVER, "0-1-11", 1_000.0)
    assert lag(cursor, FACTS) == {"bytes": 0, "seconds": 0.0, "binlog_bytes": 44 + 385}


def test_a_transaction_not_landed_is_lag() -> None:
    cursor = BinlogPosition("mysql-bin.000001", 2000, SERVER, "0-1-10", 1_000.0)
    got = lag(cursor, FACTS)
    assert got["bytes"] == got["binlog_bytes"] == 444 + 385 and got["seconds"] > 0


def test_without_gtids_or_on_another_server_the_bytes_count() -> None:
    cursor = BinlogPosition("mysql-bin.000001", 2400, SERVER, None, 1_000.0)
    assert lag(cursor, FACTS)["bytes"] == 429
    other = dataclasses.replace(cursor, gtid="0-1-11", server=ServerIdentity("mariadb", 2))
    assert lag(other, FACTS)["bytes"] == 429


def test_at_the_end_and_unknown() -> None:
    cursor = BinlogPosition("mysql-bin.000002", 385, SERVER, "0-1-11", 1_000.0)
    assert lag(cursor, FACTS) == {"bytes": 0, "seconds": 0.0, "binlog_bytes": 0}
    assert lag(None, FACTS) == {"bytes": None, "seconds": None, "binlog_bytes": None}


def test_a_lag_above_the_configured_threshold_is_a_breached_alert() -> None:
    from cdc_core.run.status import lag_alerts

    assert lag_alerts({"seconds": 30.0, "bytes": 10}, None) == []
    assert lag_alerts({"seconds": 30.0, "bytes": 10}, 60) == []
    assert lag_alerts({"seconds": None, "bytes": None}, 60) == []  # nothing landed yet: no figure to judge
    (alert,) = lag_alerts({"seconds": 125.4, "bytes": 900}, 60)
    assert (alert["alert"], alert["seconds"], alert["max_seconds"]) == ("lag", 125.4, 60)
    assert "above alerts.max_lag_seconds (60 s)" in alert["message"]
    from cdc_core.model.config import PipelineConfig

    base = {"name": "p", "source": {"conn_id": "src"}, "tables": {"include": ["db.*"]}}
    assert PipelineConfig.model_validate({**base, "alerts": {"max_lag_seconds": 900}}).alerts.max_lag_seconds == 900
    with pytest.raises(ValueError, match="greater than 0"):
        PipelineConfig.model_validate({**base, "alerts": {"max_lag_seconds": 0}})
