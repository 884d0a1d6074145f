"""The monitor page in a real `airflow api-server` and a real (headless) browser.

A pipeline is given state through cdc_core itself (a held lease, an initialised cursor, a planned
window); the page at /cdc-monitor/ must show the pipeline, its cursor and its lease to a logged-in
user, its JSON twin must refuse a request without a token, and no credential may appear anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from cdc_core.run.status import pipeline_status
from tests.support.e2e import ROOT, VENV_BIN, CdcCase, binlog_position, sql

pytestmark = pytest.mark.e2e

HOLDER = "e2e-monitor/holder-run"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, token: str | None = None, data: bytes | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"} if data else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def api_server(cdc_case: CdcCase, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**cdc_case.env, "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": base}
    log = (tmp_path / "api-server.log").open("w")
    proc = subprocess.Popen(
        [str(VENV_BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "api-server.log").read_text()[-5000:]
            try:
                if _get(f"{base}/api/v2/monitor/health")[0] == 200:
                    break
            except OSError:
                pass
            log_tail = (tmp_path / "api-server.log").read_text()[-5000:]
            assert time.monotonic() < deadline, "api-server not healthy:\n" + log_tail
            time.sleep(0.5)
        yield base
    finally:
        # The api-server's own process group (it was started in a new session): it and its workers.
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()


@pytest.fixture
def pipeline_with_state(cdc_case: CdcCase) -> Iterator[dict[str, Any]]:
    """The test pipeline with an initialised cursor, a planned window and a lease held by HOLDER."""
    cdc_case.write_config(binlog_position(cdc_case.services))
    sql(
        cdc_case.services,
        cdc_case.database,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
    )
    with cdc_case.pipeline() as p:
        grant = p.acquire(HOLDER)
        try:
            p.plan(grant)
            yield pipeline_status(p)
        finally:
            p.release(grant)


def test_monitor_page_shows_pipeline_cursor_and_lease(cdc_case: CdcCase, pipeline_with_state, api_server: str) -> None:  # type: ignore[no-untyped-def]
    base = api_server
    status = pipeline_with_state
    cursor = status["cursor"]["position"]
    where = f"{cursor['file']}:{cursor['offset']}"
    password = cdc_case.services.mysql_password

    # Without a login the plugin's routes refuse; with one they answer, without credentials in them.
    for path in ("/cdc-monitor/", "/cdc-monitor/api/pipelines"):
        code, _ = _get(base + path)
        assert code in (401, 403), (path, code)
    code, body = _get(f"{base}/auth/token", data=json.dumps({"username": "admin", "password": "admin"}).encode())
    assert code in (200, 201), body
    token = json.loads(body)["access_token"]
    code, body = _get(f"{base}/cdc-monitor/api/pipelines", token=token)
    assert code == 200, body
    (data,) = json.loads(body)["pipelines"]
    assert data["pipeline"] == cdc_case.name and data["error"] is None, data
    assert data["lease"]["holder"] == HOLDER and data["cursor"]["position"]["offset"] == cursor["offset"]
    assert password not in body

    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium",
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        try:
            context = browser.new_context()
            context.add_cookies([{"name": "_token", "value": token, "url": base}])
            page = context.new_page()
            response = page.goto(f"{base}/cdc-monitor/")
            assert response is not None and response.status == 200
            section = page.locator(f'section[data-pipeline="{cdc_case.name}"]')
            assert section.count() == 1
            assert section.locator('[data-field="cursor"]').inner_text() == where
            assert HOLDER in section.locator('[data-field="lease"]').inner_text()
            assert "held" in section.locator('[data-field="lease"]').inner_text()
            text = page.content()
            assert password not in text

            # Airflow's own UI links the page straight from the sidebar and shows it in an iframe.
            page.goto(f"{base}/")
            link = page.get_by_role("link", name="CDC pipelines")
            link.first.wait_for(timeout=60_000)
            page.goto(f"{base}/plugin/cdc-monitor")
            frame = page.frame_locator("iframe").first
            frame.locator(f'section[data-pipeline="{cdc_case.name}"]').wait_for(timeout=60_000)
        finally:
            browser.close()
