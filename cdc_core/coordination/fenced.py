"""The fenced core of coordination: one pipeline's ZooKeeper session state, reads, the lease check and the
one multi-op through which every fenced write is committed.

Every state change a run makes is one multi-op (transaction) that first checks the lease epoch (the
pipeline node's data version, bumped by every acquisition, never reset) and the lease node's data version
(changed by every renew), so a run whose lease was taken over can change nothing, whatever its clock says.
The epoch exists because a re-created lease node starts again at version 0: the lease version alone would
let a zombie's `check(lease, 0)` pass on its successor's node (cdc_core/coordination/lease.py).

The record families (lease.py, windows.py, cursor.py, snapshot_record.py, lake_record.py, notes.py) read
through `FencedStore` and write through `FencedStore.fenced`: they decide (an `attempt` returns the ops to
`Write`, or `Done` when there is nothing to do) and the core commits the ops behind the lease checks, in
the same multi-op, re-evaluating the decision on fresh reads when something changed meanwhile.
"""


from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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
from cdc_core.coordination.paths import PIPELINE_NAME_RE, PipelineNodes
from cdc_core.coordination.records import LeaseGrant, LeaseRecord
from cdc_core.model.errors import CdcError, ConfigError, CoordinationError, Fenced, StateConflict
from cdc_core.model.logfmt import iso_ms, kv
from cdc_core.model.sources import SOURCE_ID_RE, unit_name

log = logging.getLogger("cdc.coordination")
# How often an operation is re-evaluated when something it read changed under it while the lease
# stayed ours (a concurrent renew or a duplicate task of the same run); the rules are re-applied
# to fresh reads each time, so a retried ack of an acked window becomes the no-op it should be.
RACE_ATTEMPTS = 4
# ZooKeeper refuses a request over jute.maxbuffer (1 MB by default) by dropping the connection, which a
# client sees as a connection loss and would retry forever: refuse a larger multi-op before sending it.
MAX_REQUEST_BYTES = 900_000

# One operation of a multi-op: ("create", path, data) | ("set", path, data, version) | ("delete", path, version)
# | ("check", path, version).
Op = tuple[Any, ...]


def put_op(path: str, data: bytes, stat: ZnodeStat | None) -> Op:
    """Create the node when it was absent when read (NodeExists if someone was first), else compare-and-set it."""
    return ("create", path, data) if stat is None else ("set", path, data, stat.version)


@dataclass
class Write:
    """A multi-op to commit (after the lease check), and what to return once it is committed."""

    ops: list[Op]
    value: Any
    event: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class Done:
    """Nothing to write (an idempotent retry): return this."""

    value: Any


class LeaseRace(Exception):
    """The lease check failed but the lease is still ours (a concurrent renew of our own)."""


class DataRace(Exception):
    """A node the operation read changed before it committed."""


