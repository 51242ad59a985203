"""Load client for agent benchmarks: AdmissionReviews over HTTPS, as the API server sends them.

A separate process (``python -m benchmarks.agent_load ...``) so that its CPU use is not charged to
the agent. Raw HTTP/1.1 keep-alive connections over TLS on uvloop, pre-built request bodies (a Kyma
UPDATE with a spec change, ~4 KB with object and oldObject), a small connection pool like
the API server's. Modes:

* ``open``: a fixed rate (open loop). Latency is measured from the *scheduled* send time, so a
  slow server cannot hide queueing (no coordinated omission), and also from the actual write.
* ``burst``: ``--count`` requests for ONE object as fast as the pool allows (closed loop).

Prints one JSON object with counts and latency percentiles (milliseconds).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import ssl
import statistics
import time
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.stats import percentile
from kyma_operator.api.names import KYMA_FINALIZER
from kyma_wire.names import MANAGED_BY_LABEL, OPERATOR_NAME, RUNTIME_ID_LABEL, SKR_NAMESPACE, WATCHED_BY_LABEL


def _kyma(name: str, channel: str, resource_version: str) -> dict[str, Any]:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {
            "name": name,
            "namespace": SKR_NAMESPACE,
            "resourceVersion": resource_version,
            "generation": 3,
            "uid": "8b1f2a4e-5b53-4f43-9d0b-2a7c1bfa1c3e",
            "labels": {
                WATCHED_BY_LABEL: "kyma",
                MANAGED_BY_LABEL: OPERATOR_NAME,
                RUNTIME_ID_LABEL: "runtime-1",
            },
            "annotations": {"skr-domain": "c-1a2b3c.kyma.example.com"},
            "finalizers": [KYMA_FINALIZER],
            "managedFields": [
                {
                    "manager": OPERATOR_NAME,
                    "operation": "Apply",
                    "apiVersion": "operator.kyma-project.io/v1beta2",
                    "time": "2026-11-21T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:channel": {}, "f:modules": {}}},
                }
            ],
        },
        "spec": {
            "channel": channel,
            "modules": [
                {"name": m, "channel": channel, "customResourcePolicy": "CreateAndDelete", "managed": True}
                for m in ("istio", "api-gateway", "serverless", "btp-operator", "telemetry")
            ],
        },
        "status": {
            "state": "Ready",
            "activeChannel": "regular",
            "lastOperation": {"operation": "kyma is ready", "lastUpdateTime": "2026-11-21T10:00:00Z"},
            "modules": [
                {"name": m, "state": "Ready", "version": "1.2.3", "channel": "regular"}
                for m in ("istio", "api-gateway", "serverless", "btp-operator", "telemetry")
            ],
        },
    }


def review_body(name: str, uid: str) -> bytes:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
            "resource": {"group": "operator.kyma-project.io", "version": "v1beta2", "resource": "kymas"},
            "name": name,
            "namespace": SKR_NAMESPACE,
            "operation": "UPDATE",
            "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "object": _kyma(name, "fast", "1001"),
            "oldObject": _kyma(name, "regular", "1000"),
            "dryRun": False,
            "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }
    return json.dumps(review, separators=(",", ":")).encode()


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def roundtrip(self, request: bytes) -> int:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await self.reader.readexactly(length)
        if status == 200 and b'"allowed":true' not in body:
            raise RuntimeError(f"unexpected answer: {body[:200]!r}")
        return status


async def run(args: argparse.Namespace) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(args.ca))
    host, port = args.host, args.port
    connections: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(args.connections):
        reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
        connections.put_nowait(Connection(reader, writer))
    path = f"/validate/{args.manager}"

    def request(name: str, seq: int) -> bytes:
        body = review_body(name, f"{seq:036d}")
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    if args.mode == "burst":
        total = args.count
        requests = [request("hot-object", i) for i in range(total)]
    else:
        total = int(args.rate * (args.duration + args.warmup))
        templates = [request(f"kyma-{i}", i) for i in range(args.objects)]
        requests = [templates[i % args.objects] for i in range(total)]
    scheduled_latency: list[float] = []
    write_latency: list[float] = []
    statuses: dict[int, int] = {}
    skip = int(args.rate * args.warmup) if args.mode == "open" else 0

    async def one(index: int, target: float) -> None:
        conn = await connections.get()
        try:
            sent = time.perf_counter()
            status = await conn.roundtrip(requests[index])
        finally:
            connections.put_nowait(conn)
        done = time.perf_counter()
        statuses[status] = statuses.get(status, 0) + 1
        if index >= skip:
            scheduled_latency.append(done - target)
            write_latency.append(done - sent)

    # a load generator must not stall itself: no collector pauses while measuring
    gc.collect()
    gc.freeze()
    gc.disable()
    started = time.perf_counter()
    tasks: list[asyncio.Task[None]] = []
    if args.mode == "burst":

        async def worker(indices: range) -> None:
            for i in indices:
                await one(i, time.perf_counter())

        per = -(-total // args.connections)
        tasks = [
            asyncio.create_task(worker(range(i * per, min(total, (i + 1) * per))))
            for i in range(args.connections)
        ]
    else:
        start = time.perf_counter() + 0.05
        for i in range(total):
            target = start + i / args.rate
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, target)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    gc.enable()
    while not connections.empty():
        connections.get_nowait().writer.close()

    def summary(values: list[float]) -> dict[str, float]:
        ms = [v * 1000 for v in values]
        return {
            "p50": percentile(ms, 0.50),
            "p90": percentile(ms, 0.90),
            "p99": percentile(ms, 0.99),
            "p999": percentile(ms, 0.999),
            "max": max(ms) if ms else float("nan"),
            "mean": statistics.fmean(ms) if ms else float("nan"),
        }

    return {
        "mode": args.mode,
        "requests": total,
        "measured": len(scheduled_latency),
        "elapsed_s": elapsed,
        "achieved_rps": total / elapsed,
        "statuses": statuses,
        "from_schedule_ms": summary(scheduled_latency),
        "from_write_ms": summary(write_latency),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--manager", default=OPERATOR_NAME)
    parser.add_argument("--mode", choices=("open", "burst"), default="open")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        print(json.dumps(runner.run(run(args))))


if __name__ == "__main__":
    main()
