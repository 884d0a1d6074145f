"""A real StatsD listener for the metrics tests: a UDP socket on loopback, and what it received."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def udp_listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    try:
        yield sock
    finally:
        sock.close()


def received(sock: socket.socket) -> dict[str, list[str]]:
    """name -> the `value|type` of every StatsD line received so far (a client may batch lines)."""
    out: dict[str, list[str]] = {}
    while True:
        try:
            datagram = sock.recv(8192).decode()
        except TimeoutError:
            return out
        for line in datagram.splitlines():
            name, _, rest = line.partition(":")
            out.setdefault(name, []).append(rest)
