"""S3-compatible object stores for staging and the lake: one set of credentials for every client.

A pipeline whose `staging_root` or `lake_root` is an `s3://` (or `s3a://`) URL names an Airflow connection
of type `aws` in `object_store.conn_id`: login = access key id, password = secret access key, extra =
`{"endpoint_url": "http://minio:9000", "region_name": "us-east-1"}` (endpoint only for a store other than
AWS; `aws_session_token` for temporary credentials). Without `conn_id` every client uses its own default
chain (environment, instance role), as on EC2 or EKS.

Three clients read the store, and each gets the same credentials its own way:

- Python (staging via fsspec/s3fs, the lake's state via delta-rs): a `Storage` built from the pipeline's
  credentials is passed down to every call that touches its staging or lake (`staging`, `delta_state`,
  `lake_versions`, the housekeeping, the Spark jobs' driver-side reads). Nothing is process-wide: two
  pipelines on two stores in one process each use their own keys.
- The Spark jobs (spark-submit): the secret travels in the job's environment, in the AWS SDK's own
  variables (`job_env()`), never on the command line; the endpoint and path style are plain confs
  (`spark_confs()`). The job itself turns the variables into its session's s3a confs
  (`session_confs_from_env`), so executors on other hosts get them with the session (Spark redacts
  `secret`/`access.key` confs in its UI and logs).
- `s3://` is mapped to Hadoop's S3AFileSystem, so one URL names the same object everywhere.

Atomic staging on a store without rename is `cdc_core.lake.staging`'s business (manifest PUT last).

Commits without Spark (the small-table writer, delta-rs) need an atomic put-if-absent of the next log entry,
which a local disk has (link) and an S3 store has only with conditional writes (`If-None-Match: *`: AWS S3
since 2024, MinIO, Cloudflare R2, S3Proxy's filesystem backend). delta-rs 1.6 writes each log entry of an S3
table as such a PUT whatever its options (object_store's `PutMode::Create`): atomic where the store honours the
header, an unconditional overwrite where it ignores it. So `commit_storage` probes the store once per merge job,
and only where it qualifies does the small-table writer commit there (with `conditional_put=etag` said
explicitly); otherwise every table of the store goes to Spark (docs/object-store.md).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cdc_core.model.connections import ConnectionInfo
from cdc_core.model.errors import ConfigError

S3_SCHEMES = ("s3", "s3a")
CONN_TYPE = "aws"
DEFAULT_REGION = "us-east-1"

# The AWS SDKs' own variable names: botocore/s3fs, delta-rs (object_store crate) and Hadoop's
# EnvironmentVariableCredentialsProvider all read these.
ENV_KEY = "AWS_ACCESS_KEY_ID"
ENV_SECRET = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - a variable name
ENV_TOKEN = "AWS_SESSION_TOKEN"  # noqa: S105 - a variable name
ENV_ENDPOINT = "AWS_ENDPOINT_URL"
ENV_REGION = "AWS_REGION"


def is_s3(uri: str) -> bool:
    return uri.split("://", 1)[0].lower() in S3_SCHEMES if "://" in uri else False


@dataclass(frozen=True)
class S3Credentials:
    """Where the store is and who we are there. `repr` hides the secret and the token."""

    conn_id: str
    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoint_url: str | None = None  # None: AWS itself
    region: str = DEFAULT_REGION

    @property
    def secrets(self) -> list[str]:
        """Values that must never reach a command line, a log line or a page."""
        return [s for s in (self.secret_key, self.session_token) if s]

    @property
    def plain_http(self) -> bool:
        return bool(self.endpoint_url and self.endpoint_url.lower().startswith("http://"))

    def fsspec_options(self) -> dict[str, Any]:
        """s3fs keyword arguments."""
        client: dict[str, Any] = {"region_name": self.region}
        if self.endpoint_url:
            client["endpoint_url"] = self.endpoint_url
        # No listings cache: other processes (the Spark jobs, other tasks) add objects while this one runs, and
        # a cached listing of a prefix would hide them (a report written by the job, a window staged meanwhile).
        opts: dict[str, Any] = {"key": self.access_key, "secret": self.secret_key, "client_kwargs": client,
                                "use_listings_cache": False}
        if self.session_token:
            opts["token"] = self.session_token
        return opts

    def delta_rs_options(self) -> dict[str, str]:
        """delta-rs `storage_options` for the pipeline's own reads and writes outside the merge job (the
        checkpoints table): the lease makes the pipeline the only writer of those tables, so no external lock
        (AWS_S3_ALLOW_UNSAFE_RENAME, which deltalake before 1.0 required; docs/object-store.md)."""
        opts = {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        }
        if self.session_token:
            opts["AWS_SESSION_TOKEN"] = self.session_token
        if self.endpoint_url:
            opts["AWS_ENDPOINT_URL"] = self.endpoint_url
            opts["AWS_ALLOW_HTTP"] = "true" if self.plain_http else "false"
        return opts

    def job_env(self) -> dict[str, str]:
        """The Spark job's environment entries (never its command line)."""
        env = {ENV_KEY: self.access_key, ENV_SECRET: self.secret_key, ENV_REGION: self.region}
        if self.session_token:
            env[ENV_TOKEN] = self.session_token
        if self.endpoint_url:
            env[ENV_ENDPOINT] = self.endpoint_url
        return env


