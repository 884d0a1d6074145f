"""Several local MariaDB servers side by side, the shards of a group pipeline, for tests.

Each shard is a MariaDB-only `PrivateServices` (tests/faults/services.py: scripts/services.sh with its own
data directory and port, stop by the PID in its own pid file) with an identity of its own: shard i (1..N)
has server_id 100+i and GTID domain i, so no two shards, and no shard and the default server (server_id 1,
domain 0), look like the same source. A test may stop and start any one of them; ZooKeeper is not theirs
(a group pipeline coordinates through the `services` / `private_services` one).

Ports: shard i of pytest-xdist worker gwN listens on CDC_SHARD_MARIADB_PORT (default 13340) + 10 N + i,
data under .local/shards[-gwN]/shard-<i>. With the default bases the ports end in 1..MAX_SHARDS (1..6) while
every worker's private MariaDB (13317 + 10 N) ends in 7, the soak's (13318) in 8 and the shared one is
13306: no worker's shards meet any other server of the suite, and the workers' shards never meet each other.

Used by the `shard_servers` fixture (tests/conftest.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.faults.services import PrivateServices, _listener_pid

ROOT = Path(__file__).resolve().parents[2]
SHARDS_DIR = ROOT / ".local" / "shards"
BASE_PORT = int(os.environ.get("CDC_SHARD_MARIADB_PORT", "13340"))
WORKER_STRIDE = 10  # ports per pytest-xdist worker
MAX_SHARDS = 6  # shard numbers stay below the 7 that ends every private MariaDB port (see above)


def shard_port(number: int, worker: int = 0, base: int = BASE_PORT) -> int:
    """The port of shard `number` (1-based) of pytest-xdist worker `worker` (gwN -> N)."""
    if not 1 <= number <= MAX_SHARDS:
        raise ValueError(f"shard number {number} is outside 1..{MAX_SHARDS} (the ports of one worker)")
    return base + WORKER_STRIDE * worker + number


@dataclass
class ShardServers:
    """N MariaDB servers, iterable in shard order (shard 1 first); each has PrivateServices' interface
    (root_connect, cdc_connect, source_params, binlog_end, mysql_port, stop_mariadb, start_mariadb,
    wait_mariadb, ...) plus `server_id` and `gtid_domain_id`."""

    shards: tuple[PrivateServices, ...]

    @classmethod
    def for_worker(cls, worker: int = 0, count: int = 3, base_port: int = BASE_PORT,
                   directory: Path | None = None) -> ShardServers:
        directory = directory or (SHARDS_DIR.with_name(f"{SHARDS_DIR.name}-gw{worker}") if worker else SHARDS_DIR)
        return cls(tuple(
            PrivateServices(
                directory=directory / f"shard-{i}", mariadb_port=shard_port(i, worker, base_port), zk_port=0,
                server_id=100 + i, gtid_domain_id=i, with_zookeeper=False, ports_env="CDC_SHARD_MARIADB_PORT",
            )
            for i in range(1, count + 1)
        ))

    def __iter__(self) -> Iterator[PrivateServices]:
        return iter(self.shards)

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, index: int) -> PrivateServices:
        """By position: [0] is shard 1."""
        return self.shards[index]

    def start(self) -> ShardServers:
        """Start every shard that is not running, each from an empty data directory (a running one is kept
        as it is). All at once: a fresh server spends its few seconds in mariadb-install-db and start-up."""
        stopped = [s for s in self.shards if not s.running()["mariadb"]]
        for shard in stopped:
            # Fail at once with the way out, rather than after services.sh's retries on a busy port.
            listener = _listener_pid(shard.mariadb_port)
            if listener is not None:
                raise RuntimeError(
                    f"port {shard.mariadb_port} for the shard in {shard.directory} is taken by pid {listener}; "
                    "pick other shard ports with CDC_SHARD_MARIADB_PORT"
                )
        for shard in stopped:
            shutil.rmtree(shard.directory, ignore_errors=True)
        try:
            with ThreadPoolExecutor(max_workers=len(stopped) or 1) as pool:
                list(pool.map(PrivateServices.start, stopped))
        except BaseException:
            # Never leave a half-started set behind. Whatever runs from these (just emptied) directories is
            # ours, also a server whose readiness check failed (start() had not recorded it yet).
            for shard in stopped:
                shard.stop_mariadb()
            raise
        return self

    def stop_all(self) -> None:
        """Stop the shards `start()` started (each by the PID in its own pid file)."""
        for shard in self.shards:
            shard.stop_all()
