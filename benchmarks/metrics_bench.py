"""One ``/metrics`` scrape of a replica holding N Kymas x M modules: CPU, longest stall of the event
loop, peak memory and body size, ``generate_latest`` against the chunked exposition.

Run: ``.venv/bin/python -m benchmarks.metrics_bench [--kymas 5000 16700 50000] [--modules 5]
[--operator-tree DIR]``. Recorded in ``benchmarks/results/scale.md`` ("scrape").

Each measurement runs in a fresh process (``--one``), so that peak RSS is its own: the metrics of N
Kymas are recorded as the controllers record them (``KymaMetrics.record``: a state per Kyma and per
module entry; ``ManifestMetrics.state``: one per Manifest, M per Kyma), then the peak RSS is reset
(``/proc/self/clear_refs``) and one scrape is rendered:

* ``plain``: ``generate_latest(registry)``, the whole body at once (what ``/metrics`` did before
  ``runtime.exposition``; with ``--operator-tree``, also the other checkout's code);
* ``chunks``: ``ExpositionRegistry.chunks()``, each chunk dropped once rendered (as the manager
  streams it); the longest chunk's CPU is the longest the event loop is held.

Figures per scrape: CPU seconds, the longest hold of the loop (the whole scrape for ``plain``; a
chunk's includes any full garbage collection it set off, counted too),
peak RSS over the RSS before it, body MB and lines; and the RSS the recorded metrics take (over the
process before recording them). No operator, API server or runtime: the metrics objects are
driven directly, with realistic name lengths (Kyma names of 36 characters, shoot domains, instance
ids).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def _rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _one(mode: str, kymas: int, modules: int) -> dict[str, Any]:
    """In this process: record the metrics of ``kymas`` Kymas, then render one scrape."""
    from prometheus_client import CollectorRegistry, generate_latest

    from kyma_operator.api.kyma import Kyma
    from kyma_operator.api.meta import State
    from kyma_operator.controllers.kyma.metrics import KymaMetrics
    from kyma_operator.controllers.manifest.metrics import ManifestMetrics
    from kyma_operator.runtime.request import Request

    registry = CollectorRegistry()
    streamed = None
    if mode == "chunks":  # only this checkout has runtime/exposition
        from kyma_operator.runtime.exposition import ExpositionRegistry

        registry = streamed = ExpositionRegistry()
    kyma_metrics = KymaMetrics(registry, mandatory_count=lambda: 0)
    manifest_metrics = ManifestMetrics(registry)
    template = Kyma.model_validate(
        {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Kyma",
            "metadata": {"name": "template", "namespace": "kcp-system"},
            "spec": {"channel": "regular"},
        }
    )
    before_records = _rss_mb()
    for i in range(kymas):
        name = f"{i:08x}-4d2a-4b8e-9c1f-0a1b2c3d4e5f"
        kyma = template.model_copy(
            update={
                "metadata": template.metadata.model_copy(
                    update={
                        "name": name,
                        "labels": {"kyma-project.io/instance-id": f"inst-{i:08x}-aaaa-bbbb-cccc-dddd"},
                        "annotations": {"skr-domain": f"c-{i:07x}.stage.kyma.ondemand.com"},
                    }
                )
            }
        )
        kyma_metrics.record(kyma, State.READY, [(f"module-{j}", State.READY) for j in range(modules)])
        for j in range(modules):
            manifest_metrics.state(Request("kcp-system", f"{name}-module-{j}-123456"), State.READY)
    records = _rss_mb() - before_records
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS from here on
    rss_before = _rss_mb()
    cpu = time.process_time()
    wall = time.perf_counter()
    size = lines = 0
    longest = 0.0
    collections = gc.get_stats()[2]["collections"]
    if streamed is not None:
        chunks = streamed.chunks()
        while True:
            started = time.process_time()
            chunk = next(chunks, None)
            longest = max(longest, time.process_time() - started)
            if chunk is None:
                break
            size += len(chunk)
            lines += chunk.count(b"\n")
    else:
        body = generate_latest(registry)
        size, lines = len(body), body.count(b"\n")
        longest = time.process_time() - cpu
        del body
    return {
        "mode": mode,
        "kymas": kymas,
        "modules": modules,
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
        "longest_hold_ms": longest * 1e3,
        "peak_over_mb": _rss_mb("VmHWM") - rss_before,
        "full_collections": gc.get_stats()[2]["collections"] - collections,
        "body_mb": size / 1e6,
        "lines": lines,
        "records_mb": records,
    }


def _run(mode: str, kymas: int, modules: int, tree: Path | None) -> dict[str, Any]:
    root = tree or REPO_ROOT
    env = {**os.environ, "PYTHONPATH": f"{root / 'operator'}:{root}:{REPO_ROOT}"}
    argv = [sys.executable, "-m", "benchmarks.metrics_bench", "--one", mode]
    argv += ["--kymas", str(kymas), "--modules", str(modules)]
    done = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kymas", type=int, nargs="+", default=[5000, 16700], help="Kymas per replica")
    parser.add_argument("--modules", type=int, default=5, help="modules (and Manifests) per Kyma")
    parser.add_argument(
        "--operator-tree", type=Path, help="also measure another checkout's code (plain generate_latest)"
    )
    parser.add_argument("--one", choices=["plain", "chunks"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, args.kymas[0], args.modules)))
        return
    print(
        "| Kymas x modules | code | CPU per scrape | longest loop hold | peak RSS over before | body | lines "
        "| metrics records |\n|---|---|---|---|---|---|---|---|"
    )
    for kymas in args.kymas:
        runs = [("this checkout, plain", "plain", None), ("this checkout, chunks", "chunks", None)]
        if args.operator_tree is not None:
            runs.insert(0, (f"{args.operator_tree}, plain", "plain", args.operator_tree.resolve()))
        for label, mode, tree in runs:
            r = _run(mode, kymas, args.modules, tree)
            cells = [
                f"{kymas:,} x {args.modules}",
                label,
                f"{r['cpu_s']:.2f} s",
                f"{r['longest_hold_ms']:.0f} ms ({r['full_collections']} full GC)",
                f"+{r['peak_over_mb']:.0f} MB",
                f"{r['body_mb']:.1f} MB",
                f"{r['lines']:,}",
                f"{r['records_mb']:.0f} MB",
            ]
            print(f"| {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
