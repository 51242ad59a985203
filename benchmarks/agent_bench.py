"""Agent benchmarks: admission latency at 500/s (KCP up and down), sender throughput, coalescing.

Run: ``.venv/bin/python -m benchmarks.agent_bench [--duration 20] [--rate 500]``; it prints a
markdown report (copied into ``benchmarks/results/agent.md`` by hand).

Set-up, all on 127.0.0.1 and in separate processes so that each one's CPU is its own:

* the agent: the real ``python -m skr_watcher`` (uvloop, httptools, TLS 1.2+ with its serving
  certificate), configured by environment variables as in a runtime, signing every event;
* KCP: ``benchmarks.agent_receiver`` (HTTPS with mTLS, counts events; signature verification off
  so it takes little CPU away from the agent on this 2-core machine);
* the API server: ``benchmarks.agent_load`` (raw HTTP/1.1 keep-alive over TLS, 8 connections,
  a 4 KB Kyma UPDATE review with a spec change, i.e. every admission produces an event).

Scenarios:

1. admission latency at a fixed rate with KCP reachable (every admission -> a signed POST);
2. the same with KCP unreachable (connection refused: the agent retries with backoff, events queue
   and coalesce over the 1,000 objects);
3. sender throughput: this process drives ``Delivery`` + ``KcpClient`` directly (real TLS, mTLS,
   signing) with N distinct events pre-queued, for several sender/connection counts;
4. coalescing: 10,000 admissions for ONE object as fast as 8 connections allow, with KCP reachable
   and with KCP coming up only after the burst; events that reached KCP are counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvloop
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client.parser import text_string_to_metric_families

from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation
from kyma_wire.keys import private_key_pem, public_key_pem
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME
from skr_watcher import credentials
from skr_watcher.clock import SystemClock
from skr_watcher.config import AgentConfig
from skr_watcher.delivery import Delivery
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import SendQueue
from skr_watcher.retry import Backoff
from tests.controlplane.cluster import free_port
from tests.controlplane.pki import CertificateAuthority

REPO = Path(__file__).resolve().parents[1]


def poll(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Files:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        runtime_ca, kcp_ca = CertificateAuthority("runtime-ca"), CertificateAuthority("kcp-ca")
        runtime_ca.issue("runtime-1", ip_addresses=("127.0.0.1",), server=True, client=True).write(
            directory / "tls.crt", directory / "tls.key"
        )
        kcp_ca.issue("kcp", ip_addresses=("127.0.0.1",), server=True).write(
            directory / "kcp.crt", directory / "kcp.key"
        )
        (directory / "ca.crt").write_bytes(kcp_ca.cert_pem)
        (directory / "runtime-ca.crt").write_bytes(runtime_ca.cert_pem)
        key = Ed25519PrivateKey.generate()
        (directory / "signing.key").write_bytes(private_key_pem(key))
        (directory / "signing.pub").write_bytes(public_key_pem(key.public_key()))
        (directory / "signing.keyid").write_text("runtime-1:v1\n")

    overrides: dict[str, str] = {}

    def agent_env(self, kcp_addr: str, **extra: str) -> dict[str, str]:
        return {
            "KCP_ADDR": kcp_addr,
            "TLS_CERT": str(self.dir / "tls.crt"),
            "TLS_KEY": str(self.dir / "tls.key"),
            "CA_CERT": str(self.dir / "ca.crt"),
            "SIGNING_KEY": str(self.dir / "signing.key"),
            "SIGNING_KEY_ID_FILE": str(self.dir / "signing.keyid"),
            "BIND_ADDRESS": "127.0.0.1",
            "LOG_LEVEL": "WARNING",
            **self.overrides,
            **extra,
        }


def _pinned(cpus: set[int] | None) -> Callable[[], None] | None:
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


AGENT_CPU, PEER_CPU = {0}, {1}
"""With ``pin``: the agent gets CPU 0 to itself, the load client and the receiver (standing in for
the API server and KCP, which run on other machines) share CPU 1."""


@contextmanager
def process(
    argv: list[str], env: dict[str, str] | None = None, cpus: set[int] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        argv, cwd=REPO, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, preexec_fn=_pinned(cpus)
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Receiver:
    def __init__(self, files: Files, *, verify: bool = False) -> None:
        self.port = free_port()
        self.files = files
        self.verify = verify
        self.client = httpx.Client(
            base_url=f"https://127.0.0.1:{self.port}",
            verify=_client_ctx(files),
            timeout=10,
        )

    def argv(self) -> list[str]:
        argv = [
            sys.executable, "-m", "benchmarks.agent_receiver", "--port", str(self.port),
            "--cert", str(self.files.dir / "kcp.crt"), "--key", str(self.files.dir / "kcp.key"),
            "--client-ca", str(self.files.dir / "runtime-ca.crt"),
        ]  # fmt: skip
        if self.verify:
            argv += ["--verify-key", str(self.files.dir / "signing.pub")]
        return argv

    def ready(self) -> bool:
        try:
            return self.client.get("/stats").status_code == 200
        except httpx.HTTPError:
            return False

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self.client.get("/stats").json()
        return result

    def reset(self) -> None:
        self.client.post("/reset")


def _client_ctx(files: Files) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files.dir / "ca.crt"))
    context.load_cert_chain(files.dir / "tls.crt", files.dir / "tls.key")
    return context


class Agent:
    def __init__(self, files: Files, kcp_addr: str, **extra: str) -> None:
        self.webhook_port, self.metrics_port = free_port(), free_port()
        self.env = files.agent_env(
            kcp_addr, WEBHOOK_PORT=str(self.webhook_port), METRICS_PORT=str(self.metrics_port), **extra
        )

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def metrics(self) -> dict[str, float]:
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out


def load(files: Files, agent: Agent, *extra: str, cpus: set[int] | None = None) -> dict[str, Any]:
    argv = [
        sys.executable, "-m", "benchmarks.agent_load", "--port", str(agent.webhook_port),
        "--ca", str(files.dir / "runtime-ca.crt"), *extra,
    ]  # fmt: skip
    output = subprocess.run(
        argv, cwd=REPO, check=True, capture_output=True, text=True, preexec_fn=_pinned(cpus)
    ).stdout
    result: dict[str, Any] = json.loads(output)
    return result


def latency_scenario(
    files: Files, kcp_addr: str, rate: float, duration: float, label: str, pin: bool
) -> dict[str, Any]:
    agent = Agent(files, kcp_addr)
    with process([sys.executable, "-m", "skr_watcher"], agent.env, AGENT_CPU if pin else None) as proc:
        poll(agent.ready, 30, "agent")
        cpu_before, wall_before = _cpu_seconds(proc.pid), time.perf_counter()
        result = load(
            files, agent, "--mode", "open", "--rate", str(rate), "--duration", str(duration),
            cpus=PEER_CPU if pin else None,
        )  # fmt: skip
        if label == "reachable":  # the last events may still be on their way
            poll(lambda: agent.metrics().get("watcher_queue_depth", 1) == 0, 30, "queue drained")
        cpu, wall = _cpu_seconds(proc.pid) - cpu_before, time.perf_counter() - wall_before
        metrics = agent.metrics()
        rss = _rss_mb(proc.pid)
    count = metrics.get("watcher_admission_duration_seconds_count", 0.0)
    handler_mean_ms = (
        metrics.get("watcher_admission_duration_seconds_sum", 0.0) / count * 1000 if count else 0.0
    )
    return {
        "label": label,
        "pinned": pin,
        "load": result,
        "handler_mean_ms": handler_mean_ms,
        "events_sent": metrics.get("watcher_events_sent_total", 0.0),
        "events_queued": metrics.get("watcher_events_queued_total", 0.0),
        "events_coalesced": metrics.get("watcher_events_coalesced_total", 0.0),
        "kcp_failures": sum(v for k, v in metrics.items() if k.startswith("watcher_failed_kcp_total")),
        "queue_depth": metrics.get("watcher_queue_depth", 0.0),
        "rss_mb": rss,
        "agent_cpu_ms_per_admission": cpu / result["requests"] * 1000,
        "agent_cpu_share": cpu / wall,
        "load_average_1m": os.getloadavg()[0],
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc), robust against other load on the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


async def _sender_throughput(
    files: Files, receiver: Receiver, n: int, tasks: int, connections: int, signed: bool
) -> float:
    env = files.agent_env(f"127.0.0.1:{receiver.port}")
    if not signed:
        for key in ("SIGNING_KEY", "SIGNING_KEY_ID_FILE"):
            env.pop(key)
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
    delivery = Delivery(
        client=client, queue=queue, metrics=metrics, clock=clock, backoff=Backoff(0.05, 1.0),
        sender_tasks=tasks, heartbeat_interval=0,
    )  # fmt: skip
    gvk = GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Manifest")
    now = clock.now()
    for i in range(n):
        event = AgentEvent(
            watched=ObjectKey(namespace=KCP_NAMESPACE, name=f"manifest-{i}"),
            watched_gvk=gvk,
            operation=Operation.UPDATE,
            owner=ObjectKey(namespace=KCP_NAMESPACE, name=f"manifest-{i}"),
            observed_at=now,
        )
        delivery.submit(OPERATOR_NAME, event)
    started = time.perf_counter()
    delivery.start()
    left = await delivery.stop(flush_within=600)
    elapsed = time.perf_counter() - started
    await client.aclose()
    sent = metrics.registry.get_sample_value("watcher_events_sent_total") or 0.0
    if left or sent != n:
        raise RuntimeError(f"sender benchmark lost events: sent {sent} of {n}")
    return n / elapsed


def sender_scenarios(files: Files, n: int) -> list[dict[str, Any]]:
    receiver = Receiver(files)
    rows = []
    with process(receiver.argv()):
        poll(receiver.ready, 30, "receiver")
        for tasks, connections, signed in (
            (1, 1, True),
            (2, 2, True),
            (4, 4, True),
            (8, 8, True),
            (4, 4, False),
        ):
            receiver.reset()
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                rate = runner.run(_sender_throughput(files, receiver, n, tasks, connections, signed))
            received = receiver.stats()["events"]
            rows.append(
                {
                    "tasks": tasks,
                    "connections": connections,
                    "signed": signed,
                    "events_per_s": rate,
                    "received": received,
                }
            )
    return rows


def coalescing_scenario(files: Files, count: int, kcp_down_during_burst: bool) -> dict[str, Any]:
    """``count`` admissions for one object; with ``kcp_down_during_burst`` KCP comes up afterwards."""
    receiver = Receiver(files)
    agent = Agent(
        files,
        f"127.0.0.1:{receiver.port}",
        RESYNC_ON_START="false",
        HEARTBEAT_INTERVAL="0",
        RETRY_MAX_DELAY="1s",
    )
    with contextlib.ExitStack() as stack:
        if not kcp_down_during_burst:
            stack.enter_context(process(receiver.argv()))
            poll(receiver.ready, 30, "receiver")
        stack.enter_context(process([sys.executable, "-m", "skr_watcher"], agent.env))
        poll(agent.ready, 30, "agent")
        result = load(files, agent, "--mode", "burst", "--count", str(count), "--connections", "8")
        if kcp_down_during_burst:
            stack.enter_context(process(receiver.argv()))
            poll(receiver.ready, 30, "receiver")
        poll(lambda: agent.metrics().get("watcher_events_sent_total", 0) > 0, 60, "first delivery")
        poll(lambda: agent.metrics().get("watcher_queue_depth", 1) == 0, 60, "queue drained")
        poll(
            lambda: receiver.stats()["events"] == agent.metrics()["watcher_events_sent_total"],
            60,
            "in flight",
        )
        metrics = agent.metrics()
        stats = receiver.stats()
    delivered = int(dict(stats["top"]).get("hot-object", 0))  # without a RESYNC after the outage
    return {
        "kcp": "unreachable during the burst" if kcp_down_during_burst else "reachable",
        "admissions": count,
        "admission_rps": result["achieved_rps"],
        "events_delivered": delivered,
        "coalesced": metrics.get("watcher_events_coalesced_total", 0.0),
        "superseded": metrics.get("watcher_events_superseded_total", 0.0),
        "ratio": count / delivered if delivered else float("inf"),
    }


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def report(
    latency: list[dict[str, Any]], senders: list[dict[str, Any]], bursts: list[dict[str, Any]], args: Any
) -> str:
    machine = f"{os.cpu_count()} cores ({platform.machine()}), Python {platform.python_version()}"
    command = (
        f".venv/bin/python -m benchmarks.agent_bench --duration {args.duration:g} --rate {args.rate:g} "
        f"--rounds {args.rounds} --events {args.events} --burst {args.burst}"
    )
    lines = [
        f"Date: {datetime.date.today().isoformat()}. Machine: {machine}.",
        f"Command: `{command}`",
        "",
        f"### Admission latency at {args.rate:g} admissions/s over HTTPS "
        f"({args.duration:g} s measured after 2 s warm-up, {args.rounds} rounds)",
        "",
        "Latency is measured by the load client from the scheduled send time (includes any queueing);",
        "'p99 from write' from the moment the request was written. 'load avg' is the machine's 1-minute",
        "load average at the end of the run (other work shares this machine).",
        "",
        _row(
            "round", "KCP", "CPUs", "load avg", "requests", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms",
            "max ms", "p99 from write ms", "handler mean ms", "agent CPU ms/admission", "agent CPU share",
            "events sent", "coalesced", "KCP failures", "agent RSS MB",
        ),
        _row(*["---"] * 18),
    ]  # fmt: skip
    for row in latency:
        s, w = row["load"]["from_schedule_ms"], row["load"]["from_write_ms"]
        lines.append(
            _row(
                row["round"],
                row["label"],
                "agent: 1 own; peers: 1" if row["pinned"] else "all share 2",
                f"{row['load_average_1m']:.2f}",
                row["load"]["measured"],
                f"{s['p50']:.2f}",
                f"{s['p90']:.2f}",
                f"{s['p99']:.2f}",
                f"{s['p999']:.2f}",
                f"{s['max']:.1f}",
                f"{w['p99']:.2f}",
                f"{row['handler_mean_ms']:.3f}",
                f"{row['agent_cpu_ms_per_admission']:.2f}",
                f"{row['agent_cpu_share']:.0%}",
                f"{row['events_sent']:.0f}",
                f"{row['events_coalesced']:.0f}",
                f"{row['kcp_failures']:.0f}",
                f"{row['rss_mb']:.0f}",
            )
        )
    lines += [
        "",
        "Median over rounds:",
        "",
        _row("KCP", "CPUs", "p50 ms", "p99 ms", "p99.9 ms"),
        _row(*["---"] * 5),
    ]
    for label in ("reachable", "unreachable"):
        for pinned in (False, True):
            rows = [r for r in latency if r["label"] == label and r["pinned"] == pinned]
            if not rows:
                continue
            med = {
                q: statistics.median(r["load"]["from_schedule_ms"][q] for r in rows)
                for q in ("p50", "p99", "p999")
            }
            cpus = "agent: 1 own; peers: 1" if pinned else "all share 2"
            lines.append(_row(label, cpus, f"{med['p50']:.2f}", f"{med['p99']:.2f}", f"{med['p999']:.2f}"))
    lines += [
        "",
        f"### Sender throughput ({args.events} distinct events pre-queued, TLS + mTLS to a local receiver)",
        "",
        _row("sender tasks", "max connections", "signed", "events/s"),
        _row(*["---"] * 4),
    ]
    for row in senders:
        signed = "yes" if row["signed"] else "no"
        lines.append(_row(row["tasks"], row["connections"], signed, f"{row['events_per_s']:.0f}"))
    lines += [
        "",
        "### Coalescing: a burst of admissions for one object",
        "",
        _row(
            "KCP", "admissions", "admission rate /s", "events delivered", "coalesced", "superseded", "ratio"
        ),
        _row(*["---"] * 7),
    ]
    for burst in bursts:
        lines.append(
            _row(
                burst["kcp"],
                burst["admissions"],
                f"{burst['admission_rps']:.0f}",
                burst["events_delivered"],
                f"{burst['coalesced']:.0f}",
                f"{burst['superseded']:.0f}",
                f"{burst['ratio']:.0f} : 1",
            )
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--pin", action="store_true", help="also run the latency scenarios with pinned CPUs")
    parser.add_argument("--agent-env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--only-latency", action="store_true")
    parser.add_argument(
        "--rounds", type=int, default=3, help="latency scenarios are repeated (noisy machine)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        files = Files(Path(tmp))
        latency = []
        Files.overrides = dict(item.split("=", 1) for item in args.agent_env)
        for round_ in range(1, args.rounds + 1):
            for pin in (False, True) if args.pin else (False,):
                receiver = Receiver(files)
                with process(receiver.argv(), cpus=PEER_CPU if pin else None):
                    poll(receiver.ready, 30, "receiver")
                    address = f"127.0.0.1:{receiver.port}"
                    row = latency_scenario(files, address, args.rate, args.duration, "reachable", pin)
                    latency.append({**row, "round": round_})
                closed = f"127.0.0.1:{free_port()}"
                row = latency_scenario(files, closed, args.rate, args.duration, "unreachable", pin)
                latency.append({**row, "round": round_})
        if args.only_latency:
            print(json.dumps(latency, indent=1))
            return
        senders = sender_scenarios(files, args.events)
        bursts = [coalescing_scenario(files, args.burst, down) for down in (False, True)]
    print(report(latency, senders, bursts, args))
    print("\n<details><summary>raw</summary>\n\n```json")
    print(json.dumps({"latency": latency, "senders": senders, "bursts": bursts}, indent=1, default=str))
    print("```\n</details>")


if __name__ == "__main__":
    main()
