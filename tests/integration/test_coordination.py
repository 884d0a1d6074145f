"""The coordination protocol against the real ZooKeeper: lease, fencing, plans, acks, backfills, ACLs.

Every test works under its own `zk_root`. Tests that disturb a session (expiry, ACLs) use clients of
their own, never the shared `zk_client`. Waits are conditions with deadlines, never bare sleeps.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.protocol.states import KazooState

from cdc_core.coordination import (
    Cursor,
    LeaseGrant,
    PipelineCoordinator,
    make_zk_client,
)
from cdc_core.model.errors import ConfigError, CoordinationError, Fenced, LeaseHeld, StateConflict
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.window_plan import KIND_BACKFILL, WindowPlan

pytestmark = pytest.mark.integration

SERVER = ServerIdentity("mariadb", 1)


def pos(offset: int, server: ServerIdentity = SERVER, epoch: int = 0) -> BinlogPosition:
    return BinlogPosition("mysql-bin.000001", offset, server, gtid=f"0-{server.server_id}-{offset}", epoch=epoch)


def plan(
    seq: int,
    start: int,
    end: int,
    kind: str = "stream",
    pipeline: str = "orders",
    tables: tuple[str, ...] | None = None,
) -> WindowPlan:
    return WindowPlan(
        pipeline,
        seq,
        pos(start),
        pos(end),
        kind=kind,
        transactions=1,
        events=3,
        bytes=100,
        planned_at=1_700_000_000.0,
        tables=tables,
        info={"holder": "test"},
    )


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def raw(zk: KazooClient, path: str) -> tuple[bytes, int]:
    data, stat = zk.get(path)
    return data, stat.version


@pytest.fixture
def coord(zk_client: KazooClient, zk_root: str) -> Iterator[PipelineCoordinator]:
    c = PipelineCoordinator(zk_client, zk_root, "orders")
    yield c
    c.close()


@pytest.fixture
def new_client(services: Any) -> Iterator[Callable[..., KazooClient]]:
    """Clients of the test's own (separate sessions), stopped afterwards."""
    made: list[KazooClient] = []

    def make(**kw: Any) -> KazooClient:
        client = make_zk_client(services.zk_hosts, **kw)
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()


# ------------------------------------------------------------------------------------------ lease


def test_two_concurrent_acquirers_exactly_one_wins(new_client: Callable[..., KazooClient], zk_root: str) -> None:
    coords = [PipelineCoordinator(new_client(), zk_root, "orders") for _ in range(2)]
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[f"run-{i}"] = coords[i].acquire(f"run-{i}", 600)
        except LeaseHeld as e:
            outcomes[f"run-{i}"] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    grants = {h: o for h, o in outcomes.items() if isinstance(o, LeaseGrant)}
    refused = {h: o for h, o in outcomes.items() if isinstance(o, LeaseHeld)}
    assert len(grants) == 1 and len(refused) == 1, outcomes
    (winner, grant), (_, error) = next(iter(grants.items())), next(iter(refused.items()))
    assert f"held by {winner!r} until " in str(error) and "Z " in str(error)  # UTC ISO
    assert error.exit_code == 75
    lease = coords[0].read_lease()
    assert lease is not None and lease.holder == winner and lease.token == grant.token


def test_same_holder_reacquires_the_same_token(coord: PipelineCoordinator) -> None:
    first = coord.acquire("dag/run-1", 60)
    again = coord.acquire("dag/run-1", 600)  # a retried acquire task of the same run
    assert again.token == first.token and again.holder == first.holder
    assert again.expires_at > first.expires_at
    with pytest.raises(LeaseHeld, match="'dag/run-1'"):
        coord.acquire("dag/run-2", 600)


def test_grant_travels_as_a_dict_and_still_verifies(coord: PipelineCoordinator) -> None:
    grant = coord.acquire("dag/run-1", 600)
    restored = LeaseGrant.from_dict(json.loads(json.dumps(grant.to_dict())))  # as XCom carries it
    version = coord.verify(restored)
    assert coord.renew(restored, 600).token == grant.token
    assert coord.verify(restored) == version + 1  # every renew changes the version


def test_expired_lease_takeover_gives_a_larger_token(zk_client: KazooClient, zk_root: str) -> None:
    a = PipelineCoordinator(zk_client, zk_root, "orders")
    # B's clock runs an hour ahead: it sees A's lease as expired. Skew can only fence A early.
    b = PipelineCoordinator(zk_client, zk_root, "orders", clock=lambda: time.time() + 3600)
    grant_a = a.acquire("run-a", 600)
    grant_b = b.acquire("run-b", 600)
    assert grant_b.token > grant_a.token
    with pytest.raises(Fenced, match="taken over by 'run-b'"):
        a.verify(grant_a)
    with pytest.raises(LeaseHeld, match="held by 'run-b'"):
        a.acquire("run-a", 600)  # by A's clock B's lease is live
    a.release(grant_a)  # not ours any more: a logged no-op
    assert a.read_lease().token == grant_b.token  # type: ignore[union-attr]
    b.release(grant_b)
    assert a.read_lease() is None
    grant_c = a.acquire("run-c", 600)
    assert grant_c.token > grant_b.token


