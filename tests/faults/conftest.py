"""Fixtures of the fault suite: the private services (tests/conftest.py), one merge server (one Spark
JVM for every CLI run of the session), a ZooKeeper client for the oracles, and `rig(seed)` for a
pipeline of the test's own (tests/faults/harness.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import Rig
from tests.faults.merge_server import MergeServer, default_spark


@pytest.fixture(scope="session")
def merge_server() -> Iterator[MergeServer]:
    """Spark starts lazily, on the first merge."""
    with MergeServer(default_spark) as server:
        yield server


@pytest.fixture(scope="session")
def fault_zk(private_services: Any) -> Iterator[Any]:
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry

    client = KazooClient(hosts=private_services.zk_hosts, timeout=10,
                         connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2))
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def rig(
    private_services: Any, merge_server: MergeServer, fault_zk: Any, tmp_path: Path
) -> Iterator[Callable[..., Rig]]:
    """`rig(seed, **options)`: a pipeline over a fresh database on the private MariaDB; closed afterwards."""
    made: list[Rig] = []

    def make(seed: int, **kw: Any) -> Rig:
        r = Rig(private_services, tmp_path / f"rig{len(made)}", fault_zk, merge_server.address, seed, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()

