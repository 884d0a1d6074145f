"""The monitor page's charts (plugins/cdc_airflow/charts.py and monitor.render_charts): inline SVG whose points
carry their window (or table) and value as data attributes, read back here with the standard HTML parser;
hostile labels escaped; empty, one-point, all-zero and None inputs drawn without dividing by zero."""

from __future__ import annotations

import math
import os
import tempfile
from html.parser import HTMLParser
from typing import Any

import pytest

pytestmark = pytest.mark.unit

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="cdc-unit-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from cdc_airflow import charts, monitor  # noqa: E402

NOW = 1_790_000_000.0
HOSTILE = '<script>alert("x")</script>'


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text outside tags."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html_text: str) -> _Elements:
    p = _Elements()
    p.feed(html_text)
    p.close()
    return p


def points(html_text: str, chart: str | None = None) -> list[dict[str, str]]:
    """The data attributes of every plotted point (of one chart when `chart` is given), in document order."""
    out, current = [], None
    for tag, attrs in parse(html_text).tags:
        if tag == "figure" or "data-chart" in attrs:
            current = attrs.get("data-chart")
        if "data-value" in attrs and (chart is None or current == chart):
            out.append(attrs)
    return out


# ------------------------------------------------------------------------------------------- charts


def test_a_line_chart_has_one_point_per_value_carrying_its_window_and_value() -> None:
    svg = charts.line_chart("c", "Sizes", [7, 8, 9], [("changes", [3, 0, 12.5]), ("txns", [1, None, 2])], y_label="n")
    got = [(p["data-series"], p["data-seq"], float(p["data-value"])) for p in points(svg)]
    assert got == [("changes", "7", 3), ("changes", "8", 0), ("changes", "9", 12.5), ("txns", "7", 1), ("txns", "9", 2)]
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 5
    text = "".join(parse(svg).text)
    for label in ("Sizes", "n", "window seq", "changes", "txns"):  # title, axis labels, legend
        assert label in text, label


def test_values_round_trip_exactly_through_the_data_attributes() -> None:
    values = [0.1 + 0.2, 1 / 3, 10.123, 1e-9, 123456789012, -2.5]
    svg = charts.line_chart("c", "t", list(range(len(values))), [("s", values)], y_label="y")
    assert [float(p["data-value"]) for p in points(svg)] == values
    assert [p["data-value"] for p in points(svg)][4] == "123456789012"  # an int stays an int


def test_every_label_is_escaped() -> None:
    line = charts.line_chart(HOSTILE, HOSTILE, [HOSTILE, 2], [(HOSTILE, [1, 2])], y_label=HOSTILE, x_label=HOSTILE)
    bars = charts.bar_chart(HOSTILE, HOSTILE, [HOSTILE, "b"], [1, 2], value_label=HOSTILE)
    empty = charts.line_chart(HOSTILE, HOSTILE, [], [], y_label=HOSTILE)
    for svg in (line, bars, empty):
        assert "<script" not in svg and "&lt;script&gt;" in svg
        assert not any(tag == "script" for tag, _ in parse(svg).tags)
    assert {p["data-seq"] for p in points(line)} == {HOSTILE, "2"}  # the parser unescapes the attribute back
    assert [p["data-label"] for p in points(bars)] == [HOSTILE, "b"]


def test_no_windows_is_a_short_text_not_a_chart() -> None:
    for out in (
        charts.line_chart("lag", "Lag", [], [("s", [])], y_label="s"),
        charts.bar_chart("tables", "Tables", [], [], value_label="s"),
    ):
        assert "<svg" not in out and "no windows yet" in out and points(out) == []
    only_none = charts.line_chart("lag", "Lag", [1, 2], [("s", [None, math.nan])], y_label="s", empty_text="none acked")
    assert "<svg" not in only_none and "none acked" in only_none


def test_one_point_sits_in_the_middle_without_a_line() -> None:
    svg = charts.line_chart("c", "t", [5], [("s", [4.5])], y_label="y")
    (p,) = points(svg)
    assert p["data-seq"] == "5" and p["data-value"] == "4.5"
    assert float(p["cx"]) == charts.LEFT + (charts.WIDTH - charts.LEFT - charts.RIGHT) / 2
    assert "<polyline" not in svg


def test_all_zero_values_lie_on_the_axis() -> None:
    svg = charts.line_chart("c", "t", [1, 2, 3], [("s", [0, 0, 0])], y_label="y")
    got = points(svg)
    assert [p["data-value"] for p in got] == ["0", "0", "0"]
    assert {float(p["cy"]) for p in got} == {charts.HEIGHT - charts.BOTTOM}
    bars = charts.bar_chart("b", "t", ["a", "b"], [0, 0.0], value_label="s")
    assert [p["data-value"] for p in points(bars)] == ["0", "0.0"]


def test_none_values_are_skipped_and_the_rest_keep_their_window() -> None:
    svg = charts.line_chart("c", "t", [10, 11, 12, 13], [("s", [None, 2, None, 4])], y_label="y")
    assert [(p["data-seq"], p["data-value"]) for p in points(svg)] == [("11", "2"), ("13", "4")]
    bars = charts.bar_chart("b", "t", ["a", "b", "c"], [None, 3, math.inf], value_label="s")
    assert [(p["data-label"], p["data-value"]) for p in points(bars)] == [("b", "3")]


def test_points_stay_inside_the_plot_with_negative_values() -> None:
    svg = charts.line_chart("c", "t", [1, 2], [("s", [-3, 6])], y_label="y")
    ys = [float(p["cy"]) for p in points(svg)]
    assert all(charts.TOP <= y <= charts.HEIGHT - charts.BOTTOM for y in ys) and ys[0] > ys[1]


