"""`CdcPipelineHook`: the Airflow side's one way to a pipeline and the outside systems it talks to.

The configuration file names Airflow connections, never credentials: the source (`source.conn_id`,
mysql), the object store (`object_store.conn_id`, aws, optional) and ZooKeeper's digest identity
(`zookeeper.conn_id`: login and password; or the older `zookeeper.auth_env`, the NAME of an environment
variable holding user:password). The hook resolves every connection through Airflow's own lookup
(`BaseHook.get_connection`: the metadata database, `AIRFLOW_CONN_*` variables or a secrets backend), so
the same DAG works with any of them, registers each secret with Airflow's log masker, and opens the
`cdc_core.run.pipeline.Pipeline` with what it resolved. A missing connection or variable fails with a
message naming it, instead of an authentication error deep in pymysql or kazoo.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from cdc_core.model.config import load_config
from cdc_core.model.connections import ConnectionInfo
from cdc_core.model.errors import ConfigError

if TYPE_CHECKING:
    from cdc_core.capture.source import SourceParams
    from cdc_core.lake.object_store import S3Credentials
    from cdc_core.model.config import PipelineConfig
    from cdc_core.run.pipeline import Pipeline


def pipeline_config(name: str) -> PipelineConfig:
    """One pipeline's configuration, read fresh from $CDC_CONFIG (edits apply at the next task)."""
    return load_config().pipeline(name)


def secrets_of(source: Any, zk_auth: str | None = None, store: S3Credentials | None = None) -> list[str]:
    """Pure: values that must never appear in a command line, a log line or the monitor page (`zk_auth`:
    ZooKeeper's user:password)."""
    found = [getattr(source, "password", None), (zk_auth or "").partition(":")[2]]
    if store is not None:
        found += store.secrets
    return [s for s in found if s]


class CdcPipelineHook(BaseHook):
    """Owns one pipeline's connections (source, ZooKeeper credentials, object store) and opens it.

    :param pipeline: the pipeline's name in the configuration file ($CDC_CONFIG).
    :param config: its configuration, when the caller already has it (default: read fresh).
    :param environ: where `zookeeper.auth_env` is read (default: the process environment).
    """

    hook_name = "CDC pipeline"

    def __init__(
        self, pipeline: str, config: PipelineConfig | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        from cdc_core.model.sources import split_unit

        super().__init__()
        # `shop.eu1`: one source of the group pipeline `shop` (the per-source steps of its DAGs).
        self.pipeline_name, self.source_id = split_unit(pipeline)
        self._config = config
        self._environ = environ

    @cached_property
    def config(self) -> PipelineConfig:
        return self._config if self._config is not None else pipeline_config(self.pipeline_name)

    # ----------------------------------------------------------------------------- connections

    def connection_info(self, conn_id: str, role: str, conn_type: str) -> ConnectionInfo:
        """The Airflow connection `conn_id` as a `ConnectionInfo` (its repr hides the password)."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(conn_id)
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

    @property
    def unit_source(self) -> str | None:
        """The source this hook opens: the one named, else (a group pipeline's lease steps, which are the
        pipeline's whichever source serves them) the first."""
        if self.source_id is None and self.config.is_group:
            return self.config.source_ids()[0]
        return self.source_id

    def source_params(self) -> SourceParams:
        """The replication source's connection parameters (`source.conn_id`, or the source's in `sources`)."""
        from cdc_core.capture.source import SourceParams

        source = self.unit_source
        role = "source.conn_id" if source is None else f"sources[{source}].conn_id"
        conn_id = self.config.source_config(source).conn_id
        return SourceParams.from_connection(self.connection_info(conn_id, role, "mysql"))

    def object_store(self) -> S3Credentials | None:
        """The object store's credentials (`object_store.conn_id`; None when unset), masked in logs."""
        from cdc_core.lake import object_store

        conn_id = self.config.object_store.conn_id
        if not conn_id:
            return None
        creds = object_store.from_connection(self.connection_info(conn_id, "object_store.conn_id", "aws"))
        self._mask(*creds.secrets)
        return creds

    def zookeeper_digest(self) -> tuple[str, str] | None:
        """ZooKeeper's digest identity (user, password), masked in logs; None when none is configured.

        `zookeeper.conn_id`: the connection's login and password, through Airflow's lookup (so a secrets
        backend serves it too). `zookeeper.auth_env`: the variable it names, as the CLI reads it.
        """
        zk = self.config.zookeeper
        if zk.conn_id:
            conn = self.connection_info(zk.conn_id, "zookeeper.conn_id", "generic")
            digest: tuple[str, str] | None = zk.digest_from_login(conn.user, conn.password, pipeline=self.pipeline_name)
        else:
            digest = zk.digest(self._environ, pipeline=self.pipeline_name)
        if digest:
            self._mask(digest[1], ":".join(digest))
        return digest

    def transform_hash_key(self) -> bytes | None:
        """The transforms' hash key (docs/transforms.md), masked in logs: `transform.hash_key.conn_id`'s password
        through Airflow's lookup (a secrets backend serves it too). None: not a connection's (`env`, or no key),
        so the pipeline reads it as the CLI does, when a rule needs it."""
        from cdc_core.model.transforms import checked_key

        found = self.config.transform.hash_key
        if found is None or found.conn_id is None:
            return None
        conn = self.connection_info(found.conn_id, "transform.hash_key.conn_id", "generic")
        key = checked_key(conn.password or "", self.pipeline_name, f"the password of connection {found.conn_id!r}")
        self._mask(key.decode())
        return key

    @staticmethod
    def _mask(*secrets: str) -> None:
        from airflow.sdk.log import mask_secret

        for secret in secrets:
            if secret:
                mask_secret(secret)

    # -------------------------------------------------------------------------------- pipeline

    def get_conn(self) -> Pipeline:
        """A `Pipeline` with its own ZooKeeper session; the caller closes it (or use `pipeline()`)."""
        from cdc_core.run.pipeline import Pipeline

        digest = self.zookeeper_digest()  # first: a missing credential is named before anything connects
        return Pipeline.from_config(
            self.config, self.source_params(), store=self.object_store(), zk_digest=digest, source_id=self.unit_source,
            metrics_sink=airflow_stats(), hash_key=self.transform_hash_key(),
        )

    @contextmanager
    def pipeline(self) -> Iterator[Pipeline]:
        """The pipeline for one task, closed when the block ends."""
        p = self.get_conn()
        try:
            yield p
        finally:
            p.close()

    @staticmethod
    def secrets(p: Pipeline) -> list[str]:
        """Every credential value the open pipeline `p` uses (to keep off command lines and pages)."""
        return secrets_of(p.source, p.zk_auth(), p.store)


_stats_ready = False


def airflow_stats() -> Any:
    """Airflow's own metrics (StatsD or OpenTelemetry, as its `[metrics]` section configures; a no-op when
    off): the pipeline's metrics go where the deployment's Airflow metrics go (cdc_core/run/metrics.py).
    Set up from the `[metrics]` section once per process, as Airflow's task runner does: `airflow dags test`
    runs tasks without it."""
    global _stats_ready  # noqa: PLW0603 (once per process)
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    if not _stats_ready:
        stats.initialize(factory=stats_utils.get_stats_factory(),
                         export_legacy_names=conf.getboolean("metrics", "legacy_names_on"))
        _stats_ready = True
    return stats.Stats
