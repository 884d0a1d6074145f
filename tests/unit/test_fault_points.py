"""The fault points' half-way trigger (cdc_core.model.faults.midway), with the point itself recorded."""

from __future__ import annotations

from dataclasses import dataclass

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
