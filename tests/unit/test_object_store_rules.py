"""Pure rules of cdc_core.lake.object_store: credentials from an aws connection, and where each client gets them."""

from __future__ import annotations

import json

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


def test_only_s3_urls_get_delta_rs_options() -> None:
    assert object_store.is_s3("s3://b/k") and object_store.is_s3("S3A://b/k")
    assert not object_store.is_s3("/data/lake") and not object_store.is_s3("gs://b/k")
    assert object_store.delta_rs_options("/data/lake/t") is None
    assert object_store.delta_rs_uri("s3a://b/lake/t") == "s3://b/lake/t"
