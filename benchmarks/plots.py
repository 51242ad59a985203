"""Latency plots for ``RESULTS.md``, written as plain SVG by this module (no plotting library).

Why our own writer: the pictures needed are a handful of empirical CDFs (step lines, one log and
one linear axis, a legend, target markers). A plotting library would bring numpy, pillow and a font
stack into the lock file for that; ~200 lines of SVG text do it, the output is deterministic
(the same samples give the same bytes, so a plot changes in a diff only when its data does) and
GitHub renders SVG inline in Markdown.

Two drawings from the ``*.samples.json`` files (``samples.py``):

* ``latency-vs-polling.svg``: every event-driven latency we measured beside upstream's safety net
  for the same change, a 5-minute poll (a change at a random moment waits uniformly 0..300 s for
  the next poll), on a log time axis from 1 ms to 10 minutes;
* ``latency-cdf.svg``: one panel per series on a linear axis up to a little beyond its target, with
  the target as a vertical line and the 99 % level as a horizontal one: the curve must cross the
  99 % line left of the target line for the target to be met.

``python -m benchmarks.plots`` (or ``python -m benchmarks --report``) redraws them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from benchmarks.samples import SampleSet, load_all

PLOTS_DIR = Path(__file__).resolve().parent / "plots"
UPSTREAM_POLL = 300.0
"""Upstream's requeue interval for a Ready Kyma and Manifest (seconds)."""
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
FONT = 'font-family="Helvetica, Arial, sans-serif"'


@dataclass(frozen=True)
class Curve:
    label: str
    seconds: tuple[float, ...]
    target_p99: float | None
    source: str
    """Which benchmark (and its date) the samples come from."""


def curves(sets: Sequence[SampleSet]) -> list[Curve]:
    return [
        Curve(s.label, tuple(sorted(s.seconds)), s.target_p99, f"{sample.benchmark}, {sample.date}")
        for sample in sets
        for s in sample.series
        if s.seconds
    ]


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: str, *, size: int = 12, anchor: str = "start", extra: str = "") -> str:
    return (
        f'<text x="{_fmt(x)}" y="{_fmt(y)}" font-size="{size}" text-anchor="{anchor}" {FONT}{extra}>'
        f"{escape(text)}</text>"
    )


def _line(x1: float, y1: float, x2: float, y2: float, style: str) -> str:
    return f'<line x1="{_fmt(x1)}" y1="{_fmt(y1)}" x2="{_fmt(x2)}" y2="{_fmt(y2)}" {style}/>'


def _step_path(points: Sequence[tuple[float, float]], color: str, dash: str = "") -> str:
    """An empirical CDF as a step line through ``points`` (already in pixels)."""
    if not points:
        return ""
    d = [f"M{_fmt(points[0][0])},{_fmt(points[0][1])}"]
    for (_, y0), (x1, y1) in itertools.pairwise(points):
        d.append(f"H{_fmt(x1)}V{_fmt(y1)}" if y1 != y0 else f"H{_fmt(x1)}")
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<path d="{" ".join(d)}" fill="none" stroke="{color}" stroke-width="1.8"{dashed}/>'


def _cdf_points(seconds: Sequence[float]) -> list[tuple[float, float]]:
    """(latency, fraction <= latency) steps of a sorted sample list, starting at fraction 0."""
    n = len(seconds)
    points = [(seconds[0], 0.0)]
    points += [(value, (i + 1) / n) for i, value in enumerate(seconds)]
    return points


def _percentile(ordered: Sequence[float], q: float) -> float:
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _label_time(seconds: float) -> str:
    """3 significant digits at most: 24.6 ms, 101 ms, 1.5 s, 5 min."""
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    return f"{seconds * 1000:.3g} ms"


def _nice_span(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= ``value`` (axis ends there)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10.0 * power


def _svg(width: int, height: int, body: list[str]) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">'
    )
    return "\n".join([head, f'<rect width="{width}" height="{height}" fill="white"/>', *body, "</svg>", ""])


