"""Spark settings shared by spark-submit (the DAG), in-process sessions (tests, bench) and the CLI.

Pure data: no pyspark import. One list of local Delta jars (resolved once by scripts/fetch_jars.sh
into the project's Ivy cache) and one set of confs, so every way of starting Spark sees the same.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cdc_core.lake.object_store import S3Credentials
from cdc_core.model.config.sections import ZK_AUTH_ENV, SparkConfig
from cdc_core.model.connections import ConnectionInfo, env_var_name, lookup_connection
from cdc_core.model.errors import ConfigError
from cdc_core.model.layout import PROJECT_ROOT

log = logging.getLogger("cdc.spark")


def ivy_dir() -> Path:
    return Path(os.environ.get("CDC_IVY_DIR", PROJECT_ROOT / ".cache" / "ivy"))


def _cached_jars(cache: Path, artifact: str, what: str) -> list[str]:
    """Absolute paths of the jars scripts/fetch_jars.sh resolved into `cache`; a clear error when `artifact`
    (a jar name part) is not among them."""
    jars = sorted(str(p) for p in (cache / "jars").glob("*.jar"))
    if not any(artifact in Path(j).name for j in jars):
        raise ConfigError(
            f"{what} not found in {cache / 'jars'}: run scripts/fetch_jars.sh once (it resolves {artifact} "
            "from Maven Central into that cache)"
        )
    return jars


def delta_jars() -> list[str]:
    """The locally cached Delta jars."""
    return _cached_jars(ivy_dir(), "delta-spark", "Delta jars")


def s3a_ivy_dir() -> Path:
    return Path(os.environ.get("CDC_S3A_IVY_DIR", PROJECT_ROOT / ".cache" / "ivy-s3a"))


def s3a_jars() -> list[str]:
    """Hadoop's S3A connector (hadoop-aws matching pyspark's bundled Hadoop, and the AWS SDK bundle), kept
    apart from the Delta jars so only pipelines on an object store put its 700 MB on their classpath."""
    return _cached_jars(s3a_ivy_dir(), "hadoop-aws", "the S3A jars (a staging or lake root is s3://)")


def jar_list(jars: list[str], master: str) -> str:
    """The --jars value for `master`. A local master runs its executor in the driver's JVM, on this host:
    `local:` paths let it load the jars where they are instead of copying every jar into each job's work
    directory through Spark's file server (3-5 s per job for the 744 MB with the object store's S3A jars).
    A cluster's executors get them copied, as Spark does by default."""
    if master.startswith("local"):
        jars = [j if ":" in j.split("/", 1)[0] else f"local:{j}" for j in jars]
    return ",".join(jars)


def spark_confs(shuffle_partitions: int = 2, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Confs for a Delta-enabled session that is kind to a small machine."""
    confs = {
        "spark.jars": ",".join(delta_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(max(2, shuffle_partitions)),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        # Schema evolution is enabled per MERGE (WITH SCHEMA EVOLUTION), never session-wide.
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # Delta replays a table's log with 50 tasks by default: seconds of overhead per table on 2 cores.
        "spark.databricks.delta.snapshotPartitions": str(max(1, shuffle_partitions)),
        # VACUUM lists a table's directories with this many tasks (Spark's default: 10,000), which cost
        # ~45 s per table on 2 cores even for a tiny table; a few tasks list it in ~3 s.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(2, shuffle_partitions)),
    }
    confs.update(extra or {})
    return confs


def job_confs(spark: SparkConfig, store_confs: Mapping[str, str] | None = None) -> dict[str, str]:
    """The --conf values of a pipeline's Spark jobs: the defaults above, the object store's (when the pipeline
    uses one), then the pipeline's own `spark` settings, which win; the jars go separately, as --jars."""
    extra = {**(store_confs or {}), "spark.driver.memory": spark.driver_memory, **spark.conf}
    confs = spark_confs(spark.shuffle_partitions, extra)
    confs.pop("spark.jars", None)
    return confs


@dataclass(frozen=True)
class SparkJob:
    """One Spark job of a pipeline (the merge or the maintenance job), built once from its configuration and
    submitted alike by the CLI (`command`) and the Airflow operators (the same fields). Credentials travel in
    `env` only, never in `args` or `conf`."""

    application: str
    args: list[str]
    name: str
    jars: str
    conf: dict[str, str]
    env: dict[str, str] = field(repr=False)  # what the job's environment adds to the submitter's

    def command(self, master: str) -> list[str]:
        """spark-submit in deploy mode client: the submitter runs the driver and reads its exit code."""
        cmd = ["spark-submit", "--master", master, "--deploy-mode", "client", "--name", self.name,
               "--jars", self.jars]
        for k, v in sorted(self.conf.items()):
            cmd += ["--conf", f"{k}={v}"]
        return [*cmd, self.application, *self.args]

    def python_driver(self, master: str, python: str = sys.executable) -> tuple[list[str], dict[str, str]]:
        """The job's Python driver run directly instead of through spark-submit (a long-running process such
        as the merge server): its argv, and what its environment adds (`env`, plus the spark-submit options
        in PYSPARK_SUBMIT_ARGS, where pyspark reads them when it starts the JVM)."""
        cmd = self.command(master)
        submit_args = cmd[1 : cmd.index(self.application)]
        env = {**self.env, "PYSPARK_SUBMIT_ARGS": shlex.join([*submit_args, "pyspark-shell"])}
        return [python, self.application, *self.args], env


LOCAL_MASTER = "local[2]"  # only when the pipeline's Spark connection is not defined
LOCAL_IP_ENV = "SPARK_LOCAL_IP"


def spark_master(conn: ConnectionInfo) -> str:
    """Pure: the --master URL Airflow's Spark provider (SparkSubmitHook._resolve_connection) builds from a
    connection, so the CLI and the DAG submit to the same place. A `spark` connection whose host holds a
    whole master (`local[2]`, `yarn`, `spark://m1`, `k8s://https://...`) and no port is used as is;
    otherwise the type is the scheme (`spark://m1:7077` from the URI form). The port, when given, is
    appended."""
    host = conn.host
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port_given):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    return f"{master}:{conn.port}" if conn.port_given else master


