"""Pure rules of cdc_core.lake.object_store: credentials from an aws connection, and where each client gets them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import ModuleType

import pytest

from cdc_core.lake import object_store
from cdc_core.lake.spark_conf import spark_env
from cdc_core.model.connections import parse_connection
from cdc_core.model.errors import ConfigError

pytestmark = pytest.mark.unit

SECRET = "s3cr3t/with+chars"
CONN = json.dumps({"conn_type": "aws", "login": "AKIDEXAMPLE", "password": SECRET,
                   "extra": {"endpoint_url": "http://127.0.0.1:19300/", "region_name": "eu-west-1"}})


def creds() -> object_store.S3Credentials:
    return object_store.from_connection(parse_connection("cdc_s3", CONN))


def test_an_aws_connection_needs_no_host_and_gives_key_secret_endpoint_region() -> None:
    c = creds()
    assert (c.access_key, c.secret_key, c.endpoint_url, c.region) == (
        "AKIDEXAMPLE", SECRET, "http://127.0.0.1:19300", "eu-west-1")
    assert SECRET not in repr(c) and c.secrets == [SECRET]


def test_the_uri_form_and_aws_defaults() -> None:
    c = object_store.from_connection(parse_connection("x", "aws://AKID:pw@"))
    assert (c.access_key, c.secret_key, c.endpoint_url, c.region) == ("AKID", "pw", None, "us-east-1")
    assert "spark.hadoop.fs.s3a.endpoint" not in object_store.spark_confs(c)  # AWS itself: no endpoint, TLS


@pytest.mark.parametrize(
    ("conn", "says"),
    [
        ({"conn_type": "mysql", "host": "h", "login": "a", "password": "b"}, "type 'aws'"),
        ({"conn_type": "aws", "login": "a"}, r"no access key id \(login\) or no secret access key"),
        ({"conn_type": "aws", "login": "a", "password": "b", "extra": {"endpoint_url": "minio:9000"}},
         "must start with http:// or https://"),
    ],
)
def test_wrong_connections_are_refused_saying_what_to_set(conn: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        object_store.from_connection(parse_connection("cdc_s3", json.dumps(conn)))


def test_each_client_gets_the_same_credentials_in_its_own_form() -> None:
    c = creds()
    assert c.fsspec_options() == {"key": "AKIDEXAMPLE", "secret": SECRET, "use_listings_cache": False,
                                  "client_kwargs": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:19300"}}
    rs = c.delta_rs_options()
    assert rs["AWS_SECRET_ACCESS_KEY"] == SECRET and rs["AWS_ALLOW_HTTP"] == "true"
    assert rs["AWS_ENDPOINT_URL"] == "http://127.0.0.1:19300"
    confs = object_store.spark_confs(c)
    assert confs["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:19300"
    assert confs["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert confs["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert not any(SECRET in v or "AKIDEXAMPLE" in v for v in confs.values())  # confs reach the command line


def test_the_job_gets_the_secret_in_its_environment_and_its_session_builds_s3a_confs_from_it() -> None:
    env = spark_env(None, python="/venv/bin/python", path="/usr/bin", environ={}, store=creds())
    assert env["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE" and env["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:19300" and env["AWS_REGION"] == "eu-west-1"
    assert object_store.from_env(env) == object_store.S3Credentials(
        "-", "AKIDEXAMPLE", SECRET, None, "http://127.0.0.1:19300", "eu-west-1")
    session = object_store.session_confs_from_env(env)
    assert session == {"spark.hadoop.fs.s3a.access.key": "AKIDEXAMPLE", "spark.hadoop.fs.s3a.secret.key": SECRET}
    assert object_store.session_confs_from_env({}) == {}
    assert "AWS_SECRET_ACCESS_KEY" not in spark_env(None, python="/p", path="", environ={})


def test_temporary_credentials_carry_their_token_everywhere() -> None:
    conn = json.dumps({"conn_type": "aws", "login": "ASIA", "password": "pw", "extra": {"aws_session_token": "tok"}})
    c = object_store.from_connection(parse_connection("t", conn))
    assert c.secrets == ["pw", "tok"] and "tok" not in repr(c)
    assert c.job_env()["AWS_SESSION_TOKEN"] == "tok" and c.fsspec_options()["token"] == "tok"
    session = object_store.session_confs_from_env(c.job_env())
    assert session["spark.hadoop.fs.s3a.session.token"] == "tok"
    assert session["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")


def test_only_s3_urls_get_the_pipelines_options() -> None:
    assert object_store.is_s3("s3://b/k") and object_store.is_s3("S3A://b/k")
    assert not object_store.is_s3("/data/lake") and not object_store.is_s3("gs://b/k")
    storage = object_store.Storage(creds())
    assert storage.delta_rs_options("/data/lake/t") is None and storage.fsspec_options("/data/staging") == {}
    assert storage.delta_rs_options("s3a://b/lake/t") == creds().delta_rs_options()
    assert storage.fsspec_options("s3://b/staging") == creds().fsspec_options()
    assert object_store.AMBIENT.delta_rs_options("s3://b/lake/t") is None  # delta-rs's own default chain
    assert object_store.AMBIENT.fsspec_options("s3://b/staging") == {}
    assert object_store.delta_rs_uri("s3a://b/lake/t") == "s3://b/lake/t"
    assert SECRET not in repr(storage)


def test_nothing_is_process_wide(tmp_path: Path) -> None:
    """Issue 35 §3: no module state in object_store, and building pipelines' storage (or a pipeline) leaves
    fsspec's global config without credentials: each call gets its pipeline's options as an argument."""
    import fsspec.config

    from cdc_core.model.config import load_config
    from cdc_core.run.pipeline import Pipeline

    assert not hasattr(object_store, "activate") and not hasattr(object_store, "active")
    state = {name: value for name, value in vars(object_store).items()
             if not name.startswith("__") and not callable(value) and not isinstance(value, type | ModuleType)}
    assert set(state) == {"S3_SCHEMES", "CONN_TYPE", "DEFAULT_REGION", "ENV_KEY", "ENV_SECRET", "ENV_TOKEN",
                          "ENV_ENDPOINT", "ENV_REGION", "AMBIENT", "CONDITIONAL_PUTS", "PROBE_DIR",
                          "annotations"}, state  # constants only
    assert object_store.AMBIENT.creds is None
    with pytest.raises(dataclasses.FrozenInstanceError):  # nobody can give the shared default credentials
        object_store.AMBIENT.creds = creds()  # type: ignore[misc]
    other = json.loads(CONN) | {"login": "AKIDOTHER", "password": "other-secret"}
    cfg = tmp_path / "pipelines.yaml"
    cfg.write_text(json.dumps({"pipelines": [
        {"name": n, "source": {"conn_id": "src"},
         "tables": {"include": ["db.*"]}, "zookeeper": {"hosts": "127.0.0.1:1"},
         "staging_root": f"s3://{n}/staging", "lake_root": f"s3://{n}/lake", "object_store": {"conn_id": c}}
        for n, c in (("one", "cdc_s3"), ("two", "cdc_s3_other"))]}))
    env = {"AIRFLOW_CONN_CDC_S3": CONN, "AIRFLOW_CONN_CDC_S3_OTHER": json.dumps(other)}
    conf_before = json.dumps(fsspec.config.conf, sort_keys=True, default=str)
    storages = []
    for name in ("one", "two"):
        config = load_config(cfg).pipeline(name)
        p = Pipeline(config=config, source=None, coordinator=None,  # type: ignore[arg-type]
                     store=object_store.for_pipeline(config, env))
        storages.append(p.storage)
        storages[-1].fs(p.staging_root)  # an s3fs filesystem of its own, with the pipeline's options
    one, two = storages
    assert one.fsspec_options("s3://one/staging")["key"] == "AKIDEXAMPLE"
    assert two.fsspec_options("s3://two/staging")["key"] == "AKIDOTHER"
    assert one.fs("s3://one/staging")[0] is not two.fs("s3://two/staging")[0]
    assert json.dumps(fsspec.config.conf, sort_keys=True, default=str) == conf_before
    assert not any(k in fsspec.config.conf for k in object_store.S3_SCHEMES)
    assert SECRET not in conf_before and "other-secret" not in conf_before


def test_a_spark_job_builds_its_storage_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge and maintenance jobs get the credentials in their environment (`job_env`) and pass a Storage
    built from it down to their driver-side reads and their report; nothing is configured process-wide."""
    import fsspec.config

    from spark_apps.spark_job import job_storage

    for k, v in creds().job_env().items():
        monkeypatch.setenv(k, v)
    storage = job_storage()
    assert storage.creds is not None and storage.creds.secret_key == SECRET
    assert storage.delta_rs_options("s3://cdc/lake/t") == creds().delta_rs_options()
    assert not any(k in fsspec.config.conf for k in object_store.S3_SCHEMES)
    for k in creds().job_env():
        monkeypatch.delenv(k)
    assert job_storage() == object_store.AMBIENT


