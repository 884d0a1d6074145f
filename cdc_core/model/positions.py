"""Binlog positions, server identities and GTID sets: the values everything else is built on.

A `BinlogPosition` is always a transaction boundary (after a commit event). It carries what is needed
to resume on the same server (file + offset), to continue on another one (the GTID state, the commit
time of the last transaction before it), and to notice which case applies (the server identity).
Positions order totally on one server; `change_version` turns a position into one BIGINT that the
Delta merge compares ("only newer wins").
"""

from __future__ import annotations

import json
import math
import re
import uuid as uuid_mod
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple, get_args

from cdc_core.model.errors import ConfigError

POSITION_FORMAT = 1

# change_version layout: epoch (11 bits) | binlog file index (20 bits) | offset (32 bits).
# MySQL/MariaDB file indexes stop at 999999 < 2**20; max_binlog_size is at most 1 GiB, and a single
# transaction would need to push a file past 4 GiB to overflow the offset field (we refuse it then).
_EPOCH_SHIFT = 52
_FILE_SHIFT = 32
_MAX_FILE_INDEX = (1 << 20) - 1
_MAX_OFFSET = (1 << 32) - 1
_MAX_EPOCH = (1 << 11) - 1


class StartFields(NamedTuple):
    """The keys a start kind takes besides `kind`, and which of them it needs."""

    allowed: tuple[str, ...]
    required: tuple[str, ...]


# Where a pipeline without a cursor starts: the one definition (config validation and the resolver use it).
START_FIELDS: dict[str, StartFields] = {
    "current": StartFields(allowed=(), required=()),
    "gtid": StartFields(allowed=("gtid",), required=("gtid",)),
    "file": StartFields(allowed=("file", "offset"), required=("file",)),
    "file_timestamp": StartFields(allowed=("file", "at"), required=("file", "at")),
    "timestamp": StartFields(allowed=("at",), required=("at",)),
}
START_KINDS = tuple(START_FIELDS)
StartKind = Literal["current", "gtid", "file", "file_timestamp", "timestamp"]  # the same names, for typing
if set(get_args(StartKind)) != set(START_KINDS):
    raise AssertionError("StartKind and START_FIELDS name different start kinds")
START_KEYS = ("gtid", "file", "offset", "at")


def binlog_file_index(name: str) -> int:
    """The numeric suffix of a binlog file name (`mysql-bin.000042` -> 42)."""
    base, _, suffix = name.rpartition(".")
    if not base or not suffix.isdigit():
        raise ConfigError(f"binlog file name {name!r} has no numeric suffix (expected e.g. mysql-bin.000042)")
    return int(suffix)


def binlog_basename(name: str) -> str:
    return name.rpartition(".")[0]


# --------------------------------------------------------------------------------------------- GTIDs

_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_MARIADB_GTID_RE = re.compile(r"^(\d+)-(\d+)-(\d+)$")


