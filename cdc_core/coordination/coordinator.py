"""Coordination in ZooKeeper: one pipeline's lease, cursor and window records, fenced on the lease.

Layout (several pipelines never share a node; see docs/zookeeper-layout.md)::

    <root>/pipelines/<name>                     the pipeline node; its data version is the lease epoch
    <root>/pipelines/<name>/lease               the lease record (JSON); its czxid is the fencing token
    <root>/pipelines/<name>/cursor              last acked window seq + stream position + backfill (JSON)
    <root>/pipelines/<name>/windows/<seq:010d>  one immutable window plan + its state (planned|acked)
    <root>/pipelines/<name>/snapshot            the initial load's progress per table (JSON; model/snapshot_state.py)

`PipelineCoordinator` is the only object that touches ZooKeeper for a pipeline. The lease is a
record, not an ephemeral node: Airflow tasks are separate processes, so no single ZooKeeper session
lives as long as a run. The fencing token is the lease node's czxid: a takeover deletes and
re-creates the node, and zxids only grow, so a later acquisition always gets a larger token. Every
state change a run makes is one multi-op (transaction) that first checks the lease epoch (bumped by
every acquisition, never reset) and the lease node's data version (changed by every renew), so a
run whose lease was taken over can change nothing, whatever its clock says. The epoch exists
because a re-created lease node starts again at version 0: the lease version alone would let a
zombie's `check(lease, 0)` pass on its successor's node.

The rules of the protocol (which plan may be stored, how an ack moves the cursor) are pure functions
(`lease_decision`, `check_plan`, `cursor_after_ack`, `check_backfill_request`) that the coordinator
applies to what it just read; the multi-op then makes sure nothing it read changed meanwhile.
"""


from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NoAuthError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import KazooState, ZnodeStat

from cdc_core.coordination.client import CONNECTION_ERRORS, client_acl
from cdc_core.coordination.paths import PIPELINE_NAME_RE, WINDOW_NODE_RE, lease_path, pipeline_path, source_path
from cdc_core.coordination.records import (
    COORDINATION_FORMAT,
    STATE_ACKED,
    STATE_PLANNED,
    BackfillState,
    Cursor,
    LeaseGrant,
    LeaseInfo,
    LeaseRecord,
    WindowRecord,
    check_format,
    dumps,
)
from cdc_core.coordination.rules import (
    check_backfill_request,
    check_plan,
    cursor_after_ack,
    lease_decision,
    same_position,
)
from cdc_core.model import faults, snapshot_state
from cdc_core.model.errors import CdcError, ConfigError, CoordinationError, Fenced, LeaseHeld, StateConflict
from cdc_core.model.logfmt import iso_ms, kv
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.sources import SOURCE_ID_RE, unit_name
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, WindowPlan

log = logging.getLogger("cdc.coordination")
# How often an operation is re-evaluated when something it read changed under it while the lease
# stayed ours (a concurrent renew or a duplicate task of the same run); the rules are re-applied
# to fresh reads each time, so a retried ack of an acked window becomes the no-op it should be.
_RACE_ATTEMPTS = 4
# Deleting many window records: stay far below ZooKeeper's 1 MB request limit.
_PRUNE_BATCH = 200
# ZooKeeper refuses a request over jute.maxbuffer (1 MB by default) by dropping the connection, which a
# client sees as a connection loss and would retry forever: refuse a larger multi-op before sending it.
MAX_REQUEST_BYTES = 900_000


def _maintenance_record(d: dict[str, Any]) -> dict[str, Any]:
    check_format(d, "maintenance record")
    return d


@dataclass
class _Write:
    """A multi-op to commit (after the lease check), and what to return once it is committed."""

    ops: list[tuple[Any, ...]]
    value: Any
    event: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Done:
    """Nothing to write (an idempotent retry): return this."""

    value: Any


class _LeaseRace(Exception):
    """The lease check failed but the lease is still ours (a concurrent renew of our own)."""


class _DataRace(Exception):
    """A node the operation read changed before it committed."""


