"""Connecting to the source database: its parameters (`SourceParams`, never showing the password), pymysql
connections with one shared PREFERRED-mode TLS context per process, and pymysql errors as `SourceError`s
that name the server, what was found and the fix."""

from __future__ import annotations

import functools
import os
import ssl
from dataclasses import dataclass, field
from typing import Any

import pymysql

from cdc_core.model.connections import ConnectionInfo
from cdc_core.model.errors import ConfigError, SourceError

# pymysql / server error codes we translate into actionable messages.
_ER_ACCESS_DENIED = 1045
_ER_HOST_NOT_PRIVILEGED = 1130
_ER_DBACCESS_DENIED = 1044
_CR_CONN_HOST_ERROR = 2003
_CR_UNKNOWN_HOST = 2005
_CR_SERVER_LOST = 2013
_ER_NO_BINARY_LOGGING = 1381


@dataclass(frozen=True)
class SourceParams:
    """How to reach the source. The password is kept out of repr/str (and so out of logs and errors)."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    connect_timeout: int = 10

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_connection(cls, info: ConnectionInfo) -> SourceParams:
        """The source's parameters from a resolved connection (Airflow's or the CLI's)."""
        if not info.user:
            raise ConfigError(
                f"connection {info.conn_id!r} has no login: set the replication user's login and password on it"
            )
        return cls(host=info.host, port=info.port, user=info.user, password=info.password or "")

    def __repr__(self) -> str:
        return (
            f"SourceParams(host={self.host!r}, port={self.port}, user={self.user!r}, password='***', "
            f"connect_timeout={self.connect_timeout})"
        )

    __str__ = __repr__

    def pymysql_kwargs(self) -> dict[str, Any]:
        """Arguments for pymysql.connect (the only place the password leaves this object)."""
        return {
            "host": self.host,
            "port": int(self.port),
            "user": self.user,
            "password": self.password,
            "connect_timeout": self.connect_timeout,
        }


def source_error_from(e: BaseException, params: SourceParams, doing: str = "connect to") -> SourceError:
    """Translate a pymysql error into a SourceError that names host:port and user, never the password."""
    code = e.args[0] if getattr(e, "args", None) and isinstance(e.args[0], int) else None
    who = f"user {params.user!r} at {params.address}"
    if code in (_ER_ACCESS_DENIED, _ER_HOST_NOT_PRIVILEGED, _ER_DBACCESS_DENIED):
        return SourceError(
            f"cannot {doing} the source as {who}: access denied (error {code}). Check the user name and password "
            "in the source connection, and that the user may connect from this host "
            "(CREATE USER ...; GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO ...; GRANT SELECT ON "
            "`<captured schema>`.* TO ...; see docs/security.md)"
        )
    if code in (_CR_CONN_HOST_ERROR, _CR_UNKNOWN_HOST, _CR_SERVER_LOST):
        return SourceError(
            f"cannot {doing} the source at {params.address} (as {params.user!r}): server unreachable "
            f"(error {code}). Check that the server runs, that host and port in the source connection are right, "
            f"and that no firewall blocks the port (waited {params.connect_timeout}s)"
        )
    detail = str(e.args[1]) if len(getattr(e, "args", ())) > 1 else str(e)
    return SourceError(f"cannot {doing} the source at {params.address} as {params.user!r}: {detail} (error {code})")


@functools.cache
def _preferred_tls_context() -> ssl.SSLContext:
    """The TLS context pymysql uses for a connection without TLS options (its PREFERRED mode), built once.

    pymysql builds it on every connection with `ssl.create_default_context()`, which loads the system CA
    store (20-250 ms on a loaded machine) although the context then verifies nothing (CERT_NONE, no host
    check: PREFERRED encrypts if the server offers TLS and falls back to plain otherwise). A window opens
    up to three connections, so that was a fixed cost per window. This context has exactly the same
    settings minus the unused CA store, and is shared (an SSLContext is safe to share across threads).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    ctx.options |= ssl.OP_NO_SSLv2
    ctx.options |= ssl.OP_NO_SSLv3
    keylog = os.environ.get("SSLKEYLOGFILE")  # as create_default_context does
    if keylog:
        ctx.keylog_filename = keylog
    return ctx


class SourceConnection(pymysql.connections.Connection):  # type: ignore[misc]
    """A pymysql connection that reuses one PREFERRED-mode TLS context per process.

    Only the no-options case (`sslp == {}`, pymysql's PREFERRED mode) is served from the cache; explicit
    TLS options (a CA, client certificate, verification, an SSLContext) go through pymysql unchanged, so a
    configured TLS connection is exactly as strict as before.
    """

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        if isinstance(sslp, dict) and not sslp:
            return _preferred_tls_context()
        return super()._create_ssl_ctx(sslp)


def open_connection(**kwargs: Any) -> pymysql.connections.Connection:
    """`pymysql.connect(**kwargs)` with the shared PREFERRED TLS context (see `SourceConnection`)."""
    return SourceConnection(**kwargs)


def connect(params: SourceParams) -> pymysql.connections.Connection:
    """An autocommit utf8mb4 connection to the source, or a SourceError saying what to fix."""
    try:
        return open_connection(**params.pymysql_kwargs(), autocommit=True, charset="utf8mb4")
    except pymysql.err.MySQLError as e:
        raise source_error_from(e, params) from None


def conn_address(conn: Any) -> str:
    return f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"