def test_zombie_is_fenced_and_the_cursor_holds_the_successors_value(zk_client: KazooClient, zk_root: str) -> None:
    a = PipelineCoordinator(zk_client, zk_root, "orders")
    b = PipelineCoordinator(zk_client, zk_root, "orders")
    grant_a = a.acquire("run-a", 0.3)
    a.set_start(grant_a, pos(4))
    stored = a.store_plan(grant_a, plan(1, 4, 50))
    wait_for(lambda: time.time() > grant_a.expires_at + 0.01, "A's lease to expire")

    grant_b = b.acquire("run-b", 600)
    assert grant_b.token > grant_a.token
    pending = b.pending_window()
    assert pending == stored  # the successor replays exactly what the zombie planned
    cursor_b = b.ack_window(grant_b, 1, {"changes": 3})
    assert cursor_b.seq == 1 and cursor_b.position == pos(50)
    cursor_bytes = raw(zk_client, b.cursor_path)

    with pytest.raises(Fenced, match="taken over by 'run-b'"):
        a.store_plan(grant_a, plan(2, 50, 60))
    with pytest.raises(Fenced):
        a.ack_window(grant_a, 1, {"changes": 999})
    with pytest.raises(Fenced):
        a.renew(grant_a, 600)
    with pytest.raises(Fenced):
        a.start_backfill(grant_a, pos(4), pos(50), (), "zombie")
    with pytest.raises(Fenced):
        a.prune_windows(grant_a, 0, 0)
    a.release(grant_a)  # no-op
    assert raw(zk_client, b.cursor_path) == cursor_bytes
    assert a.read_cursor() == cursor_b
    assert a.get_window(2) is None
    assert a.get_window(1).result == {"changes": 3}  # type: ignore[union-attr]
    assert a.read_lease().holder == "run-b"  # type: ignore[union-attr]


def test_renew_refuses_a_bad_ttl_and_release_removes_the_lease(coord: PipelineCoordinator) -> None:
    grant = coord.acquire("run-1", 600)
    with pytest.raises(ConfigError):
        coord.renew(grant, 0)
    coord.release(grant)
    assert coord.read_lease() is None
    with pytest.raises(Fenced, match="gone"):
        coord.verify(grant)
    coord.release(grant)  # twice: still a no-op


# ---------------------------------------------------------------------------------- plans and acks


def test_plans_are_immutable_and_follow_the_rules(coord: PipelineCoordinator, zk_client: KazooClient) -> None:
    grant = coord.acquire("run-1", 600)
    assert coord.read_cursor() == Cursor()
    assert coord.pending_window() is None
    first = plan(1, 4, 50)
    with pytest.raises(StateConflict, match="must be 1"):
        coord.store_plan(grant, plan(2, 4, 50))
    coord.store_plan(grant, first)
    before = raw(zk_client, coord.window_path(1))

    with pytest.raises(StateConflict, match="planned and not acked"):
        coord.store_plan(grant, plan(1, 4, 60))  # a different plan for the same window
    with pytest.raises(StateConflict, match="planned and not acked"):
        coord.store_plan(grant, plan(2, 50, 60))
    assert coord.store_plan(grant, first).plan == first  # the identical plan again: a retried step
    assert raw(zk_client, coord.window_path(1)) == before
    assert coord.pending_window().plan == first  # type: ignore[union-attr]

    coord.ack_window(grant, 1, {})
    with pytest.raises(StateConflict, match="must be 2"):
        coord.store_plan(grant, plan(3, 50, 60))
    with pytest.raises(StateConflict, match="must start at the cursor"):
        coord.store_plan(grant, plan(2, 51, 60))
    with pytest.raises(StateConflict, match="belongs to pipeline"):
        coord.store_plan(grant, plan(2, 50, 60, pipeline="billing"))
    coord.store_plan(grant, plan(2, 50, 60))
    assert coord.get_window(1).plan == first  # type: ignore[union-attr]


