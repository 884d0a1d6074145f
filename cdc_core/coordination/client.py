"""The ZooKeeper client: digest auth and ACLs, and a logger that never shows the credential."""


from __future__ import annotations

import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import ACL, make_digest_acl, make_digest_acl_credential

from cdc_core.model.errors import ConfigError, CoordinationError

log = logging.getLogger("cdc.coordination")
CONNECTION_ERRORS = (
    ConnectionLoss, SessionExpiredError, ConnectionClosedError, OperationTimeoutError, KazooTimeoutError,
)


# ----------------------------------------------------------------------------------- the client


def acl_for(user: str, password: str) -> list[ACL]:
    return [make_digest_acl(user, password, all=True)]


class RedactingLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo logs every request at DEBUG, the digest Auth packet (`user:password`) and the ACLs (the
    credential's hash) included. This adapter renders each message and blanks those strings before the
    record exists, so no handler at any level ever sees them."""

    def __init__(self, logger: logging.Logger, secrets: tuple[str, ...]):
        super().__init__(logger, {})
        self._secrets = tuple(sorted((s for s in secrets if s), key=len, reverse=True))

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            text = " ".join([str(msg), *map(str, args)])
        for secret in self._secrets:
            text = text.replace(secret, "<redacted>")
        self.logger.log(level, "%s", text, **kwargs)

    def warn(self, msg: object, *args: object, **kwargs: Any) -> None:  # kazoo still calls warn()
        self.log(logging.WARNING, msg, *args, **kwargs)


def make_zk_client(hosts: str, *, auth: tuple[str, str] | None = None, timeout: float = 10) -> KazooClient:
    """A started kazoo client. With `auth` (user, password), the session authenticates by digest and
    every node created through it is readable and writable by that identity only.

    Credentials are never logged: messages name the hosts and the user at most.
    """
    kwargs: dict[str, Any] = {}
    if auth is not None:
        user, password = auth
        if not user or ":" in user or not password:
            raise ConfigError("ZooKeeper digest auth needs a non-empty user without ':' and a non-empty password")
        kwargs["auth_data"] = [("digest", f"{user}:{password}")]
        kwargs["default_acl"] = acl_for(user, password)
        hashed = make_digest_acl_credential(user, password)  # "user:base64(sha1)" as it appears in ACLs
        kwargs["logger"] = RedactingLogger(
            logging.getLogger("kazoo.client"), (f"{user}:{password}", password, hashed, hashed.partition(":")[2])
        )
    client = KazooClient(
        hosts=hosts,
        timeout=timeout,
        # Kazoo's default backs off up to an hour between reconnects; a few seconds suits a batch run.
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=5),
        **kwargs,
    )
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, KazooException, OSError) as e:
        client.close()
        raise CoordinationError(
            f"ZooKeeper at {hosts} did not answer within {timeout}s ({type(e).__name__}); "
            "check zookeeper.hosts and that ZooKeeper is running"
        ) from None
    return client


def client_acl(client: KazooClient) -> list[ACL] | None:
    """The ACL for nodes this product creates: the client's default, else its digest identity."""
    if client.default_acl:
        return list(client.default_acl)
    for scheme, credential in getattr(client, "auth_data", ()) or ():
        if scheme == "digest" and ":" in credential:
            user, _, password = credential.partition(":")
            return acl_for(user, password)
    return None
