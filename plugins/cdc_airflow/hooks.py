"""Where the Airflow side gets a pipeline from: its configuration, its source credentials, its ZooKeeper.

The configuration file names an Airflow connection (`source.conn_id`), never credentials. Inside
Airflow the connection is resolved by Airflow itself (`BaseHook.get_connection`: the metadata
database, `AIRFLOW_CONN_*` variables or a secrets backend), so the same DAG works with any of them.
ZooKeeper digest credentials come from the environment variable named by `zookeeper.auth_env`
(`Pipeline.from_config` reads it); they are checked here first so a missing variable fails the task
with a message instead of an authentication error deep in kazoo.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from cdc_core.model.config import load_config
from cdc_core.model.connections import ConnectionInfo
from cdc_core.model.errors import ConfigError

if TYPE_CHECKING:
    from cdc_core.capture.source import SourceParams
    from cdc_core.lake.object_store import S3Credentials
    from cdc_core.model.config import PipelineConfig
    from cdc_core.run.pipeline import Pipeline


def connection_info(conn_id: str, role: str = "source.conn_id", conn_type: str = "mysql") -> ConnectionInfo:
    """The Airflow connection `conn_id` as a `ConnectionInfo` (its repr hides the password)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ConfigError(
            f"Airflow connection {conn_id!r} ({role}) is not defined; create it in the Airflow UI "
            f"(Admin > Connections, type {conn_type}) or set AIRFLOW_CONN_{conn_id.upper()} to its JSON or URI form"
        ) from None
    return ConnectionInfo.from_fields(
        conn_id,
        conn_type=conn.conn_type,
        host=conn.host,
        port=conn.port,
        login=conn.login,
        password=conn.password,
        schema=conn.schema,
        extra=conn.extra,
        where=f"Airflow connection {conn_id!r}",
    )


def source_params_from_info(info: ConnectionInfo) -> SourceParams:
    """Pure: the replication source's parameters from a resolved connection."""
    from cdc_core.capture.source import SourceParams

    return SourceParams.from_connection(info)


def source_params_from_connection(conn_id: str) -> SourceParams:
    """The source's connection parameters from the Airflow connection `conn_id`."""
    return source_params_from_info(connection_info(conn_id))


def object_store_from_connection(pc: PipelineConfig) -> S3Credentials | None:
    """The object store's credentials from the Airflow connection `object_store.conn_id` names (None when
    unset), registered with Airflow's log masker."""
    from airflow.sdk.log import mask_secret

    from cdc_core.lake import object_store

    if not pc.object_store.conn_id:
        return None
    creds = object_store.from_connection(connection_info(pc.object_store.conn_id, "object_store.conn_id", "aws"))
    for secret in creds.secrets:
        mask_secret(secret)
    return creds


def check_zookeeper_auth(pc: PipelineConfig, environ: dict[str, str] | None = None) -> None:
    """Fail early, naming the variable, when `zookeeper.auth_env` is configured but not set."""
    pc.zookeeper.digest(environ, pipeline=pc.name)


def pipeline_config(name: str) -> PipelineConfig:
    """One pipeline's configuration, read fresh from $CDC_CONFIG (edits apply at the next task)."""
    return load_config().pipeline(name)


def secrets_of(pc: PipelineConfig, source: Any, store: S3Credentials | None = None) -> list[str]:
    """Values that must never appear in a command line, a log line or the monitor page."""
    found = [getattr(source, "password", None)]
    with suppress(ConfigError):  # an unset variable is reported by check_zookeeper_auth, not here
        found.append((pc.zookeeper.digest() or ("", ""))[1])
    if store is not None:
        found += store.secrets
    return [s for s in found if s]


@contextmanager
def open_pipeline(name: str) -> Iterator[Pipeline]:
    """A `Pipeline` for one task (its own ZooKeeper session), closed when the block ends."""
    from cdc_core.run.pipeline import Pipeline

    pc = pipeline_config(name)
    check_zookeeper_auth(pc)
    p = Pipeline.from_config(
        pc, source_params_from_connection(pc.source.conn_id), store=object_store_from_connection(pc)
    )
    try:
        yield p
    finally:
        p.close()
