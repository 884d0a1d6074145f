"""The fence a Spark job checks before every commit: does this run still hold the pipeline's lease?

The job runs in another process (often on another host) than the task that took the lease, so it opens
its own ZooKeeper session and compares the lease node's czxid with the run's fencing token.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from cdc_core.coordination.client import RedactingLogger
from cdc_core.coordination.paths import lease_path
from cdc_core.model.config import ZK_AUTH_ENV
from cdc_core.model.errors import ConfigError, CoordinationError, Fenced
from cdc_core.model.logfmt import one_line


def zk_fence_check(hosts: str, root: str, pipeline: str, token: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """A check that this run still holds the pipeline's lease (lease node czxid == token), and a closer."""
    from kazoo.client import KazooClient, KazooState
    from kazoo.exceptions import KazooException, NoAuthError, NoNodeError

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
    path = lease_path(root, pipeline)

    def check() -> None:
        if client.state != KazooState.CONNECTED:
            raise CoordinationError(
                f"ZooKeeper session is {client.state}: cannot confirm the lease of {pipeline!r}, so not writing; retry"
            )
        try:
            _, stat = client.get(path)
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

    def close() -> None:
        client.stop()
        client.close()

    return check, close
