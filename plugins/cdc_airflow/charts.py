"""Small charts for the monitor page, drawn on the server as inline SVG (no JavaScript, no dependency).

Pure functions from lists of numbers and labels to an SVG string: `line_chart` plots one or more series over
window sequence numbers, `bar_chart` one value per label (horizontal bars). Every point is one element that
carries its key and its value as data attributes (`data-seq` or `data-label`, `data-value`, `data-series`),
so that a test (or a curious operator's devtools) reads back exactly what was plotted. A None (or NaN) value
is no point; an empty chart is a short text instead of an SVG; every label is HTML-escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import TypeGuard

Value = float | int | None

WIDTH, HEIGHT = 560, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 38, 34  # room for the y axis' ticks and label, title and legend, x labels
COLORS = ("#2563eb", "#d97706", "#059669", "#7c3aed", "#dc2626")
MAX_X_LABELS = 12


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def number(value: float | int) -> str:
    """A value as a data attribute: ints as they are, floats as Python's shortest round-trip text (so that
    `float(attribute) == value` in Python and `parseFloat(attribute) === value` in a browser)."""
    return str(value) if isinstance(value, int) else repr(float(value))


def plotted(value: object) -> TypeGuard[float | int]:
    """Whether a value is a point: a finite int or float (None, NaN, a bool or a text is none)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def tick(value: float) -> str:
    return f"{value:.3g}"


def empty(title: str, chart: str, text: str) -> str:
    return f'<p class="muted chart-empty" data-chart="{esc(chart)}">{esc(title)}: {esc(text)}</p>'


def _frame(chart: str, title: str, body: list[str], height: int = HEIGHT) -> str:
    return (
        f'<figure class="chart" data-chart="{esc(chart)}" style="margin:.4rem 0 .8rem">'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="{esc(title)}" style="font:11px system-ui,sans-serif;max-width:100%">'
        f"<title>{esc(title)}</title>"
        f'<text x="{LEFT}" y="14" font-size="13" font-weight="600" fill="#1d2733">{esc(title)}</text>'
        + "".join(body)
        + "</svg></figure>"
    )


def line_chart(
    chart: str,
    title: str,
    seqs: Sequence[int | str],
    series: Sequence[tuple[str, Sequence[Value]]],
    *,
    y_label: str,
    x_label: str = "window seq",
    empty_text: str = "no windows yet",
) -> str:
    """One or more series over window sequence numbers (left to right as given): a line through the plotted
    points of each series and one `<circle data-series data-seq data-value>` per point; a legend when there is
    more than one series. `seqs` and every series' values are parallel lists."""
    if not seqs:
        return empty(title, chart, "no windows yet")
    points = [
        (name, i, float(v), v) for name, values in series for i, v in enumerate(values[: len(seqs)]) if plotted(v)
    ]
    if not points:
        return empty(title, chart, empty_text)
    found = [p[2] for p in points]
    lo, hi = min(0.0, *found), max(0.0, *found)
    if hi == lo:  # all zero: a flat line along the axis, not a division by zero
        hi = lo + 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = len(seqs)

    def x(i: int) -> float:
        return LEFT + plot_w / 2 if n == 1 else LEFT + i * plot_w / (n - 1)

    def y(v: float) -> float:
        return TOP + plot_h - (v - lo) / (hi - lo) * plot_h

    body = _axes(lo, hi, y, y_label, x_label)
    step = max(1, math.ceil(n / MAX_X_LABELS))
    for i, seq in enumerate(seqs):
        if i % step == 0 or i == n - 1:
            body.append(
                f'<text x="{x(i):.1f}" y="{TOP + plot_h + 14}" text-anchor="middle" fill="#5b6775">{esc(seq)}</text>'
            )
    for k, (name, _) in enumerate(series):
        color = COLORS[k % len(COLORS)]
        mine = [(i, v, raw) for s, i, v, raw in points if s == name]
        if len(mine) > 1:
            line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v, _ in mine)
            body.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for i, v, raw in mine:
            body.append(
                f'<circle class="point" cx="{x(i):.1f}" cy="{y(v):.1f}" r="3.5" fill="{color}" '
                f'data-series="{esc(name)}" data-seq="{esc(seqs[i])}" data-value="{number(raw)}">'
                f"<title>{esc(name)}, window {esc(seqs[i])}: {esc(number(raw))}</title></circle>"
            )
        if len(series) > 1:
            lx = LEFT + k * 130  # the legend: a row under the title
            body.append(
                f'<rect x="{lx}" y="20" width="10" height="10" fill="{color}"/>'
                f'<text x="{lx + 14}" y="29" fill="#1d2733">{esc(name)}</text>'
            )
    return _frame(chart, title, body)


