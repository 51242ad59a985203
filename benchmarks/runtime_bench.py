"""Measure the controller runtime: queue latency and throughput, API and watch paths, informer RSS.

Run: ``.venv/bin/python -m benchmarks.runtime_bench [--loop asyncio|uvloop] [--skip-cluster]``.

* enqueue -> reconcile start latency with an idle queue (in process, no API server);
* queue throughput (keys/s) through a Controller (metrics on) with 1 and 4 workers, and the bare
  WorkQueue for reference;
* against a real API server started here (one etcd + one kube-apiserver): ``KubeClient.get``
  latency next to the official client's own call, write -> informer event -> reconcile start
  latency, and the RSS of a process whose informer caches 5,000 small custom objects (measured in
  a child process so the numbers contain nothing else).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from kyma_operator.runtime import (
    Controller,
    Informer,
    KubeClient,
    QueueShutDown,
    Request,
    Result,
    RuntimeMetrics,
    WorkQueue,
)
from kyma_operator.runtime.resources import CONFIGMAPS, NAMESPACES

WIDGET_COUNT = 5000


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms (n={len(samples)})"


def rss_mib(pid: int | None = None) -> float:
    for line in Path(f"/proc/{pid or os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# -- in-process ------------------------------------------------------------------------------------


class _Timestamping:
    def __init__(self) -> None:
        self.started: asyncio.Future[float] | None = None
        self.count = 0
        self.target = 0
        self.all_done: asyncio.Event = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        if self.started is not None and not self.started.done():
            self.started.set_result(time.perf_counter())
        self.count += 1
        if self.count == self.target:
            self.all_done.set()
        return Result()


async def enqueue_latency(n: int = 3000) -> list[float]:
    reconciler = _Timestamping()
    controller = Controller("bench", reconciler, metrics=RuntimeMetrics(CollectorRegistry()))
    task = asyncio.create_task(controller.run())
    loop = asyncio.get_running_loop()
    samples = []
    for i in range(n):
        await controller.queue.wait_idle()
        await asyncio.sleep(0)  # the worker is back in get()
        reconciler.started = loop.create_future()
        before = time.perf_counter()
        controller.enqueue(Request("ns", f"k{i}"), "bench")
        samples.append(await reconciler.started - before)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return samples[100:]  # warm-up


async def controller_throughput(workers: int, n: int = 100_000) -> float:
    reconciler = _Timestamping()
    reconciler.target = n
    controller = Controller("bench", reconciler, workers=workers, metrics=RuntimeMetrics(CollectorRegistry()))
    for i in range(n):
        controller.enqueue(Request("ns", f"k{i}"), "bench")
    started = time.perf_counter()
    task = asyncio.create_task(controller.run())
    await reconciler.all_done.wait()
    elapsed = time.perf_counter() - started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return n / elapsed


async def bare_queue_throughput(workers: int, n: int = 200_000) -> float:
    queue: WorkQueue[int] = WorkQueue("bare")
    for i in range(n):
        queue.add(i)

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            queue.forget(key)
            queue.done(key)

    started = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    await queue.shutdown(drain=True)
    await asyncio.gather(*tasks)
    return n / (time.perf_counter() - started)


# -- against a real API server -----------------------------------------------------------------


async def get_latency(client: KubeClient, kubeconfig: Path, namespace: str, n: int = 500) -> tuple[str, str]:
    await client.create(
        CONFIGMAPS, {"metadata": {"name": "probe", "namespace": namespace}, "data": {"k": "v"}}
    )
    ours = []
    for _ in range(n + 50):
        before = time.perf_counter()
        await client.get(CONFIGMAPS, "probe", namespace)
        ours.append(time.perf_counter() - before)

    import kubernetes

    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))
    official = []
    for _ in range(n + 50):
        before = time.perf_counter()
        response = api.read_namespaced_config_map("probe", namespace, _preload_content=False)
        json.loads(response.data)
        official.append(time.perf_counter() - before)
    api.api_client.close()
    return percentiles(ours[50:]), percentiles(official[50:])


async def write_to_reconcile_latency(client: KubeClient, namespace: str, n: int = 300) -> tuple[str, str]:
    await client.create(CONFIGMAPS, {"metadata": {"name": "hot", "namespace": namespace}, "data": {"i": "0"}})
    informer = Informer(client, CONFIGMAPS, namespace=namespace)
    reconciler = _Timestamping()
    controller = Controller("hot", reconciler)
    controller.watch(informer)
    tasks = [asyncio.create_task(informer.run()), asyncio.create_task(controller.run())]
    await informer.wait_synced(30)
    await controller.queue.wait_idle()
    loop = asyncio.get_running_loop()
    end_to_end, writes = [], []
    for i in range(n + 20):
        await controller.queue.wait_idle()
        reconciler.started = loop.create_future()
        before = time.perf_counter()
        await client.patch(CONFIGMAPS, "hot", {"data": {"i": str(i + 1)}}, namespace)
        writes.append(time.perf_counter() - before)
        end_to_end.append(await asyncio.wait_for(reconciler.started, 10) - before)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return percentiles(end_to_end[20:]), percentiles(writes[20:])


async def create_widgets(client: KubeClient, namespace: str, count: int) -> float:
    from tests.integration.kyma_operator.runtime.conftest import WIDGETS, install_widget_crd

    await install_widget_crd(client)
    semaphore = asyncio.Semaphore(16)

    async def create(i: int) -> None:
        async with semaphore:
            await client.create(
                WIDGETS,
                {
                    "metadata": {"name": f"w-{i:05d}", "namespace": namespace, "labels": {"bench": "rss"}},
                    "spec": {"size": i, "color": "blue"},
                },
            )

    started = time.perf_counter()
    await asyncio.gather(*(create(i) for i in range(count)))
    return time.perf_counter() - started


def informer_child(kubeconfig: str, namespace: str, strip: bool) -> None:
    """Runs in a child process: baseline RSS, then RSS with a synced informer (printed as JSON)."""
    from tests.integration.kyma_operator.runtime.conftest import WIDGETS

    async def main() -> dict[str, float]:
        client = KubeClient.from_kubeconfig_file(kubeconfig)
        await client.list(NAMESPACES, limit=1)  # warm: threads, connection, TLS
        gc.collect()
        baseline = rss_mib()
        kwargs: dict[str, Any] = {} if strip else {"transform": None}
        informer = Informer(client, WIDGETS, namespace=namespace, **kwargs)
        task = asyncio.create_task(informer.run())
        started = time.perf_counter()
        await informer.wait_synced(120)
        synced_after = time.perf_counter() - started
        gc.collect()
        with_cache = rss_mib()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        return {"objects": len(informer), "baseline": baseline, "synced": with_cache, "sync_s": synced_after}

    print(json.dumps(asyncio.run(main())))


def measure_informer_rss(kubeconfig: Path, namespace: str, strip: bool) -> dict[str, float]:
    output = subprocess.run(
        [sys.executable, "-m", "benchmarks.runtime_bench", "--informer-child", str(kubeconfig), namespace]
        + ([] if strip else ["--keep-managed-fields"]),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(output.strip().splitlines()[-1])
    return result


async def cluster_benchmarks() -> None:
    from tests.controlplane.cluster import ControlPlane

    with ControlPlane(["bench"]) as plane:
        server = plane["bench"]
        async with KubeClient.from_kubeconfig_file(server.kubeconfig_path) as client:
            await client.create(NAMESPACES, {"metadata": {"name": "bench"}})
            ours, official = await get_latency(client, server.kubeconfig_path, "bench")
            print(f"KubeClient.get (async, httpx on the loop):    {ours}")
            print(f"official client read (sync, same call):       {official}")
            e2e, writes = await write_to_reconcile_latency(client, "bench")
            print(f"patch -> watch event -> reconcile start:      {e2e}")
            print(f"  (the patch request alone:                   {writes})")
            await client.create(NAMESPACES, {"metadata": {"name": "widgets"}})
            took = await create_widgets(client, "widgets", WIDGET_COUNT)
            print(
                f"created {WIDGET_COUNT} Widgets in {took:.1f} s ({WIDGET_COUNT / took:.0f}/s, 16 concurrent)"
            )
        for strip in (True, False):
            result = measure_informer_rss(server.kubeconfig_path, "widgets", strip)
            delta = result["synced"] - result["baseline"]
            label = "managedFields stripped (default)" if strip else "managedFields kept"
            print(
                f"informer RSS, {int(result['objects'])} Widgets, {label}: "
                f"process {result['synced']:.1f} MiB "
                f"(baseline {result['baseline']:.1f} MiB, cache +{delta:.1f} MiB = "
                f"{delta * 1024 / result['objects']:.2f} KiB/object), list+sync {result['sync_s']:.2f} s"
            )


async def in_process_benchmarks() -> None:
    print(f"enqueue -> reconcile start, idle queue:       {percentiles(await enqueue_latency())}")
    for workers in (1, 4):
        rate = await controller_throughput(workers)
        print(f"Controller throughput, {workers} worker(s):          {rate:,.0f} keys/s")
    for workers in (1, 4):
        rate = await bare_queue_throughput(workers)
        print(f"bare WorkQueue throughput, {workers} worker(s):      {rate:,.0f} keys/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--skip-cluster", action="store_true")
    parser.add_argument("--informer-child", nargs=2, metavar=("KUBECONFIG", "NAMESPACE"))
    parser.add_argument("--keep-managed-fields", action="store_true")
    args = parser.parse_args()
    if args.informer_child:
        kubeconfig, namespace = args.informer_child
        informer_child(kubeconfig, namespace, strip=not args.keep_managed_fields)
        return
    runner: Callable[[Any], Any] = asyncio.run
    if args.loop == "uvloop":
        import uvloop

        runner = uvloop.run
    print(f"python {sys.version.split()[0]}, loop {args.loop}, {os.cpu_count()} CPUs")
    runner(in_process_benchmarks())
    if not args.skip_cluster:
        runner(cluster_benchmarks())


if __name__ == "__main__":
    main()