def test_ack_moves_the_cursor_exactly_and_is_idempotent(coord: PipelineCoordinator, zk_client: KazooClient) -> None:
    grant = coord.acquire("run-1", 600)
    coord.set_start(grant, pos(4))
    with pytest.raises(StateConflict, match="never planned"):
        coord.ack_window(grant, 1, {})
    p1 = plan(1, 4, 50)
    coord.store_plan(grant, p1)
    assert coord.read_cursor().position == pos(4)
    cursor = coord.ack_window(grant, 1, {"changes": 3, "tables": {"db.t": {"changes": 3}}})
    assert (cursor.seq, cursor.position, cursor.backfill) == (1, p1.end, None)
    assert coord.read_cursor() == cursor
    record = coord.get_window(1)
    assert record is not None and record.state == "acked" and record.result["changes"] == 3
    assert record.acked_at is not None and record.plan == p1
    window_bytes, cursor_bytes = raw(zk_client, coord.window_path(1)), raw(zk_client, coord.cursor_path)

    assert coord.ack_window(grant, 1, {"changes": 999}) == cursor  # a retried ack: no-op
    assert raw(zk_client, coord.window_path(1)) == window_bytes
    assert raw(zk_client, coord.cursor_path) == cursor_bytes
    assert coord.pending_window() is None

    coord.store_plan(grant, plan(2, 50, 80))
    coord.ack_window(grant, 2, {"changes": 1})
    assert [w.seq for w in coord.recent_windows(10)] == [2, 1]
    assert [w.seq for w in coord.recent_windows(1)] == [2]
    assert coord.read_cursor().position == pos(80)


def test_set_start_and_rebase(coord: PipelineCoordinator) -> None:
    grant = coord.acquire("run-1", 600)
    coord.set_start(grant, pos(100))
    coord.set_start(grant, pos(100))  # same position: no-op
    with pytest.raises(StateConflict, match="already stands"):
        coord.set_start(grant, pos(200))
    with pytest.raises(StateConflict, match="backward"):
        coord.rebase_cursor(grant, pos(50), reason="test")
    failover = ServerIdentity("mariadb", 2)
    with pytest.raises(StateConflict, match="later epoch"):
        coord.rebase_cursor(grant, pos(7, server=failover), reason="failover without an epoch")
    cursor = coord.rebase_cursor(grant, pos(7, server=failover, epoch=1), reason="gtid")
    assert cursor.position == pos(7, server=failover, epoch=1)
    first = WindowPlan("orders", 1, pos(7, server=failover, epoch=1), pos(9, server=failover, epoch=1))
    coord.store_plan(grant, first)
    with pytest.raises(StateConflict, match="planned and not acked"):
        coord.rebase_cursor(grant, pos(8, server=failover, epoch=1))


def test_backfill_flow(coord: PipelineCoordinator) -> None:
    grant = coord.acquire("run-1", 600)
    coord.set_start(grant, pos(4))
    coord.store_plan(grant, plan(1, 4, 100))
    with pytest.raises(StateConflict, match="planned and not acked"):
        coord.start_backfill(grant, pos(10), pos(100), ("db.t",), "ops")
    coord.ack_window(grant, 1, {})
    with pytest.raises(StateConflict, match="at or before the cursor"):
        coord.start_backfill(grant, pos(10), pos(120), ("db.t",), "ops")

    cursor = coord.start_backfill(grant, pos(10), pos(100), ("db.t",), "ops")
    assert cursor.backfill is not None and cursor.backfill.position == pos(10)
    assert cursor.backfill.requested_by == "ops" and cursor.position == pos(100)
    with pytest.raises(StateConflict, match="already active"):
        coord.start_backfill(grant, pos(10), pos(100), ("db.t",), "ops")
    with pytest.raises(StateConflict, match="backfill is active"):
        coord.store_plan(grant, plan(2, 100, 120))
    with pytest.raises(StateConflict, match="where the backfill stands"):
        coord.store_plan(grant, plan(2, 11, 60, kind=KIND_BACKFILL, tables=("db.t",)))

    coord.store_plan(grant, plan(2, 10, 60, kind=KIND_BACKFILL, tables=("db.t",)))
    with pytest.raises(StateConflict, match="planned and not acked"):
        coord.cancel_backfill(grant)
    mid = coord.ack_window(grant, 2, {})
    assert mid.seq == 2 and mid.position == pos(100)  # the stream position never moves in a backfill
    assert mid.backfill is not None and mid.backfill.position == pos(60)

    coord.store_plan(grant, plan(3, 60, 100, kind=KIND_BACKFILL, tables=("db.t",)))
    done = coord.ack_window(grant, 3, {})
    assert done.backfill is None and done.position == pos(100) and done.seq == 3
    coord.store_plan(grant, plan(4, 100, 130))
    assert coord.ack_window(grant, 4, {}).position == pos(130)

    coord.start_backfill(grant, pos(10), pos(130), (), "ops")
    assert coord.cancel_backfill(grant).backfill is None
    assert coord.cancel_backfill(grant).backfill is None  # nothing to cancel: no-op
    assert coord.read_cursor().position == pos(130)


