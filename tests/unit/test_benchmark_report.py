"""RESULTS.md reads each figure out of the recorded results files, judges it against its target,
and says "not measured" (never a guess) where a results file or figure is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks.report import RESULTS_DIR, TARGETS, evaluate, render


def _verdict(what: str, results_dir: Path = RESULTS_DIR) -> tuple[str, str]:
    target = next(t for t in TARGETS if t.what.startswith(what))
    verdict = evaluate(target, results_dir)
    return verdict.figure, verdict.status


def test_recorded_figures_are_read_and_judged() -> None:
    assert _verdict("runtime write -> Kyma reconcile start") == ("p50 7.9, p99 25.4 ms", "met")
    assert _verdict("runtime drift") == ("p50 73.6, p99 146.6 ms", "met")
    assert _verdict("agent RSS") == ("38.7 / 43.2 MB", "met")
    assert _verdict("agent image's installed packages") == ("18.8 MB", "met")
    assert _verdict("failover after kill -9") == ("10.5 / 11.0 s", "met")
    assert _verdict("5,000 Kymas in one operator process") == ("387 MB", "met")
    assert _verdict("replica joining a running group") == (
        "2.8 s / 9.6 s with --shard-scoped-caches",
        "met",
    )
    assert _verdict("memory per scoped replica holding k of 16 shards") == (
        "1.2 % / 1.3 % over (3 / 5 replicas)",
        "NOT met",
    )
    assert _verdict("full resync of 5,000 Kymas, 3 scoped replicas") == (
        "41 % (leader, 6 of 16 shards) / 32 % / 34 % (the file's newest summary; all runs are there)",
        "NOT met",
    )
    assert _verdict("module enabled -> module Ready") == (
        "p50 / p99 per step 1: 6.9 / 8.8, 2: 14.1 / 24.6, 3: 37.9 / 64.8, 5a: 24.8 / 58.8, "
        "5b: 8.1 / 24.3, 5c: 7.3 / 16.0 ms",
        "met",
    )


def test_a_missing_results_file_or_figure_is_not_measured(tmp_path: Path) -> None:
    shutil.copy(RESULTS_DIR / "e2e.md", tmp_path / "e2e.md")
    (tmp_path / "manifest.md").write_text("# Manifest\n\nDate: 2026-11-24. Machine: a laptop.\n")
    assert _verdict("runtime drift", tmp_path) == ("- (not in results/manifest.md)", "not measured")
    assert _verdict("module enabled in a runtime", tmp_path) == (
        "- (no results/module.md yet)",
        "not measured",
    )
    page = render(tmp_path, today="2026-11-24")
    assert f"**1 targets met, 0 not met, {len(TARGETS) - 1} not measured**" in page
    assert "| [manifest](results/manifest.md) | 2026-11-24 | a laptop |" in page


def test_module_bench_output_is_read_once_recorded(tmp_path: Path) -> None:
    # the rows `benchmarks.module_bench` prints, as they would be copied into results/module.md
    (tmp_path / "module.md").write_text(
        "| what | samples | p50 | p99 | max | mean |\n|---|---|---|---|---|---|\n"
        "| module enabled in the runtime Kyma -> Manifest in KCP | 100 | 41.0 ms | 120.5 ms | 130.0 ms "
        "| 45.0 ms |\n"
        "| Manifest status change -> Kyma status.modules shows it | 100 | 12.0 ms | 30.1 ms | 31.0 ms "
        "| 13.0 ms |\n"
        "\n| per Ready Kyma-hour | ours | upstream | ours / upstream |\n|---|---|---|---|\n"
        "| kcp writes | 0.0 | 72 | 0.0 % |\n| kcp reads | 10.0 | 300 | 3.3 % |\n"
        "| runtime writes | 0.0 | 144 | 0.0 % |\n| runtime reads | 20.0 | 400 | 5.0 % |\n"
        "| all | 30.0 | 916 | 3.3 % |\n"
    )
    assert _verdict("module enabled in a runtime", tmp_path) == ("p50 41.0, p99 120.5 ms", "NOT met")
    assert _verdict("Manifest status change", tmp_path) == ("p50 12.0, p99 30.1 ms", "met")
    assert _verdict("API requests per Ready Kyma-hour", tmp_path) == ("30.0 vs 916 (3.3 %)", "met")
    assert _verdict("writes per Ready Kyma-hour", tmp_path) == ("0.0 / 0.0", "met")


def test_a_rerecorded_manifest_run_is_read_from_the_benchmarks_own_output(tmp_path: Path) -> None:
    # what `benchmarks.manifest_bench` prints today, copied as is into results/manifest.md
    (tmp_path / "manifest.md").write_text(
        "| what | samples | p50 | p99 | max | mean |\n|---|---|---|---|---|---|\n"
        "| drift: runtime delete -> object back | 5 | 76.6 ms | 266.3 ms | 266.3 ms | 124.6 ms |\n\n"
        "idle: 12 reconciles of a Ready Manifest (one hour of 5-minute polling): writes "
        "{'status': 0, 'metadata': 1, 'applied': 0, 'pruned': 0}\n"
    )
    assert _verdict("runtime drift", tmp_path) == ("p50 76.6, p99 266.3 ms", "met")
    assert _verdict("writes of a Ready Manifest", tmp_path) == ("1", "NOT met")
