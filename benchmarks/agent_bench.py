"""Agent benchmarks: admission latency at 500/s (KCP up and down), CPU, memory, sender, coalescing.

Run: ``.venv/bin/python -m benchmarks.agent_bench [--duration 20] [--rate 500]``; it prints a
markdown report (copied into ``benchmarks/results/agent.md`` by hand). ``--compare before=PATH``
also runs the agent of another checkout (e.g. ``git worktree add --detach ../before <branch>``),
interleaved with this one in every round, so both see the same machine load; this tree's agent runs
with batching on and off (``BATCH_MAX_EVENTS=1``).

Set-up, all on 127.0.0.1 and in separate processes so that each one's CPU is its own:

* the agent: the real ``python -m skr_watcher`` (stdlib event loop, httptools, TLS 1.2+ with its
  serving certificate), configured by environment variables as in a runtime, signing every event;
* KCP: ``benchmarks.agent_receiver`` (HTTPS with mTLS, counts events; signature verification off
  so it takes little CPU away from the agent on this 2-core machine);
* the API server: ``benchmarks.agent_load`` (raw HTTP/1.1 keep-alive over TLS, 8 connections,
  a 4 KB Kyma UPDATE review with a spec change, i.e. every admission produces an event).

Scenarios:

1. admission latency at a fixed rate with KCP reachable (every admission -> a signed POST);
2. the same with KCP unreachable (connection refused: the agent retries with backoff, events queue
   and coalesce over the 1,000 objects);
3. sender throughput: ``benchmarks/agent_sender.py`` (its own process, so its CPU time is the send
   path's) drives ``Delivery`` + ``KcpClient`` (real TLS, mTLS, signing) with N distinct events
   pre-queued: events/s, CPU per sent event and events/s per agent core;
4. coalescing: 10,000 admissions for ONE object as fast as 8 connections allow, with KCP reachable
   and with KCP coming up only after the burst; events that reached KCP are counted.
"""

from __future__ import annotations

import argparse
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
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client.parser import text_string_to_metric_families

from kyma_wire.keys import private_key_pem, public_key_pem
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
    argv: list[str], env: dict[str, str] | None = None, cpus: set[int] | None = None, cwd: Path = REPO
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        argv, cwd=cwd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, preexec_fn=_pinned(cpus)
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


class Variant:
    """Which agent runs: the code of a checkout (``tree``) with extra environment."""

    def __init__(self, name: str, tree: Path = REPO, **env: str) -> None:
        self.name = name
        self.tree = tree
        self.env = env


class Agent:
    def __init__(self, files: Files, kcp_addr: str, variant: Variant | None = None, **extra: str) -> None:
        self.variant = variant or Variant("this tree")
        self.webhook_port, self.metrics_port = free_port(), free_port()
        self.env = files.agent_env(
            kcp_addr,
            WEBHOOK_PORT=str(self.webhook_port),
            METRICS_PORT=str(self.metrics_port),
            PYTHONPATH=str(self.variant.tree),
            **self.variant.env,
            **extra,
        )

    @contextmanager
    def running(
        self, cpus: set[int] | None = None, wrapper: Sequence[str] = ()
    ) -> Iterator[subprocess.Popen[bytes]]:
        """The agent process (``wrapper``: what runs it, e.g. ``benchmarks/loop_stalls.py OUT.json``)."""
        argv = [sys.executable, *wrapper, "-m", "skr_watcher"]
        with process(argv, self.env, cpus, cwd=self.variant.tree) as proc:
            yield proc

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