def test_prune_windows_keeps_the_last_acked_and_the_pending(zk_client: KazooClient, zk_root: str) -> None:
    now = [1_700_000_000.0]
    coord = PipelineCoordinator(zk_client, zk_root, "orders", clock=lambda: now[0])
    grant = coord.acquire("run-1", 10**9)
    coord.set_start(grant, pos(4))
    bounds = [4, 10, 20, 30, 40, 50]
    for seq in range(1, 6):  # acked at T, T+100, ..., T+400
        coord.store_plan(grant, plan(seq, bounds[seq - 1], bounds[seq]))
        coord.ack_window(grant, seq, {})
        now[0] += 100
    coord.store_plan(grant, plan(6, 50, 60))  # pending; now = T+500
    assert coord.prune_windows(grant, keep_last=0, older_than_seconds=10_000) == 0  # none old enough
    assert coord.prune_windows(grant, keep_last=3, older_than_seconds=350) == 2  # 1 and 2 (3 is too young)
    assert [w.seq for w in coord.recent_windows(10)] == [6, 5, 4, 3]
    assert coord.prune_windows(grant, keep_last=0, older_than_seconds=0) == 2  # 3, 4; never 5 or 6
    assert [w.seq for w in coord.recent_windows(10)] == [6, 5]
    assert coord.pending_window().seq == 6  # type: ignore[union-attr]
    assert coord.ack_window(grant, 6, {}).seq == 6


# ------------------------------------------------------------------------------ nothing partial


def test_a_failed_multi_op_changes_nothing(coord: PipelineCoordinator, zk_client: KazooClient) -> None:
    grant = coord.acquire("run-1", 600)
    coord.set_start(grant, pos(4))
    coord.store_plan(grant, plan(1, 4, 50))
    window_before = zk_client.get(coord.window_path(1))[0]
    cursor_before = zk_client.get(coord.cursor_path)[0]

    def bump_cursor(action: str) -> None:
        # Another writer of the same run touches the cursor between read and commit, every time:
        # the window update (op 2) would succeed on its own; the cursor CAS (op 3) fails.
        data, stat = zk_client.get(coord.cursor_path)
        zk_client.set(coord.cursor_path, data, version=stat.version)

    coord.before_commit = bump_cursor
    with pytest.raises(StateConflict, match="kept racing"):
        coord.ack_window(grant, 1, {"changes": 3})
    coord.before_commit = None
    assert zk_client.get(coord.window_path(1))[0] == window_before  # still 'planned', no result
    assert zk_client.get(coord.cursor_path)[0] == cursor_before
    assert coord.get_window(1).state == "planned"  # type: ignore[union-attr]

    # A takeover between read and commit. Neither lease node was ever renewed, so both are at data
    # version 0: `check(lease, 0)` alone would pass on the successor's node (ABA). The epoch check on
    # the pipeline node fails instead -> Fenced, and nothing lands.
    usurper = PipelineCoordinator(zk_client, coord.root, "orders", clock=lambda: time.time() + 3600)
    taken: list[LeaseGrant] = []
    coord.before_commit = lambda action: taken.append(usurper.acquire("run-2", 600)) if not taken else None
    with pytest.raises(Fenced, match="taken over by 'run-2'"):
        coord.ack_window(grant, 1, {"changes": 3})
    coord.before_commit = None
    assert zk_client.get(coord.window_path(1))[0] == window_before
    assert zk_client.get(coord.cursor_path)[0] == cursor_before
    # The successor finishes the same window.
    assert usurper.ack_window(taken[0], 1, {"changes": 3}).position == pos(50)


def test_a_zombie_renew_or_release_cannot_touch_the_successors_lease(
    coord: PipelineCoordinator, zk_client: KazooClient
) -> None:
    usurper = PipelineCoordinator(zk_client, coord.root, "orders", clock=lambda: time.time() + 3600)
    for act in ("renew", "release"):
        grant = coord.acquire(f"run-{act}", 600)
        assert zk_client.get(coord.lease_path)[1].version == 0
        taken: list[LeaseGrant] = []

        def take_over(action: str) -> None:
            if not taken:  # between the zombie's read and its write; the new node is at version 0 too
                taken.append(usurper.acquire("run-next", 600))
                assert zk_client.get(coord.lease_path)[1].version == 0

        coord.before_commit = take_over
        if act == "renew":
            with pytest.raises(Fenced, match="taken over by 'run-next'"):
                coord.renew(grant, 600)
        else:
            coord.release(grant)  # re-reads, sees it is not ours any more: a no-op
        coord.before_commit = None
        lease = coord.read_lease()
        assert lease is not None and lease.holder == "run-next" and lease.token == taken[0].token
        usurper.verify(taken[0])
        usurper.release(taken[0])


def test_a_store_plan_race_stores_no_window(coord: PipelineCoordinator, zk_client: KazooClient) -> None:
    grant = coord.acquire("run-1", 600)
    coord.set_start(grant, pos(4))
    bumps = []

    def bump_cursor(action: str) -> None:
        data, stat = zk_client.get(coord.cursor_path)
        zk_client.set(coord.cursor_path, data, version=stat.version)
        bumps.append(action)

    coord.before_commit = bump_cursor
    with pytest.raises(StateConflict):
        coord.store_plan(grant, plan(1, 4, 50))
    coord.before_commit = None
    assert len(bumps) >= 2  # retried with fresh reads before giving up
    assert not zk_client.exists(coord.window_path(1))
    # A concurrent renew of our own changes only the lease version: the lease check fails, the lease
    # is still ours, so the operation re-reads and lands on the next attempt.
    renewed: list[LeaseGrant] = []

    def renew_once(action: str) -> None:
        if not renewed and action.startswith("store plan"):
            renewed.append(coord.renew(grant, 600))

    coord.before_commit = renew_once
    assert coord.store_plan(grant, plan(1, 4, 50)).seq == 1
    coord.before_commit = None
    assert renewed and zk_client.exists(coord.window_path(1))