def _merge_intervals(intervals: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, disjoint, non-adjacent closed intervals."""
    out: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def _subtract_intervals(
    a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    result: list[tuple[int, int]] = []
    for lo, hi in a:
        pieces = [(lo, hi)]
        for blo, bhi in b:
            nxt: list[tuple[int, int]] = []
            for plo, phi in pieces:
                if bhi < plo or blo > phi:
                    nxt.append((plo, phi))
                    continue
                if plo < blo:
                    nxt.append((plo, blo - 1))
                if phi > bhi:
                    nxt.append((bhi + 1, phi))
            pieces = nxt
        result.extend(pieces)
    return _merge_intervals(result)


@dataclass(frozen=True)
class MysqlGtidSet:
    """A MySQL GTID set: `uuid:1-5:7,uuid2:1-3` (server uuid -> executed transaction numbers)."""

    intervals: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = ()

    flavor = "mysql"

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        by_uuid: dict[str, list[tuple[int, int]]] = {}
        text = text.strip().replace("\n", "")
        if not text:
            return cls()
        for raw in text.split(","):
            part = raw.strip()
            if not part:
                continue
            sid, *ranges = part.split(":")
            if not _UUID_RE.match(sid) or not ranges:
                raise ConfigError(
                    f"malformed MySQL GTID set element {part!r}: expected 'uuid:N' or 'uuid:N-M' "
                    "(e.g. 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5)"
                )
            sid = str(uuid_mod.UUID(sid))
            for r in ranges:
                lo_s, _, hi_s = r.partition("-")
                if not lo_s.isdigit() or (hi_s and not hi_s.isdigit()):
                    raise ConfigError(f"malformed GTID interval {r!r} in {part!r}: expected N or N-M")
                lo, hi = int(lo_s), int(hi_s or lo_s)
                if lo < 1 or hi < lo:
                    raise ConfigError(f"malformed GTID interval {r!r} in {part!r}: need 1 <= N <= M")
                by_uuid.setdefault(sid, []).append((lo, hi))
        return cls(tuple(sorted((u, _merge_intervals(iv)) for u, iv in by_uuid.items())))

    def _as_dict(self) -> dict[str, tuple[tuple[int, int], ...]]:
        return dict(self.intervals)

    def union(self, other: MysqlGtidSet) -> MysqlGtidSet:
        d = {u: list(iv) for u, iv in self.intervals}
        for u, iv in other.intervals:
            d.setdefault(u, []).extend(iv)
        return MysqlGtidSet(tuple(sorted((u, _merge_intervals(iv)) for u, iv in d.items())))

    def difference(self, other: MysqlGtidSet) -> MysqlGtidSet:
        o = other._as_dict()
        out = []
        for u, iv in self.intervals:
            rest = _subtract_intervals(iv, o.get(u, ()))
            if rest:
                out.append((u, rest))
        return MysqlGtidSet(tuple(out))

    def contains(self, other: MysqlGtidSet) -> bool:
        """True when every transaction in `other` is also in this set."""
        return not other.difference(self)

    def add(self, gtid: str) -> MysqlGtidSet:
        sid, _, n = gtid.rpartition(":")
        return self.union(MysqlGtidSet.parse(f"{sid}:{n}"))

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def __str__(self) -> str:
        return ",".join(
            u + "".join(f":{lo}" if lo == hi else f":{lo}-{hi}" for lo, hi in iv) for u, iv in self.intervals
        )


@dataclass(frozen=True)
class MariadbGtidList:
    """A MariaDB GTID position: `domain-server-seq` per replication domain (`0-1-42,1-2-7`).

    MariaDB's binlog position is one last GTID per domain; within a domain sequence numbers grow, so
    "contains" is "for every domain, at least as far".
    """

    entries: tuple[tuple[int, int, int], ...] = ()  # (domain, server_id, seq), one per domain, sorted

    flavor = "mariadb"

    @classmethod
    def parse(cls, text: str) -> MariadbGtidList:
        text = text.strip()
        if not text:
            return cls()
        by_domain: dict[int, tuple[int, int, int]] = {}
        for raw in text.split(","):
            part = raw.strip()
            if not part:
                continue
            m = _MARIADB_GTID_RE.match(part)
            if not m:
                raise ConfigError(
                    f"malformed MariaDB GTID {part!r}: expected domain-server-seq, e.g. 0-1-42"
                )
            d, s, q = (int(x) for x in m.groups())
            if d in by_domain:
                raise ConfigError(f"MariaDB GTID list {text!r} names domain {d} twice")
            by_domain[d] = (d, s, q)
        return cls(tuple(sorted(by_domain.values())))

    def seq_by_domain(self) -> dict[int, int]:
        return {d: q for d, _, q in self.entries}

    def union(self, other: MariadbGtidList) -> MariadbGtidList:
        best: dict[int, tuple[int, int, int]] = {e[0]: e for e in self.entries}
        for e in other.entries:
            cur = best.get(e[0])
            if cur is None or e[2] > cur[2]:
                best[e[0]] = e
        return MariadbGtidList(tuple(sorted(best.values())))

    def difference(self, other: MariadbGtidList) -> MariadbGtidList:
        theirs = other.seq_by_domain()
        return MariadbGtidList(tuple(e for e in self.entries if e[2] > theirs.get(e[0], 0)))

    def contains(self, other: MariadbGtidList) -> bool:
        return not other.difference(self)

    def add(self, gtid: str) -> MariadbGtidList:
        return self.union(MariadbGtidList.parse(gtid))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __str__(self) -> str:
        return ",".join(f"{d}-{s}-{q}" for d, s, q in self.entries)


GtidSet = MysqlGtidSet | MariadbGtidList


def parse_gtid_set(text: str, flavor: str | None = None) -> GtidSet:
    """Parse a GTID set of either flavor; `flavor` forces one ('mysql' or 'mariadb')."""
    text = text.strip()
    if flavor is None:
        flavor = "mysql" if ":" in text else "mariadb"
    if flavor == "mysql":
        return MysqlGtidSet.parse(text)
    if flavor == "mariadb":
        return MariadbGtidList.parse(text)
    raise ConfigError(f"unknown GTID flavor {flavor!r}: expected 'mysql' or 'mariadb'")


# ------------------------------------------------------------------------------------ server identity


@dataclass(frozen=True)
class ServerIdentity:
    """Who wrote a binlog. File names and offsets mean nothing on another server."""

    flavor: str  # "mariadb" | "mysql"
    server_id: int
    server_uuid: str | None = None  # MySQL only; MariaDB has none

    def same_server(self, other: ServerIdentity) -> bool:
        if self.flavor != other.flavor or self.server_id != other.server_id:
            return False
        if self.server_uuid and other.server_uuid:
            return self.server_uuid == other.server_uuid
        return True

    def to_dict(self) -> dict[str, Any]:
        return {"flavor": self.flavor, "server_id": self.server_id, "server_uuid": self.server_uuid}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerIdentity:
        return cls(flavor=d["flavor"], server_id=int(d["server_id"]), server_uuid=d.get("server_uuid"))

    def __str__(self) -> str:
        return f"{self.flavor}:server_id={self.server_id}" + (f":{self.server_uuid}" if self.server_uuid else "")


# ---------------------------------------------------------------------------------------- positions


@dataclass(frozen=True)
class BinlogPosition:
    """A transaction boundary in one server's binlog.

    `gtid` is the GTID state *after* this point (executed set on MySQL, per-domain position on
    MariaDB), as text, or None when the source has no GTIDs. `commit_ts` is the commit time (unix
    seconds) of the last transaction before this point, or None when unknown (e.g. the very start).
    `epoch` counts source-server switches of the pipeline: positions of a later epoch are newer than
    any of an earlier one, whatever their file names.
    """

    file: str
    offset: int
    server: ServerIdentity
    gtid: str | None = None
    commit_ts: float | None = None
    epoch: int = 0

    def __post_init__(self) -> None:
        binlog_file_index(self.file)  # validates the name
        if self.offset < 4:
            raise ConfigError(f"binlog offset {self.offset} in {self.file} is before the 4-byte magic header")

    # Ordering is only meaningful within one server (same epoch); across epochs the epoch wins.
    def sort_key(self) -> tuple[int, int, int]:
        return (self.epoch, binlog_file_index(self.file), self.offset)

    def __lt__(self, other: BinlogPosition) -> bool:
        return self.sort_key() < other.sort_key()

    def __le__(self, other: BinlogPosition) -> bool:
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: BinlogPosition) -> bool:
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: BinlogPosition) -> bool:
        return self.sort_key() >= other.sort_key()

    def same_point(self, other: BinlogPosition) -> bool:
        return self.sort_key() == other.sort_key()

    @property
    def change_version(self) -> int:
        return change_version(self.epoch, self.file, self.offset)

    def gtid_set(self) -> GtidSet | None:
        return None if self.gtid is None else parse_gtid_set(self.gtid, self.server.flavor)

    def label(self) -> str:
        return f"{self.file}:{self.offset}" + (f" gtid={self.gtid}" if self.gtid else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": POSITION_FORMAT,
            "file": self.file,
            "offset": self.offset,
            "gtid": self.gtid,
            "commit_ts": self.commit_ts,
            "epoch": self.epoch,
            "server": self.server.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BinlogPosition:
        if d.get("format") != POSITION_FORMAT:
            raise ConfigError(f"unsupported position format {d.get('format')!r} (this version reads {POSITION_FORMAT})")
        return cls(
            file=d["file"],
            offset=int(d["offset"]),
            server=ServerIdentity.from_dict(d["server"]),
            gtid=d.get("gtid"),
            commit_ts=d.get("commit_ts"),
            epoch=int(d.get("epoch", 0)),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BinlogPosition:
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        return self.label()


def change_version(epoch: int, file: str, offset: int) -> int:
    """One BIGINT that orders changes: epoch, then binlog file index, then offset."""
    idx = binlog_file_index(file)
    if not (0 <= epoch <= _MAX_EPOCH and 0 <= idx <= _MAX_FILE_INDEX and 0 <= offset <= _MAX_OFFSET):
        raise ConfigError(f"position epoch={epoch} {file}:{offset} does not fit the change-version encoding")
    return (epoch << _EPOCH_SHIFT) | (idx << _FILE_SHIFT) | offset


@dataclass(frozen=True)
class BinlogFile:
    """One row of SHOW BINARY LOGS."""

    name: str
    size: int

    @property
    def index(self) -> int:
        return binlog_file_index(self.name)


@dataclass(frozen=True)
class SourceEnd:
    """The server's current end of binlog (SHOW MASTER STATUS / SHOW BINARY LOG STATUS)."""

    file: str
    offset: int
    gtid: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StartSpec:
    """A configured start for a pipeline without a saved cursor (`at` in unix seconds, UTC)."""

    kind: str = "current"
    gtid: str | None = None
    file: str | None = None
    offset: int | None = None
    at: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in START_KINDS:
            raise ConfigError(f"start.kind {self.kind!r} is not one of {', '.join(START_KINDS)}")
        allowed, required = START_FIELDS[self.kind]
        given = [f for f in START_KEYS if getattr(self, f) is not None]
        extra = [f for f in given if f not in allowed]
        if extra:
            raise ConfigError(
                f"start kind {self.kind!r} takes {', '.join(allowed) or 'nothing else'}; remove {', '.join(extra)}"
            )
        missing = [f for f in required if getattr(self, f) is None]
        if missing:
            raise ConfigError(f"start kind {self.kind!r} needs {', '.join(missing)}")
        if self.file is not None:
            binlog_file_index(self.file)  # ConfigError with an example when malformed
        if self.offset is not None and self.offset < 4:
            raise ConfigError(f"start.offset {self.offset} is before the 4-byte binlog header; use 4 or more")
        if self.at is not None:
            at: Any = self.at
            if isinstance(at, datetime):
                if at.tzinfo is None:
                    raise ConfigError("start.at must be timezone-aware (UTC), e.g. 2026-11-20T08:00:00Z")
                object.__setattr__(self, "at", at.timestamp())
            elif isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(float(at)):
                raise ConfigError(f"start.at must be unix seconds or an aware datetime, got {at!r}")
            else:
                object.__setattr__(self, "at", float(at))
        if self.gtid is not None and not self.gtid.strip():
            raise ConfigError("start.gtid is empty; give a GTID set such as 0-1-42 (MariaDB) or uuid:1-42 (MySQL)")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}