def test_bars_come_in_the_order_given_with_their_values() -> None:
    svg = charts.bar_chart("t", "Slowest", ["db.a", "db.b"], [9.5, 2], value_label="merge seconds")
    got = points(svg)
    assert [(p["data-label"], p["data-value"]) for p in got] == [("db.a", "9.5"), ("db.b", "2")]
    assert float(got[0]["width"]) > float(got[1]["width"])
    assert "merge seconds" in "".join(parse(svg).text)


# ------------------------------------------------------------------------------------------ the page


def _window(seq: int, *, state: str = "acked", kind: str = "stream", **result: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "plan": {
            "seq": seq,
            "kind": kind,
            "transactions": seq * 2,
            "start": {"file": "mysql-bin.000007", "offset": 100 * seq},
            "end": {"file": "mysql-bin.000007", "offset": 100 * seq + 99, "commit_ts": NOW - 100 + seq},
            "planned_at": NOW - 50 + seq,
        },
        "state": state,
        "acked_at": NOW - 40 + seq * 1.5 if state == "acked" else None,
        "result": result,
    }


WINDOWS = [  # newest first, as status() lists them
    _window(4, state="planned"),
    _window(3, kind="snapshot", changes=500, tables={"shop.items": {"changes": 500}}, durations={"merge": 7.0}),
    _window(
        2,
        changes=30,
        tables={"shop.orders": {"changes": 20}, "shop.<b>x</b>": {"changes": 10}},
        durations={"merge": 2.5},
    ),
    _window(1, changes=0, tables={"shop.orders": {"changes": 0}}),
]


def test_chart_figures_take_the_lag_at_ack_from_the_record() -> None:
    two = monitor.chart_figures(WINDOWS[2])
    # acked_at (NOW - 37) minus the commit time of the window's last transaction (NOW - 98)
    assert two["commit_age"] == 61.0 and two["plan_to_ack"] == 11.0
    assert two["changes"] == 30 and two["transactions"] == 4 and two["merge"] == 2.5
    assert monitor.chart_figures(WINDOWS[0])["commit_age"] is None  # planned: not acked yet
    assert monitor.chart_figures(WINDOWS[0])["plan_to_ack"] is None
    assert monitor.chart_figures(WINDOWS[1])["commit_age"] is None  # a snapshot chunk reads rows, not the binlog
    no_commit = _window(5)
    no_commit["plan"]["end"].pop("commit_ts")
    assert monitor.chart_figures(no_commit)["commit_age"] is None


def test_the_page_draws_the_charts_from_the_windows() -> None:
    status = {"pipeline": "orders", "error": None, "windows": WINDOWS}
    page = monitor.render_pipeline(status, NOW)
    seqs = ["1", "2", "3", "4"]  # oldest first
    lag = points(page, "lag")
    assert [(p["data-seq"], float(p["data-value"])) for p in lag] == [("1", 60.5), ("2", 61.0)]
    sizes = {(p["data-series"], p["data-seq"]): float(p["data-value"]) for p in points(page, "sizes")}
    assert sizes == {
        ("changes", "1"): 0,
        ("changes", "2"): 30,
        ("changes", "3"): 500,
        **{("transactions", s): int(s) * 2 for s in seqs},
    }
    durations = {(p["data-series"], p["data-seq"]): float(p["data-value"]) for p in points(page, "durations")}
    assert durations == {
        ("merge job", "2"): 2.5,
        ("merge job", "3"): 7.0,
        ("plan to ack", "1"): 10.5,
        ("plan to ack", "2"): 11.0,
        ("plan to ack", "3"): 11.5,
    }
    # No window records merge seconds per table: the changes per table, the busiest first, and a note says so.
    tables = [(p["data-label"], p["data-value"]) for p in points(page, "tables")]
    assert tables == [("shop.items", "500"), ("shop.orders", "20"), ("shop.<b>x</b>", "10")]
    assert "<b>x</b>" not in page and "shop.&lt;b&gt;x&lt;/b&gt;" in page
    assert "nor is merge time per table" in page


def test_the_per_table_chart_plots_merge_seconds_when_the_windows_record_them() -> None:
    timed = [
        _window(2, changes=3, tables={"a.t": {"changes": 1, "seconds": 0.5}, "a.u": {"changes": 2, "seconds": 4.0}}),
        _window(1, changes=1, tables={"a.t": {"changes": 1, "seconds": 1.25}}),
    ]
    page = monitor.render_charts(timed)
    assert [(p["data-label"], p["data-value"]) for p in points(page, "tables")] == [("a.u", "4.0"), ("a.t", "1.75")]
    assert "Merge seconds per table" in page and "nor is merge time per table" not in page


def test_the_per_table_chart_keeps_the_slowest_few() -> None:
    many = [_window(1, changes=45, tables={f"s.t{i:02d}": {"changes": i} for i in range(10)})]
    labels = [p["data-label"] for p in points(monitor.render_charts(many), "tables")]
    assert labels == [f"s.t{i:02d}" for i in range(9, 9 - monitor.CHART_TABLES, -1)]


def test_a_single_planned_window_shows_what_it_has_and_says_what_is_missing() -> None:
    page = monitor.render_pipeline({"pipeline": "orders", "windows": [_window(1, state="planned")]}, NOW)
    assert points(page, "lag") == [] and "no window acked yet" in page
    assert [(p["data-series"], p["data-value"]) for p in points(page, "sizes")] == [("transactions", "2")]


def test_no_windows_means_no_charts() -> None:
    page = monitor.render_pipeline({"pipeline": "orders", "windows": []}, NOW)
    assert "No windows yet." in page and 'data-field="charts"' not in page and "<svg" not in page
