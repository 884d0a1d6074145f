"""The port layout of the test shards (tests/support/shards.py): under pytest-xdist no worker's shards land on
another server of the suite (the shared MariaDB, any worker's private one, the soak's) or on another worker's
shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.shards import MAX_SHARDS, ShardServers, shard_port

pytestmark = pytest.mark.unit

WORKERS = range(16)
SHARED, SOAK, PRIVATE_BASE = 33306, 33318, 33317  # scripts/services.sh, tests/faults/soak.py, tests/faults/services.py


def test_shard_ports_never_meet_the_suites_other_servers_or_each_other() -> None:
    others = {SHARED, SOAK} | {PRIVATE_BASE + 10 * n for n in WORKERS}  # private_services: + 10 N per worker
    shards = [shard_port(i, n, base=33340) for n in WORKERS for i in range(1, MAX_SHARDS + 1)]
    assert len(set(shards)) == len(shards)
    assert not set(shards) & others
    assert shard_port(1, 0, base=33340) == 33341 and shard_port(3, 1, base=33340) == 33353


def test_a_shard_number_outside_one_workers_ports_is_refused() -> None:
    for number in (0, MAX_SHARDS + 1):
        with pytest.raises(ValueError, match="outside 1"):
            shard_port(number)


def test_each_shard_has_its_own_identity_port_and_directory(tmp_path: Path) -> None:
    shards = list(ShardServers.for_worker(2, count=3, base_port=40000, directory=tmp_path))
    assert [(s.mariadb_port, s.server_id, s.gtid_domain_id) for s in shards] == [
        (40021, 101, 1), (40022, 102, 2), (40023, 103, 3)]
    assert [s.directory for s in shards] == [tmp_path / f"shard-{i}" for i in (1, 2, 3)]
    assert shards[0].env["CDC_MARIADB_SERVER_ID"] == "101" and shards[0].env["CDC_MARIADB_GTID_DOMAIN_ID"] == "1"
    with pytest.raises(RuntimeError, match="no ZooKeeper"):
        _ = shards[0].zk_hosts
    assert [s.directory.parent.name for s in ShardServers.for_worker(0)] == ["shards"] * 3
    assert [s.directory.parent.name for s in ShardServers.for_worker(2)] == ["shards-gw2"] * 3
