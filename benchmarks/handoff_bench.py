"""Hand-off benchmark: an event forwarded to the shard holder vs an event handled locally.

Run: ``.venv/bin/python -m benchmarks.handoff_bench [--events 3000] [--rate 300] [--rounds 2]``.
Results go to ``benchmarks/results/listener.md`` by hand.

Set-up: two sharded listener replicas ``a`` and ``b``, each in its own process on uvloop +
httptools (the same pieces ``kyma_operator.listener.wiring.OperatorListener`` assembles, with in-memory
Kymas and keys instead of informers, and counting sinks instead of controllers), 2 shards:
``a`` holds shard 0, ``b`` shard 1, each replica's hand-off endpoint on its own port. Every request
goes to ``a``: signed events of shard-0 runtimes are handled by ``a`` (local); events of shard-1
runtimes are verified by ``a`` and handed to ``b`` (forwarded). Requests are pre-signed with the
raw Ed25519 signer of ``listener_bench`` (distinct nonces), as that benchmark does.

* Latency: open loop at ``--rate`` requests/s over 16 keep-alive connections, latency from each
  request's scheduled send time (``listener_bench.fixed_rate``), p50/p99 per kind; rounds
  alternate local and forwarded. (With 4 connections a contended machine turned the open loop
  into a closed one: 4 requests in flight cap the rate at 4 / round trip, and a slow spell of
  the forwarded path's three process hops then queued the rest of the run.)
* CPU per event: ``--events`` requests as fast as 16 connections allow, user+system CPU of each
  replica process from ``/proc`` before and after; per event = delta / events.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvloop
from prometheus_client import CollectorRegistry

from benchmarks.listener_bench import HOST, PIDS, Runtimes, blast, cpu_seconds, fixed_rate, free_port, presign
from benchmarks.listener_server import NAMESPACE, CountSink
from kcp_listener.app import build_asgi
from kcp_listener.config import ListenerConfig
from kcp_listener.handoff import Forwarder, Handoff, HandoffMetrics
from kcp_listener.handoff_auth import HandoffSigner, HandoffVerifier
from kcp_listener.handoff_server import HandoffApp, HandoffServer
from kcp_listener.health import HeartbeatTracker
from kcp_listener.intake import EventIntake
from kcp_listener.keystore import KeyStore
from kcp_listener.metrics import ListenerMetrics
from kcp_listener.routing import InMemoryDirectory, Router
from kcp_listener.server import ListenerServer
from kyma_operator.listener.shards import RuntimeShardView
from kyma_operator.runtime.shardmap import Replica, shard_of
from kyma_wire.keys import load_public_key

REPO = Path(__file__).resolve().parents[1]
SHARDS = 2
KEY = bytes(range(32))


class TwoReplicas:
    """ShardView: shard 0 held by ``a``, shard 1 by ``b``, as replica ``me`` sees it."""

    def __init__(self, me: str, handoff_ports: dict[str, int]) -> None:
        self.me = me
        self._holders = {
            0: Replica("a", f"http://{HOST}:{handoff_ports['a']}"),
            1: Replica("b", f"http://{HOST}:{handoff_ports['b']}"),
        }

    @property
    def shards(self) -> int:
        return SHARDS

    def holds(self, shard: int) -> bool:
        return self._holders[shard].identity == self.me

    def held_since(self, shard: int) -> float | None:
        return 0.0 if self.holds(shard) else None  # held for the whole run

    def holder(self, shard: int) -> Replica | None:
        return self._holders.get(shard)


async def serve(args: argparse.Namespace) -> None:
    """One replica (child process)."""
    config = ListenerConfig(port=args.port, handoff_port=args.handoff_port, replay_cache_entries=2_000_000)
    fixture = json.loads(Path(args.fixture).read_text())  # noqa: ASYNC240 (startup, before serving)
    registry = CollectorRegistry()
    keys = KeyStore(registry)
    directory = InMemoryDirectory()
    for runtime in fixture["runtimes"]:
        runtime_id = runtime["id"]
        keys.set_keys(runtime_id, runtime_id, {"v1": load_public_key(runtime["public_pem"].encode())})
        directory.add_kyma(NAMESPACE, f"kyma-{runtime_id}", runtime_id)
    metrics = HandoffMetrics(registry)
    forwarder = Forwarder(HandoffSigner(KEY), metrics)
    view = TwoReplicas(args.name, {"a": args.handoff_a, "b": args.handoff_b})
    intake = EventIntake(
        config,
        keys=keys,
        router=Router(directory),
        kyma_sink=CountSink(),
        manifest_sink=CountSink(),
        heartbeats=HeartbeatTracker(clock=time.time, max_silence=180),
        metrics=ListenerMetrics(registry),
        clock=time.time,
        handoff=Handoff(RuntimeShardView(view), metrics, lambda: forwarder),
    )
    handoff_app = HandoffApp(
        intake, HandoffVerifier(KEY), metrics, max_body_bytes=config.handoff_max_body_bytes
    )
    handoff_server = HandoffServer(handoff_app, host=HOST, port=args.handoff_port)
    await handoff_server.start()
    try:
        await ListenerServer(config, build_asgi(intake)).run()
    finally:
        await handoff_server.shutdown()
        await forwarder.aclose()


@contextlib.contextmanager
def replicas(fixture: Path) -> Iterator[dict[str, int]]:
    """Start replicas a and b; yields their public ports."""
    public = {name: free_port() for name in "ab"}
    internal = {name: free_port() for name in "ab"}
    processes: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "operator"), str(REPO)])}
    try:
        for name in "ab":
            args = [sys.executable, "-m", "benchmarks.handoff_bench", "serve", "--name", name]
            args += [
                "--port",
                str(public[name]),
                "--handoff-port",
                str(internal[name]),
                "--fixture",
                str(fixture),
            ]
            args += ["--handoff-a", str(internal["a"]), "--handoff-b", str(internal["b"])]
            processes.append(subprocess.Popen(args, cwd=REPO, env=env))
        for name, process in zip("ab", processes, strict=True):
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"http://{HOST}:{public[name]}/openapi.json", timeout=1).status_code == 200:
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"replica {name} did not start")
                time.sleep(0.1)
            PIDS[public[name]] = process.pid
        yield public
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def raws(runtimes: Runtimes, indices: list[int], count: int, port: int) -> list[bytes]:
    chosen = [indices[i % len(indices)] for i in range(count)]
    return [signed.raw(port) for signed in presign(runtimes, chosen, port)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    runtimes = Runtimes.generate(args.runtimes)
    by_shard: dict[int, list[int]] = {0: [], 1: []}
    for index, runtime_id in enumerate(runtimes.ids):
        by_shard[shard_of(runtime_id, SHARDS)].append(index)
    kinds = {"local": by_shard[0], "forwarded": by_shard[1]}
    results: dict[str, Any] = {kind: {"latency": [], "cpu": []} for kind in kinds}
    with tempfile.TemporaryDirectory() as scratch:
        fixture = Path(scratch) / "runtimes.json"
        runtimes.write_fixture(fixture)
        with replicas(fixture) as ports:
            a, b = ports["a"], ports["b"]
            warm = raws(runtimes, by_shard[0] + by_shard[1], 500, a)
            uvloop.run(blast(a, warm, 8))
            for _ in range(args.rounds):
                for kind, indices in kinds.items():
                    requests = raws(runtimes, indices, args.latency_events, a)
                    results[kind]["latency"].append(uvloop.run(fixed_rate(a, requests, args.rate, 16)))
                for kind, indices in kinds.items():
                    requests = raws(runtimes, indices, args.events, a)
                    before = cpu_seconds(a), cpu_seconds(b)
                    outcome = uvloop.run(blast(a, requests, 16))
                    after = cpu_seconds(a), cpu_seconds(b)
                    results[kind]["cpu"].append(
                        {
                            "ok": outcome["ok"],
                            "other": outcome["other"],
                            "events_per_s": args.events / outcome["elapsed_s"],
                            "a_us": (after[0] - before[0]) / args.events * 1e6,
                            "b_us": (after[1] - before[1]) / args.events * 1e6,
                            "load": os.getloadavg()[0],
                        }
                    )
    return results


def report(args: argparse.Namespace, results: dict[str, Any]) -> str:
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at the end",
        "",
        "| kind | round | p50 ms | p99 ms | non-200 | events/s (16 conns) | CPU a µs/event "
        "| CPU b µs/event | CPU a+b µs/event | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, data in results.items():
        for n, (lat, cpu) in enumerate(zip(data["latency"], data["cpu"], strict=True), 1):
            failed = int(lat["non_200"]) + int(cpu["other"])
            lines.append(
                f"| {kind} | {n} | {lat['p50_ms']:.2f} | {lat['p99_ms']:.2f} | {failed} "
                f"| {cpu['events_per_s']:,.0f} | {cpu['a_us']:.0f} | {cpu['b_us']:.0f} "
                f"| {cpu['a_us'] + cpu['b_us']:.0f} | {cpu['load']:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("serve", help="one replica (started by the benchmark)")
    child.add_argument("--name", choices=["a", "b"], required=True)
    child.add_argument("--port", type=int, required=True)
    child.add_argument("--handoff-port", type=int, required=True)
    child.add_argument("--handoff-a", type=int, required=True)
    child.add_argument("--handoff-b", type=int, required=True)
    child.add_argument("--fixture", required=True)
    parser.add_argument("--runtimes", type=int, default=1000)
    parser.add_argument("--events", type=int, default=3000, help="requests per CPU measurement")
    parser.add_argument("--latency-events", type=int, default=1500, help="requests per latency measurement")
    parser.add_argument("--rate", type=float, default=300.0, help="open-loop rate of the latency runs")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.command == "serve":
        uvloop.run(serve(args))
        return
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = run(args)
    print(f"handoff_bench {started}: {' '.join(sys.argv[1:])}")
    print(report(args, results))


if __name__ == "__main__":
    main()
