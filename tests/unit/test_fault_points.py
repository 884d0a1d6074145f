"""The fault points: the half-way trigger (cdc_core.model.faults.midway), with the point itself recorded, and the
raise action."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from cdc_core.model import faults

pytestmark = pytest.mark.unit


@dataclass
class Batch:
    rows: int


@pytest.fixture
def fired(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(faults, "point", lambda name: seen.append((name, 0)))
    return seen


def test_fires_once_half_way_through_single_changes(fired) -> None:  # type: ignore[no-untyped-def]
    fired_at = []
    for _item in faults.midway(range(10), 10, "mid_stage"):
        fired_at.append(len(fired))
    assert [name for name, _ in fired] == ["mid_stage"]
    assert fired_at.index(1) == 5  # fired after the 5th item was handed over, before the 6th


def test_batches_count_their_rows(fired) -> None:  # type: ignore[no-untyped-def]
    out = list(faults.midway([Batch(3), Batch(3), Batch(3)], 10, "mid_stage"))
    assert len(out) == 3 and len(fired) == 1


def test_an_overestimate_fires_after_the_last_item(fired) -> None:  # type: ignore[no-untyped-def]
    # A window's event count includes GTID, table-map and commit events: rows may never reach half.
    out = list(faults.midway([Batch(1), Batch(1)], 40, "mid_stage"))
    assert len(out) == 2 and [n for n, _ in fired] == ["mid_stage"]


def test_nothing_read_fires_nothing(fired) -> None:  # type: ignore[no-untyped-def]
    assert list(faults.midway([], 40, "mid_stage")) == []
    assert fired == []


def test_a_point_can_raise_an_error_of_the_hierarchy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`CDC_FAULT_ACTION=raise:<Error>`: what the Spark job then says and exits with (the DAG tests' hook)."""
    from cdc_core.model.errors import ConfigError, Fenced

    monkeypatch.setenv("CDC_FAULT", "merge_start")
    monkeypatch.setenv("CDC_FAULT_ACTION", "raise:Fenced")
    with pytest.raises(Fenced, match="fault point merge_start: injected Fenced"):
        faults.point("merge_start")
    faults.point("mid_merge")  # not armed: nothing happens
    monkeypatch.setenv("CDC_FAULT_ACTION", "raise:ConfigError")
    monkeypatch.setenv("CDC_FAULT_ONCE", str(tmp_path / "fired"))
    with pytest.raises(ConfigError):
        faults.point("merge_start")
    faults.point("merge_start")  # fired once already
    monkeypatch.setenv("CDC_FAULT_ACTION", "raise:KeyError")
    monkeypatch.delenv("CDC_FAULT_ONCE")
    with pytest.raises(ValueError, match="not an error of the hierarchy"):
        faults.point("merge_start")