class _ProbeStore:
    """An S3 client as the probe sees it (s3fs's `call_s3`, `rm`): `second` is how the store answers the second
    `If-None-Match: *` PUT of one key (None: it accepts it), `first` the first."""

    def __init__(self, second: str | None, first: str | None = None) -> None:
        self.answers = [first, second]
        self.puts: list[dict[str, object]] = []
        self.removed: list[str] = []

    def call_s3(self, method: str, **kw: object) -> dict[str, object]:
        assert method == "put_object" and kw["IfNoneMatch"] == "*"
        self.puts.append(kw)
        code = self.answers[len(self.puts) - 1]
        if code is None:
            return {}
        cause = type("ClientError", (Exception,), {})()
        cause.response = {"Error": {"Code": code}}
        raise OSError(22, "refused") from cause

    def rm(self, path: str) -> None:
        self.removed.append(path)


@pytest.mark.parametrize(("second", "first", "qualifies", "says"), [
    ("PreconditionFailed", None, True, ""),
    ("ConditionalRequestConflict", None, True, ""),  # AWS, when another writer's PUT of the key is in flight
    (None, None, False, "ignores If-None-Match"),
    ("NotImplemented", None, False, "NotImplemented, not 412"),
    (None, "AccessDenied", False, "refused a conditional write (AccessDenied)"),
])
def test_the_probe_admits_only_a_store_that_refuses_the_second_conditional_put(
    monkeypatch: pytest.MonkeyPatch, second: str | None, first: str | None, qualifies: bool, says: str
) -> None:
    fake = _ProbeStore(second, first)
    storage = object_store.Storage(creds())
    monkeypatch.setattr(object_store.Storage, "fs", lambda self, url: (fake, url.removeprefix("s3://")))
    checked, why = object_store.commit_storage(storage, "s3://bucket/lake")
    assert (why is None) == qualifies and says in (why or "")
    assert checked.may_commit("s3://bucket/lake/db/t") == qualifies and checked.conditional_put == qualifies
    assert {p["Bucket"] for p in fake.puts} == {"bucket"}
    assert all(str(p["Key"]).startswith("lake/_cdc_probes/conditional-put-") for p in fake.puts)
    assert len(fake.removed) == 1  # the probe key is deleted whatever the answer


