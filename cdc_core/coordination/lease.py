"""The lease record family: acquire, renew, release and break a pipeline's lease, and read it for monitoring.

The lease is a record, not an ephemeral node: Airflow tasks are separate processes, so no single ZooKeeper
session lives as long as a run. The fencing token is the lease node's czxid: a takeover deletes and
re-creates the node, and zxids only grow, so a later acquisition always gets a larger token.

Why the lease node's data version alone cannot fence: a takeover deletes and re-creates the node (so that
its czxid, the token, changes), and a re-created node starts again at data version 0. A zombie that read
version 0 would pass `check(lease, 0)` on its successor's node. So every acquisition also bumps the data
version of the pipeline node (<root>/pipelines/<name>), in the same multi-op that creates the lease node,
and writes the new value into the lease record as its `epoch`. That version never resets (the pipeline node
is never deleted), so `check(pipeline node, epoch)` fails for everyone but the current holder, and every
multi-op a holder commits (renew, release, plan, ack, cursor changes) starts with it, followed by
`check(lease, version)` (`FencedStore.lease_guard`). Clocks play no part in this: they only decide when a
takeover is allowed.
"""


from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

from kazoo.protocol.states import ZnodeStat

from cdc_core.coordination.fenced import RACE_ATTEMPTS, FencedStore, LeaseRace, Op
from cdc_core.coordination.records import COORDINATION_FORMAT, LeaseGrant, LeaseInfo, LeaseRecord, dumps
from cdc_core.coordination.rules import lease_decision
from cdc_core.model.errors import ConfigError, CoordinationError, LeaseHeld, StateConflict
from cdc_core.model.logfmt import iso_ms, kv

log = logging.getLogger("cdc.coordination")