# ------------------------------------------------------------------------------- session and ACLs


def test_session_expiry_mid_run(
    services: Any, new_client: Callable[..., KazooClient], zk_root: str, zk_client: KazooClient
) -> None:
    a = new_client()
    coord = PipelineCoordinator(a, zk_root, "orders")
    grant = coord.acquire("run-1", 600)
    coord.set_start(grant, pos(4))
    coord.store_plan(grant, plan(1, 4, 50))
    snapshot = {p: zk_client.get(p)[0] for p in (coord.lease_path, coord.cursor_path, coord.window_path(1))}

    # Hold kazoo's connection thread in SUSPENDED, then in LOST, while the test acts: the states are
    # otherwise gone within milliseconds (kazoo reconnects by itself).
    seen = {s: threading.Event() for s in (KazooState.SUSPENDED, KazooState.LOST, KazooState.CONNECTED)}
    release = {KazooState.SUSPENDED: threading.Event(), KazooState.LOST: threading.Event()}

    def hold(state: str) -> None:
        first = not seen[state].is_set()
        seen[state].set()
        if first and state in release:
            release[state].wait(30)

    old_session = a.client_id
    a.add_listener(hold)
    try:
        expirer = KazooClient(hosts=services.zk_hosts, client_id=a.client_id)
        expirer.start(timeout=15)
        expirer.stop()  # closes a's session
        expirer.close()

        def refuses_everything() -> None:
            for act in (
                lambda: coord.ack_window(grant, 1, {}),
                lambda: coord.store_plan(grant, plan(2, 50, 60)),
                lambda: coord.renew(grant, 600),
                lambda: coord.release(grant),
                lambda: coord.acquire("run-1", 600),
                coord.read_cursor,
                coord.pending_window,
            ):
                with pytest.raises(CoordinationError, match="not safe to act"):
                    act()

        assert seen[KazooState.SUSPENDED].wait(30)
        refuses_everything()
        release[KazooState.SUSPENDED].set()
        assert seen[KazooState.LOST].wait(30)
        refuses_everything()
        release[KazooState.LOST].set()
        assert seen[KazooState.CONNECTED].wait(30)
        wait_for(lambda: coord.state == KazooState.CONNECTED, "the coordinator to see CONNECTED")
    finally:
        release[KazooState.SUSPENDED].set()
        release[KazooState.LOST].set()
        a.remove_listener(hold)

    assert a.client_id[0] != old_session[0]  # a new session
    assert {p: zk_client.get(p)[0] for p in snapshot} == snapshot  # nothing changed meanwhile
    assert coord.needs_reverify
    coord.verify(grant)  # the lease is a record, not an ephemeral node: it survived the session
    assert not coord.needs_reverify
    cursor = coord.ack_window(grant, 1, {"changes": 3})
    assert cursor.seq == 1 and cursor.position == pos(50)
    coord.release(grant)
    coord.close()


def test_coordinator_refuses_on_a_stopped_client(new_client: Callable[..., KazooClient], zk_root: str) -> None:
    client = new_client()
    coord = PipelineCoordinator(client, zk_root, "orders")
    client.stop()
    with pytest.raises(CoordinationError, match="not safe to act"):
        coord.read_cursor()
    with pytest.raises(CoordinationError, match="not safe to act"):
        coord.acquire("run-1", 600)


def test_the_merge_jobs_fence_outlives_the_expiry_of_its_own_session(
    services: Any, zk_client: KazooClient, zk_root: str
) -> None:
    """The fence's session expiring under a merge job (a long pause) does not fail the window: the check
    waits for kazoo's new session and reads the lease again; it still says fenced once the lease moved."""
    from cdc_core.coordination.fence import zk_fence_check

    coord = PipelineCoordinator(zk_client, zk_root, "orders")
    grant = coord.acquire("run-1", 600)
    fence, close = zk_fence_check(services.zk_hosts, zk_root, "orders", grant.token)
    try:
        fence()
        old_session = fence.client.client_id
        lost, release = threading.Event(), threading.Event()

        def hold_lost(state: str) -> None:  # keeps kazoo's connection thread in LOST until released
            if state == KazooState.LOST and not lost.is_set():
                lost.set()
                release.wait(30)

        fence.client.add_listener(hold_lost)
        expirer = KazooClient(hosts=services.zk_hosts, client_id=old_session)
        expirer.start(timeout=15)
        expirer.stop()  # closes the fence's session
        expirer.close()
        assert lost.wait(30), "the fence's session was not expired"
        outcome: list[BaseException | None] = []

        def check_now() -> None:
            try:
                fence()
                outcome.append(None)
            except BaseException as e:  # asserted below
                outcome.append(e)

        checker = threading.Thread(target=check_now)
        checker.start()
        time.sleep(1.0)
        assert fence.client.state == KazooState.LOST and not outcome  # the check waits for a session
        release.set()
        checker.join(30)
        assert outcome == [None]  # confirmed through the new session instead of refusing
        assert fence.client.client_id[0] != old_session[0]
        coord.release(grant)
        successor = coord.acquire("run-2", 600)
        assert successor.token != grant.token
        with pytest.raises(Fenced, match="not this run's"):
            fence()
    finally:
        close()