class FencedStore:
    """One pipeline's (or group source's) view of ZooKeeper: connection state, reads, the fence, the commit.

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
        clock: Callable[[], float],
        before_commit: Callable[[str], None] | None = None,
        source: str | None = None,
    ):
        if not PIPELINE_NAME_RE.match(pipeline):
            raise ConfigError(f"pipeline name {pipeline!r} must be 1-64 characters of a-z, 0-9, _ and -")
        if not root.startswith("/") or (root != "/" and root.endswith("/")) or "//" in root:
            raise ConfigError(f"ZooKeeper root {root!r} must be an absolute path without a trailing slash")
        if source is not None and not SOURCE_ID_RE.match(source):
            raise ConfigError(f"source id {source!r} must be 1-32 characters of a-z, 0-9, _ and -")
        self.client = client
        self.root = root
        self.pipeline = pipeline
        self.source = source
        self.unit = unit_name(pipeline, source)  # whose windows these are (their plans' `pipeline`)
        self.nodes = PipelineNodes.of(root, pipeline, source)
        self.clock = clock
        self.before_commit = before_commit
        self.acl = client_acl(client)
        self._reverify = False
        self._state_layout_ok = False
        client.add_listener(self._on_state)

    def close(self) -> None:
        """Stop tracking the client's state (the client itself belongs to the caller)."""
        self.client.remove_listener(self._on_state)

    # ---------------------------------------------------------------------------- connection state

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: record and log only, never block.
        if state == KazooState.LOST:
            self._reverify = True
        log.warning("zk.state %s", kv(pipeline=self.pipeline, state=state))

    @property
    def state(self) -> str:
        # The client's own: kazoo sets it before it tells listeners. A copy kept by the listener could miss the
        # change to CONNECTED made just after start() returns (the session is live a moment before), and then
        # read LOST for good.
        return str(self.client.state)

    @property
    def needs_reverify(self) -> bool:
        """True after a LOST session until the lease has been verified again."""
        return self._reverify

    def require_connected(self, action: str) -> None:
        state = self.state
        if state != KazooState.CONNECTED or not self.client.connected:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: ZooKeeper connection is {state}: not safe to act ({action}); "
                "an unknown answer is never taken as 'not there'. Retry the step once ZooKeeper is reachable "
                "(every step is idempotent)"
            )

    @contextmanager
    def zk(self, what: str) -> Iterator[None]:
        """Map kazoo's errors to ours. Callers handle the expected ones (NoNode, BadVersion) inside."""
        try:
            yield
        except CdcError:
            raise
        except NoAuthError:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: ZooKeeper refused {what} under {self.nodes.base} (not authorised): "
                "the pipeline's nodes are restricted to the identity that created them; use the same credentials "
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

    # ------------------------------------------------------------------------------------- reads

    def parse(self, data: bytes, path: str, parser: Callable[[dict[str, Any]], Any]) -> Any:
        try:
            return parser(json.loads(data))
        except (ValueError, KeyError, TypeError, ConfigError) as e:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: {path} holds data this version cannot read ({e}); "
                "inspect it with zkCli and restore it from a backup, or ask the operator who changed it"
            ) from None

    def get(self, path: str, what: str) -> tuple[bytes, ZnodeStat] | None:
        with self.zk(what):
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                return None
        return data, stat

    def lease(self) -> tuple[LeaseRecord, ZnodeStat] | None:
        """The lease record and its node's stat, read in one go; None when nobody holds the lease."""
        got = self.get(self.nodes.lease, "reading the lease")
        if got is None:
            return None
        rec: LeaseRecord = self.parse(got[0], self.nodes.lease, LeaseRecord.from_dict)
        stat: ZnodeStat = got[1]
        return rec, stat

    def ensure_layout(self) -> None:
        with self.zk("creating the pipeline's nodes"):
            for path in (self.nodes.windows, self.nodes.snapshot):
                self.client.ensure_path(path, acl=self.acl)

    # --------------------------------------------------------------------------------- multi-ops

    def multi(self, ops: list[Op], what: str) -> list[Any]:
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
        with self.zk(what):
            tx = self.client.transaction()
            for op in ops:
                kind = op[0]
                if kind == "create":
                    tx.create(op[1], op[2], acl=self.acl)
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
    def first_failure(results: list[Any]) -> tuple[int, Exception] | None:
        if not any(isinstance(r, Exception) for r in results):
            return None
        for i, r in enumerate(results):
            if isinstance(r, Exception) and not isinstance(r, RolledBackError | RuntimeInconsistency):
                return i, r
        return 0, results[0]

    # ------------------------------------------------------------------------------------- fence

    def fence_reason(self, grant: LeaseGrant, current: tuple[LeaseRecord, ZnodeStat] | None) -> str | None:
        """Why `grant` no longer holds the lease `current` (as just read), or None while it does."""
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

    def fenced_error(self, grant: LeaseGrant, reason: str, what: str) -> Fenced:
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

    def ours(self, grant: LeaseGrant, what: str) -> tuple[LeaseRecord, ZnodeStat]:
        """The lease record and stat, read in one go, after checking they are `grant`'s (else Fenced)."""
        current = self.lease()
        reason = self.fence_reason(grant, current)
        if reason is not None:
            raise self.fenced_error(grant, reason, what)
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
        self.require_connected("verify lease")
        return int(self.ours(grant, "verify")[1].version)

    # ----------------------------------------------------------------------------- fenced writes

    def fenced(self, grant: LeaseGrant, what: str, attempt: Callable[[], Write | Done]) -> Any:
        """Verify the lease, read and decide (`attempt`), then commit one multi-op that starts with the
        epoch and lease-version checks. Re-evaluate when something changed meanwhile while the lease
        stayed ours."""
        if not self._state_layout_ok:  # a group pipeline's source may act under a lease another source took
            self.ensure_layout()
            self._state_layout_ok = True
        for _ in range(RACE_ATTEMPTS):
            self.require_connected(what)
            rec, stat = self.ours(grant, what)
            step = attempt()
            if isinstance(step, Done):
                return step.value
            try:
                self._commit(grant, rec, stat, step.ops, what)
            except (LeaseRace, DataRace):
                continue
            log.info("%s %s", step.event, kv(pipeline=self.unit, token=f"{grant.token:#x}", **step.fields))
            return step.value
        raise StateConflict(
            f"pipeline {self.pipeline!r}: {what} kept racing with concurrent changes of the same run "
            f"(token {grant.token:#x}); nothing was changed. Make sure only one task of the run acts at a time"
        )

    def lease_guard(self, rec: LeaseRecord, stat: ZnodeStat) -> list[Op]:
        """The checks every fenced multi-op starts with: the epoch (pipeline node) and the lease's version."""
        return [("check", self.nodes.base, rec.epoch), ("check", self.nodes.lease, stat.version)]

    def _commit(self, grant: LeaseGrant, rec: LeaseRecord, stat: ZnodeStat, ops: list[Op], what: str) -> None:
        guard = self.lease_guard(rec, stat)
        failure = self.first_failure(self.multi([*guard, *ops], what))
        if failure is None:
            return
        index, error = failure
        if index < len(guard):
            # A lease check: lost (Fenced), or changed by a concurrent renew of our own (retry).
            current = self.lease()
            reason = self.fence_reason(grant, current)
            if reason is None and current is not None and current[0].epoch != rec.epoch:
                reason = f"the pipeline's lease epoch moved from {rec.epoch} (the node was changed by hand)"
            if reason is not None:
                raise self.fenced_error(grant, reason, what)
            raise LeaseRace()
        if isinstance(error, NoAuthError):
            raise CoordinationError(f"pipeline {self.pipeline!r}: ZooKeeper refused {what} (not authorised)")
        op = ops[index - len(guard)]
        log.info(
            "zk.multi_op_conflict %s",
            kv(pipeline=self.pipeline, action=repr(what), op=op[0], path=op[1], error=type(error).__name__),
        )
        raise DataRace()
