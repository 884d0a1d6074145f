"""A reference model of the state, history and change-log tables (cdc_core.model.output_modes) in plain Python,
written from the rules, not from the merge job: whatever windows, replays and backfills deliver a change stream,
the lake must equal the model of the stream itself.

A change is (op, row, version, commit time); the stream is in binlog order (increasing versions). An update's before
image (op B) comes just before its update, with its version: only the change log keeps it.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.staged_builder import VersionClock

Change = tuple[str, dict[str, Any], int, dt.datetime]


@dataclass
class Version:
    row: dict[str, Any]
    op: str
    valid_from: int
    valid_from_ts: dt.datetime
    last_version: int
    valid_to: int | None = None
    valid_to_ts: dt.datetime | None = None


@dataclass
class Model:
    key: tuple[str, ...]
    track: tuple[str, ...] = ()  # empty: every column but the key
    state: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    history: list[Version] = field(default_factory=list)
    changelog: list[tuple[str, dict[str, Any], int]] = field(default_factory=list)
    _current: dict[tuple[Any, ...], Version] = field(default_factory=dict)

    def k(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.key)

    def tracked(self, row: dict[str, Any]) -> tuple[Any, ...]:
        cols = self.track or tuple(sorted(c for c in row if c not in self.key))
        return tuple(row.get(c) for c in cols)

    def apply(self, stream: Sequence[Change]) -> Model:
        for op, row, version, ts in stream:
            key = self.k(row)
            self.changelog.append((op, dict(row), version))
            if op == "B":
                continue
            cur = self._current.get(key)
            if op == "D":
                self.state.pop(key, None)
                if cur is not None:
                    cur.valid_to, cur.valid_to_ts = version, ts
                    del self._current[key]
                continue
            self.state[key] = dict(row)
            if cur is not None and self.tracked(cur.row) == self.tracked(row):
                cur.row, cur.last_version = dict(row), version  # folded in: no new version
                continue
            if cur is not None:
                cur.valid_to, cur.valid_to_ts = version, ts
            new = Version(dict(row), op, version, ts, version)
            self.history.append(new)
            self._current[key] = new
        return self


def random_stream(rng: random.Random, clock: Callable[[], int], n: int, *, before_images: bool = False) -> list[Change]:
    """n changes over 5 ids: inserts of absent ids, updates (some changing only `visits`, some nothing), deletes;
    `before_images`: each update preceded by its before image (op B, not counted in n)."""
    live: dict[int, dict[str, Any]] = {}
    out: list[Change] = []
    while sum(c[0] != "B" for c in out) < n:
        i = rng.randrange(5)
        version = clock()
        ts = VersionClock.commit_ts(version)
        if i not in live:
            live[i] = {"id": i, "tier": rng.choice(["gold", "silver", None]), "visits": rng.randrange(3)}
            out.append(("I", dict(live[i]), version, ts))
        elif rng.random() < 0.2:
            out.append(("D", live.pop(i), version, ts))
        else:
            row = dict(live[i])
            if before_images:
                out.append(("B", dict(row), version, ts))
            pick = rng.random()
            if pick < 0.4:
                row["visits"] += 1
            elif pick < 0.8:
                row["tier"] = rng.choice(["gold", "silver", "bronze", None])
            live[i] = row  # else: an update that changes nothing
            out.append(("U", dict(row), version, ts))
    return out


def whole_updates(changes: Sequence[Change], at: int) -> int:
    """`at`, moved back to before a before image whose update it would cut away (one rows event: never split)."""
    return at - 1 if 0 < at < len(changes) and changes[at - 1][0] == "B" else at
