"""Raw latency samples round-trip through their JSON file, and the plots drawn from them are
well-formed SVG that show every series, upstream's poll and the targets (benchmarks/plots.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from pydantic import ValidationError

from benchmarks import plots, samples
from benchmarks.report import render

SVG = "{http://www.w3.org/2000/svg}"


def _write_samples(results: Path) -> None:
    fast = [0.010 + 0.001 * i for i in range(99)] + [0.300]  # p99 nearest rank: 0.108
    series = [
        samples.Series.of("Manifest status change -> Kyma status", fast, 0.1),
        samples.Series.of("drift -> restored", [0.05, 0.07, 0.2], 1.0),
    ]
    samples.save(
        results / f"module{samples.SAMPLES_SUFFIX}", samples.sample_set("benchmarks.module_bench", series)
    )


def test_samples_round_trip_and_reject_a_broken_file(tmp_path: Path) -> None:
    _write_samples(tmp_path)
    (loaded,) = samples.load_all(tmp_path)
    assert loaded.benchmark == "benchmarks.module_bench"
    assert [s.label for s in loaded.series] == ["Manifest status change -> Kyma status", "drift -> restored"]
    assert loaded.series[1].seconds == (0.05, 0.07, 0.2)
    assert loaded.series[0].target_p99 == 0.1
    (tmp_path / f"bad{samples.SAMPLES_SUFFIX}").write_text('{"benchmark": "x", "series": [{"label": ""}]}')
    with pytest.raises(ValidationError):
        samples.load_all(tmp_path)


def test_plots_are_svg_with_every_series_upstream_and_the_verdicts(tmp_path: Path) -> None:
    _write_samples(tmp_path)
    written = plots.write_plots(tmp_path, tmp_path / "plots")
    assert [p.name for p in written] == ["latency-vs-polling.svg", "latency-cdf.svg"]
    overview, panels = (ET.parse(p).getroot() for p in written)  # well-formed XML
    texts = " ".join(t.text or "" for t in overview.iter(f"{SVG}text"))
    assert "upstream: next 5-minute poll" in texts
    assert "Manifest status change -> Kyma status (n=100, p99 108 ms)" in texts
    assert len(overview.findall(f"{SVG}path")) == 3  # upstream + two series
    panel_texts = " ".join(t.text or "" for t in panels.iter(f"{SVG}text"))
    assert "p99 108 ms  (NOT met)" in panel_texts  # 108 ms against a 100 ms target
    assert "p99 200 ms  (met)" in panel_texts
    assert "target 100 ms" in panel_texts and "target 1 s" in panel_texts
    # drawing twice gives the same bytes (a plot changes in a diff only when its data does)
    again = plots.write_plots(tmp_path, tmp_path / "again")
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in written]


def test_the_report_embeds_the_plots_only_when_there_are_samples(tmp_path: Path) -> None:
    assert "No plots" in render(tmp_path, today="2026-11-24")
    _write_samples(tmp_path)
    page = render(tmp_path, today="2026-11-24")
    assert "![latency CDFs, ours vs upstream's 5-minute poll](plots/latency-vs-polling.svg)" in page
    assert "| [module.samples.json](results/module.samples.json) |" in page