def test_commits_need_a_local_lake_or_conditional_puts_and_the_writer_options_say_so() -> None:
    storage = object_store.Storage(creds())
    assert storage.may_commit("/data/lake/t") and not storage.may_commit("s3://b/lake/t")
    assert object_store.commit_storage(storage, "/data/lake") == (storage, None)  # nothing to probe
    off, why = object_store.commit_storage(storage, "s3://b/lake", "off")
    assert off is storage and "conditional_puts is off" in str(why)
    checked = dataclasses.replace(storage, conditional_put=True)
    opts = checked.delta_rs_options("s3://b/lake/t")
    assert opts is not None and opts["conditional_put"] == "etag" and "AWS_S3_ALLOW_UNSAFE_RENAME" not in opts
    assert opts["AWS_SECRET_ACCESS_KEY"] == SECRET and checked.delta_rs_options("/data/lake/t") is None
    ambient = dataclasses.replace(object_store.AMBIENT, conditional_put=True)
    assert ambient.delta_rs_options("s3://b/lake/t") == {"conditional_put": "etag"}  # the default chain's keys
    assert object_store.commit_storage(checked, "s3://b/lake") == (checked, None)  # probed once


def test_conditional_puts_are_auto_or_off_in_the_config() -> None:
    from pydantic import ValidationError

    from cdc_core.model.config.sections import ObjectStoreConfig

    assert ObjectStoreConfig().conditional_puts == "auto"
    assert ObjectStoreConfig(conditional_puts="off").conditional_puts == "off"
    with pytest.raises(ValidationError, match="conditional_puts"):
        ObjectStoreConfig(conditional_puts="yes")


def test_per_table_reads_a_stores_tables_at_once_in_order_and_a_local_lakes_one_by_one() -> None:
    import threading
    import time

    from cdc_core.lake import delta_state

    seen: set[str] = set()
    at_once = {"now": 0, "max": 0}
    lock = threading.Lock()

    def read(uri: str) -> str:
        with lock:
            at_once["now"] += 1
            at_once["max"] = max(at_once["max"], at_once["now"])
            seen.add(threading.current_thread().name)
        time.sleep(0.02)
        with lock:
            at_once["now"] -= 1
        return uri.upper()

    uris = [f"s3://b/lake/db/t{i}" for i in range(20)]
    assert delta_state.per_table(read, uris, "s3://b/lake") == [u.upper() for u in uris]
    assert 1 < at_once["max"] <= delta_state.READ_THREADS
    at_once["max"] = 0
    local = [f"/data/lake/db/t{i}" for i in range(5)]
    assert delta_state.per_table(read, local, "/data/lake") == [u.upper() for u in local]
    assert at_once["max"] == 1

    def broken(uri: str) -> str:
        raise ValueError(uri)

    with pytest.raises(ValueError, match="t0"):
        delta_state.per_table(broken, uris[:3], "s3://b/lake")
