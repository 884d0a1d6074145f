"""The history's versions recomputed in plain Python (cdc_core.model.history_versions, which delta-rs lands for small
tables) against the reference model (tests/support/output_model.py): random change streams cut into windows at
random, some windows delivered again (replays), backfills re-delivering a suffix cut elsewhere, DDL that clears the
table; after every window the lake, kept as the history MERGE keeps it (keyed on key and valid-from version, a row
replaced when its end or newest change differ), equals the model of the stream given so far. Many seeds: no Spark."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest

from cdc_core.model.history_versions import recompute, same_values
from cdc_core.model.manifest import COL_COMMIT_TS, COL_OP, COL_ORDINAL, COL_VERSION
from cdc_core.model.output_modes import (
    COL_IS_CURRENT,
    COL_LAST_VERSION,
    COL_VALID_FROM,
    COL_VALID_FROM_VERSION,
    COL_VALID_TO,
    COL_VALID_TO_VERSION,
)
from tests.support.output_model import Change, Model, random_stream
from tests.support.staged_builder import VersionClock

pytestmark = pytest.mark.unit

VALUES = ("id", "tier", "visits")
EPOCH = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def _window_rows(changes: list[Change]) -> list[dict[str, Any]]:
    return [{**row, COL_OP: op, COL_VERSION: v, COL_ORDINAL: n, COL_COMMIT_TS: ts}
            for n, (op, row, v, ts) in enumerate(changes)]


class _Lake:
    """The history table as the MERGE keeps it."""

    def __init__(self, track: tuple[str, ...]) -> None:
        self.rows: dict[tuple[Any, int], dict[str, Any]] = {}
        self.track = track or ("tier", "visits")  # every column but the key
        self.seq = 0

    def land(self, changes: list[Change], seq: int | None = None) -> None:
        if seq is None:
            self.seq += 1
        got = recompute(_window_rows(changes), list(self.rows.values()) or None, ("id",), VALUES, self.track,
                        seq or self.seq)
        for r in got:
            at = (r["id"], r[COL_VALID_FROM_VERSION])
            have = self.rows.get(at)
            if have is None or (have[COL_VALID_TO_VERSION], have[COL_LAST_VERSION]) != (
                    r[COL_VALID_TO_VERSION], r[COL_LAST_VERSION]):
                self.rows[at] = r

    def equals(self, given: list[Change], track: tuple[str, ...]) -> None:
        ordered = sorted({c[2]: c for c in given}.values(), key=lambda c: c[2])
        model = Model(("id",), track).apply(ordered)
        got = sorted(((r["id"], r["tier"], r["visits"], r[COL_OP], r[COL_VALID_FROM_VERSION], r[COL_VALID_TO_VERSION],
                       r[COL_IS_CURRENT], r[COL_LAST_VERSION], r[COL_VALID_FROM], r[COL_VALID_TO])
                      for r in self.rows.values()), key=repr)
        want = sorted(((v.row["id"], v.row["tier"], v.row["visits"], v.op, v.valid_from, v.valid_to,
                        v.valid_to is None, v.last_version, v.valid_from_ts, v.valid_to_ts) for v in model.history),
                      key=repr)
        assert got == want


@pytest.mark.parametrize("seed", range(60))
def test_windows_replays_and_backfills_equal_the_model(seed: int) -> None:
    rng = random.Random(seed)
    track: tuple[str, ...] = rng.choice([(), ("tier",)])
    changes = random_stream(rng, VersionClock(), rng.randrange(5, 40))
    lake = _Lake(track)
    cuts = sorted(rng.sample(range(1, len(changes)), min(len(changes) - 1, rng.randrange(1, 5))))
    given: list[Change] = []
    for a, b in zip([0, *cuts], [*cuts, len(changes)], strict=True):
        lake.land(changes[a:b])
        given += changes[a:b]
        lake.equals(given, track)
        if rng.random() < 0.3:  # the same window again
            lake.land(changes[a:b], seq=lake.seq)
            lake.equals(given, track)
    since = rng.randrange(len(changes))
    split = rng.randrange(since, len(changes) + 1)
    for part in (changes[since:split], changes[split:]):  # a backfill: a suffix again, in new windows
        if part:
            lake.land(part)
            lake.equals(given, track)


def test_a_gap_filled_by_a_later_window_closes_the_version_before_it() -> None:
    """A window that misses a change (delivered later by a backfill) gives a history that the backfill repairs."""
    rng = random.Random(7)
    changes = random_stream(rng, VersionClock(), 20)
    lake = _Lake(())
    lake.land(changes[:5])
    lake.land(changes[10:])
    lake.land(changes[5:10])
    lake.equals(changes, ())


def test_a_cleared_table_closes_every_current_version_at_the_ddl() -> None:
    ts = EPOCH + dt.timedelta(seconds=5)
    rows = [{"id": 1, "tier": "a", "visits": 0, COL_OP: "I", COL_VALID_FROM: EPOCH, COL_VALID_FROM_VERSION: 10,
             COL_VALID_TO: None, COL_VALID_TO_VERSION: None, COL_IS_CURRENT: True, COL_LAST_VERSION: 10}]
    window = _window_rows([("I", {"id": 2, "tier": "b", "visits": 1}, 30, ts)])
    got = {r["id"]: r for r in recompute(window, rows, ("id",), VALUES, ("tier", "visits"), 3, [(20, ts)])}
    assert (got[1][COL_VALID_TO_VERSION], got[1][COL_IS_CURRENT]) == (20, False)  # closed by the TRUNCATE
    assert (got[2][COL_VALID_FROM_VERSION], got[2][COL_IS_CURRENT]) == (30, True)  # opened after it


def test_values_are_compared_as_sql_null_safe_equality() -> None:
    assert same_values(None, None) and not same_values(None, 0) and not same_values(0, None)
    assert same_values(-0.0, 0.0) and same_values(float("nan"), float("nan")) and not same_values(1.0, float("nan"))
    assert same_values(b"x", b"x") and not same_values("a", "b")