def latency_vs_polling(items: Sequence[Curve]) -> str:
    """Every series' CDF and upstream's 5-minute poll on a log axis (see the module docstring)."""
    width, ph = 760, 320
    left, right, top = 60, 20, 50
    lo, hi = 1e-3, 600.0
    pw = width - left - right
    legend_top = top + ph + 60
    height = legend_top + 18 * (len(items) + 1) + 10

    def x(seconds: float) -> float:
        value = min(max(seconds, lo), hi)
        return left + pw * (math.log10(value) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    def y(fraction: float) -> float:
        return top + ph * (1.0 - fraction)

    body = [
        _text(left, 22, "Event-driven latencies (ours, measured) vs upstream's 5-minute poll", size=15),
        _text(left, 40, "cumulative share of samples; log time axis", size=11, extra=' fill="#555"'),
    ]
    for tick in (1e-3, 1e-2, 0.1, 1.0, 10.0, 60.0, 300.0):
        body.append(_line(x(tick), top, x(tick), top + ph, 'stroke="#ddd"'))
        body.append(_text(x(tick), top + ph + 18, _label_time(tick), size=11, anchor="middle"))
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        body.append(_line(left, y(fraction), left + pw, y(fraction), 'stroke="#eee"'))
        body.append(_text(left - 6, y(fraction) + 4, f"{fraction:g}", size=11, anchor="end"))
    body.append(_line(left, y(0.99), left + pw, y(0.99), 'stroke="#bbb" stroke-dasharray="4 3"'))
    body.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    body.append(_text(left + pw / 2, top + ph + 36, "latency", size=12, anchor="middle"))
    # upstream: a change at a random moment waits U(0, 300 s) for the next poll
    steps = [lo * (UPSTREAM_POLL / lo) ** (i / 200) for i in range(201)]
    upstream = " ".join(
        f"{'M' if i == 0 else 'L'}{_fmt(x(t))},{_fmt(y(t / UPSTREAM_POLL))}" for i, t in enumerate(steps)
    )
    body.append(f'<path d="{upstream}" fill="none" stroke="#666" stroke-width="2" stroke-dasharray="7 4"/>')
    legend = [("upstream: next 5-minute poll (uniform 0..300 s)", "#666", "7 4")]
    for index, curve in enumerate(items):
        color = PALETTE[index % len(PALETTE)]
        points = [(x(t), y(f)) for t, f in _cdf_points(curve.seconds)]
        points.append((x(hi), points[-1][1]))
        body.append(_step_path(points, color))
        p99 = _percentile(curve.seconds, 0.99)
        legend.append((f"{curve.label} (n={len(curve.seconds)}, p99 {_label_time(p99)})", color, ""))
    lx, ly = left, legend_top
    for i, (label, color, dash) in enumerate(legend):
        row = ly + 18 * i
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        body.append(_line(lx, row - 4, lx + 22, row - 4, f'stroke="{color}" stroke-width="2.5"{dashed}'))
        body.append(_text(lx + 28, row, label, size=11))
    return _svg(width, height, body)


def latency_panels(items: Sequence[Curve]) -> str:
    """One linear-axis CDF panel per series with its target (see the module docstring)."""
    columns = 2
    pw, ph = 360, 190
    left, top, gap_x, gap_y = 55, 115, 45, 95
    rows = math.ceil(len(items) / columns)
    width = left + columns * pw + (columns - 1) * gap_x + 20
    height = top + rows * ph + (rows - 1) * gap_y + 55
    body = [
        _text(left, 22, "Latency distributions against their targets (linear axis)", size=15),
        _text(
            left, 40,
            "dashed vertical: the p99 target; dashed horizontal: 99 % of samples;",
            size=11, extra=' fill="#555"',
        ),
        _text(left, 55, "met when the curve crosses 99 % left of the target", size=11, extra=' fill="#555"'),
    ]  # fmt: skip
    for index, curve in enumerate(items):
        color = PALETTE[index % len(PALETTE)]
        ox = left + (index % columns) * (pw + gap_x)
        oy = top + (index // columns) * (ph + gap_y)
        p99 = _percentile(curve.seconds, 0.99)
        span = _nice_span(max(curve.target_p99 or 0.0, p99) * 1.2)

        def x(seconds: float, ox: float = ox, span: float = span) -> float:
            return ox + pw * min(seconds, span) / span

        def y(fraction: float, oy: float = oy) -> float:
            return oy + ph * (1.0 - fraction)

        body.append(_text(ox, oy - 38, curve.label, size=11))
        verdict = ""
        if curve.target_p99 is not None:
            verdict = "  (met)" if p99 <= curve.target_p99 else "  (NOT met)"
        status = f"n={len(curve.seconds)}, p50 {_label_time(_percentile(curve.seconds, 0.5))}, "
        status += f"p99 {_label_time(p99)}{verdict}"
        body.append(_text(ox, oy - 23, status, size=10, extra=' fill="#555"'))
        body.append(_text(ox, oy - 9, curve.source, size=9, extra=' fill="#888"'))
        for i in range(6):
            tick = span * i / 5
            body.append(_line(x(tick), oy, x(tick), oy + ph, 'stroke="#eee"'))
            body.append(_text(x(tick), oy + ph + 15, _label_time(round(tick, 6)), size=10, anchor="middle"))
        for fraction in (0.0, 0.5, 1.0):
            body.append(_line(ox, y(fraction), ox + pw, y(fraction), 'stroke="#eee"'))
            body.append(_text(ox - 5, y(fraction) + 4, f"{fraction:g}", size=10, anchor="end"))
        body.append(_line(ox, y(0.99), ox + pw, y(0.99), 'stroke="#888" stroke-dasharray="4 3"'))
        body.append(_text(ox + pw - 4, y(0.99) + 11, "99 %", size=9, anchor="end", extra=' fill="#888"'))
        if curve.target_p99 is not None:
            tx = x(curve.target_p99)
            body.append(_line(tx, oy, tx, oy + ph, 'stroke="#d62728" stroke-dasharray="5 3"'))
            right = tx - ox < 90  # too close to the left axis: label on the right of the line
            label = f"target {_label_time(curve.target_p99)}"
            lx, anchor = (tx + 4, "start") if right else (tx - 4, "end")
            body.append(_text(lx, oy + ph - 6, label, size=10, anchor=anchor, extra=' fill="#d62728"'))
        points = [(x(t), y(f)) for t, f in _cdf_points(curve.seconds)]
        body.append(_step_path(points, color))
        beyond = sum(1 for t in curve.seconds if t > span)
        if beyond:
            body.append(_text(ox + pw, oy + 12, f"{beyond} beyond the axis", size=9, anchor="end"))
        body.append(f'<rect x="{ox}" y="{oy}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    return _svg(width, height, body)


def write_plots(results_dir: Path, plots_dir: Path = PLOTS_DIR) -> list[Path]:
    """Draw both plots from the samples in ``results_dir``; returns the files written (none
    without samples)."""
    items = curves(load_all(results_dir))
    if not items:
        return []
    plots_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in (("latency-vs-polling.svg", latency_vs_polling), ("latency-cdf.svg", latency_panels)):
        path = plots_dir / name
        path.write_text(draw(items))
        written.append(path)
    return written


def main() -> None:
    from benchmarks.report import RESULTS_DIR

    for path in write_plots(RESULTS_DIR):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
