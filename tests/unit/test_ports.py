"""tests/support/ports.py: the servers the tests start listen on ports that outgoing connections never take."""

from __future__ import annotations

import socket

import pytest

from tests.support import ports

pytestmark = pytest.mark.unit


def test_a_free_port_is_bindable_and_outside_the_ephemeral_range() -> None:
    low, high = ports._ephemeral()
    drawn = {ports.free_port() for _ in range(20)}
    assert len(drawn) > 1  # drawn at random: two processes picking at once rarely collide
    for port in drawn:
        assert not low <= port <= high, (port, low, high)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_taken_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(ports, "RANGE", (port, port))  # the only candidate is taken: the kernel's choice
        got = ports.free_port()
        assert got != port