def from_connection(info: ConnectionInfo) -> S3Credentials:
    """Pure: credentials from an `aws` connection (login, password, extra endpoint_url/region_name)."""
    where = f"connection {info.conn_id!r} (object_store.conn_id)"
    if (info.conn_type or "").lower() != CONN_TYPE:
        raise ConfigError(
            f"{where} has type {info.conn_type!r}; the object store's connection is of type 'aws': login = access "
            "key id, password = secret access key, extra = {\"endpoint_url\": ..., \"region_name\": ...}"
        )
    extra = dict(info.extra or {})
    key = info.user or extra.get("aws_access_key_id")
    secret = info.password or extra.get("aws_secret_access_key")
    if not key or not secret:
        raise ConfigError(
            f"{where} has no access key id (login) or no secret access key (password); set both, or remove "
            "object_store.conn_id to use the environment's or the instance role's credentials"
        )
    endpoint = extra.get("endpoint_url") or (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
    if endpoint is not None and not str(endpoint).lower().startswith(("http://", "https://")):
        raise ConfigError(f"{where}: extra.endpoint_url {endpoint!r} must start with http:// or https://")
    return S3Credentials(
        conn_id=info.conn_id,
        access_key=str(key),
        secret_key=str(secret),
        session_token=extra.get("aws_session_token") or None,
        endpoint_url=str(endpoint).rstrip("/") if endpoint else None,
        region=str(extra.get("region_name") or DEFAULT_REGION),
    )


def for_pipeline(config: Any, env: Mapping[str, str] | None = None) -> S3Credentials | None:
    """The credentials of the connection a pipeline's `object_store.conn_id` names, from the environment
    (AIRFLOW_CONN_<ID>, as the CLI reads every connection); None when it names none."""
    from cdc_core.model.connections import resolve_connection

    conn_id = config.object_store.conn_id
    return from_connection(resolve_connection(conn_id, env)) if conn_id else None


def from_env(environ: Mapping[str, str]) -> S3Credentials | None:
    """Inside a Spark job: the credentials its submitter put in its environment (`job_env`)."""
    key, secret = environ.get(ENV_KEY), environ.get(ENV_SECRET)
    if not key or not secret:
        return None
    return S3Credentials(
        conn_id="-",
        access_key=key,
        secret_key=secret,
        session_token=environ.get(ENV_TOKEN) or None,
        endpoint_url=environ.get(ENV_ENDPOINT) or None,
        region=environ.get(ENV_REGION) or DEFAULT_REGION,
    )


def spark_confs(creds: S3Credentials | None) -> dict[str, str]:
    """Plain (secret-free) confs for the Spark side of `s3://`/`s3a://` URLs."""
    confs = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        # Fail in seconds, not after Hadoop's default of many retries with minutes of backoff.
        "spark.hadoop.fs.s3a.attempts.maximum": "5",
        "spark.hadoop.fs.s3a.retry.limit": "5",
    }
    if creds is not None:
        confs["spark.hadoop.fs.s3a.endpoint.region"] = creds.region
        if creds.endpoint_url:
            confs["spark.hadoop.fs.s3a.endpoint"] = creds.endpoint_url
            # Stores other than AWS (MinIO, S3Proxy, Ceph) address buckets by path, not by host name.
            confs["spark.hadoop.fs.s3a.path.style.access"] = "true"
            confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false" if creds.plain_http else "true"
    return confs