class Lease:
    """The pipeline's lease node and the epoch on the pipeline node (shared by a group pipeline's sources)."""

    def __init__(self, store: FencedStore) -> None:
        self.store = store
        self.pipeline = store.pipeline

    def read(self) -> LeaseInfo | None:
        """The current lease for monitoring, or None when nobody holds one."""
        self.store.require_connected("read lease")
        got = self.store.lease()
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

    def _grant(self, rec: LeaseRecord, token: int) -> LeaseGrant:
        return LeaseGrant(
            pipeline=self.pipeline, holder=rec.holder, token=token, expires_at=rec.expires_at,
            acquired_at=rec.acquired_at,
        )

    def _pipeline_meta(self, holder: str, now: float) -> bytes:
        return dumps({"format": COORDINATION_FORMAT, "pipeline": self.pipeline, "last_acquired_by": holder,
                       "last_acquired_at": now})

    def acquire(self, holder: str, ttl_seconds: float, *, process: dict[str, Any] | None = None) -> LeaseGrant:
        """Take the pipeline's lease, or raise LeaseHeld naming who holds it until when.

        A live lease of the same holder (a retried acquire task of the same run) is returned with
        the same token, renewed for `ttl_seconds`. `process` (a CLI holder's process identity,
        `cdc_core.model.holders`) is recorded with a new lease.
        """
        store, base, lease_node = self.store, self.store.nodes.base, self.store.nodes.lease
        if not holder or len(holder) > 512:
            raise ConfigError(f"pipeline {self.pipeline!r}: a lease holder is a non-empty name (up to 512 chars)")
        if not ttl_seconds > 0:
            raise ConfigError(f"pipeline {self.pipeline!r}: lease ttl must be positive, got {ttl_seconds}")
        store.require_connected("acquire lease")
        store.ensure_layout()
        for _ in range(RACE_ATTEMPTS):
            now = store.clock()
            current = store.lease()
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
                except LeaseRace:
                    continue
                log.info("lease.reentered %s", kv(pipeline=self.pipeline, holder=holder, token=f"{grant.token:#x}"))
                return grant
            got = store.get(base, "reading the pipeline node")
            if got is None:
                store.ensure_layout()  # deleted under us (by hand)
                continue
            base_version = got[1].version
            rec = LeaseRecord(
                holder, now, now + ttl_seconds, now, uuid.uuid4().hex, epoch=base_version + 1, process=process
            )
            ops: list[Op] = [("set", base, self._pipeline_meta(holder, now), base_version)]
            if current is not None:
                # Takeover of an expired lease: delete the version we read and create anew, atomically,
                # so the node's czxid (the token) changes and the epoch moves on: the previous holder is
                # fenced from now on, whatever its clock says.
                ops.append(("delete", lease_node, current[1].version))
            ops.append(("create", lease_node, dumps(rec.to_dict())))
            if store.first_failure(store.multi(ops, "acquiring the lease")) is not None:
                store.ensure_layout()
                continue  # another acquirer, a renew or a release came first: re-read decides
            mine = store.lease()
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

    def _renew_once(self, rec: LeaseRecord, stat: ZnodeStat, ttl_seconds: float, now: float) -> LeaseGrant:
        new = replace(rec, expires_at=now + ttl_seconds, renewed_at=now)
        ops = [("check", self.store.nodes.base, rec.epoch),
               ("set", self.store.nodes.lease, dumps(new.to_dict()), stat.version)]
        if self.store.first_failure(self.store.multi(ops, "renewing the lease")) is not None:
            raise LeaseRace()
        return self._grant(new, stat.czxid)

    def renew(self, grant: LeaseGrant, ttl_seconds: float) -> LeaseGrant:
        """Extend the lease (compare-and-set on its version, under the epoch check); Fenced when it is
        no longer ours.

        Renewing after our own clock says the lease expired is fine as long as nobody took it over:
        the token (czxid) and the epoch are unchanged, and a takeover would have changed both.
        """
        if not ttl_seconds > 0:
            raise ConfigError(f"pipeline {self.pipeline!r}: lease ttl must be positive, got {ttl_seconds}")
        self.store.require_connected("renew lease")
        for _ in range(RACE_ATTEMPTS):
            rec, stat = self.store.ours(grant, "renew")
            now = self.store.clock()
            if now >= rec.expires_at:
                log.warning("lease.renew_after_expiry %s", kv(pipeline=self.pipeline, token=f"{grant.token:#x}"))
            try:
                return self._renew_once(rec, stat, ttl_seconds, now)
            except LeaseRace:
                continue  # a concurrent renew of ours, or a takeover: re-read decides
        raise CoordinationError(f"pipeline {self.pipeline!r}: the lease kept changing while renewing it; retry")

    def release(self, grant: LeaseGrant) -> None:
        """Give the lease up. Releasing a lease that is no longer ours is a logged no-op."""
        store = self.store
        store.require_connected("release lease")
        for _ in range(RACE_ATTEMPTS):
            current = store.lease()
            reason = store.fence_reason(grant, current)
            if reason is not None:
                log.info(
                    "lease.release_noop %s",
                    kv(pipeline=self.pipeline, holder=repr(grant.holder), token=f"{grant.token:#x}",
                        reason=repr(reason)),
                )
                return
            assert current is not None
            rec, stat = current
            ops = [("check", store.nodes.base, rec.epoch), ("delete", store.nodes.lease, stat.version)]
            if store.first_failure(store.multi(ops, "releasing the lease")) is not None:
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
        store = self.store
        store.require_connected("break lease")
        for _ in range(RACE_ATTEMPTS):
            current = store.lease()
            if current is None:
                raise StateConflict(f"pipeline {self.pipeline!r}: no lease to break (nobody holds it)")
            rec, stat = current
            if rec.holder != holder:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: the lease is held by {rec.holder!r}, not {holder!r}; "
                    f"check `cdc lease show {self.pipeline}` and name the holder shown there"
                )
            got = store.get(store.nodes.base, "reading the pipeline node")
            if got is None:
                continue
            ops = [
                ("set", store.nodes.base, self._pipeline_meta(f"broken:{holder}", store.clock()), got[1].version),
                ("delete", store.nodes.lease, stat.version),
            ]
            if store.first_failure(store.multi(ops, "breaking the lease")) is not None:
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
