"""``benchmarks/RESULTS.md``: every DESIGN target beside our recorded figure and upstream's reference.

Why: the figures live in one results file per benchmark (``benchmarks/results/<name>.md``, each with
its command, machine and date, copied there after a quiet run), in the shape that suits that
benchmark. A reader wants one page: each target of DESIGN.md §7, §9.3 and §10, the figure we
measured, upstream's figure, and whether the target is met, said plainly. This module reads the
figures out of the results files (markdown table rows and the bold figures they state) rather than
keeping a second copy of them, so the report cannot drift from the records; a figure that is not
in a results file is reported as not measured, never guessed.

``python -m benchmarks --report`` rewrites the page without running anything; ``make bench`` does it
after the runs.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks import plots, samples

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPORT = Path(__file__).resolve().parent / "RESULTS.md"

Figures = tuple[float, ...]


@dataclass(frozen=True)
class Target:
    section: str
    what: str
    target: str
    upstream: str
    results: str
    """Results file stem (``benchmarks/results/<results>.md``)."""
    pattern: str
    """Regex over the results file; its groups are the figures (numbers, ``,`` allowed)."""
    show: str
    """How to show the figures: ``str.format`` with ``{0}``, ``{1}``..."""
    met: Callable[[Figures], bool]
    newest: bool = False
    """The last match in the file counts (a figure re-measured in a section appended later), not the
    first (a file whose headline comes first)."""


def _row(label: str, *columns: int) -> str:
    """A markdown table row whose first cell contains ``label``; captures the given columns (1 = the
    cell after the label)."""
    cells = "".join(r"\|([^|\n]*)" if i in columns else r"\|[^|\n]*" for i in range(1, max(columns) + 1))
    return rf"^\|[^|\n]*{re.escape(label)}[^|\n]*{cells}"


_ENABLE_STEPS = (
    r"operator's share of enable -> Ready, p50 / p99 per step: "
    + ", ".join(rf"{step} \*\*([\d.]+) / ([\d.]+)\*\*" for step in ("1", "2", "3", "5a", "5b", "5c"))
    + " ms"
)
"""``benchmarks.enable_steps``'s summary line: p50 and p99 of the operator's share of each step."""

TARGETS: tuple[Target, ...] = (
    Target(
        "§7", "runtime write -> Kyma reconcile start (loopback, real API servers)",
        "p50 <= 15 ms, p99 <= 50 ms", "safety net alone: 150 s on average (5-minute poll)", "e2e",
        _row("write → Kyma reconcile start", 2, 4),
        "p50 {0}, p99 {1} ms", lambda f: f[0] <= 15 and f[1] <= 50,
    ),
    Target(
        "§7", "listener throughput, signature mode, vs a bare FastAPI endpoint in the same run", ">= 95 %",
        "no figure (upstream's listener has no signatures)", "listener",
        r"listener \+ controllers \(same run\) \| \*\*[\d,]+ req/s \(([\d.]+) % of plain\)",
        "{0} %", lambda f: f[0] >= 95,
    ),
    Target(
        "§7", "listener throughput, xfcc mode, per core vs the upstream Go listener", ">= 1.5x",
        "the upstream Go listener (same run)", "listener",
        r"\*\*xfcc mode: ([\d.]+)x the upstream Go listener per core\*\*", "{0}x", lambda f: f[0] >= 1.5,
        newest=True,
    ),
    Target(
        "§7", "10,000 events for one Kyma within a second -> reconciles", "<= 3",
        "one reconcile per event (no coalescing)", "listener",
        r"10,000 events within exactly one second[^\n]*?\*\*(\d+)\*\* requests forwarded",
        "{0} (virtual clock)", lambda f: f[0] <= 3,
    ),
    Target(
        "§7", "5,000 runtimes send one event each -> Kymas enqueued", "all, none lost",
        "unbuffered channel: events can block or be lost", "listener",
        r"\*\*5,000 distinct Kymas reconciled, (\d+) lost\*\*", "5,000 reconciled, {0} lost",
        lambda f: f[0] == 0,
    ),
    Target(
        "§7", "agent admission response p99 at 500/s, KCP reachable / unreachable", "<= 2 ms both",
        "the admission waits for the KCP call: up to 15 s", "agent",
        r"\| reachable \| [\d.]+ \| \*\*([\d.]+)\*\*[\s\S]*?\| unreachable[^|]*\| [\d.]+ \| \*\*([\d.]+)\*\*",
        "{0} / {1} ms", lambda f: max(f) <= 2,
    ),
    Target(
        "§7", "agent CPU per sent event", "<= 0.4 ms", "no figure", "agent",
        r"CPU per sent event at 500/s \|[^|]*\| \*\*([\d.]+) ms\*\*", "{0} ms", lambda f: f[0] <= 0.4,
    ),
    Target(
        "§7", "agent RSS (after start / peak under load)", "<= 45 MB", "no figure", "agent",
        r"RSS after start / peak under load \|[^|]*\| \*\*([\d.]+) / ([\d.]+) MB\*\*", "{0} / {1} MB",
        lambda f: max(f) <= 45,
    ),
    Target(
        "#23", "agent image's installed packages (fresh venv, `du` of site-packages)", "<= 25 MB",
        "no figure (a Go binary)", "agent_install", r"\*\*agent image's site-packages: ([\d.]+) MB", "{0} MB",
        lambda f: f[0] <= 25,
    ),
    Target(
        "§7/§9.3", "API requests per Ready Kyma-hour (5 modules), vs upstream's 5-minute polling",
        "<= 10 % of upstream", "every 5 minutes: Kyma + each Manifest reconciled", "module",
        r"^\| all \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) % \|", "{0} vs {1} ({2} %)", lambda f: f[2] <= 10,
    ),
    Target(
        "§7", "5,000 Kymas in one operator process", "<= 500 MB RSS", "upstream's scale target: 5,000",
        "scale", r"5,000 Kymas[^\n]*?\*\*([\d.]+) MB\*\* RSS", "{0} MB", lambda f: f[0] <= 500,
    ),
    Target(
        "§9.3", "module enabled in a runtime -> Manifest in KCP", "p99 <= 100 ms",
        "the runtime Kyma is polled: up to 5 min", "module",
        _row("module enabled in the runtime Kyma -> Manifest in KCP", 2, 3), "p50 {0}, p99 {1} ms",
        lambda f: f[1] <= 100,
    ),
    Target(
        "§9.3", "module enabled -> module Ready: the operator's share per step", "<= 100 ms per step",
        "each step waits for the next poll", "enable_steps",
        _ENABLE_STEPS,
        "p50 / p99 per step 1: {0} / {1}, 2: {2} / {3}, 3: {4} / {5}, 5a: {6} / {7}, 5b: {8} / {9}, "
        "5c: {10} / {11} ms", lambda f: max(f[1::2]) <= 100, newest=True,
    ),
    Target(
        "§9.3", "runtime drift (module object deleted) -> restored", "p99 <= 1 s",
        "mean 150 s (5-minute poll)", "manifest", _row("drift: runtime delete", 2, 3),
        "p50 {0}, p99 {1} ms", lambda f: f[1] <= 1000,
    ),
    Target(
        "§9.3", "Manifest status change -> Kyma status", "p99 <= 100 ms", "up to 5 min (#1482, #1762)",
        "module", _row("Manifest status change -> Kyma status", 2, 3), "p50 {0}, p99 {1} ms",
        lambda f: f[1] <= 100,
    ),
    Target(
        "§9.3", "writes of a Ready Manifest at rest (12 causeless reconciles)", "0",
        "server-side apply of everything every 5 min", "manifest",
        r"\*\*(\d+) writes\*\*"
        r"|writes \{'status': (\d+), 'metadata': (\d+), 'applied': (\d+), 'pruned': (\d+)\}",
        "{0}", lambda f: sum(f) == 0,
    ),
    Target(
        "§9.3", "writes per Ready Kyma-hour at rest (KCP / runtime, 5 modules)", "0",
        "SSA of CRDs, catalog, webhook and Manifests every 5 min", "module",
        r"^\| kcp writes \| ([\d.]+) \|[\s\S]*?^\| runtime writes \| ([\d.]+) \|", "{0} / {1}",
        lambda f: max(f) == 0,
    ),
    Target(
        "§10", "failover after kill -9 / SIGSTOP of the leader (p50)", "<= 15 s",
        "Lease defaults: ~15 s + restart", "failover",
        r"failover after kill -9 \| \*\*([\d.]+) s\*\*[\s\S]*?failover after SIGSTOP \| \*\*([\d.]+) s\*\*",
        "{0} / {1} s", lambda f: max(f) <= 15,
    ),
    Target(
        "§10", "no Kyma reconciled by two replicas at once (paused leader resumed; one Lease)", "0",
        "no fencing: the resumed leader reconciled for ~8 s", "failover",
        r"failover after SIGSTOP \|[^\n]*\| \*\*(\d+)\*\* \|", "{0} overlapping", lambda f: f[0] == 0,
    ),
    Target(
        "§10", "shard takeover after kill -9 of a sharded replica / Kymas reconciled twice at once (p50)",
        "<= 15 s / 0", "one leader for all Kymas: no shards", "sharding",
        r"kill -9 of a non-leader -> its shards held by the two others \| \*\*([\d.]+) s\*\*[\s\S]*?"
        r"Kymas reconciled by two replicas at overlapping times \(whole run\) \| \*\*(\d+)\*\*",
        "{0} s / {1}", lambda f: f[0] <= 15 and f[1] == 0,
    ),
    Target(
        "§10", "replica joining a running group -> every Kyma of its shards reconciled (5,000 Kymas)",
        "<= 15 s (as a takeover)", "one leader for all Kymas: no shards", "sharding",
        r"replica joining a running group, 5,000 Kymas: joined -> every Kyma of its shards reconciled\s+"
        r"\*\*([\d.]+) s\*\* \(`--sharding`\), \*\*([\d.]+) s\*\* \(`--shard-scoped-caches`\)",
        "{0} s / {1} s with --shard-scoped-caches", lambda f: max(f) <= 15, newest=True,
    ),
    Target(
        "§10", "memory per scoped replica holding k of 16 shards, 50,000 Kymas x 5 modules, 3 and 5 replicas",
        "<= k/16 of one replica's cache + base", "no shards: one replica caches the whole fleet", "scale",
        r"the most a scoped replica is over k/16 of one replica's cache \+ base:\s+\*\*([\d.]+) %\*\* with 3 "
        r"replicas, \*\*([\d.]+) %\*\* with 5",
        "{0} % / {1} % over (3 / 5 replicas)", lambda f: f[0] <= 0 and f[1] <= 0, newest=True,
    ),
    Target(
        "§10", "full resync of 5,000 Kymas, 3 scoped replicas: CPU of each against one replica alone "
        "(near-linear speed-up, counted in CPU: wall time on 2 cores is not the target)",
        "<= 40 % each", "one leader does everything", "scale",
        r"full resync with 3 scoped replicas, CPU of each against one replica alone:\s+\*\*(\d+) %\*\* "
        r"\(the leader, 6 shards\), \*\*(\d+) %\*\* and \*\*(\d+) %\*\*",
        "{0} % (leader, 6 of 16 shards) / {1} % / {2} % (the file's newest summary; all runs are there)",
        lambda f: max(f) <= 40,
        newest=True,
    ),
    Target(
        "§11", "fleet rollout of a bad version (5,000 Kymas): Kymas that received it, halt + 30 s",
        "<= canary wave + failure budget", "all 5,000 (no gate; upstream's 5-minute spread)", "rollout",
        r"Kymas with the bad version 30 s after the halt \| \*\*(\d+)\*\* of [\d,]+ \| "
        r"canary wave (\d+) \+ budget (\d+)",
        "{0} (canary {1} + budget {2})", lambda f: f[0] <= f[1] + f[2],
    ),
    Target(
        "§11", "fleet rollout: first failure in a Manifest -> rollout halted", "<= 5 s",
        "never halts", "rollout", r"first failure -> phase Halted seen by a watch \| \*\*([\d.]+) s\*\*",
        "{0} s", lambda f: f[0] <= 5,
    ),
    Target(
        "§11", "fleet rollout: operator Manifest writes per upgraded Kyma (good version, gated)",
        "1, nothing else per Kyma", "1 (no rollout state)", "rollout",
        r"Manifest writes per upgraded Kyma, gated \| \*\*([\d.]+)\*\*", "{0}", lambda f: f[0] <= 1.0,
    ),
)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    target: Target
    figure: str
    status: str
    """``met``, ``NOT met`` or ``not measured``."""


def _number(text: str) -> float:
    return float(re.sub(r"[^\d.]", "", text))


def evaluate(target: Target, results_dir: Path) -> Verdict:
    path = results_dir / f"{target.results}.md"
    if not path.exists():
        return Verdict(target, f"- (no results/{target.results}.md yet)", "not measured")
    matches = re.finditer(target.pattern, path.read_text(), re.MULTILINE)
    match = next(reversed(list(matches)), None) if target.newest else next(matches, None)
    if match is None:
        return Verdict(target, f"- (not in results/{target.results}.md)", "not measured")
    groups = [g for g in match.groups() if g is not None]  # alternatives leave the others unset
    try:
        figures = tuple(_number(g) for g in groups)
    except ValueError:
        return Verdict(target, f"- (unreadable in results/{target.results}.md)", "not measured")
    if len(groups) > target.show.count("{"):  # e.g. writes by kind: show their sum
        groups = [f"{sum(figures):g}"]
    shown = target.show.format(*(g.strip().strip("*").strip().removesuffix(" ms") for g in groups))
    return Verdict(target, shown, "met" if target.met(figures) else "NOT met")


def provenance(path: Path) -> tuple[str, str]:
    """(date, machine) as the results file states them, shortened to one line."""
    text = path.read_text()
    date = re.search(r"Date:\s*([\d/-]+)", text)
    machine = re.search(r"Machine:\s*([\s\S]*?)(?:[.;](?:\s|$)|\n\n)", text)
    summary = " ".join(machine.group(1).split()) if machine else "-"
    summary = re.sub(r"\*\*", "", summary)
    return (date.group(1) if date else "-"), (summary[:140] + "..." if len(summary) > 140 else summary)


def _this_machine() -> str:
    memory = ""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages * size / 2**30:.0f} GiB"
    except (ValueError, OSError):
        pass
    python = platform.python_version()
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores{memory}, Python {python}"


def render(
    results_dir: Path = RESULTS_DIR, targets: Sequence[Target] = TARGETS, today: str | None = None
) -> str:
    verdicts = [evaluate(t, results_dir) for t in targets]
    counts = {s: sum(v.status == s for v in verdicts) for s in ("met", "NOT met", "not measured")}
    lines = [
        "# Benchmark results",
        "",
        f"Generated {today or datetime.date.today().isoformat()} on {_this_machine()} by `make bench`",
        "(`python -m benchmarks --report` regenerates it without running anything) from the recorded",
        "results in [`results/`](results/). Each figure is read from its results file, which names the",
        "command, the machine and the date of its run (table at the end); nothing here is typed twice.",
        "",
        f"**{counts['met']} targets met, {counts['NOT met']} not met, "
        f"{counts['not measured']} not measured** (DESIGN.md §7, §9.3, §10, §11).",
        "",
        "| § | what | target | ours | upstream | verdict | from |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        t = v.target
        verdict = f"**{v.status}**" if v.status != "met" else "met"
        source = f"[{t.results}](results/{t.results}.md)"
        lines.append(
            f"| {t.section} | {t.what} | {t.target} | {v.figure} | {t.upstream} | {verdict} | {source} |"
        )
    lines += ["", "## Results files", "", "| file | date | machine |", "|---|---|---|"]
    for path in sorted(results_dir.glob("*.md")):
        date, machine = provenance(path)
        lines.append(f"| [{path.stem}](results/{path.name}) | {date} | {machine} |")
    lines += _plots_section(results_dir)
    return "\n".join(lines)


def _plots_section(results_dir: Path) -> list[str]:
    sets = samples.load_all(results_dir)
    if not sets:
        return ["", "No plots: no `results/*.samples.json` (run a latency benchmark with `--samples`).", ""]
    lines = [
        "",
        "## Plots",
        "",
        "Drawn by `benchmarks/plots.py` (plain SVG, no plotting library) from the raw samples the",
        "latency benchmarks keep with `--samples` next to their results file:",
        "",
        "| samples | series | date | command |",
        "|---|---|---|---|",
    ]
    for path in sorted(results_dir.glob(f"*{samples.SAMPLES_SUFFIX}")):
        sample = samples.load(path)
        series = "; ".join(f"{s.label} (n={len(s.seconds)})" for s in sample.series)
        note = f" ({sample.note})" if sample.note else ""
        lines.append(
            f"| [{path.name}](results/{path.name}) | {series} | {sample.date} | `{sample.command}`{note} |"
        )
    lines += [
        "",
        "![latency CDFs, ours vs upstream's 5-minute poll](plots/latency-vs-polling.svg)",
        "",
        "![latency CDFs against their targets](plots/latency-cdf.svg)",
        "",
    ]
    return lines


def write_report(results_dir: Path = RESULTS_DIR, output: Path = REPORT) -> Path:
    """RESULTS.md, and the plots next to it from the samples in ``results_dir``."""
    plots.write_plots(results_dir, output.parent / "plots")
    output.write_text(render(results_dir))
    return output