def resolve_spark_master(conn_id: str, env: Mapping[str, str] | None = None, *, pipeline: str = "-") -> str:
    """The pipeline's Spark master from its connection (`spark.conn_id`, env AIRFLOW_CONN_<ID>, the same
    lookup as the source's connection). The CLI runs the driver itself (deploy mode client: it reads the
    job's exit code, e.g. the fence's), so a connection asking for cluster mode is refused. Falls back to
    local[2], with a log line saying so, only when the connection is not defined."""
    conn = lookup_connection(conn_id, env)
    if conn is None:
        log.warning(
            "spark.master_default pipeline=%s conn_id=%s master=%s reason=%s", pipeline, conn_id, LOCAL_MASTER,
            f"{env_var_name(conn_id)}_is_not_set(define_it_to_submit_where_the_DAG_does)",
        )
        return LOCAL_MASTER
    mode = str(conn.extra.get("deploy-mode") or "client")
    if mode != "client":
        raise ConfigError(
            f"connection {conn_id!r} (env {env_var_name(conn_id)}) asks for deploy-mode {mode!r}; the cdc CLI "
            "runs the Spark driver itself (deploy-mode client) to read the job's outcome: remove 'deploy-mode' "
            "from the connection's extra or set it to 'client'"
        )
    master = spark_master(conn)
    log.info("spark.master pipeline=%s conn_id=%s master=%s deploy_mode=client", pipeline, conn_id, master)
    return master


def spark_env(
    zk_auth: str | None = None,
    *,
    python: str | None = None,
    path: str | None = None,
    environ: Mapping[str, str] | None = None,
    store: S3Credentials | None = None,
) -> dict[str, str]:
    """The environment of every Spark job (merge and maintenance; CLI and Airflow operators alike):
    the venv's interpreter for PySpark and its bin/ first on PATH; the ZooKeeper credential the job's fence
    check needs as CDC_ZK_AUTH=digest:<user:password> when `zk_auth` is given (the environment, never the
    command line; callers never log it); SPARK_LOCAL_IP only when the caller's environment sets it (the
    local setup does; a production driver must advertise its real address to executors on other hosts); the
    object store's credentials in the AWS SDK's variables when `store` is given (cdc_core.lake.object_store)."""
    environ = os.environ if environ is None else environ
    python = python or sys.executable
    venv_bin = str(Path(python).parent)
    parts = [p for p in (environ.get("PATH", "") if path is None else path).split(os.pathsep) if p]
    if venv_bin not in parts:
        parts.insert(0, venv_bin)
    env = {"PATH": os.pathsep.join(parts), "PYSPARK_PYTHON": python}
    if environ.get(LOCAL_IP_ENV):
        env[LOCAL_IP_ENV] = environ[LOCAL_IP_ENV]
    if zk_auth:
        env[ZK_AUTH_ENV] = f"digest:{zk_auth}"
    if store is not None:
        env.update(store.job_env())
    return env
