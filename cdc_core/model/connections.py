"""Resolve an Airflow connection id without Airflow, from the environment.

The configuration file names connections (`source.conn_id`), never credentials. Inside Airflow the DAG
glue may use Airflow's own lookup; the `cdc` CLI must work without Airflow installed or configured, so
it reads the variable Airflow itself would read first: `AIRFLOW_CONN_<CONN_ID upper-cased>`, holding
either Airflow's JSON form (`{"conn_type": "mysql", "host": ..., "port": ..., "login": ..., "password":
...}`) or its URI form (`mysql://login:password@host:port/schema?key=value`). The result's repr never
shows the password.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from cdc_core.model.errors import ConfigError

DEFAULT_PORTS = {"mysql": 3306, "mariadb": 3306}
# An object store's connection (its endpoint, if any, lives in its extra); a ZooKeeper credential
# (`zookeeper.conn_id`: only its login and password matter, the hosts are in the configuration).
HOSTLESS_TYPES = ("aws", "generic", "zookeeper")
_JSON_KEYS = ("conn_type", "host", "port", "login", "password", "schema", "extra", "description")
_JSON_EXAMPLE = '{"conn_type":"mysql","host":"db1","port":3306,"login":"cdc","password":"..."}'
_JSON_WRONG_NAMES = {"user": "login", "username": "login", "database": "schema", "type": "conn_type"}


def env_var_name(conn_id: str) -> str:
    """The variable Airflow reads for a connection id (Airflow's own convention)."""
    return f"AIRFLOW_CONN_{conn_id.upper()}"


@dataclass(frozen=True)
class ConnectionInfo:
    """Where and as whom to connect. `repr`/`str` hide the password and extra values."""

    conn_id: str
    host: str
    port: int
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    conn_type: str | None = None
    schema: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False, compare=False)
    # False when the connection named no port and `port` is the type's default (a Spark master URL
    # then gets no port, as Airflow's Spark provider does).
    port_given: bool = field(default=True, repr=False, compare=False)

    def __repr__(self) -> str:
        return (
            f"ConnectionInfo(conn_id={self.conn_id!r}, conn_type={self.conn_type!r}, host={self.host!r}, "
            f"port={self.port!r}, user={self.user!r}, password={'***' if self.password else None!r}, "
            f"schema={self.schema!r}, extra_keys={sorted(self.extra)!r})"
        )

    __str__ = __repr__

    def safe_dict(self) -> dict[str, Any]:
        """For logs and status pages: everything but the secret."""
        return {
            "conn_id": self.conn_id,
            "conn_type": self.conn_type,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": "***" if self.password else None,
            "schema": self.schema,
        }

    @classmethod
    def from_fields(
        cls,
        conn_id: str,
        *,
        conn_type: str | None,
        host: str | None,
        port: int | str | None,
        login: str | None,
        password: str | None,
        schema: str | None = None,
        extra: Mapping[str, Any] | str | None = None,
        where: str | None = None,
    ) -> ConnectionInfo:
        """Build from Airflow connection fields (also used by the DAG glue with an Airflow Connection)."""
        where = where or f"connection {conn_id!r}"
        port_given = port not in (None, "")
        if not host and (conn_type or "").lower() not in HOSTLESS_TYPES:
            raise ConfigError(f"{where} has no host; set 'host' in the connection")
        if port in (None, ""):
            port = DEFAULT_PORTS.get((conn_type or "").lower(), 3306)
        try:
            port_num = int(port)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: port {port!r} is not a number") from None
        if not 0 < port_num < 65536:
            raise ConfigError(f"{where}: port {port_num} is out of range")
        if isinstance(extra, str):
            try:
                extra = json.loads(extra) if extra.strip() else {}
            except json.JSONDecodeError as e:
                raise ConfigError(f"{where}: 'extra' is not valid JSON ({e.msg})") from None
        if extra is not None and not isinstance(extra, Mapping):
            raise ConfigError(f"{where}: 'extra' must be a JSON object")
        return cls(
            conn_id=conn_id,
            host=str(host or ""),
            port=port_num,
            user=login or None,
            password=password if password not in ("", None) else None,
            conn_type=conn_type or None,
            schema=schema or None,
            extra=dict(extra or {}),
            port_given=port_given,
        )


def parse_connection(conn_id: str, value: str, where: str | None = None) -> ConnectionInfo:
    """Parse Airflow's JSON or URI connection form."""
    where = where or f"connection {conn_id!r}"
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: not valid JSON ({e.msg} at position {e.pos})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: the JSON form must be an object")
        for key in data:
            if key in _JSON_WRONG_NAMES:
                raise ConfigError(f"{where}: unknown key {key!r}; Airflow calls it {_JSON_WRONG_NAMES[key]!r}")
            if key not in _JSON_KEYS:
                raise ConfigError(f"{where}: unknown key {key!r}; Airflow's JSON form has {', '.join(_JSON_KEYS)}")
        return ConnectionInfo.from_fields(
            conn_id,
            conn_type=data.get("conn_type"),
            host=data.get("host"),
            port=data.get("port"),
            login=data.get("login"),
            password=data.get("password"),
            schema=data.get("schema"),
            extra=data.get("extra"),
            where=where,
        )
    if "://" not in text:
        raise ConfigError(
            f"{where}: expected Airflow's JSON form ({{\"conn_type\": \"mysql\", \"host\": ...}}) "
            "or a URI such as mysql://login:password@host:3306"
        )
    try:
        parts = urlsplit(text)
        hostname = parts.hostname
    except ValueError:  # e.g. spark://local[2]: brackets are an IPv6 literal in a URI
        raise ConfigError(
            f"{where}: the URI's host is not valid; percent-encode '[' and ']' (spark://local%5B2%5D) "
            'or use the JSON form ({"conn_type": "spark", "host": "local[2]"})'
        ) from None
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{where}: the URI's port is not a number") from None
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra: Mapping[str, Any] | str | None = query.pop("__extra__", None) or query or None
    return ConnectionInfo.from_fields(
        conn_id,
        conn_type=parts.scheme.replace("-", "_") or None,
        host=unquote(hostname) if hostname else None,
        port=port,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        schema=unquote(parts.path[1:]) if parts.path else None,
        extra=extra,
        where=where,
    )


def lookup_connection(conn_id: str, env: Mapping[str, str] | None = None) -> ConnectionInfo | None:
    """The connection `conn_id` from `AIRFLOW_CONN_<ID>`, None when that variable is unset or empty
    (a malformed value is a ConfigError, never None)."""
    environ = os.environ if env is None else env
    name = env_var_name(conn_id)
    value = environ.get(name)
    if value is None or not value.strip():
        return None
    return parse_connection(conn_id, value, where=f"connection {conn_id!r} (env {name})")


def resolve_connection(conn_id: str, env: Mapping[str, str] | None = None) -> ConnectionInfo:
    """The connection `conn_id` from `AIRFLOW_CONN_<ID>`; a ConfigError saying how to define it when absent."""
    info = lookup_connection(conn_id, env)
    if info is None:
        name = env_var_name(conn_id)
        raise ConfigError(
            f"connection {conn_id!r} is not defined: set {name} to Airflow's JSON form, e.g. "
            f"{name}='{_JSON_EXAMPLE}' "
            f"or a URI, e.g. {name}='mysql://cdc:...@db1:3306' (for the local services: "
            "`source scripts/airflow_env.sh`). The cdc CLI reads connections from the environment only; "
            "one stored in Airflow's database is not visible to it"
        )
    return info
