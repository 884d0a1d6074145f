"""The window plan: an immutable description of one binlog range a run will land.

Once a plan is stored in ZooKeeper (see `coordination`), whoever holds the pipeline's lease next
replays exactly this plan: same start, same end, same table filter. A zombie and its successor can
therefore only ever apply identical changes, and Delta's idempotent writes (app id = pipeline,
version = `seq`) make the second application a no-op.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass, field
from typing import Any

from cdc_core.model.errors import ConfigError
from cdc_core.model.positions import BinlogPosition

WINDOW_PLAN_FORMAT = 1

KIND_STREAM = "stream"  # the scheduled pipeline, from the cursor forward
KIND_BACKFILL = "backfill"  # an explicit replay of an older range (does not move the cursor)
KIND_SNAPSHOT = "snapshot"  # a chunk of an initial load
WINDOW_KINDS = (KIND_STREAM, KIND_BACKFILL, KIND_SNAPSHOT)


@dataclass(frozen=True)
class WindowCaps:
    """Upper bounds for one window; a transaction larger than a cap is still taken whole."""

    max_events: int = 200_000
    max_bytes: int = 256 * 1024 * 1024
    max_transactions: int = 50_000


@dataclass(frozen=True)
class WindowPlan:
    pipeline: str
    seq: int
    start: BinlogPosition
    end: BinlogPosition
    kind: str = KIND_STREAM
    transactions: int = 0
    events: int = 0
    bytes: int = 0
    planned_at: float = 0.0
    # Backfill/snapshot only: restrict to these `schema.table` names (None = the pipeline's tables).
    tables: tuple[str, ...] | None = None
    # Free-form, informational (e.g. the run that planned it, the resolver rule that chose the start).
    info: dict[str, Any] = field(default_factory=dict)
    # The capture settings in force when the window was planned ({"include", "exclude", "full_row_key"}
    # pattern lists), so that re-staging the window reads exactly the same tables even if the
    # configuration changed meanwhile. None in plans written before this field existed.
    capture: dict[str, tuple[str, ...]] | None = None

    def __post_init__(self) -> None:
        if self.seq < 1:
            raise ConfigError(f"window sequence numbers start at 1, got {self.seq}")
        if self.kind not in WINDOW_KINDS:
            raise ConfigError(f"unknown window kind {self.kind!r}")
        if self.end < self.start:
            raise ConfigError(
                f"window {self.seq} of {self.pipeline!r} ends ({self.end}) before it starts ({self.start})"
            )

    @property
    def is_empty(self) -> bool:
        # A snapshot chunk reads rows, not a binlog range: it is never "nothing to do".
        return self.kind != KIND_SNAPSHOT and self.transactions == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": WINDOW_PLAN_FORMAT,
            "pipeline": self.pipeline,
            "seq": self.seq,
            "kind": self.kind,
            "start": self.start.to_dict(),
            "end": self.end.to_dict(),
            "transactions": self.transactions,
            "events": self.events,
            "bytes": self.bytes,
            "planned_at": self.planned_at,
            "tables": list(self.tables) if self.tables is not None else None,
            "info": self.info,
            "capture": {k: list(v) for k, v in self.capture.items()} if self.capture is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WindowPlan:
        if d.get("format") != WINDOW_PLAN_FORMAT:
            raise ConfigError(f"unsupported window plan format {d.get('format')!r}")
        return cls(
            pipeline=d["pipeline"],
            seq=int(d["seq"]),
            kind=d.get("kind", KIND_STREAM),
            start=BinlogPosition.from_dict(d["start"]),
            end=BinlogPosition.from_dict(d["end"]),
            transactions=int(d.get("transactions", 0)),
            events=int(d.get("events", 0)),
            bytes=int(d.get("bytes", 0)),
            planned_at=float(d.get("planned_at", 0.0)),
            tables=tuple(d["tables"]) if d.get("tables") is not None else None,
            info=dict(d.get("info") or {}),
            capture={k: tuple(v) for k, v in d["capture"].items()} if d.get("capture") is not None else None,
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | builtins.bytes) -> WindowPlan:
        return cls.from_dict(json.loads(text))

    def label(self) -> str:
        return (
            f"{self.pipeline}#{self.seq} [{self.start.file}:{self.start.offset} .. {self.end.file}:{self.end.offset})"
        )
