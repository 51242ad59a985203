"""The statistics every benchmark prints: nearest-rank percentiles and one Markdown latency row."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..1) of ``values``; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def latency_row(label: str, seconds: list[float]) -> str:
    """``| label | samples | p50 | p99 | max | mean |`` in milliseconds."""
    ms = [v * 1000 for v in seconds]
    if not ms:
        return f"| {label} | 0 | - | - | - | - |"
    return (
        f"| {label} | {len(ms)} | {percentile(ms, 0.5):.1f} ms | {percentile(ms, 0.99):.1f} ms | "
        f"{max(ms):.1f} ms | {statistics.fmean(ms):.1f} ms |"
    )
