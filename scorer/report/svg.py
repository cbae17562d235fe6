"""Small inline-SVG charts for the report: bar charts and a line chart, drawn here so that the
report is one file that opens offline (no JavaScript, no CDN)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Sequence

WIDTH = 640
HEIGHT = 240
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 40
BAR_COLOUR = "#4c78a8"
LINE_COLOUR = "#e45756"
AXIS_COLOUR = "#888"


@dataclass(frozen=True)
class Bar:
    label: str  # under the bar (may be thinned out when there are many bars)
    value: float
    tooltip: str


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _axis(value: float, *, whole: bool) -> tuple[float, float]:
    """(top, step) of a y axis covering `value` with about five nice ticks; whole steps for counts."""
    if value <= 0:
        return (1.0, 1.0) if whole else (1.0, 0.25)
    raw = value / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw - 1e-12)
    if whole:
        step = max(1.0, float(math.ceil(step)))
    return step * math.ceil(value / step - 1e-9), step


def _ticks(top: float, step: float) -> list[float]:
    return [step * i for i in range(int(round(top / step)) + 1)]


def _tick_label(value: float, percent: bool) -> str:
    if percent:
        return f"{value * 100:.0f}%"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2g}"


def _frame(title: str, y_max: float, step: float, percent: bool, parts: list[str], x_label: str) -> str:
    plot_h = HEIGHT - TOP - BOTTOM
    axis = [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="{AXIS_COLOUR}"/>',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" stroke="{AXIS_COLOUR}"/>',
    ]
    for tick in _ticks(y_max, step):
        y = TOP + plot_h - (tick / y_max * plot_h if y_max > 0 else 0)
        axis.append(
            f'<text x="{LEFT - 6}" y="{_fmt(y + 4)}" text-anchor="end" class="tick">{_tick_label(tick, percent)}</text>'
            f'<line x1="{LEFT}" y1="{_fmt(y)}" x2="{WIDTH - RIGHT}" y2="{_fmt(y)}" stroke="#eee"/>'
        )
    axis.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle" class="axis-label">{escape(x_label)}</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
        + "".join(axis)
        + "".join(parts)
        + "</svg>"
    )


def bar_chart(title: str, bars: Sequence[Bar], *, x_label: str, y_max: float | None = None, percent: bool = False) -> str:
    """Vertical bars; `percent` draws values 0..1 as percentages. Every bar carries its value in
    `data-value` and a hover tooltip."""
    if y_max is not None:
        top, step = y_max, y_max / 4
    else:
        top, step = _axis(max((b.value for b in bars), default=0.0), whole=True)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(bars), 1)
    # Thin out x labels so they never overlap (about 40 px per label).
    every = max(1, int(len(bars) / (plot_w / 40)) + (1 if len(bars) > plot_w / 40 else 0))
    parts = []
    for i, bar in enumerate(bars):
        h = bar.value / top * plot_h if top > 0 else 0.0
        x = LEFT + i * slot + slot * 0.1
        y = TOP + plot_h - h
        parts.append(
            f'<rect class="bar" x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(slot * 0.8)}" height="{_fmt(h)}" '
            f'fill="{BAR_COLOUR}" data-label="{escape(bar.label)}" data-value="{bar.value:g}">'
            f"<title>{escape(bar.tooltip)}</title></rect>"
        )
        if i % every == 0:
            parts.append(
                f'<text x="{_fmt(LEFT + (i + 0.5) * slot)}" y="{TOP + plot_h + 14}" text-anchor="middle" class="tick">'
                f"{escape(bar.label)}</text>"
            )
    return _frame(title, top, step, percent, parts, x_label)


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    tooltip: str


def line_chart(title: str, points: Sequence[Point], *, x_labels: tuple[str, str], x_label: str, y_max: float = 1.0) -> str:
    """A line through `points` (x in any unit, drawn from min to max), y on 0..y_max."""
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    xs = [p.x for p in points]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    span = (x1 - x0) or 1.0

    def place(p: Point) -> tuple[float, float]:
        x = LEFT + (plot_w / 2 if x1 == x0 else (p.x - x0) / span * plot_w)
        y = TOP + plot_h - max(0.0, min(p.y, y_max)) / y_max * plot_h
        return x, y

    coords = [place(p) for p in points]
    parts = []
    if len(coords) > 1:
        path = " ".join(f"{_fmt(x)},{_fmt(y)}" for x, y in coords)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{LINE_COLOUR}" stroke-width="2"/>')
    for (x, y), p in zip(coords, points):
        parts.append(
            f'<circle class="point" cx="{_fmt(x)}" cy="{_fmt(y)}" r="3" fill="{LINE_COLOUR}" data-value="{p.y:.4f}">'
            f"<title>{escape(p.tooltip)}</title></circle>"
        )
    base = TOP + plot_h + 14
    parts.append(f'<text x="{LEFT}" y="{base}" text-anchor="start" class="tick">{escape(x_labels[0])}</text>')
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{base}" text-anchor="end" class="tick">{escape(x_labels[1])}</text>')
    return _frame(title, y_max, y_max / 4, False, parts, x_label)