def test_digest_acl_locks_out_every_other_identity(
    new_client: Callable[..., KazooClient], zk_client: KazooClient, zk_root: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(1)  # everything, kazoo's request dumps included
    secret = "s3cret-" + str(time.time_ns())
    owner = new_client(auth=("cdc-owner", secret))
    try:
        coord = PipelineCoordinator(owner, zk_root, "orders")
        grant = coord.acquire("run-1", 600)
        coord.set_start(grant, pos(4))
        coord.store_plan(grant, plan(1, 4, 50))

        acls, _ = owner.get_acls(coord.lease_path)
        assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls] == [("digest", "cdc-owner", 31)]
        for path in (zk_root, coord.base, coord.cursor_path, coord.windows_path, coord.window_path(1)):
            assert all(a.id.scheme == "digest" for a in owner.get_acls(path)[0]), path

        intruder = new_client(auth=("intruder", "other-password"))
        for other in (intruder, zk_client):  # another identity, and no identity at all
            for path in (coord.base, coord.lease_path, coord.cursor_path, coord.window_path(1)):
                with pytest.raises(NoAuthError):
                    other.get(path)
            with pytest.raises(NoAuthError):
                other.get_children(coord.windows_path)
            with pytest.raises(NoAuthError):
                other.set(coord.cursor_path, b"{}")
            with pytest.raises(NoAuthError):
                other.set(coord.window_path(1), b"{}")
            with pytest.raises(NoAuthError):
                other.delete(coord.lease_path)
            with pytest.raises(NoAuthError):
                other.create(coord.windows_path + "/0000000002", b"{}")
            # The product reports the refusal; it never reads it as "no cursor" or "no lease".
            theirs = PipelineCoordinator(other, zk_root, "orders")
            with pytest.raises(CoordinationError, match="not authorised"):
                theirs.read_cursor()
            with pytest.raises(CoordinationError, match="not authorised"):
                theirs.read_lease()
            with pytest.raises(CoordinationError, match="not authorised"):
                theirs.acquire("intruder", 600)
            theirs.close()

        assert coord.ack_window(grant, 1, {}).seq == 1  # the owner still works
        coord.close()
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "Sending request" in logged  # kazoo's debug dumps were captured ...
        assert secret not in logged and secret not in caplog.text  # ... without the password
        hashed = owner.get_acls(coord.lease_path)[0][0].id.id
        assert hashed not in logged
    finally:
        owner.delete(zk_root, recursive=True)  # the fixture's open client may not


