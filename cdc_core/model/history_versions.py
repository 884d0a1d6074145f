"""The history's versions of the keys a window touches, recomputed in plain Python (cdc_core.model.output_modes):
what `spark_apps.merge.outputs.history_rows` computes with Spark, for windows and histories small enough to hold
in memory (cdc_core.lake.history_merge lands them with delta-rs). A pure function of the lake's rows and the
window's changes, so a replay, or a backfill re-delivering changes the lake holds, gives the same rows.

Events per key, in (version, rank, ordinal) order: the lake's versions (`open`), the deletes the lake's closed
versions imply (`close`, at their valid_to, unless another version opens there), the window's changes (`change`,
or `close` for a delete) less those the lake already holds (those at a version where the lake has an event). An
open or change event opens a version unless the previous event is a change or version with the same tracked
values (NULLs equal, as SQL's `<=>`: then it folds into that version); a close ends the current version.
`cleared`: the (version, commit time) of DDL that removed every row: a close of every key the lake holds a current
version of, or the window changed, there.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_core.model.manifest import COL_COMMIT_TS, COL_OP, COL_ORDINAL, COL_VERSION, COL_WINDOW_SEQ, OP_DELETE
from cdc_core.model.output_modes import (
    COL_IS_CURRENT,
    COL_LAST_VERSION,
    COL_VALID_FROM,
    COL_VALID_FROM_VERSION,
    COL_VALID_TO,
    COL_VALID_TO_VERSION,
    OP_CLEARED,
)

OPEN, CLOSE, CHANGE = "open", "close", "change"  # a version the lake holds, a delete, any other change
RANK_LAKE, RANK_CLOSED, RANK_WINDOW = 0, 1, 2  # order at equal versions: the lake's rows first

Row = dict[str, Any]


@dataclass(frozen=True)
class _Event:
    ver: int
    rank: int
    ordinal: int
    kind: str
    ts: dt.datetime | None
    op: str | None
    value_version: int | None  # the version its values are of (a lake version's newest change)
    cap_ver: int | None = None  # a lake version's end as the lake holds it
    cap_ts: dt.datetime | None = None
    row: Row | None = None  # the values (a close carries none)

    @property
    def order(self) -> tuple[int, int, int]:
        return self.ver, self.rank, self.ordinal


def same_values(a: Any, b: Any) -> bool:
    """Equal as SQL's `<=>` compares them: NULLs equal, NaN equal to NaN, -0.0 equal to 0.0."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def touched_keys(window: Iterable[Row], key: Sequence[str]) -> set[tuple[Any, ...]]:
    return {tuple(r[k] for k in key) for r in window}


