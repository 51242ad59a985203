"""The agent's sender alone, in its own process: events/s, CPU per sent event, events/s per core.

Run by ``benchmarks.agent_bench`` as ``python benchmarks/agent_sender.py ...`` with ``PYTHONPATH``
set to the checkout whose agent is measured (so an older tree can be compared in the same run: it
needs only ``skr_watcher``'s ``Delivery``/``KcpClient``/``SendQueue`` and the event model, wherever
that tree keeps it). ``N`` distinct events are queued, then the real sender (TLS, mTLS, signing)
delivers them to the receiver; the process's own CPU time (user + system) is what the send path
costs, since nothing else runs in it, on the event loop the agent runs on (the standard library's).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import resource
import time
from typing import Any

from skr_watcher import credentials, retry
from skr_watcher.clock import SystemClock
from skr_watcher.config import AgentConfig
from skr_watcher.delivery import Delivery
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import SendQueue


def _wire() -> Any:
    """This tree's event model module (``kyma_wire.events``; an older tree kept it in the listener)."""
    for name in ("kyma_wire.events", "kcp_listener.contract"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise SystemExit("no event model found on PYTHONPATH")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _backoff(base: float, cap: float) -> Any:
    """The agent's retry backoff (named ``Backoff`` in older trees, which this script also runs)."""
    return (getattr(retry, "RetryBackoff", None) or retry.Backoff)(base, cap)  # type: ignore[attr-defined]


async def run(env: dict[str, str], n: int, tasks: int, connections: int, batch: int) -> dict[str, Any]:
    config = AgentConfig.from_env(env)
    clock = SystemClock()
    loaded = credentials.load(config, time.time)
    client = KcpClient(
        config.kcp_base_url,
        ssl_context=loaded.client_context,
        signer=loaded.signer,
        max_connections=connections,
    )
    metrics = AgentMetrics()
    queue = SendQueue(n + 10)
    options: dict[str, Any] = {}
    if "batch_max_events" in inspect.signature(Delivery).parameters:
        options = {"batch_max_events": batch, "batch_interval": 0.01}
    elif batch > 1:
        raise SystemExit("this tree's agent cannot batch")
    delivery = Delivery(
        client=client, queue=queue, metrics=metrics, clock=clock, backoff=_backoff(0.05, 1.0),
        sender_tasks=tasks, heartbeat_interval=0, **options,
    )  # fmt: skip
    wire = _wire()
    event_model = getattr(wire, "AgentEvent", None) or wire.WatchEvent
    GroupVersionKind, ObjectKey, Operation = wire.GroupVersionKind, wire.ObjectKey, wire.Operation
    gvk = GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Manifest")
    wall = getattr(clock, "utc_now", None) or clock.now  # type: ignore[attr-defined]  # older trees: now()
    now = wall()
    # literal names: this script also runs an older tree, which has no kyma_wire.names
    for i in range(n):
        event = event_model(
            watched=ObjectKey(namespace="kcp-system", name=f"manifest-{i}"),
            watched_gvk=gvk,
            operation=Operation.UPDATE,
            owner=ObjectKey(namespace="kcp-system", name=f"manifest-{i}"),
            observed_at=now,
        )
        delivery.submit("lifecycle-manager", event)
    cpu_before, started = _cpu(), time.perf_counter()
    delivery.start()
    left = await delivery.stop(flush_within=600)
    elapsed, cpu = time.perf_counter() - started, _cpu() - cpu_before
    await client.aclose()
    sent = metrics.registry.get_sample_value("watcher_events_sent_total") or 0.0
    requests = metrics.registry.get_sample_value("watcher_kcp_requests_total") or 0.0
    if left or sent != n:
        raise SystemExit(f"sender benchmark lost events: sent {sent} of {n}")
    return {
        "events": n,
        "requests": requests,
        "events_per_s": n / elapsed,
        "cpu_ms_per_event": cpu / n * 1000,
        "events_per_core_s": n / cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", required=True, help="JSON object: the agent's environment")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1, help="batch_max_events (1: one request per event)")
    args = parser.parse_args()
    with asyncio.Runner() as runner:  # the agent's own loop: the standard library's (skr_watcher.__main__)
        result = runner.run(run(json.loads(args.env), args.events, args.tasks, args.connections, args.batch))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