def test_digest_acl_covers_the_whole_subtree_and_the_merge_jobs_fence_check(
    services: Any,
    new_client: Callable[..., KazooClient],
    zk_client: KazooClient,
    zk_root: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every node the pipeline creates (root, pipelines, lease, cursor, window records, snapshot) is the owner's
    alone: another identity or none can neither read, list, change, delete, add to, nor re-ACL any of them (only
    `exists`, which ZooKeeper never guards, shows a node's stat). The Spark job's fence check reads the lease
    with CDC_ZK_AUTH, and without it (or with another identity) says it is not authorised and how to fix that."""
    from kazoo.security import OPEN_ACL_UNSAFE

    from cdc_core.coordination.fence import zk_fence_check
    from cdc_core.model.config.sections import ZK_AUTH_ENV

    secret = "s3cret-" + str(time.time_ns())
    owner = new_client(auth=("cdc-owner", secret))
    try:
        coord = PipelineCoordinator(owner, zk_root, "orders")
        grant = coord.acquire("run-1", 600)
        coord.set_start(grant, pos(4))
        coord.store_plan(grant, plan(1, 4, 50))
        coord.ack_window(grant, 1, {})
        coord.store_plan(grant, plan(2, 50, 90))  # an acked and a planned window record
        nodes: list[str] = []
        stack = [zk_root]
        while stack:
            path = stack.pop()
            nodes.append(path)
            stack += [f"{path}/{c}" for c in owner.get_children(path)]
        expected = {
            zk_root,
            f"{zk_root}/pipelines",
            coord.base,
            coord.lease_path,
            coord.cursor_path,
            coord.windows_path,
            coord.window_path(1),
            coord.window_path(2),
            coord.snapshot_path,
        }
        assert set(nodes) == expected
        for path in nodes:
            acls, _ = owner.get_acls(path)
            assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls] == [("digest", "cdc-owner", 31)], path

        intruder = new_client(auth=("intruder", "other-password"))
        for other in (intruder, zk_client):  # another identity, and no identity at all
            for path in nodes:
                for attempt in (
                    lambda p=path: other.get(p),
                    lambda p=path: other.get_children(p),
                    lambda p=path: other.get_acls(p),
                    lambda p=path: other.set(p, b"{}"),
                    lambda p=path: other.set_acls(p, OPEN_ACL_UNSAFE),
                    lambda p=path: other.create(f"{p}/intruder", b""),
                ):
                    with pytest.raises(NoAuthError):
                        attempt()
                if path != zk_root:
                    with pytest.raises(NoAuthError):
                        other.delete(path)
                assert other.exists(path) is not None  # stat only: ZooKeeper does not guard exists()
        assert coord.read_cursor().seq == 1 and coord.pending_window().plan.seq == 2  # type: ignore[union-attr]

        # The merge job's fence check, exactly as spark-submit runs it: credentials from the environment.
        hosts = services.zk_hosts
        monkeypatch.setenv(ZK_AUTH_ENV, f"digest:cdc-owner:{secret}")
        check, close = zk_fence_check(hosts, zk_root, "orders", grant.token)
        try:
            check()  # ours: passes
        finally:
            close()
        for auth in ("digest:intruder:other-password", None):
            if auth is None:
                monkeypatch.delenv(ZK_AUTH_ENV)
            else:
                monkeypatch.setenv(ZK_AUTH_ENV, auth)
            check, close = zk_fence_check(hosts, zk_root, "orders", grant.token)
            try:
                with pytest.raises(CoordinationError, match=rf"not authorised.*{ZK_AUTH_ENV}=digest:<user>:<password>"):
                    check()
            finally:
                close()
        coord.close()
    finally:
        owner.delete(zk_root, recursive=True)  # the fixture's open client may not


def test_two_pipelines_side_by_side(zk_client: KazooClient, zk_root: str) -> None:
    orders = PipelineCoordinator(zk_client, zk_root, "orders")
    billing = PipelineCoordinator(zk_client, zk_root, "billing")
    go = orders.acquire("run-o", 600)
    gb = billing.acquire("run-b", 600)  # each pipeline has its own lease
    orders.set_start(go, pos(4))
    billing.set_start(gb, pos(1000))
    orders.store_plan(go, plan(1, 4, 50))
    billing.store_plan(gb, plan(1, 1000, 1200, pipeline="billing"))
    orders.ack_window(go, 1, {"p": "orders"})
    assert billing.pending_window() is not None  # untouched by the orders ack
    billing.ack_window(gb, 1, {"p": "billing"})

    assert orders.read_cursor().position == pos(50)
    assert billing.read_cursor().position == pos(1200)
    assert orders.get_window(1).result == {"p": "orders"}  # type: ignore[union-attr]
    assert billing.get_window(1).result == {"p": "billing"}  # type: ignore[union-attr]
    with pytest.raises(Fenced, match="for pipeline 'orders'"):
        billing.ack_window(go, 1, {})  # one pipeline's grant is worthless for another
    assert sorted(zk_client.get_children(f"{zk_root}/pipelines")) == ["billing", "orders"]
    for c in (orders, billing):
        assert sorted(zk_client.get_children(c.base)) == ["cursor", "lease", "snapshot", "windows"]
    orders.release(go)
    assert billing.read_lease().holder == "run-b"  # type: ignore[union-attr]


def test_last_error_is_a_note_that_changes_no_state(coord: PipelineCoordinator, zk_client: KazooClient) -> None:
    assert coord.read_last_error() is None
    g = coord.acquire("run-a", 600)
    coord.set_start(g, pos(4))
    before = {p: raw(zk_client, f"{coord.base}/{p}") for p in ("cursor", "lease")}
    coord.record_error("run-a", "merge_window", 1, "LakeError: boom")
    coord.record_error("run-b", "stage_window", 2, "SourceError: later")  # overwrites: the last one counts
    last = coord.read_last_error()
    assert last is not None
    assert (last["holder"], last["step"], last["seq"], last["message"]) == (
        "run-b",
        "stage_window",
        2,
        "SourceError: later",
    )
    assert {p: raw(zk_client, f"{coord.base}/{p}") for p in ("cursor", "lease")} == before
    coord.release(g)


def test_breaking_a_dead_runs_lease_fences_it(coord: PipelineCoordinator) -> None:
    dead = coord.acquire("run-dead", 600)
    coord.set_start(dead, pos(4))
    with pytest.raises(StateConflict, match="held by 'run-dead', not 'run-x'"):
        coord.break_lease("run-x")  # one breaks the lease one looked at
    broken = coord.break_lease("run-dead")
    assert broken.holder == "run-dead" and broken.token == dead.token
    assert coord.read_lease() is None
    nxt = coord.acquire("run-next", 600)  # no waiting for the expiry
    assert nxt.token > dead.token
    with pytest.raises(Fenced):
        coord.store_plan(dead, plan(1, 4, 50))  # the "dead" run, alive after all, changes nothing
    coord.store_plan(nxt, plan(1, 4, 50))
    with pytest.raises(StateConflict, match="no lease to break"):
        coord.release(nxt) or coord.break_lease("run-next")


def test_bad_names_are_refused(zk_client: KazooClient) -> None:
    with pytest.raises(ConfigError):
        PipelineCoordinator(zk_client, "/r", "Orders/x")
    with pytest.raises(ConfigError):
        PipelineCoordinator(zk_client, "relative", "orders")


def test_a_request_over_zookeepers_limit_is_refused_clearly_and_changes_nothing(
    coord: PipelineCoordinator, zk_client: KazooClient
) -> None:
    """ZooKeeper answers a request over jute.maxbuffer (1 MB) by dropping the connection, which reads as a
    connection loss that a retry repeats forever: the coordinator refuses it first, with what to change."""
    grant = coord.acquire("run-1", 600)
    coord.set_start(grant, pos(4))
    many = tuple(f"{'s' * 64}.{f't{i:05d}'.ljust(64, 'x')}" for i in range(8000))  # ~1 MB of names
    with pytest.raises(CoordinationError, match=r"store plan 1 would write [\d,]+ bytes.*max_tables_per_window"):
        coord.store_plan(grant, plan(1, 4, 50, tables=many))
    assert coord.pending_window() is None and coord.read_cursor().position == pos(4)

    coord.store_plan(grant, plan(1, 4, 50))
    before = raw(zk_client, coord.window_path(1)), raw(zk_client, coord.cursor_path)
    huge = {"tables": {name: {"changes": 1, "status": "committed"} for name in many}}
    with pytest.raises(CoordinationError, match="ack window 1 would write"):
        coord.ack_window(grant, 1, huge)
    assert (raw(zk_client, coord.window_path(1)), raw(zk_client, coord.cursor_path)) == before
    cursor = coord.ack_window(grant, 1, {"changes": 1})  # the session is fine: a normal ack lands
    assert (cursor.seq, cursor.position) == (1, pos(50))


def test_a_merge_longer_than_the_lease_keeps_it(
    zk_client: KazooClient, zk_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window of many tables may merge for longer than `lease_seconds`: the run renews its lease while the
    Spark job runs, so nobody takes it over meanwhile (which would fence the merge and waste it). The lease is
    judged by an injected clock that the job moves 3 s ahead (past the 2 s lease it started under) in two
    steps, each followed by a renewal (every third of the lease, in real time): no real-time wait for the
    lease to run out."""
    from cdc_core.capture.source import SourceParams
    from cdc_core.lake.job_outcome import JobExit
    from cdc_core.lake.spark_conf import SparkJob
    from cdc_core.model.config import PipelineConfig
    from cdc_core.run import merge_step, stage
    from cdc_core.run.pipeline import Pipeline
    from tests.support.fake_manifest import fake_manifest

    now = [time.time()]
    coord = PipelineCoordinator(zk_client, zk_root, "orders", clock=lambda: now[0])
    other = PipelineCoordinator(zk_client, zk_root, "orders", clock=lambda: now[0])
    cfg = PipelineConfig(name="orders", source={"conn_id": "x"}, tables={"include": ["db.*"]}, lease_seconds=2,
                         staging_root="/nonexistent/staging", lake_root="/nonexistent/lake")
    p = Pipeline(config=cfg, source=SourceParams(host="h", port=1, user="u", password="pw"), coordinator=coord)
    grant = coord.acquire("run-1", cfg.lease_seconds)
    started = now[0]
    seen: list[str] = []

    def slow_job(job: SparkJob) -> JobExit:
        for _ in range(2):  # the job outlives the lease it started under: 1.5 s, then 3 s after its start
            now[0] += 1.5
            wait_for(lambda: (coord.read_lease() or SimpleNamespace(renewed_at=None)).renewed_at == now[0],
                     "a renewal of the lease while the job runs")
        assert now[0] - started > cfg.lease_seconds
        try:
            other.acquire("run-2", 2)
            seen.append("taken over")
        except LeaseHeld:
            seen.append("held")
        return JobExit(0, "", "")

    monkeypatch.setattr(stage, "manifest", lambda p, seq: fake_manifest("t"))
    monkeypatch.setattr(merge_step, "merge_job", lambda p, grant, seq: SparkJob(application="merge_window.py", args=[],
                                                                    name="cdc-merge", jars="", conf={}, env={}))
    try:
        assert p.merge_locally(grant, 1, submit=slow_job).merged is True
        assert seen == ["held"]
        coord.verify(grant)  # still this run's lease: the ack can follow
    finally:
        coord.close()
        other.close()