class _PeakRss:
    """Samples a process's RSS in a thread while the load runs (peak = 'RSS under load')."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.peak = max(self.peak, _rss_mb(self.pid))

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb(self.pid))


def latency_scenario(
    files: Files,
    kcp_addr: str,
    rate: float,
    duration: float,
    label: str,
    pin: bool,
    variant: Variant | None = None,
) -> dict[str, Any]:
    agent = Agent(files, kcp_addr, variant)
    with agent.running(AGENT_CPU if pin else None) as proc:
        poll(agent.ready, 30, "agent")
        rss_start = _rss_mb(proc.pid)
        cpu_before, wall_before = _cpu_seconds(proc.pid), time.perf_counter()
        with _PeakRss(proc.pid) as peak:
            result = load(
                files,
                agent,
                "--mode",
                "open",
                "--rate",
                str(rate),
                "--duration",
                str(duration),
                cpus=PEER_CPU if pin else None,
            )
            if label == "reachable":  # the last events may still be on their way
                poll(lambda: agent.metrics().get("watcher_queue_depth", 1) == 0, 30, "queue drained")
        cpu, wall = _cpu_seconds(proc.pid) - cpu_before, time.perf_counter() - wall_before
        metrics = agent.metrics()
        rss = _rss_mb(proc.pid)
    count = metrics.get("watcher_admission_duration_seconds_count", 0.0)
    handler_mean_ms = (
        metrics.get("watcher_admission_duration_seconds_sum", 0.0) / count * 1000 if count else 0.0
    )
    sent = metrics.get("watcher_events_sent_total", 0.0)
    return {
        "label": label,
        "variant": agent.variant.name,
        "pinned": pin,
        "load": result,
        "rss_start_mb": rss_start,
        "rss_peak_mb": peak.peak,
        "kcp_requests": metrics.get("watcher_kcp_requests_total", 0.0),
        "agent_cpu_ms_per_sent_event": cpu / sent * 1000 if sent else float("nan"),
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


def sender_run(files: Files, receiver: Receiver, variant: Variant, n: int, batch: int) -> dict[str, Any]:
    """``benchmarks/agent_sender.py`` with ``variant``'s code: its own process, its own CPU time."""
    env = {**files.agent_env(f"127.0.0.1:{receiver.port}"), **variant.env}
    argv = [
        sys.executable, str(REPO / "benchmarks" / "agent_sender.py"), "--env", json.dumps(env),
        "--events", str(n), "--batch", str(batch),
    ]  # fmt: skip
    output = subprocess.run(
        argv,
        cwd=variant.tree,
        env={**os.environ, "PYTHONPATH": str(variant.tree)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(output)
    return {**result, "variant": variant.name, "batch": batch}


def sender_scenarios(
    files: Files, n: int, runs: list[tuple[Variant, int]], rounds: int
) -> list[dict[str, Any]]:
    """Every (variant, batch size) of ``runs``, interleaved, ``rounds`` times."""
    receiver = Receiver(files)
    rows = []
    with process(receiver.argv()):
        poll(receiver.ready, 30, "receiver")
        for round_ in range(1, rounds + 1):
            for variant, batch in runs:
                receiver.reset()
                row = sender_run(files, receiver, variant, n, batch)
                row["received"] = receiver.stats()["events"]
                rows.append({**row, "round": round_})
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


def _median(rows: list[dict[str, Any]], get: Callable[[dict[str, Any]], float]) -> float:
    values = [get(r) for r in rows]
    values = [v for v in values if v == v]  # drop NaN
    return statistics.median(values) if values else float("nan")


def command_line(args: Any) -> str:
    parts = [
        ".venv/bin/python -m benchmarks.agent_bench",
        f"--duration {args.duration:g} --rate {args.rate:g} --rounds {args.rounds}",
        f"--events {args.events} --burst {args.burst}",
        *(f"--compare {item}" for item in args.compare),
        *(["--only-latency"] if args.only_latency else []),
        *(["--skip-coalescing"] if args.skip_coalescing else []),
    ]
    return " ".join(parts)


def report(
    latency: list[dict[str, Any]],
    senders: list[dict[str, Any]],
    bursts: list[dict[str, Any]],
    args: Any,
    variants: list[Variant],
) -> str:
    machine = f"{os.cpu_count()} cores ({platform.machine()}), Python {platform.python_version()}"
    trees = ", ".join(f"{v.name}: {v.tree}" + (f" {v.env}" if v.env else "") for v in variants)
    lines = [
        f"Date: {datetime.date.today().isoformat()}. Machine: {machine}.",
        f"Command: `{command_line(args)}`",
        f"Agents: {trees}.",
        "",
        f"### Admission latency, CPU and memory at {args.rate:g} admissions/s over HTTPS "
        f"({args.duration:g} s, {args.rounds} rounds, variants interleaved in every round)",
        "",
        "Latency from the moment the load client wrote the request ('from schedule' also counts the",
        "client's own queueing). 'CPU ms/sent event' is the agent's CPU over the run divided by the events",
        "KCP accepted; 'send cost/event' is (CPU reachable - CPU unreachable) per sent event, i.e. what",
        "sending adds. RSS after start and the peak while under load. 'load avg' is the machine's",
        "1-minute load average at the end of the run (other work shares this machine).",
        "",
        _row(
            "round", "agent", "KCP", "load avg", "admissions", "p50 ms", "p99 ms", "p99.9 ms",
            "p99 from schedule ms", "handler mean ms", "CPU ms/admission", "CPU ms/sent event",
            "events sent", "KCP requests", "RSS start MB", "RSS peak MB",
        ),
        _row(*["---"] * 16),
    ]  # fmt: skip
    for row in latency:
        s, w = row["load"]["from_schedule_ms"], row["load"]["from_write_ms"]
        lines.append(
            _row(
                row["round"],
                row["variant"],
                row["label"],
                f"{row['load_average_1m']:.2f}",
                row["load"]["measured"],
                f"{w['p50']:.2f}",
                f"{w['p99']:.2f}",
                f"{w['p999']:.2f}",
                f"{s['p99']:.2f}",
                f"{row['handler_mean_ms']:.3f}",
                f"{row['agent_cpu_ms_per_admission']:.3f}",
                f"{row['agent_cpu_ms_per_sent_event']:.3f}",
                f"{row['events_sent']:.0f}",
                f"{row['kcp_requests']:.0f}",
                f"{row['rss_start_mb']:.1f}",
                f"{row['rss_peak_mb']:.1f}",
            )
        )
    lines += [
        "",
        "Median over rounds:",
        "",
        _row(
            "agent", "KCP", "p50 ms", "p99 ms", "CPU ms/admission", "CPU ms/sent event",
            "send cost/event ms", "RSS start MB", "RSS peak MB",
        ),
        _row(*["---"] * 9),
    ]  # fmt: skip
    for variant in variants:
        down = [r for r in latency if r["variant"] == variant.name and r["label"] == "unreachable"]
        for label in ("reachable", "unreachable"):
            rows = [r for r in latency if r["variant"] == variant.name and r["label"] == label]
            if not rows:
                continue
            cost = float("nan")
            if label == "reachable" and down:
                per_admission = _median(rows, lambda r: r["agent_cpu_ms_per_admission"]) - _median(
                    down, lambda r: r["agent_cpu_ms_per_admission"]
                )
                per_event = _median(rows, lambda r: r["events_sent"] / r["load"]["requests"])
                cost = per_admission / per_event if per_event else float("nan")
            lines.append(
                _row(
                    variant.name,
                    label,
                    f"{_median(rows, lambda r: r['load']['from_write_ms']['p50']):.2f}",
                    f"{_median(rows, lambda r: r['load']['from_write_ms']['p99']):.2f}",
                    f"{_median(rows, lambda r: r['agent_cpu_ms_per_admission']):.3f}",
                    f"{_median(rows, lambda r: r['agent_cpu_ms_per_sent_event']):.3f}"
                    if label == "reachable"
                    else "-",
                    f"{cost:.3f}" if label == "reachable" else "-",
                    f"{_median(rows, lambda r: r['rss_start_mb']):.1f}",
                    f"{_median(rows, lambda r: r['rss_peak_mb']):.1f}",
                )
            )
    if senders:
        lines += [
            "",
            f"### Sender alone ({args.events} distinct events pre-queued, 4 senders, 4 connections,"
            " TLS + mTLS, signed; median over rounds)",
            "",
            _row(
                "agent", "batch max", "events/s", "CPU ms/sent event", "events/s per agent core", "requests"
            ),
            _row(*["---"] * 6),
        ]
        seen: list[tuple[str, int]] = []
        for row in senders:
            key = (row["variant"], row["batch"])
            if key in seen:
                continue
            seen.append(key)
            rows = [r for r in senders if (r["variant"], r["batch"]) == key]
            lines.append(
                _row(
                    key[0],
                    key[1],
                    f"{_median(rows, lambda r: r['events_per_s']):.0f}",
                    f"{_median(rows, lambda r: r['cpu_ms_per_event']):.3f}",
                    f"{_median(rows, lambda r: r['events_per_core_s']):.0f}",
                    f"{_median(rows, lambda r: r['requests']):.0f}",
                )
            )
    if bursts:
        lines += [
            "",
            "### Coalescing: a burst of admissions for one object (this tree)",
            "",
            _row(
                "KCP", "admissions", "admission rate /s", "events delivered", "coalesced", "superseded",
                "ratio",
            ),
            _row(*["---"] * 7),
        ]  # fmt: skip
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
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also run the agent of the checkout at PATH (interleaved with this tree's in every round)",
    )
    parser.add_argument("--only-latency", action="store_true")
    parser.add_argument("--skip-coalescing", action="store_true", help="no burst scenarios")
    parser.add_argument("--rounds", type=int, default=3, help="scenarios are repeated (noisy machine)")
    args = parser.parse_args()
    variants = [
        Variant(label, Path(path).resolve()) for label, path in (c.split("=", 1) for c in args.compare)
    ]
    variants += [Variant("batching on"), Variant("batching off", BATCH_MAX_EVENTS="1")]
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        files = Files(Path(tmp))
        latency = []
        Files.overrides = dict(item.split("=", 1) for item in args.agent_env)
        for round_ in range(1, args.rounds + 1):
            for pin in (False, True) if args.pin else (False,):
                for variant in variants:
                    receiver = Receiver(files)
                    with process(receiver.argv(), cpus=PEER_CPU if pin else None):
                        poll(receiver.ready, 30, "receiver")
                        address = f"127.0.0.1:{receiver.port}"
                        row = latency_scenario(
                            files, address, args.rate, args.duration, "reachable", pin, variant
                        )
                        latency.append({**row, "round": round_})
                    closed = f"127.0.0.1:{free_port()}"
                    row = latency_scenario(
                        files, closed, args.rate, args.duration, "unreachable", pin, variant
                    )
                    latency.append({**row, "round": round_})
        senders: list[dict[str, Any]] = []
        bursts: list[dict[str, Any]] = []
        if not args.only_latency:
            runs = [(v, 1) for v in variants[:-2]] + [(variants[-2], 64), (variants[-2], 1)]
            senders = sender_scenarios(files, args.events, runs, args.rounds)
            if not args.skip_coalescing:
                bursts = [coalescing_scenario(files, args.burst, down) for down in (False, True)]
    print(report(latency, senders, bursts, args, variants))
    print("\n<details><summary>raw</summary>\n\n```json")
    print(json.dumps({"latency": latency, "senders": senders, "bursts": bursts}, indent=1, default=str))
    print("```\n</details>")


if __name__ == "__main__":
    main()
