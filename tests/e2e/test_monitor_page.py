"""The monitor page in a real `airflow api-server` and a real (headless) browser.

A pipeline is given state through cdc_core itself (a held lease, two acked windows, a planned one);
the page at /cdc-monitor/ must show the pipeline, its cursor and its lease to a logged-in user, and
charts whose points (read back from the DOM) are the numbers of the windows in its JSON twin; that
JSON must refuse a request without a token, and no credential may appear anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from cdc_core.run.status import pipeline_status
from tests.support.e2e import ROOT, VENV_BIN, CdcCase, binlog_position, sql
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e

HOLDER = "e2e-monitor/holder-run"


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
    port = free_port()
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
    """The test pipeline with two acked windows, a third one planned, and a lease held by HOLDER. The acked
    ones hold only DDL of tables the lake never had: the merge step skips them, so no Spark job runs."""
    cdc_case.write_config(binlog_position(cdc_case.services))
    sql(cdc_case.services, cdc_case.database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    with cdc_case.pipeline() as p:
        grant = p.acquire(HOLDER)
        try:
            for then in ("CREATE TABLE u (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1, 'a'), (2, 'b')"):
                seq = p.plan(grant).seq
                p.stage(grant, seq)
                assert p.merge_locally(grant, seq).skipped is not None
                p.ack(grant, seq)
                sql(cdc_case.services, cdc_case.database, then)
            p.plan(grant)
            yield pipeline_status(p)
        finally:
            p.release(grant)


def chart_points(windows: list[dict[str, Any]]) -> list[tuple[str, str | None, str, float]]:
    """What the page's charts must plot, read from the JSON's window records (newest first there): per chart,
    series and window (or table) the value. Lag: ack time minus the commit time of the window's last
    transaction; sizes: changes and transactions; durations: the merge job's seconds and plan to ack; per
    table: its changes over these windows (the records hold no per-table merge seconds), the most first."""
    oldest_first = list(reversed(windows))
    acked = [w for w in oldest_first if w["state"] == "acked"]

    def per_window(chart: str, series: str, pairs: list[tuple[dict[str, Any], Any]]) -> list[Any]:
        return [(chart, series, str(w["plan"]["seq"]), v) for w, v in pairs if v is not None]

    changes: dict[str, int] = {}
    for w in oldest_first:
        for name, info in (w["result"].get("tables") or {}).items():
            changes[name] = changes.get(name, 0) + info["changes"]
    return [
        *per_window("lag", "commit age", [(w, round(w["acked_at"] - w["plan"]["end"]["commit_ts"], 3)) for w in acked]),
        *per_window("sizes", "changes", [(w, w["result"].get("changes")) for w in oldest_first]),
        *per_window("sizes", "transactions", [(w, w["plan"]["transactions"]) for w in oldest_first]),
        *per_window("durations", "merge job", [(w, (w["result"].get("durations") or {}).get("merge")) for w in acked]),
        *per_window(
            "durations", "plan to ack", [(w, round(w["acked_at"] - w["plan"]["planned_at"], 3)) for w in acked]
        ),
        *[("tables", None, name, v) for name, v in sorted(changes.items(), key=lambda kv: (-kv[1], kv[0]))[:8]],
    ]


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
    windows = data["windows"]
    assert [(w["plan"]["seq"], w["state"]) for w in windows] == [(3, "planned"), (2, "acked"), (1, "acked")]
    expected_points = chart_points(windows)
    lags = [v for chart, _, _, v in expected_points if chart == "lag"]
    assert len(lags) == 2 and all(0 <= v < 600 for v in lags), lags  # one source clock: never negative

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

            # The charts (inline SVG drawn by the server): each point carries its window and value.
            drawn = section.locator("[data-chart] [data-value]").evaluate_all(
                """els => els.map(e => [e.closest("[data-chart]").dataset.chart, e.dataset.series || null,
                                        e.dataset.seq || e.dataset.label, parseFloat(e.dataset.value)])"""
            )
            assert [tuple(p) for p in drawn] == expected_points
            assert section.locator('figure[data-chart="lag"] svg').count() == 1

            # Airflow's own UI links the page straight from the sidebar and shows it in an iframe.
            page.goto(f"{base}/")
            link = page.get_by_role("link", name="CDC pipelines")
            link.first.wait_for(timeout=60_000)
            page.goto(f"{base}/plugin/cdc-monitor")
            frame = page.frame_locator("iframe").first
            frame.locator(f'section[data-pipeline="{cdc_case.name}"]').wait_for(timeout=60_000)
        finally:
            browser.close()
