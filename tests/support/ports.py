"""Ports for the servers the tests and the soak start (merge servers, S3Proxy, Spark's master, Airflow's API
server, PostgreSQL): one way to pick them.

A port the kernel hands out for `bind(0)` comes from the ephemeral range, the same range outgoing connections
take their local ports from. Between picking it and the server binding it (seconds: a Python or JVM start-up)
a busy machine's connections (Spark, Airflow, a soak beside the suite) can take it, and the server fails with
"Address already in use". So the port is drawn at random below the ephemeral range, away from the fixed ports
the project's services use (MariaDB 13xxx, ZooKeeper 22xxx, PostgreSQL 25432, the UI 28080), and checked
bindable; only a machine whose ephemeral range leaves no room there falls back to the kernel's choice."""

from __future__ import annotations

import random
import socket
from pathlib import Path

RANGE = (30000, 32700)  # above the fixed ports, below Linux's default ephemeral range (32768-60999)


def _ephemeral() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nobody listens on, outside the ephemeral range when the machine allows it."""
    low, high = RANGE
    eph_low, eph_high = _ephemeral()
    if not (eph_high < low or eph_low > high):
        high = min(high, eph_low - 1)
    rng = random.SystemRandom()
    for _ in range(50 if high > low else 0):
        port = rng.randint(low, high)
        if _bindable(port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
