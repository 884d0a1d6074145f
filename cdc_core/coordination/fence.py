"""The fence a Spark job checks before every commit: does this run still hold the pipeline's lease?

The job runs in another process (often on another host) than the task that took the lease, so it opens
its own ZooKeeper session and compares the lease node's czxid with the run's fencing token.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from cdc_core.coordination.client import RedactingLogger
from cdc_core.coordination.paths import lease_path
from cdc_core.model.config.sections import ZK_AUTH_ENV
from cdc_core.model.errors import ConfigError, CoordinationError, Fenced
from cdc_core.model.logfmt import one_line


def zk_fence_check(hosts: str, root: str, pipeline: str, token: int) -> tuple[LeaseFence, Callable[[], None]]:
    """A check that this run still holds the pipeline's lease (lease node czxid == token), and a closer."""
    from kazoo.client import KazooClient

    auth_data = None
    extra: dict[str, Any] = {}
    auth = os.environ.get(ZK_AUTH_ENV)
    if auth:
        scheme, sep, cred = auth.partition(":")
        if not sep or not scheme:
            raise ConfigError(f"{ZK_AUTH_ENV} must look like 'scheme:credential' (e.g. digest:user:password)")
        auth_data = [(scheme, cred)]
        # kazoo logs its Auth packet at DEBUG: blank the credential before any handler sees it.
        extra["logger"] = RedactingLogger(logging.getLogger("kazoo.client"), (cred, cred.partition(":")[2]))
    client = KazooClient(hosts=hosts, auth_data=auth_data, timeout=10, **extra)
    try:
        client.start(timeout=15)
    except Exception as e:
        client.close()
        raise CoordinationError(
            f"cannot reach ZooKeeper at {hosts} to check the lease of {pipeline!r}: {one_line(e)}"
        ) from e
    fence = LeaseFence(client, lease_path(root, pipeline), pipeline, token)
    return fence, fence.close


# A merge job's ZooKeeper session can expire under it (a long GC pause, a loaded host): kazoo then opens a
# new one by itself within moments. The fence only reads the lease node, which any session can, so a check
# waits this long for the new session before refusing to confirm the lease.
RECONNECT_SECONDS = 20.0


class LeaseFence:
    """The check (call it): the lease node's czxid is still this run's token; raises Fenced otherwise."""

    def __init__(self, client: Any, path: str, pipeline: str, token: int) -> None:
        self.client = client
        self.path = path
        self.pipeline = pipeline
        self.token = token

    def _connected(self) -> bool:
        from kazoo.client import KazooState

        deadline = time.monotonic() + RECONNECT_SECONDS
        while self.client.state != KazooState.CONNECTED:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def __call__(self) -> None:
        from kazoo.exceptions import KazooException, NoAuthError, NoNodeError

        pipeline, path, token = self.pipeline, self.path, self.token
        if not self._connected():
            raise CoordinationError(
                f"ZooKeeper session is {self.client.state} (for {RECONNECT_SECONDS:.0f} s): cannot confirm the lease "
                f"of {pipeline!r}, so not writing; retry"
            )
        try:
            _, stat = self.client.get(path)
        except NoNodeError as e:
            raise Fenced(
                f"fenced: pipeline {pipeline!r} has no lease at {path}; this run (token {token:#x}) stopped writing"
            ) from e
        except NoAuthError as e:
            raise CoordinationError(
                f"ZooKeeper refused reading the lease {path} of {pipeline!r} (not authorised): the pipeline's nodes "
                f"are ACL'd to its zookeeper.auth_env identity; give the job that identity as {ZK_AUTH_ENV}="
                "digest:<user>:<password> in its environment (never on the command line)"
            ) from e
        except KazooException as e:
            raise CoordinationError(f"reading the lease {path} failed: {one_line(e)}; retry") from e
        if stat.czxid != token:
            raise Fenced(
                f"fenced: pipeline {pipeline!r} lease {path} is now held with token {stat.czxid:#x}, not this run's "
                f"{token:#x}; this run stopped writing (the holder will land the window)"
            )

    def close(self) -> None:
        self.client.stop()
        self.client.close()