def recompute(  # noqa: PLR0917 (the recompute's inputs, as history_rows takes them)
    window: Sequence[Row], lake: Sequence[Row] | None, key: Sequence[str], values: Sequence[str],
    tracked: Sequence[str], seq: int, cleared: Sequence[tuple[int, dt.datetime]] = (),
) -> list[Row]:
    """The history rows of the keys `window` touches (and, with `cleared`, of every key the lake holds a current
    version of). `window`: the window's changes (the value columns, `_cdc_op`, `_cdc_version`, `_cdc_ordinal`,
    `_cdc_commit_ts`); `lake`: the history's rows (at least those of the touched keys; None: no history yet)."""
    events: dict[tuple[Any, ...], list[_Event]] = {}

    def add(k: tuple[Any, ...], e: _Event) -> None:
        events.setdefault(k, []).append(e)

    for r in window:
        kind = CLOSE if r[COL_OP] == OP_DELETE else CHANGE
        add(tuple(r[k] for k in key), _Event(r[COL_VERSION], RANK_WINDOW, r[COL_ORDINAL], kind, r[COL_COMMIT_TS],
                                            r[COL_OP], r[COL_VERSION], row={c: r[c] for c in values}))
    if cleared:
        keys = touched_keys(window, key) | {tuple(r[k] for k in key) for r in lake or () if r[COL_IS_CURRENT]}
        for k in keys:
            for at, ts in cleared:
                add(k, _Event(at, RANK_WINDOW, 0, CLOSE, ts, OP_CLEARED, None))
    if lake:
        low = min((e.ver for es in events.values() for e in es), default=None)
        held: dict[tuple[Any, ...], list[Row]] = {}
        for r in lake:
            k = tuple(r[c] for c in key)
            if k in events and (low is None or r[COL_VALID_TO_VERSION] is None or r[COL_VALID_TO_VERSION] >= low):
                held.setdefault(k, []).append(r)
        for k, rows in held.items():
            starts = {r[COL_VALID_FROM_VERSION] for r in rows}
            for r in rows:
                add(k, _Event(r[COL_VALID_FROM_VERSION], RANK_LAKE, 0, OPEN, r[COL_VALID_FROM], r[COL_OP],
                              r[COL_LAST_VERSION], r[COL_VALID_TO_VERSION], r[COL_VALID_TO],
                              row={c: r[c] for c in values}))
                end = r[COL_VALID_TO_VERSION]
                if end is not None and not (end in starts and end != r[COL_VALID_FROM_VERSION]):
                    add(k, _Event(end, RANK_CLOSED, 0, CLOSE, r[COL_VALID_TO], OP_DELETE, None))
    out: list[Row] = []
    for k, es in events.items():
        out.extend(_versions(k, sorted(es, key=lambda e: e.order), key, values, tracked, seq, bool(lake)))
    return out


def _versions(  # noqa: PLR0917
    k: tuple[Any, ...], events: list[_Event], key: Sequence[str], values: Sequence[str], tracked: Sequence[str],
    seq: int, from_lake: bool,
) -> list[Row]:
    if from_lake:  # the window's changes the lake holds already: at a version where the lake has an event
        kept, lake_ver = [], None
        for e in events:
            if e.rank < RANK_WINDOW:
                lake_ver = e.ver
                kept.append(e)
            elif lake_ver is None or lake_ver != e.ver:
                kept.append(e)
        events = kept
    opens: list[bool] = []
    for i, e in enumerate(events):
        prev = events[i - 1] if i else None
        may_fold = e.kind == CHANGE and prev is not None and prev.kind != CLOSE
        folds = may_fold and prev is not None and all(
            same_values((e.row or {}).get(c), (prev.row or {}).get(c)) for c in tracked)
        opens.append(e.kind == OPEN or (e.kind == CHANGE and not folds))
    out: list[Row] = []
    for i, e in enumerate(events):
        if not opens[i]:
            continue
        # The version this event opens: it and the folded changes after it, up to the next boundary.
        j = i + 1
        while j < len(events) and not opens[j] and events[j].kind != CLOSE:
            j += 1
        members = [x for x in events[i:j] if x.kind != CLOSE]
        nxt = events[j] if j < len(events) else None
        newest = max(members, key=lambda x: (x.value_version if x.value_version is not None else -1, x.order))
        last = max((x.value_version for x in members if x.value_version is not None), default=None)
        keep_cap = e.cap_ver is not None and (nxt is None or e.cap_ver <= nxt.ver)
        to_ver = e.cap_ver if keep_cap else (nxt.ver if nxt is not None else None)
        to_ts = e.cap_ts if keep_cap else (nxt.ts if nxt is not None else None)
        row = dict(newest.row or {})
        row.update(zip(key, k, strict=True))
        row.update({
            COL_OP: e.op, COL_VALID_FROM: e.ts, COL_VALID_FROM_VERSION: e.ver, COL_VALID_TO: to_ts,
            COL_VALID_TO_VERSION: to_ver, COL_IS_CURRENT: to_ver is None, COL_LAST_VERSION: last,
            COL_WINDOW_SEQ: seq,
        })
        out.append(row)
    return out
