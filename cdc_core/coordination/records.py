"""The persisted coordination records (lease, cursor, window records): frozen values with a format version."""


from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from time import time as _wall_clock
from typing import Any, Literal

from cdc_core.model.errors import ConfigError
from cdc_core.model.logfmt import iso_ms
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowPlan

log = logging.getLogger("cdc.coordination")

COORDINATION_FORMAT = 1
WindowState = Literal["planned", "acked"]
STATE_PLANNED: WindowState = "planned"
STATE_ACKED: WindowState = "acked"




def dumps(d: dict[str, Any]) -> bytes:
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode("utf-8")


def check_format(d: dict[str, Any], what: str) -> None:
    if d.get("format") != COORDINATION_FORMAT:
        raise ConfigError(
            f"unsupported {what} format {d.get('format')!r} (this version reads {COORDINATION_FORMAT}); "
            "a newer release wrote it: upgrade this one"
        )


# ------------------------------------------------------------------------------------------ values


@dataclass(frozen=True)
class LeaseGrant:
    """What a run holds while it works on a pipeline. Travels between tasks (XCom); no secrets.

    `token` is the lease node's czxid: it only grows, so it orders acquisitions; the Spark job and
    the logs carry it. `expires_at`/`acquired_at` are unix seconds by the acquirer's clock.
    """

    pipeline: str
    holder: str
    token: int
    expires_at: float
    acquired_at: float

    @property
    def expires_at_iso(self) -> str:
        return iso_ms(self.expires_at) or ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": COORDINATION_FORMAT,
            "pipeline": self.pipeline,
            "holder": self.holder,
            "token": self.token,
            "expires_at": self.expires_at,
            "acquired_at": self.acquired_at,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LeaseGrant:
        check_format(d, "lease grant")
        return cls(
            pipeline=str(d["pipeline"]),
            holder=str(d["holder"]),
            token=int(d["token"]),
            expires_at=float(d["expires_at"]),
            acquired_at=float(d["acquired_at"]),
        )


@dataclass(frozen=True)
class LeaseRecord:
    """The lease node's data. The token is not in it: it is the node's czxid."""

    holder: str
    acquired_at: float
    expires_at: float
    renewed_at: float
    # Random, not secret: lets an acquirer recognise the node it created inside a transaction.
    nonce: str = ""
    # The pipeline node's data version right after this acquisition (see "Why the lease node's data
    # version alone cannot fence" in PipelineCoordinator).
    epoch: int = 0
    # The holder's process identity (`cdc_core.model.holders.ProcessIdentity.to_dict()`, versioned on its
    # own) when the holder is a CLI process: lets a later CLI run on the same host recognise a dead
    # holder. Optional: absent for Airflow tasks and in records of older releases, which ignore it.
    process: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": COORDINATION_FORMAT,
            "holder": self.holder,
            "acquired_at": self.acquired_at,
            "expires_at": self.expires_at,
            "renewed_at": self.renewed_at,
            "nonce": self.nonce,
            "epoch": self.epoch,
        }
        if self.process is not None:
            d["process"] = self.process
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LeaseRecord:
        check_format(d, "lease record")
        return cls(
            holder=str(d["holder"]),
            acquired_at=float(d["acquired_at"]),
            expires_at=float(d["expires_at"]),
            renewed_at=float(d["renewed_at"]),
            nonce=str(d.get("nonce", "")),
            epoch=int(d.get("epoch", 0)),
            process=d["process"] if isinstance(d.get("process"), dict) else None,
        )


@dataclass(frozen=True)
class LeaseInfo:
    """The lease as a monitor sees it."""

    pipeline: str
    holder: str
    token: int
    acquired_at: float
    expires_at: float
    renewed_at: float
    version: int  # the lease node's data version (changes on every renew)
    epoch: int = 0  # the acquisition's fencing epoch (the pipeline node's data version)
    process: dict[str, Any] | None = None  # the holder's process identity, when it recorded one

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        now = _wall_clock() if now is None else now
        return {
            "pipeline": self.pipeline,
            "holder": self.holder,
            "token": self.token,
            "token_hex": f"{self.token:#x}",
            "acquired_at": self.acquired_at,
            "acquired_at_iso": iso_ms(self.acquired_at),
            "expires_at": self.expires_at,
            "expires_at_iso": iso_ms(self.expires_at),
            "renewed_at": self.renewed_at,
            "version": self.version,
            "epoch": self.epoch,
            "expired": self.expired(now),
            "process": self.process,
        }


@dataclass(frozen=True)
class BackfillState:
    """An explicit replay of an older binlog range; it never moves the stream position."""

    position: BinlogPosition  # where the next backfill window starts
    until: BinlogPosition  # the backfill is finished once a window ends at or after this
    tables: tuple[str, ...] = ()  # `schema.table` names; empty = every table of the pipeline
    requested_by: str = ""
    requested_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position.to_dict(),
            "until": self.until.to_dict(),
            "tables": list(self.tables),
            "requested_by": self.requested_by,
            "requested_at": self.requested_at,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BackfillState:
        return cls(
            position=BinlogPosition.from_dict(d["position"]),
            until=BinlogPosition.from_dict(d["until"]),
            tables=tuple(d.get("tables") or ()),
            requested_by=str(d.get("requested_by", "")),
            requested_at=d.get("requested_at"),
        )


@dataclass(frozen=True)
class Cursor:
    """What the pipeline has durably landed. `seq` 0 and `position` None: nothing yet."""

    seq: int = 0  # last acked window
    position: BinlogPosition | None = None  # the next stream window starts here
    backfill: BackfillState | None = None
    updated_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": COORDINATION_FORMAT,
            "seq": self.seq,
            "position": self.position.to_dict() if self.position is not None else None,
            "backfill": self.backfill.to_dict() if self.backfill is not None else None,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cursor:
        check_format(d, "cursor")
        return cls(
            seq=int(d["seq"]),
            position=BinlogPosition.from_dict(d["position"]) if d.get("position") else None,
            backfill=BackfillState.from_dict(d["backfill"]) if d.get("backfill") else None,
            updated_at=d.get("updated_at"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Cursor:
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class WindowRecord:
    """One stored window: the immutable plan, and whether its changes have been acked."""

    plan: WindowPlan
    state: WindowState = STATE_PLANNED
    result: dict[str, Any] = field(default_factory=dict)
    acked_at: float | None = None

    @property
    def seq(self) -> int:
        return self.plan.seq

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": COORDINATION_FORMAT,
            "plan": self.plan.to_dict(),
            "state": self.state,
            "result": self.result,
            "acked_at": self.acked_at,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WindowRecord:
        check_format(d, "window record")
        state = d.get("state")
        if state not in (STATE_PLANNED, STATE_ACKED):
            raise ConfigError(f"unknown window state {state!r} (expected 'planned' or 'acked')")
        return cls(
            plan=WindowPlan.from_dict(d["plan"]),
            state=STATE_ACKED if state == STATE_ACKED else STATE_PLANNED,
            result=dict(d.get("result") or {}),
            acked_at=d.get("acked_at"),
        )