class PipelineCoordinator:
    """The only object that touches ZooKeeper for one pipeline.

    It tracks the client's connection state with a listener: while SUSPENDED or after LOST nothing
    is read or changed (an unknown answer is never "not there"), and after a LOST session the next
    fenced operation re-verifies the lease before anything else (every fenced operation verifies it
    anyway; the lease is a record, so it survives the session).
    """

    def __init__(
        self,
        client: KazooClient,
        root: str,
        pipeline: str,
        *,
        clock: Callable[[], float] = faults.clock,
        before_commit: Callable[[str], None] | None = None,
        source: str | None = None,
    ):
        """`clock`: the time leases are granted and checked against. `before_commit`: called with the
        operation's name just before each fenced multi-op is committed (races in tests, diagnostics).
        `source`: one source of a group pipeline (cdc_core.model.sources): its state (cursor, windows,
        snapshot, lake registry, last error) lives under `sources/<id>/`, the lease stays the pipeline's."""
        if not PIPELINE_NAME_RE.match(pipeline):
            raise ConfigError(f"pipeline name {pipeline!r} must be 1-64 characters of a-z, 0-9, _ and -")
        if not root.startswith("/") or (root != "/" and root.endswith("/")) or "//" in root:
            raise ConfigError(f"ZooKeeper root {root!r} must be an absolute path without a trailing slash")
        self.client = client
        self.root = root
        self.pipeline = pipeline
        self._clock = clock
        if source is not None and not SOURCE_ID_RE.match(source):
            raise ConfigError(f"source id {source!r} must be 1-32 characters of a-z, 0-9, _ and -")
        self.source = source
        self.unit = unit_name(pipeline, source)  # whose windows these are (their plans' `pipeline`)
        self._state_layout_ok = False
        self.base = pipeline_path(root, pipeline)
        self.lease_path = lease_path(root, pipeline)
        self.state_base = source_path(root, pipeline, source)
        self.cursor_path = f"{self.state_base}/cursor"
        self.windows_path = f"{self.state_base}/windows"
        self.snapshot_path = f"{self.state_base}/snapshot"
        self.lake_path = f"{self.state_base}/lake"
        self.last_error_path = f"{self.state_base}/last_error"
        self._acl = client_acl(client)
        self._state: str = client.state
        self._reverify = False
        self.before_commit = before_commit
        client.add_listener(self._on_state)

    def __repr__(self) -> str:
        return f"PipelineCoordinator(pipeline={self.pipeline!r}, base={self.base!r}, state={self._state})"

    def close(self) -> None:
        """Stop tracking the client's state (the client itself belongs to the caller)."""
        self.client.remove_listener(self._on_state)

    # ---------------------------------------------------------------------------- connection state

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: record and log only, never block.
        self._state = state
        if state == KazooState.LOST:
            self._reverify = True
        log.warning("zk.state %s", kv(pipeline=self.pipeline, state=state))

    @property
    def state(self) -> str:
        return self._state

    @property
    def needs_reverify(self) -> bool:
        """True after a LOST session until the lease has been verified again."""
        return self._reverify

    def _require_connected(self, action: str) -> None:
        # kazoo sets client.state before it calls listeners, so check both: whichever noticed first.
        state = self.client.state if self.client.state != KazooState.CONNECTED else self._state
        if state != KazooState.CONNECTED or not self.client.connected:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: ZooKeeper connection is {state}: not safe to act ({action}); "
                "an unknown answer is never taken as 'not there'. Retry the step once ZooKeeper is reachable "
                "(every step is idempotent)"
            )

    @contextmanager
    def _zk(self, what: str) -> Iterator[None]:
        """Map kazoo's errors to ours. Callers handle the expected ones (NoNode, BadVersion) inside."""
        try:
            yield
        except CdcError:
            raise
        except NoAuthError:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: ZooKeeper refused {what} under {self.base} (not authorised): the "
                "pipeline's nodes are restricted to the identity that created them; use the same credentials "
                "(zookeeper.auth_env)"
            ) from None
        except CONNECTION_ERRORS as e:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: ZooKeeper connection failed during {what} ({type(e).__name__}); the "
                "outcome is unknown and is not taken as 'not there'. Retry the step once ZooKeeper is reachable "
                "(every step is idempotent)"
            ) from e
        except KazooException as e:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: ZooKeeper error during {what}: {type(e).__name__} {e}"
            ) from e

    def _parse(self, data: bytes, path: str, parser: Callable[[dict[str, Any]], Any]) -> Any:
        try:
            return parser(json.loads(data))
        except (ValueError, KeyError, TypeError, ConfigError) as e:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: {path} holds data this version cannot read ({e}); "
                "inspect it with zkCli and restore it from a backup, or ask the operator who changed it"
            ) from None

    # ------------------------------------------------------------------------------------- reads

    def _get(self, path: str, what: str) -> tuple[bytes, ZnodeStat] | None:
        with self._zk(what):
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                return None
        return data, stat

    def _lease(self) -> tuple[LeaseRecord, ZnodeStat] | None:
        got = self._get(self.lease_path, "reading the lease")
        if got is None:
            return None
        rec: LeaseRecord = self._parse(got[0], self.lease_path, LeaseRecord.from_dict)
        stat: ZnodeStat = got[1]
        return rec, stat

    def _window_seqs(self) -> list[int]:
        with self._zk("listing window records"):
            try:
                names = self.client.get_children(self.windows_path)
            except NoNodeError:
                return []
        return sorted(int(n) for n in names if WINDOW_NODE_RE.match(n))

    def _cursor(self) -> tuple[Cursor, ZnodeStat | None, bytes]:
        """The cursor, its node's stat (None when absent) and its raw bytes (rewritten unchanged)."""
        got = self._get(self.cursor_path, "reading the cursor")
        if got is None:
            # Absent means "never acked anything" only if no window was ever stored.
            if self._window_seqs():
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: {self.cursor_path} is missing but window records exist under "
                    f"{self.windows_path}; restore the cursor node (it is never deleted by the product)"
                )
            initial = Cursor()
            return initial, None, dumps(initial.to_dict())
        return self._parse(got[0], self.cursor_path, Cursor.from_dict), got[1], got[0]

    def _window(self, seq: int) -> tuple[WindowRecord, ZnodeStat] | None:
        path = self.window_path(seq)
        got = self._get(path, f"reading window {seq}")
        if got is None:
            return None
        record: WindowRecord = self._parse(got[0], path, WindowRecord.from_dict)
        if record.seq != seq or record.plan.pipeline != self.unit:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: {path} holds window {record.seq} of {record.plan.pipeline!r}; "
                "the node was copied or edited by hand: restore it"
            )
        return record, got[1]

    def _pending(self) -> tuple[Cursor, ZnodeStat | None, bytes, tuple[WindowRecord, ZnodeStat] | None]:
        """The cursor and the pending window: the only one that can be pending is cursor.seq + 1."""
        for _ in range(_RACE_ATTEMPTS):
            cursor, cstat, raw = self._cursor()
            got = self._window(cursor.seq + 1)
            if got is None or got[0].state == STATE_PLANNED:
                return cursor, cstat, raw, got
            # Acked: the cursor moved on between the two reads (they change in one multi-op). Re-read.
        raise StateConflict(
            f"pipeline {self.pipeline!r}: window {cursor.seq + 1} is acked but the cursor says {cursor.seq}; "
            "the records keep changing or were edited by hand"
        )

    def window_path(self, seq: int) -> str:
        return f"{self.windows_path}/{seq:010d}"

    def read_cursor(self) -> Cursor:
        """The cursor; seq 0 and no position when the pipeline never acked anything."""
        self._require_connected("read cursor")
        return self._cursor()[0]

    def read_lease(self) -> LeaseInfo | None:
        """The current lease for monitoring, or None when nobody holds one."""
        self._require_connected("read lease")
        got = self._lease()
        if got is None:
            return None
        rec, stat = got
        return LeaseInfo(
            pipeline=self.pipeline,
            holder=rec.holder,
            token=stat.czxid,
            acquired_at=rec.acquired_at,
            expires_at=rec.expires_at,
            renewed_at=rec.renewed_at,
            version=stat.version,
            epoch=rec.epoch,
            process=rec.process,
        )

    def pending_window(self) -> WindowRecord | None:
        """The planned, un-acked window (at most one exists), or None."""
        self._require_connected("read pending window")
        got = self._pending()[3]
        return got[0] if got else None

    def get_window(self, seq: int) -> WindowRecord | None:
        self._require_connected(f"read window {seq}")
        got = self._window(seq)
        return got[0] if got else None

    def recent_windows(self, limit: int = 10) -> list[WindowRecord]:
        """The newest `limit` window records, newest first."""
        self._require_connected("read recent windows")
        out: list[WindowRecord] = []
        for seq in reversed(self._window_seqs()):
            if len(out) >= limit:
                break
            got = self._window(seq)
            if got is not None:  # pruned meanwhile
                out.append(got[0])
        return out

    def record_error(self, holder: str, step: str, seq: int | None, message: str) -> None:
        """Note the last failure for the monitor (`last_error`). Best effort and not fenced: it is a note
        for operators, not pipeline state (nothing reads it to decide anything), and recording it must
        never hide the failure itself."""
        data = dumps(
            {"format": COORDINATION_FORMAT, "holder": holder, "step": step, "seq": seq,
             "message": message[:4000], "at": self._clock()}
        )
        try:
            self._require_connected("record error")
            with self._zk("recording the last error"):
                if self.client.exists(self.last_error_path) is None:
                    self.client.create(self.last_error_path, data, acl=self._acl, makepath=True)
                else:
                    self.client.set(self.last_error_path, data)
        except Exception as e:  # never mask the error being recorded
            log.warning("error.not_recorded %s", kv(pipeline=self.pipeline, step=step, reason=type(e).__name__))

    def read_last_error(self) -> dict[str, Any] | None:
        """The last failure noted by `record_error`, or None."""
        self._require_connected("read last error")
        got = self._get(self.last_error_path, "reading the last error")
        if got is None:
            return None
        try:
            value: dict[str, Any] = json.loads(got[0])
        except ValueError:
            return None
        return value

    # ------------------------------------------------------------------------------------- lease
    #
    # Why the lease node's data version alone cannot fence: a takeover deletes and re-creates the
    # node (so that its czxid, the token, changes), and a re-created node starts again at data version
    # 0. A zombie that read version 0 would pass `check(lease, 0)` on its successor's node. So every
    # acquisition also bumps the data version of the pipeline node (<root>/pipelines/<name>), in the
    # same multi-op that creates the lease node, and writes the new value into the lease record as its
    # `epoch`. That version never resets (the pipeline node is never deleted), so
    # `check(pipeline node, epoch)` fails for everyone but the current holder, and every multi-op
    # a holder commits (renew, release, plan, ack, cursor changes) starts with it, followed by
    # `check(lease, version)`. Clocks play no part in this: they only decide when a takeover is allowed.

    def _ensure_layout(self) -> None:
        with self._zk("creating the pipeline's nodes"):
            for path in (self.windows_path, self.snapshot_path):
                self.client.ensure_path(path, acl=self._acl)

    def _grant(self, rec: LeaseRecord, token: int) -> LeaseGrant:
        return LeaseGrant(
            pipeline=self.pipeline, holder=rec.holder, token=token, expires_at=rec.expires_at,
            acquired_at=rec.acquired_at,
        )

    def _multi(self, ops: list[tuple[Any, ...]], what: str) -> list[Any]:
        """Commit ops as one multi-op. kazoo's commit() does not raise for a failed op: the failing op
        carries its error, the ops before it RolledBackError, the ops after it RuntimeInconsistency;
        nothing of the multi-op landed. Returns the raw results."""
        size = sum(len(op[1]) + (len(op[2]) if op[0] in ("create", "set") else 0) for op in ops)
        if size > MAX_REQUEST_BYTES:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: {what} would write {size:,} bytes to ZooKeeper in one request, more "
                f"than its request limit allows (1 MB by default, jute.maxbuffer); nothing was written. A window's "
                "plan and ack carry each of its tables: lower snapshot.max_tables_per_window (snapshot windows) or "
                "the window caps, then retry"
            )
        with self._zk(what):
            tx = self.client.transaction()
            for op in ops:
                kind = op[0]
                if kind == "create":
                    tx.create(op[1], op[2], acl=self._acl)
                elif kind == "set":
                    tx.set_data(op[1], op[2], version=op[3])
                elif kind == "delete":
                    tx.delete(op[1], version=op[2])
                elif kind == "check":
                    tx.check(op[1], op[2])
                else:
                    raise ValueError(f"unknown multi-op kind {kind!r}")
            if self.before_commit is not None:
                self.before_commit(what)
            results: list[Any] = tx.commit()
        return results

    @staticmethod
    def _first_failure(results: list[Any]) -> tuple[int, Exception] | None:
        if not any(isinstance(r, Exception) for r in results):
            return None
        for i, r in enumerate(results):
            if isinstance(r, Exception) and not isinstance(r, RolledBackError | RuntimeInconsistency):
                return i, r
        return 0, results[0]

    def _lease_guard(self, rec: LeaseRecord, stat: ZnodeStat) -> list[tuple[Any, ...]]:
        return [("check", self.base, rec.epoch), ("check", self.lease_path, stat.version)]

    def _pipeline_meta(self, holder: str, now: float) -> bytes:
        return dumps({"format": COORDINATION_FORMAT, "pipeline": self.pipeline, "last_acquired_by": holder,
                       "last_acquired_at": now})

    def acquire(self, holder: str, ttl_seconds: float, *, process: dict[str, Any] | None = None) -> LeaseGrant:
        """Take the pipeline's lease, or raise LeaseHeld naming who holds it until when.

        A live lease of the same holder (a retried acquire task of the same run) is returned with
        the same token, renewed for `ttl_seconds`. `process` (a CLI holder's process identity,
        `cdc_core.model.holders`) is recorded with a new lease.
        """
        if not holder or len(holder) > 512:
            raise ConfigError(f"pipeline {self.pipeline!r}: a lease holder is a non-empty name (up to 512 chars)")
        if not ttl_seconds > 0:
            raise ConfigError(f"pipeline {self.pipeline!r}: lease ttl must be positive, got {ttl_seconds}")
        self._require_connected("acquire lease")
        self._ensure_layout()
        for _ in range(_RACE_ATTEMPTS):
            now = self._clock()
            current = self._lease()
            decision = lease_decision(current[0] if current else None, holder, now)
            if decision == "held":
                assert current is not None
                cur, stat = current
                raise LeaseHeld(
                    f"pipeline {self.pipeline!r}: the lease is held by {cur.holder!r} until {iso_ms(cur.expires_at)} "
                    f"(token {stat.czxid:#x}); another run is working on this pipeline: skip this run "
                    "(the next scheduled run picks up where it stops)",
                    holder=cur.holder,
                    expires_at=cur.expires_at,
                    token=stat.czxid,
                )
            if decision == "reenter":
                assert current is not None
                try:
                    grant = self._renew_once(current[0], current[1], ttl_seconds, now)
                except _LeaseRace:
                    continue
                log.info("lease.reentered %s", kv(pipeline=self.pipeline, holder=holder, token=f"{grant.token:#x}"))
                return grant
            got = self._get(self.base, "reading the pipeline node")
            if got is None:
                self._ensure_layout()  # deleted under us (by hand)
                continue
            base_version = got[1].version
            rec = LeaseRecord(
                holder, now, now + ttl_seconds, now, uuid.uuid4().hex, epoch=base_version + 1, process=process
            )
            ops: list[tuple[Any, ...]] = [("set", self.base, self._pipeline_meta(holder, now), base_version)]
            if current is not None:
                # Takeover of an expired lease: delete the version we read and create anew, atomically,
                # so the node's czxid (the token) changes and the epoch moves on: the previous holder is
                # fenced from now on, whatever its clock says.
                ops.append(("delete", self.lease_path, current[1].version))
            ops.append(("create", self.lease_path, dumps(rec.to_dict())))
            if self._first_failure(self._multi(ops, "acquiring the lease")) is not None:
                self._ensure_layout()
                continue  # another acquirer, a renew or a release came first: re-read decides
            mine = self._lease()
            if mine is None or mine[0].nonce != rec.nonce:
                continue  # someone took it over right after us (a tiny ttl): re-read decides
            grant = self._grant(rec, mine[1].czxid)
            if current is None:
                log.info(
                    "lease.acquired %s",
                    kv(pipeline=self.pipeline, holder=repr(holder), token=f"{grant.token:#x}", epoch=rec.epoch,
                        expires_at=iso_ms(rec.expires_at)),
                )
            else:
                old, old_stat = current
                log.warning(
                    "lease.taken_over %s",
                    kv(pipeline=self.pipeline, holder=repr(holder), token=f"{grant.token:#x}", epoch=rec.epoch,
                        previous_holder=repr(old.holder), previous_token=f"{old_stat.czxid:#x}",
                        previous_expired_at=iso_ms(old.expires_at)),
                )
            return grant
        raise CoordinationError(
            f"pipeline {self.pipeline!r}: the lease kept changing while acquiring it; retry the acquire step"
        )

    def _fence_reason(self, grant: LeaseGrant, current: tuple[LeaseRecord, ZnodeStat] | None) -> str | None:
        if grant.pipeline != self.pipeline:
            return f"the grant is for pipeline {grant.pipeline!r}"
        if current is None:
            return "the lease node is gone (it expired and was taken over and released, or was released)"
        rec, stat = current
        if stat.czxid != grant.token:
            return f"the lease was taken over by {rec.holder!r} (token {stat.czxid:#x}, until {iso_ms(rec.expires_at)})"
        if rec.holder != grant.holder:
            return f"the lease names holder {rec.holder!r}"
        return None

    def _fenced_error(self, grant: LeaseGrant, reason: str, what: str) -> Fenced:
        log.warning(
            "lease.fenced %s",
            kv(pipeline=self.pipeline, holder=repr(grant.holder), token=f"{grant.token:#x}", action=repr(what)),
        )
        return Fenced(
            f"pipeline {self.pipeline!r}: run {grant.holder!r} (token {grant.token:#x}) no longer holds the lease: "
            f"{reason}. Refused {what}; nothing was changed. Stop this run: the lease holder replays the stored window",
            holder=grant.holder,
            token=grant.token,
        )

    def _ours(self, grant: LeaseGrant, what: str) -> tuple[LeaseRecord, ZnodeStat]:
        """The lease record and stat, read in one go, after checking they are `grant`'s (else Fenced)."""
        current = self._lease()
        reason = self._fence_reason(grant, current)
        if reason is not None:
            raise self._fenced_error(grant, reason, what)
        assert current is not None
        if self._reverify:
            self._reverify = False
            log.warning(
                "lease.reverified %s",
                kv(pipeline=self.pipeline, token=f"{grant.token:#x}", after="session_lost", action=repr(what)),
            )
        return current

    def verify(self, grant: LeaseGrant) -> int:
        """The lease node's current data version, after checking it is still `grant`'s lease (else Fenced)."""
        self._require_connected("verify lease")
        return int(self._ours(grant, "verify")[1].version)

    def _renew_once(self, rec: LeaseRecord, stat: ZnodeStat, ttl_seconds: float, now: float) -> LeaseGrant:
        new = replace(rec, expires_at=now + ttl_seconds, renewed_at=now)
        ops = [("check", self.base, rec.epoch), ("set", self.lease_path, dumps(new.to_dict()), stat.version)]
        if self._first_failure(self._multi(ops, "renewing the lease")) is not None:
            raise _LeaseRace()
        return self._grant(new, stat.czxid)

    def renew(self, grant: LeaseGrant, ttl_seconds: float) -> LeaseGrant:
        """Extend the lease (compare-and-set on its version, under the epoch check); Fenced when it is
        no longer ours.

        Renewing after our own clock says the lease expired is fine as long as nobody took it over:
        the token (czxid) and the epoch are unchanged, and a takeover would have changed both.
        """
        if not ttl_seconds > 0:
            raise ConfigError(f"pipeline {self.pipeline!r}: lease ttl must be positive, got {ttl_seconds}")
        self._require_connected("renew lease")
        for _ in range(_RACE_ATTEMPTS):
            rec, stat = self._ours(grant, "renew")
            now = self._clock()
            if now >= rec.expires_at:
                log.warning("lease.renew_after_expiry %s", kv(pipeline=self.pipeline, token=f"{grant.token:#x}"))
            try:
                return self._renew_once(rec, stat, ttl_seconds, now)
            except _LeaseRace:
                continue  # a concurrent renew of ours, or a takeover: re-read decides
        raise CoordinationError(f"pipeline {self.pipeline!r}: the lease kept changing while renewing it; retry")

    def release(self, grant: LeaseGrant) -> None:
        """Give the lease up. Releasing a lease that is no longer ours is a logged no-op."""
        self._require_connected("release lease")
        for _ in range(_RACE_ATTEMPTS):
            current = self._lease()
            reason = self._fence_reason(grant, current)
            if reason is not None:
                log.info(
                    "lease.release_noop %s",
                    kv(pipeline=self.pipeline, holder=repr(grant.holder), token=f"{grant.token:#x}",
                        reason=repr(reason)),
                )
                return
            assert current is not None
            rec, stat = current
            ops = [("check", self.base, rec.epoch), ("delete", self.lease_path, stat.version)]
            if self._first_failure(self._multi(ops, "releasing the lease")) is not None:
                continue
            log.info(
                "lease.released %s", kv(pipeline=self.pipeline, holder=repr(grant.holder), token=f"{grant.token:#x}")
            )
            return
        raise CoordinationError(f"pipeline {self.pipeline!r}: the lease kept changing while releasing it; retry")

    def break_lease(self, holder: str) -> LeaseInfo:
        """Operator action: remove a live lease held by `holder` (a run known to be dead) so that the next
        run need not wait for its expiry. Safe even if that run is alive after all: the pipeline node's
        version (the epoch) is bumped and the lease node deleted in one multi-op, so its every later
        fenced operation fails. Naming the holder makes sure one breaks the lease one looked at."""
        self._require_connected("break lease")
        for _ in range(_RACE_ATTEMPTS):
            current = self._lease()
            if current is None:
                raise StateConflict(f"pipeline {self.pipeline!r}: no lease to break (nobody holds it)")
            rec, stat = current
            if rec.holder != holder:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: the lease is held by {rec.holder!r}, not {holder!r}; "
                    f"check `cdc lease show {self.pipeline}` and name the holder shown there"
                )
            got = self._get(self.base, "reading the pipeline node")
            if got is None:
                continue
            ops = [
                ("set", self.base, self._pipeline_meta(f"broken:{holder}", self._clock()), got[1].version),
                ("delete", self.lease_path, stat.version),
            ]
            if self._first_failure(self._multi(ops, "breaking the lease")) is not None:
                continue  # renewed or released meanwhile: re-read decides
            info = LeaseInfo(self.pipeline, rec.holder, stat.czxid, rec.acquired_at, rec.expires_at, rec.renewed_at,
                             stat.version, rec.epoch)
            log.warning(
                "lease.broken %s",
                kv(pipeline=self.pipeline, holder=repr(holder), token=f"{stat.czxid:#x}",
                    expires_at=iso_ms(rec.expires_at)),
            )
            return info
        raise CoordinationError(f"pipeline {self.pipeline!r}: the lease kept changing while breaking it; retry")

    # ----------------------------------------------------------------------------- fenced writes

    def _fenced(self, grant: LeaseGrant, what: str, attempt: Callable[[], _Write | _Done]) -> Any:
        """Verify the lease, read and decide (`attempt`), then commit one multi-op that starts with the
        epoch and lease-version checks. Re-evaluate when something changed meanwhile while the lease
        stayed ours."""
        if not self._state_layout_ok:  # a group pipeline's source may act under a lease another source took
            self._ensure_layout()
            self._state_layout_ok = True
        for _ in range(_RACE_ATTEMPTS):
            self._require_connected(what)
            rec, stat = self._ours(grant, what)
            step = attempt()
            if isinstance(step, _Done):
                return step.value
            try:
                self._commit(grant, rec, stat, step.ops, what)
            except (_LeaseRace, _DataRace):
                continue
            log.info("%s %s", step.event, kv(pipeline=self.unit, token=f"{grant.token:#x}", **step.fields))
            return step.value
        raise StateConflict(
            f"pipeline {self.pipeline!r}: {what} kept racing with concurrent changes of the same run "
            f"(token {grant.token:#x}); nothing was changed. Make sure only one task of the run acts at a time"
        )

    def _commit(
        self, grant: LeaseGrant, rec: LeaseRecord, stat: ZnodeStat, ops: list[tuple[Any, ...]], what: str
    ) -> None:
        guard = self._lease_guard(rec, stat)
        failure = self._first_failure(self._multi([*guard, *ops], what))
        if failure is None:
            return
        index, error = failure
        if index < len(guard):
            # A lease check: lost (Fenced), or changed by a concurrent renew of our own (retry).
            current = self._lease()
            reason = self._fence_reason(grant, current)
            if reason is None and current is not None and current[0].epoch != rec.epoch:
                reason = f"the pipeline's lease epoch moved from {rec.epoch} (the node was changed by hand)"
            if reason is not None:
                raise self._fenced_error(grant, reason, what)
            raise _LeaseRace()
        if isinstance(error, NoAuthError):
            raise CoordinationError(f"pipeline {self.pipeline!r}: ZooKeeper refused {what} (not authorised)")
        op = ops[index - len(guard)]
        log.info(
            "zk.multi_op_conflict %s",
            kv(pipeline=self.pipeline, action=repr(what), op=op[0], path=op[1], error=type(error).__name__),
        )
        raise _DataRace()

    def _cursor_op(self, cstat: ZnodeStat | None, data: bytes) -> tuple[Any, ...]:
        # An absent cursor is created in the same multi-op (NodeExists if someone was first).
        if cstat is None:
            return ("create", self.cursor_path, data)
        return ("set", self.cursor_path, data, cstat.version)

    def store_plan(self, grant: LeaseGrant, plan: WindowPlan) -> WindowRecord:
        """Store the next window's plan, immutably. Storing the identical pending plan again is a no-op."""
        record = WindowRecord(plan=plan)

        def attempt() -> _Write | _Done:
            cursor, cstat, raw, pending = self._pending()
            if pending is not None and pending[0].plan.to_dict() == plan.to_dict():
                return _Done(pending[0])  # a retried plan step whose first attempt landed
            check_plan(self.unit, cursor, pending[0] if pending else None, plan)
            # Rewriting the cursor unchanged (CAS) both checks and bumps its version: every operation
            # that relies on "no pending window" writes the cursor too, so they serialise on it.
            ops = [("create", self.window_path(plan.seq), dumps(record.to_dict())), self._cursor_op(cstat, raw)]
            if plan.kind == KIND_SNAPSHOT:  # the chunk must be the snapshot's next one, still when committed
                sstate, sstat = self._snapshot_state()
                snapshot_state.check_chunk(self.unit, sstate, plan)
                assert sstat is not None  # an active snapshot has a record
                ops.append(("check", self.snapshot_path, sstat.version))
            return _Write(ops, record, "window.stored", {"seq": plan.seq, "kind": plan.kind})

        result: WindowRecord = self._fenced(grant, f"store plan {plan.seq}", attempt)
        return result

    def ack_window(
        self, grant: LeaseGrant, seq: int, result: dict[str, Any],
        rereads: Sequence[snapshot_state.TableRequest] = (),
        renames: Sequence[tuple[str, str, int]] = (),
    ) -> Cursor:
        """Mark window `seq` acked and move the cursor past it, in one fenced multi-op.

        `rereads`: tables the window's schema changes left to be re-read from the source (docs/schema-changes.md):
        requested in the same multi-op, unless already requested for that change or a later one. `renames`:
        (table, new name, change version) of the window's table renames: a table renamed while its snapshot is
        still loading is loaded again under its new name (the rows it had not loaded yet are in no binlog).
        Acking an already-acked window returns the cursor unchanged (a retried ack step).
        """
        try:
            json.dumps(result)
        except (TypeError, ValueError) as e:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: the ack result of window {seq} is not JSON ({e})"
            ) from None

        def attempt() -> _Write | _Done:
            got = self._window(seq)
            if got is None:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot ack window {seq}: it was never planned "
                    f"(no {self.window_path(seq)})"
                )
            record, wstat = got
            cursor, cstat, _ = self._cursor()
            if record.state == STATE_ACKED:
                return _Done(cursor)
            now = self._clock()
            new_cursor = cursor_after_ack(self.pipeline, cursor, record.plan, now)
            acked = replace(record, state=STATE_ACKED, result=dict(result), acked_at=now)
            ops = [
                ("set", self.window_path(seq), dumps(acked.to_dict()), wstat.version),
                self._cursor_op(cstat, dumps(new_cursor.to_dict())),
            ]
            if record.plan.kind == KIND_SNAPSHOT:  # the chunk's progress moves with the ack, atomically
                ops.append(self._snapshot_op(record.plan, result, now))
            elif rereads or renames:
                state, stat = self._snapshot_state()
                loading = [
                    snapshot_state.TableRequest(dst, None, t.chunk_rows, sweep_below=v)
                    for src, dst, v in renames if (t := state.table(src)) is not None and not t.done
                ]
                wanted = snapshot_state.reread_requests(state, [*rereads, *loading])
                if wanted:
                    data = snapshot_state.with_requests(state, wanted, now, "schema change").to_json()
                    path = self.snapshot_path
                    ops.append(("create", path, data) if stat is None else ("set", path, data, stat.version))
            fields = {"seq": seq, "kind": record.plan.kind}
            faults.point("mid_ack")  # crash suite: lease checked, records read, nothing committed yet
            if new_cursor.position is not None:
                fields["cursor"] = new_cursor.position.label().replace(" ", "_")
            if record.plan.kind == KIND_BACKFILL:
                fields["backfill_done"] = new_cursor.backfill is None
            return _Write(ops, new_cursor, "window.acked", fields)

        cursor: Cursor = self._fenced(grant, f"ack window {seq}", attempt)
        return cursor

    def _cursor_change(
        self, grant: LeaseGrant, what: str, decide: Callable[[Cursor], Cursor | None], event: str, **fields: Any
    ) -> Cursor:
        """A fenced cursor change that requires no pending window. `decide` returns None for a no-op."""

        def attempt() -> _Write | _Done:
            cursor, cstat, _, pending = self._pending()
            if pending is not None:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot {what}: window {pending[0].seq} ({pending[0].plan.kind}) is "
                    "planned and not acked; replay and ack it first"
                )
            new = decide(cursor)
            if new is None:
                return _Done(cursor)
            return _Write([self._cursor_op(cstat, dumps(new.to_dict()))], new, event, fields)

        result: Cursor = self._fenced(grant, what, attempt)
        return result

    # ---------------------------------------------------------------------------------- snapshot

    def _snapshot_state(self) -> tuple[snapshot_state.SnapshotState, ZnodeStat | None]:
        got = self._get(self.snapshot_path, "reading the snapshot record")
        if got is None:
            return snapshot_state.SnapshotState(), None
        if not got[0]:  # created empty by the layout: no snapshot requested yet
            return snapshot_state.SnapshotState(), got[1]
        parse = snapshot_state.SnapshotState.from_dict
        state: snapshot_state.SnapshotState = self._parse(got[0], self.snapshot_path, parse)
        return state, got[1]

    def _snapshot_op(self, plan: WindowPlan, result: dict[str, Any], now: float) -> tuple[Any, ...]:
        state, stat = self._snapshot_state()
        rows = int(result.get("changes") or 0)
        per_table = {
            str(n): int(t.get("changes") or 0) for n, t in (result.get("tables") or {}).items() if isinstance(t, dict)
        }
        data = snapshot_state.after_ack(state, plan, rows, now, per_table).to_json()
        if stat is None:
            return ("create", self.snapshot_path, data)
        return ("set", self.snapshot_path, data, stat.version)

    def read_snapshot(self) -> snapshot_state.SnapshotState:
        """The snapshot record (tables, progress); empty when no snapshot was ever requested."""
        self._require_connected("read snapshot")
        return self._snapshot_state()[0]

    def update_snapshot(
        self,
        grant: LeaseGrant,
        what: str,
        decide: Callable[[snapshot_state.SnapshotState], snapshot_state.SnapshotState | None],
        event: str,
        **fields: Any,
    ) -> snapshot_state.SnapshotState:
        """A fenced change of the snapshot record (request, cancel, restart); `decide` None = no-op."""

        def attempt() -> _Write | _Done:
            state, stat = self._snapshot_state()
            new = decide(state)
            if new is None:
                return _Done(state)
            data = new.to_json()
            path = self.snapshot_path
            op: tuple[Any, ...] = ("create", path, data) if stat is None else ("set", path, data, stat.version)
            return _Write([op], new, event, fields)

        result: snapshot_state.SnapshotState = self._fenced(grant, what, attempt)
        return result

    def start_backfill(
        self,
        grant: LeaseGrant,
        from_position: BinlogPosition,
        until_position: BinlogPosition,
        tables: tuple[str, ...] | list[str] = (),
        requested_by: str = "",
    ) -> Cursor:
        """Make the next windows a backfill from `from_position` until `until_position` (at most the cursor)."""

        def decide(cursor: Cursor) -> Cursor:
            check_backfill_request(self.pipeline, cursor, from_position, until_position)
            now = self._clock()
            bf = BackfillState(from_position, until_position, tuple(tables), requested_by or grant.holder, now)
            return replace(cursor, backfill=bf, updated_at=now)

        return self._cursor_change(
            grant, "start a backfill", decide, "backfill.started",
            start=from_position.label().replace(" ", "_"), until=until_position.label().replace(" ", "_"),
        )

    def cancel_backfill(self, grant: LeaseGrant) -> Cursor:
        """Drop the active backfill (a no-op when none is active)."""

        def decide(cursor: Cursor) -> Cursor | None:
            if cursor.backfill is None:
                return None
            return replace(cursor, backfill=None, updated_at=self._clock())

        return self._cursor_change(grant, "cancel the backfill", decide, "backfill.cancelled")

    def set_start(self, grant: LeaseGrant, position: BinlogPosition) -> Cursor:
        """Set the first stream position of a pipeline that has none yet (same position again: no-op)."""

        def decide(cursor: Cursor) -> Cursor | None:
            if cursor.position is not None:
                if same_position(cursor.position, position):
                    return None
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot set the start to {position.label()}: the cursor already "
                    f"stands at {cursor.position.label()} (a cursor never jumps; a backfill replays older changes)"
                )
            return replace(cursor, position=position, updated_at=self._clock())

        return self._cursor_change(
            grant, "set the start position", decide, "cursor.started", position=position.label().replace(" ", "_")
        )

    def rebase_cursor(self, grant: LeaseGrant, position: BinlogPosition, reason: str = "") -> Cursor:
        """Re-express the cursor on another server after a failover (the same logical point).

        The cursor never moves backward: on the same server the new position must not be earlier; on
        another server it must carry a later epoch (positions of different servers do not compare).
        """

        def decide(cursor: Cursor) -> Cursor | None:
            old = cursor.position
            if old is None:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot rebase a cursor that has no position; set the start"
                )
            if same_position(old, position):
                return None
            if cursor.backfill is not None:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot rebase the cursor while a backfill is active; "
                    "finish or cancel it"
                )
            same_server = old.server.same_server(position.server)
            if (same_server and position < old) or (not same_server and position.epoch <= old.epoch):
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: rebasing the cursor from {old.label()} ({old.server}, "
                    f"epoch {old.epoch}) to {position.label()} ({position.server}, epoch {position.epoch}) would "
                    "move it backward or sideways; a position on another server must carry a later epoch"
                )
            return replace(cursor, position=position, updated_at=self._clock())

        return self._cursor_change(
            grant, "rebase the cursor", decide, "cursor.rebased",
            position=position.label().replace(" ", "_"), reason=repr(reason),
        )

    def prune_windows(self, grant: LeaseGrant, keep_last: int, older_than_seconds: float) -> int:
        """Delete acked window records beyond the newest `keep_last` and older than `older_than_seconds`.

        Never the pending window nor the last acked one. Returns how many records were deleted.
        """
        deleted = 0
        self._require_connected("prune windows")
        self._ours(grant, "prune windows")
        cursor = self._cursor()[0]
        seqs = self._window_seqs()
        kept = set(seqs[-keep_last:]) if keep_last > 0 else set()
        # `< cursor.seq` leaves out the last acked window and the pending one (cursor.seq + 1).
        candidates = [s for s in seqs if s < cursor.seq and s not in kept]
        cutoff = self._clock() - older_than_seconds
        for start in range(0, len(candidates), _PRUNE_BATCH):
            batch = candidates[start : start + _PRUNE_BATCH]

            def attempt(batch: list[int] = batch) -> _Write | _Done:
                ops: list[tuple[Any, ...]] = []
                for seq in batch:
                    got = self._window(seq)
                    if got is None:
                        continue
                    record, wstat = got
                    if record.state == STATE_ACKED and record.acked_at is not None and record.acked_at < cutoff:
                        ops.append(("delete", self.window_path(seq), wstat.version))
                if not ops:
                    return _Done(0)
                return _Write(ops, len(ops), "windows.pruned", {"count": len(ops), "up_to": batch[-1]})

            deleted += self._fenced(grant, "prune windows", attempt)
        return deleted

    # ------------------------------------------------------------------------------- maintenance
    #
    # <base>/maintenance holds the last maintenance run's result (JSON, format-versioned), for the
    # monitor and `cdc status`. It is written fenced like everything else: a zombie maintenance run
    # cannot overwrite its successor's record.

    @property
    def maintenance_path(self) -> str:
        return f"{self.base}/maintenance"

    def record_maintenance(self, grant: LeaseGrant, result: dict[str, Any]) -> None:
        """Store the last maintenance run's result (replacing the previous one), fenced on the lease."""
        data = dumps({"format": COORDINATION_FORMAT, **result})
        if len(data) > 900_000:  # ZooKeeper's request limit is 1 MB
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: the maintenance result is {len(data)} bytes, too large for "
                f"{self.maintenance_path}; record fewer details per table"
            )

        def attempt() -> _Write | _Done:
            got = self._get(self.maintenance_path, "reading the maintenance record")
            path = self.maintenance_path
            op = ("create", path, data) if got is None else ("set", path, data, got[1].version)
            return _Write([op], None, "maintenance.recorded", {"bytes": len(data)})

        self._fenced(grant, "record maintenance", attempt)

    def read_maintenance(self) -> dict[str, Any] | None:
        """The last maintenance run's result, or None when maintenance never ran."""
        self._require_connected("read maintenance record")
        got = self._get(self.maintenance_path, "reading the maintenance record")
        if got is None:
            return None
        result: dict[str, Any] = self._parse(got[0], self.maintenance_path, _maintenance_record)
        return result

    def window_record_seqs(self) -> list[int]:
        """Sequence numbers of the stored window records, ascending (one listing; for housekeeping)."""
        self._require_connected("list window records")
        return self._window_seqs()

    # ------------------------------------------------------------------------ lake table registry

    def read_lake(self) -> dict[str, Any] | None:
        """The lake table registry's data (cdc_core.model.lake_registry), None when nothing was registered yet."""
        self._require_connected("read lake registry")
        got = self._get(self.lake_path, "reading the lake registry")
        if got is None:
            return None
        data: dict[str, Any] = self._parse(got[0], self.lake_path, lambda d: d)
        return data

    def update_lake(
        self, grant: LeaseGrant, change: Callable[[dict[str, Any] | None], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        """Replace the lake registry's data with `change(current)` in one fenced compare-and-set
        (`change` returns None for "no change"; it is re-applied to fresh data after a race)."""

        def attempt() -> _Write | _Done:
            got = self._get(self.lake_path, "reading the lake registry")
            current = self._parse(got[0], self.lake_path, lambda d: d) if got is not None else None
            new = change(current)
            if new is None or new == current:
                return _Done(current)
            op: tuple[Any, ...] = (
                ("create", self.lake_path, dumps(new)) if got is None
                else ("set", self.lake_path, dumps(new), got[1].version)
            )
            return _Write([op], new, "lake.recorded", {"tables": len(new.get("tables") or {})})

        result: dict[str, Any] | None = self._fenced(grant, "record lake tables", attempt)
        return result