def session_confs_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Inside a Spark job: the s3a credential confs from its environment, for its own session builder, so
    executors on other hosts authenticate too (their environment does not have the variables)."""
    creds = from_env(environ)
    if creds is None:
        return {}
    confs = {
        "spark.hadoop.fs.s3a.access.key": creds.access_key,
        "spark.hadoop.fs.s3a.secret.key": creds.secret_key,
    }
    if creds.session_token:
        confs["spark.hadoop.fs.s3a.session.token"] = creds.session_token
        confs["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        )
    return confs


# ------------------------------------------------------------------------------ one pipeline's storage


@dataclass(frozen=True)
class Storage:
    """How this process's Python clients reach one pipeline's staging and lake: the options fsspec (staging,
    reports, listings) and delta-rs (the lake's state, the checkpoints table) take for a URL of it.

    Built once where the pipeline is opened (`Pipeline.storage`; a Spark job builds its own from its
    environment, `Storage(from_env(os.environ))`) and passed down as an argument. Nothing is process-wide,
    so pipelines on different stores with different keys run side by side in one process (the monitor
    opens them in a thread pool). `creds` None: local roots, or an object store reached through each
    library's default chain (environment, instance role)."""

    creds: S3Credentials | None = None
    # The store honours `If-None-Match: *` (probed by `commit_storage`): delta-rs commits with a put-if-absent
    # of the log entry, so a writer that checked version V can never commit on top of another's V+1.
    conditional_put: bool = False

    def fsspec_options(self, url: str) -> dict[str, Any]:
        """s3fs keyword arguments for `url` (none for a local path or without credentials)."""
        return self.creds.fsspec_options() if self.creds is not None and is_s3(url) else {}

    def delta_rs_options(self, uri: str) -> dict[str, str] | None:
        """delta-rs `storage_options` for the table at `uri` (None: a local path, or the default chain)."""
        if not is_s3(uri):
            return None
        opts = self.creds.delta_rs_options() if self.creds is not None else {}
        if self.conditional_put:
            opts.pop("AWS_S3_ALLOW_UNSAFE_RENAME", None)
            opts["conditional_put"] = "etag"  # commits are If-None-Match PUTs (no lock, nothing unsafe)
        return opts or None

    def may_commit(self, uri: str) -> bool:
        """Whether delta-rs may commit to the table at `uri` from here: a local path (its log entries are
        created by link, atomically), or a store whose conditional puts `commit_storage` found."""
        return not is_s3(uri) or self.conditional_put

    def fs(self, url: str) -> tuple[Any, str]:
        """`url`'s fsspec filesystem and the path inside it. s3fs caches one filesystem per set of options,
        so two pipelines with different keys never share one."""
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(url, **self.fsspec_options(url))
        except ImportError:
            raise ConfigError(
                f"{url}: staging or lake on s3:// needs the s3fs package (pip install 's3fs'; it is in the "
                "project's dependencies)"
            ) from None
        return fs, str(path)

    def open(self, url: str, mode: str = "rb") -> Any:
        """An fsspec file of `url`, to use as a context manager."""
        fs, path = self.fs(url)
        return fs.open(path, mode)


# No credentials of a pipeline's own: local paths, or each library's default chain for an object store.
AMBIENT = Storage()

CONDITIONAL_PUTS = ("auto", "off")  # object_store.conditional_puts
PROBE_DIR = "_cdc_probes"  # under the lake root; not a table (no _delta_log), removed after each probe


def commit_storage(storage: Storage, lake_root: str, mode: str = "auto") -> tuple[Storage, str | None]:
    """(`storage` able to commit without Spark to the lake's tables, None), or (`storage` unchanged, why not).
    A local lake needs nothing; an object store qualifies when `mode` is auto and the probe finds that it
    honours `If-None-Match: *` (each merge job probes once: three requests)."""
    if not is_s3(lake_root) or storage.conditional_put:
        return storage, None
    if mode == "off":
        return storage, "object_store.conditional_puts is off"
    why = probe_conditional_put(storage, lake_root)
    return (replace(storage, conditional_put=True), None) if why is None else (storage, why)


def probe_conditional_put(storage: Storage, root: str) -> str | None:
    """None when the store at `root` refuses a second `If-None-Match: *` PUT of one key (412), else why it
    does not qualify: it ignores the header (both PUTs succeed), refuses it (501 and the like), or the probe
    could not write at all. The probe object is deleted again."""
    fs, path = storage.fs(root.rstrip("/") + f"/{PROBE_DIR}/conditional-put-{uuid.uuid4().hex}")
    bucket, _, key = path.partition("/")
    call = getattr(fs, "call_s3", None)
    if call is None:
        return f"{type(fs).__name__} cannot send conditional writes"
    try:
        try:
            call("put_object", Bucket=bucket, Key=key, Body=b"", IfNoneMatch="*")
        except OSError as e:
            return f"the store refused a conditional write ({error_code(e) or e})"
        try:
            call("put_object", Bucket=bucket, Key=key, Body=b"", IfNoneMatch="*")
        except OSError as e:
            code = error_code(e)
            if code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return None
            return f"the store answered a conditional write of an existing key with {code or e}, not 412"
        return "the store ignores If-None-Match (a second conditional write of one key succeeded)"
    finally:
        with contextlib.suppress(OSError):  # a probe object left behind is harmless: not a table
            fs.rm(path)


def error_code(e: BaseException) -> str | None:
    """The S3 error code (`PreconditionFailed`, ...) behind an s3fs OSError, None when there is none."""
    seen: BaseException | None = e
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code"):
            return str(response["Error"]["Code"])
        seen = seen.__cause__ or seen.__context__
    return None


def delta_rs_uri(uri: str) -> str:
    """The same object under the scheme delta-rs understands."""
    return "s3://" + uri.split("://", 1)[1] if is_s3(uri) else uri
