"""The source connection's TLS context: pymysql's PREFERRED mode, built once per process, and configured
TLS options left to pymysql unchanged. No server is needed: pymysql builds the context in the constructor
(`defer_connect=True` keeps it from connecting)."""

from __future__ import annotations

import ssl

import pymysql
import pytest

from cdc_core.capture.source import SourceConnection, open_connection

pytestmark = pytest.mark.unit


def _conn(**kw: object) -> SourceConnection:
    c = open_connection(host="127.0.0.1", port=1, user="u", password="p", defer_connect=True, **kw)
    assert isinstance(c, SourceConnection)
    return c


def test_preferred_mode_matches_pymysql_and_is_shared() -> None:
    stock = pymysql.connect(host="127.0.0.1", port=1, user="u", password="p", defer_connect=True)
    a, b = _conn(), _conn()
    # Same mode as stock pymysql: TLS attempted, not required, nothing verified.
    assert (a.ssl, a._ssl_required) == (stock.ssl, stock._ssl_required) == (True, False)
    for attr in ("verify_mode", "check_hostname", "protocol", "minimum_version", "maximum_version"):
        assert getattr(a.ctx, attr) == getattr(stock.ctx, attr), attr
    assert a.ctx.options == stock.ctx.options
    assert a.ctx.verify_flags == stock.ctx.verify_flags
    assert a.ctx.verify_mode == ssl.CERT_NONE and not a.ctx.check_hostname
    assert a.ctx is b.ctx  # built once


def test_configured_tls_is_left_to_pymysql() -> None:
    a = _conn(ssl_verify_cert=True, ssl_verify_identity=True)
    stock = pymysql.connect(
        host="127.0.0.1", port=1, user="u", password="p", defer_connect=True, ssl_verify_cert=True,
        ssl_verify_identity=True,
    )
    assert a._ssl_required and stock._ssl_required
    assert a.ctx.verify_mode == stock.ctx.verify_mode == ssl.CERT_REQUIRED
    assert a.ctx.check_hostname == stock.ctx.check_hostname
    assert a.ctx.cert_store_stats() == stock.ctx.cert_store_stats()  # the CA store is loaded, as before
    assert a.ctx is not _conn().ctx
    own = ssl.create_default_context()
    assert _conn(ssl=own).ctx is own


def test_disabled_tls_builds_no_context() -> None:
    a = _conn(ssl_disabled=True)
    assert not a.ssl and not hasattr(a, "ctx")
