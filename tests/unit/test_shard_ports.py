"""The port layout of the test shards (tests/support/shards.py): under pytest-xdist no worker's shards land on
another server of the suite (the shared MariaDB, any worker's private one, the soak's) or on another worker's
shards."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.shards import MAX_SHARDS, ShardServers, shard_port

pytestmark = pytest.mark.unit

WORKERS = range(16)
SHARED, SOAK, PRIVATE_BASE = 13306, 13318, 13317  # scripts/services.sh, tests/faults/soak.py, tests/faults/services.py


def test_shard_ports_never_meet_the_suites_other_servers_or_each_other() -> None:
    others = {SHARED, SOAK} | {PRIVATE_BASE + 10 * n for n in WORKERS}  # private_services: + 10 N per worker
    shards = [shard_port(i, n, base=13340) for n in WORKERS for i in range(1, MAX_SHARDS + 1)]
    assert len(set(shards)) == len(shards)
    assert not set(shards) & others
    assert shard_port(1, 0, base=13340) == 13341 and shard_port(3, 1, base=13340) == 13353


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


EPHEMERAL_FIRST = 32768  # Linux's default net.ipv4.ip_local_port_range starts here
# A default port written as `:-NNNNN` (shell), `"NNNNN")` (os.environ.get) or `default=NNNNN` (argparse).
DEFAULT_PORT = re.compile(r'(?:PORT:-|PORT", "|port", type=int, default=)(\d{4,5})')


def test_every_fixed_default_port_lies_below_the_ephemeral_range() -> None:
    """An outgoing connection may take any port of the ephemeral range as its local port; a server of the suite
    (or of the demo, or of a benchmark) listening on a fixed port there fails at random with "port busy"."""
    root = Path(__file__).resolve().parents[2]
    sources = [p for d in ("scripts", "tests", "bench") for p in (root / d).rglob("*") if p.suffix in (".py", ".sh")]
    found = {(p.relative_to(root).as_posix(), int(m)) for p in sources for m in DEFAULT_PORT.findall(p.read_text())}
    assert len(found) >= 10, found  # the pattern still finds the defaults
    assert {port for _, port in found} >= {13306, 13317, 13340, 22181}
    assert [(path, port) for path, port in sorted(found) if port >= EPHEMERAL_FIRST] == []
    worst_shard = shard_port(MAX_SHARDS, max(WORKERS), base=13340)
    assert worst_shard < EPHEMERAL_FIRST


def test_no_benchmark_or_script_default_port_is_a_test_workers_port() -> None:
    """A benchmark runs beside the suite (the long run for hours): on a port of a worker's private MariaDB or shard,
    that worker's fault tests error ("Address already in use"), as a long run on 13327 did to worker 1."""
    root = Path(__file__).resolve().parents[2]
    sources = [p for d in ("scripts", "bench") for p in (root / d).rglob("*") if p.suffix in (".py", ".sh")]
    found = {(p.relative_to(root).as_posix(), int(m)) for p in sources for m in DEFAULT_PORT.findall(p.read_text())}
    assert ("bench/longrun.py", 13309) in found, found
    workers = {PRIVATE_BASE + 10 * n for n in WORKERS} | {22193 + 10 * n for n in WORKERS}  # MariaDB, ZooKeeper
    workers |= {shard_port(i, n, base=13340) for n in WORKERS for i in range(1, MAX_SHARDS + 1)}
    assert [(path, port) for path, port in sorted(found) if port in workers] == []