def bar_chart(
    chart: str,
    title: str,
    labels: Sequence[str],
    values: Sequence[Value],
    *,
    value_label: str,
    empty_text: str = "no windows yet",
) -> str:
    """One horizontal bar per label (in the order given), each a `<rect data-label data-value>`; a None value
    is left out. The bars start at zero (a negative value draws to the left of it)."""
    bars = [(label, float(v), v) for label, v in zip(labels, values, strict=False) if plotted(v)]
    if not bars:
        return empty(title, chart, empty_text if labels else "no windows yet")
    lo, hi = min(0.0, *(b[1] for b in bars)), max(0.0, *(b[1] for b in bars))
    if hi == lo:
        hi = lo + 1.0
    left, row = 190, 20
    height = TOP + row * len(bars) + BOTTOM
    plot_w = WIDTH - left - RIGHT - 50  # room for the value after the bar

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    body = [
        f'<line x1="{x(0):.1f}" y1="{TOP}" x2="{x(0):.1f}" y2="{TOP + row * len(bars)}" stroke="#8592a0"/>',
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle" fill="#5b6775">'
        f"{esc(value_label)}</text>",
    ]
    for j, (label, v, raw) in enumerate(bars):
        top = TOP + j * row
        x0, x1 = sorted((x(0), x(v)))
        body.append(
            f'<text x="{left - 6}" y="{top + 14}" text-anchor="end" fill="#1d2733">{esc(label)}</text>'
            f'<rect class="bar" x="{x0:.1f}" y="{top + 3}" width="{max(x1 - x0, 1):.1f}" height="{row - 6}" '
            f'fill="{COLORS[0]}" data-label="{esc(label)}" data-value="{number(raw)}">'
            f"<title>{esc(label)}: {esc(number(raw))}</title></rect>"
            f'<text x="{max(x(0), x(v)) + 4:.1f}" y="{top + 14}" fill="#5b6775">{esc(tick(v))}</text>'
        )
    return _frame(chart, title, body, height)


def _axes(lo: float, hi: float, y: Callable[[float], float], y_label: str, x_label: str) -> list[str]:
    """Three y ticks with grid lines (lo, middle, hi), the y axis, the zero line, and both axis labels."""
    bottom = HEIGHT - BOTTOM
    out = [
        f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{WIDTH - RIGHT}" y2="{y(v):.1f}" stroke="#e6eaef"/>'
        f'<text x="{LEFT - 5}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#5b6775">{esc(tick(v))}</text>'
        for v in (lo, (lo + hi) / 2, hi)
    ]
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#8592a0"/>')
    out.append(f'<line x1="{LEFT}" y1="{y(0.0):.1f}" x2="{WIDTH - RIGHT}" y2="{y(0.0):.1f}" stroke="#8592a0"/>')
    mid = TOP + (bottom - TOP) / 2
    out.append(
        f'<text x="12" y="{mid:.1f}" text-anchor="middle" fill="#5b6775" transform="rotate(-90 12 {mid:.1f})">'
        f"{esc(y_label)}</text>"
        f'<text x="{LEFT + (WIDTH - LEFT - RIGHT) / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle" fill="#5b6775">'
        f"{esc(x_label)}</text>"
    )
    return out
