"""The fenced store's view of the ZooKeeper connection (cdc_core.coordination.fenced.FencedStore)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kazoo.protocol.states import KazooState

from cdc_core.coordination.fenced import FencedStore
from cdc_core.model.errors import CoordinationError

pytestmark = pytest.mark.unit


class ConnectingClient:
    """A client whose connection thread sets CONNECTED (and tells the listeners it has) while the store is being
    made, before the store's listener is in: kazoo's `start()` returns once the session is live, a moment before
    that change. Seen in CI: a store that had read LOST first failed every step of that process with
    "connection is LOST"."""

    default_acl = None
    auth_data: tuple[()] = ()

    def __init__(self) -> None:
        self.state = KazooState.LOST
        self.connected = True
        self.listeners: list[Callable[[str], None]] = []

    def change(self, state: str) -> None:
        self.state = state  # as kazoo does: the state first, then the listeners
        self.connected = state == KazooState.CONNECTED
        for listener in list(self.listeners):
            listener(state)

    def add_listener(self, listener: Callable[[str], None]) -> None:
        if self.state == KazooState.LOST and not self.listeners:
            self.change(KazooState.CONNECTED)  # the connection thread, just before this listener is added
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], None]) -> None:
        self.listeners.remove(listener)


def test_a_connection_that_becomes_live_while_the_store_is_made_is_seen_as_connected() -> None:
    store = FencedStore(ConnectingClient(), "/cdc", "orders", clock=lambda: 0.0)
    store.require_connected("acquire lease")  # raised "connection is LOST" when the state was read first
    assert store.state == KazooState.CONNECTED
    assert not store.needs_reverify


def test_a_lost_connection_is_not_safe_to_act_on() -> None:
    client = ConnectingClient()
    store = FencedStore(client, "/cdc", "orders", clock=lambda: 0.0)
    client.change(KazooState.LOST)
    with pytest.raises(CoordinationError, match="connection is LOST: not safe to act"):
        store.require_connected("ack")
    assert store.needs_reverify
