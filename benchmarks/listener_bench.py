"""Listener benchmarks: authenticated events/s vs a bare FastAPI endpoint, latency, storms, fan-out.

Run: ``.venv/bin/python -m benchmarks.listener_bench [--duration 10] [--rounds 2]`` (needs ``wrk``:
``apt-get install -y wrk``). Results go to ``benchmarks/results/listener.md`` by hand.

How it measures (one run, side by side):

* Servers run in their own process (``benchmarks.listener_server``), one uvicorn worker on uvloop +
  httptools each, started one at a time (the machine has 2 cores; the load generator takes one).
  ``plain`` is a bare FastAPI ``POST /v2/lifecycle-manager/event`` that parses the body into the
  ``AgentEvent`` model; ``listener`` is the full listener (signature mode: digest, RFC 9421
  Ed25519 verify, replay cache, body validation, routing over 5,000 runtimes) enqueuing into two
  real runtime ``Controller``s whose reconcilers count.
* Throughput: ``wrk -t1 -c50`` with a Lua script cycling through N pre-signed requests (nonces
  must be unique, so every request is distinct; N exceeds what a run can send, and any replay
  would show up as non-2xx). BOTH servers get the SAME signed requests (the plain endpoint ignores
  the signature headers), so bytes on the wire are identical. Requests are pre-signed by this
  script over ``signing.signature_base`` with raw Ed25519 (the library signer costs ~320 us each);
  a sample is verified with the library's verifier first, and the listener verifies every one.
* Latency: an open-loop asyncio client at a fixed rate (latency counted from the scheduled send
  time, so queueing is not hidden), raw HTTP/1.1 keep-alive connections.
* Storm: 10,000 events for ONE Kyma sent as fast as possible; reconciles counted by the server's
  real Controller (with and without the listener's per-target throttling).
* Fan-out: 5,000 runtimes send one event each; every Kyma must be reconciled (429s are retried
  after Retry-After, as the agent does).
* Micro: per-operation costs in process, best of 5 batches; ``pipeline_us`` is the whole ASGI
  fast path per request (no server, no network), which minus the raw Ed25519 cost is what the
  listener's own code costs.
* Compare (``--compare DIR...``, e.g. ``git archive <commit> | tar -x -C /tmp/before``): the
  listeners of several checkouts, plain FastAPI and the Ed25519 floor measured in turn, several
  cycles, on the same machine at the same time: the honest before/after on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import hashlib
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvloop
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nacl.bindings import crypto_sign_open
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from kcp_listener.app import build_asgi
from kcp_listener.config import ListenerConfig
from kcp_listener.health import HeartbeatTracker
from kcp_listener.intake import EventIntake
from kcp_listener.keystore import KeyStore
from kcp_listener.metrics import ListenerMetrics
from kcp_listener.routing import InMemoryDirectory, Router
from kcp_listener.verifier import SignatureVerifier
from kyma_operator.listener.sinks import ControllerSink
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.request import Request
from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation, event_path
from kyma_wire.keys import public_key_pem
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME, SKR_NAMESPACE
from kyma_wire.profile import COVERED_COMPONENTS, SIGNATURE_TAG, make_key_id, signature_base
from tests.rfc9421_reference import EventSigner, LibrarySignatureVerifier

REPO = Path(__file__).resolve().parents[1]
MANAGER = OPERATOR_NAME
PATH = event_path(MANAGER)
HOST = "127.0.0.1"
BODY = AgentEvent(
    watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
    watched_gvk=GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma"),
    operation=Operation.UPDATE,
    observed_at=datetime.datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=datetime.UTC),
).to_wire()
DIGEST = "sha-256=:" + base64.b64encode(hashlib.sha256(BODY).digest()).decode() + ":"
INNER = "(" + " ".join(f'"{c}"' for c in COVERED_COMPONENTS) + ")"


# --- keys and pre-signed requests ------------------------------------------------------------------


@dataclass
class Runtimes:
    ids: list[str]
    keys: list[Ed25519PrivateKey]

    @classmethod
    def generate(cls, count: int) -> Runtimes:
        ids = [f"rt-{i:05d}" for i in range(count)]
        return cls(ids, [Ed25519PrivateKey.generate() for _ in ids])

    def write_fixture(self, path: Path) -> None:
        runtimes = [
            {"id": rid, "public_pem": public_key_pem(key.public_key()).decode()}
            for rid, key in zip(self.ids, self.keys, strict=True)
        ]
        path.write_text(json.dumps({"runtimes": runtimes}))


@dataclass(frozen=True)
class Signed:
    signature_input: str
    signature: str

    def raw(self, port: int) -> bytes:
        return (
            f"POST {PATH} HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\nContent-Digest: {DIGEST}\r\n"
            f"Signature-Input: {self.signature_input}\r\nSignature: {self.signature}\r\n\r\n"
        ).encode() + BODY


def presign(runtimes: Runtimes, indices: Sequence[int], port: int) -> list[Signed]:
    """One distinct signed request per index (runtime index), created now."""
    url = f"http://{HOST}:{port}{PATH}"
    headers = {"content-type": "application/json", "content-digest": DIGEST}
    created = int(time.time())
    out = []
    for serial, index in enumerate(indices):
        params: list[tuple[str, int | str]] = [
            ("created", created),
            ("keyid", make_key_id(runtimes.ids[index], "v1")),
            ("alg", "ed25519"),
            ("expires", created + 60),
            ("nonce", f"{serial:x}-{secrets.token_urlsafe(12)}"),
            ("tag", SIGNATURE_TAG),
        ]
        signature = runtimes.keys[index].sign(signature_base("POST", url, headers, params))
        serialized = "".join(f";{k}={v}" if isinstance(v, int) else f';{k}="{v}"' for k, v in params)
        out.append(Signed(f"kcp={INNER}{serialized}", "kcp=:" + base64.b64encode(signature).decode() + ":"))
    return out


def check_sample(runtimes: Runtimes, signed: Sequence[Signed], indices: Sequence[int], port: int) -> None:
    """The library's verifier accepts a sample of the pre-signed requests."""

    class Keys:
        def public_keys(self, key_id: str) -> list[object]:
            return [runtimes.keys[runtimes.ids.index(key_id.split(":")[0])].public_key()]

    verifier = LibrarySignatureVerifier(Keys())  # type: ignore[arg-type]
    for position in range(0, len(signed), max(1, len(signed) // 10)):
        item = signed[position]
        headers = {
            "content-type": "application/json",
            "content-digest": DIGEST,
            "signature-input": item.signature_input,
            "signature": item.signature,
        }
        result = verifier.verify("POST", f"http://{HOST}:{port}{PATH}", headers, BODY)
        assert result.runtime_id == runtimes.ids[indices[position]]


# --- server processes ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


PIDS: dict[int, int] = {}
"""port -> server process id (for CPU accounting)."""


def cpu_seconds(port: int) -> float:
    """User + system CPU time the server on ``port`` has used so far."""
    fields = Path(f"/proc/{PIDS[port]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def server(kind: str, fixture: Path | None = None, tree: Path = REPO, **options: object) -> Iterator[int]:
    """A server process of ``tree``'s code (another checkout of this repository for comparisons)."""
    port = free_port()
    args = [sys.executable, "-m", "benchmarks.listener_server", "--kind", kind, "--port", str(port)]
    if fixture is not None:
        args += ["--fixture", str(fixture)]
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "operator"), str(tree)])}
    process = subprocess.Popen(args, cwd=tree, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://{HOST}:{port}/openapi.json", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} server did not start")
            time.sleep(0.1)
        PIDS[port] = process.pid
        yield port
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def server_metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://{HOST}:{port}/metrics", timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def reconciles(port: int, controller: str) -> tuple[int, int]:
    metrics = server_metrics(port)
    labels = (("controller", controller),)
    return int(metrics[("bench_reconciles_total", labels)]), int(
        metrics[("bench_distinct_reconciled", labels)]
    )


# --- wrk -------------------------------------------------------------------------------------------------

LUA = """
local reqs = {}
local n = 0
local i = 0
local body = %(body)s
local digest = %(digest)s
function init(args)
  for line in io.lines(args[1]) do
    local tab = line:find("\\t", 1, true)
    n = n + 1
    reqs[n] = {line:sub(1, tab - 1), line:sub(tab + 1)}
  end
end
function request()
  i = i + 1
  if i > n then i = 1 end
  local r = reqs[i]
  return wrk.format("POST", "%(path)s", {["Content-Type"] = "application/json",
    ["Content-Digest"] = digest, ["Signature-Input"] = r[1], ["Signature"] = r[2]}, body)
end
"""


@dataclass
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    cpu_us: float = 0.0
    """Server CPU time per request (user + system): robust against other load on the machine."""


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(port: int, signed: Sequence[Signed], duration: int, connections: int) -> WrkResult:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "requests.tsv"
        data.write_text("".join(f"{s.signature_input}\t{s.signature}\n" for s in signed))
        script = Path(tmp) / "signed.lua"
        script.write_text(
            LUA % {"body": json.dumps(BODY.decode()), "digest": json.dumps(DIGEST), "path": PATH}
        )
        cpu_before = cpu_seconds(port)
        output = subprocess.run(
            [
                *("wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script)),
                *(f"http://{HOST}:{port}", "--", str(data)),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return parse_wrk(output, cpu_seconds(port) - cpu_before)


def parse_wrk(output: str, server_cpu: float) -> WrkResult:
    """wrk's ``--latency`` report, with the server's CPU seconds spent during the run."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    non_2xx_match = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    cpu_us = server_cpu / total * 1e6
    return WrkResult(rps, p50, p99, total, int(non_2xx_match.group(1)) if non_2xx_match else 0, cpu_us)


# --- raw asyncio HTTP client ----------------------------------------------------------------------------


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def send(self, raw: bytes) -> tuple[int, dict[str, str]]:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers

    def close(self) -> None:
        self.writer.close()


async def fixed_rate(port: int, raws: Sequence[bytes], rate: float, connections: int) -> dict[str, float]:
    """Open loop: request k is due at t0 + k/rate; latency is measured from the due time."""
    conns = [await Connection.open(port) for _ in range(connections)]
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    counter = iter(range(len(raws)))
    clock = time.perf_counter  # the loop's clock has millisecond resolution under uvloop
    t0 = clock() + 0.05

    async def worker(conn: Connection) -> None:
        for k in counter:
            due = t0 + k / rate
            delay = due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            status, _ = await conn.send(raws[k])
            latencies.append(clock() - due)
            statuses[status] += 1

    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = clock() - t0
    for conn in conns:
        conn.close()
    latencies.sort()
    return {
        "sent": len(latencies),
        "achieved_rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "max_ms": latencies[-1] * 1000,
        "non_200": sum(v for k, v in statuses.items() if k != 200),
    }


async def blast(port: int, raws: Sequence[bytes], connections: int) -> dict[str, float]:
    """Send every request once, as fast as possible; retry 429 after Retry-After like the agent."""
    conns = [await Connection.open(port) for _ in range(connections)]
    statuses: Counter[int] = Counter()
    retried = 0
    counter = iter(raws)
    started = time.perf_counter()

    async def worker(conn: Connection) -> None:
        nonlocal retried
        for raw in counter:
            while True:
                status, headers = await conn.send(raw)
                if status != 429:
                    statuses[status] += 1
                    break
                retried += 1
                await asyncio.sleep(float(headers.get("retry-after", "1")))

    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - started
    for conn in conns:
        conn.close()
    return {
        "elapsed_s": elapsed,
        "ok": statuses[200],
        "other": sum(statuses.values()) - statuses[200],
        "429_retried": retried,
    }


# --- scenarios -------------------------------------------------------------------------------------------


def _best_us(operation: Callable[[], object], n: int = 1000, repeats: int = 5) -> float:
    """Microseconds per call, the best of ``repeats`` batches (robust to other load on the machine)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(n):
            operation()
        best = min(best, time.perf_counter() - started)
    return best / n * 1e6


def micro(runtimes: Runtimes) -> dict[str, float]:
    """Per-operation costs in-process (best of 5 batches each): library sign, fast verify, library
    verify, raw Ed25519 by cryptography and by libsodium, and the whole fast path per request."""
    key, key_id = runtimes.keys[0], make_key_id(runtimes.ids[0], "v1")
    public = key.public_key()

    class Keys:
        def public_keys(self, _: str) -> list[object]:
            return [public]

    url = f"http://{HOST}:8082{PATH}"
    request = httpx.Request("POST", url, content=BODY, headers={"content-type": "application/json"})
    signer = EventSigner(key, key_id)
    out = {"library_sign_us": _best_us(lambda: signer.sign(request), n=400)}
    headers = dict(request.headers)
    fast = SignatureVerifier(Keys())  # type: ignore[arg-type]
    library = LibrarySignatureVerifier(Keys())  # type: ignore[arg-type]
    out["fast_verify_us"] = _best_us(lambda: fast.verify("POST", url, headers, BODY))
    out["library_verify_us"] = _best_us(lambda: library.verify("POST", url, headers, BODY), n=400)
    message = b"x" * 400
    signature = key.sign(message)
    out["raw_ed25519_verify_us"] = _best_us(lambda: public.verify(signature, message))
    raw_public, signed_message = public.public_bytes_raw(), signature + message
    out["raw_ed25519_verify_libsodium_us"] = _best_us(lambda: crypto_sign_open(signed_message, raw_public))
    out["pipeline_us"] = uvloop.run(pipeline(runtimes))
    return out


class _Count:
    """A controller queue that only counts (``runtime.source.Enqueuer``): the work queue's own cost
    is measured by ``runtime_bench``; this measures the listener and the intake in front of it."""

    def __init__(self) -> None:
        self.count = 0

    def add(self, request: Request, reason: str) -> None:
        self.count += 1

    def add_after(self, request: Request, delay: float, reason: str) -> None:
        self.count += 1

    def is_queued(self, request: Request) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def events_waiting(self) -> int:
        return 0


class _NeverCoalesce:
    """A timer whose clock moves a minute per reading: every event is forwarded at once (as in the
    wrk runs, where each of the 5,000 Kymas gets about one event per second)."""

    def __init__(self) -> None:
        self.at = 0.0

    def now(self) -> float:
        self.at += 60.0
        return self.at

    def call_later(self, delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        raise AssertionError("nothing is coalesced in this measurement")

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("nothing sleeps in this measurement")


def _intake() -> ControllerSink:
    """The Kyma controller's intake as the operator builds it (throttled, behind the listener's
    ``ControllerSink``), over a counting queue."""
    intake = Intake("runtime event", throttle_window=0.5, clock=_NeverCoalesce())
    intake.bind(_Count())
    return ControllerSink(intake)


async def pipeline(runtimes: Runtimes, count: int = 5000, repeats: int = 4) -> float:
    """CPU per request of the listener's ASGI fast path in process (no HTTP server, no network):
    pre-signed requests for all runtimes, the same intake as the server's, a sink that counts.
    The best of ``repeats`` batches of ``count`` distinct requests."""
    keys = KeyStore()
    directory = InMemoryDirectory()
    for runtime_id, key in zip(runtimes.ids, runtimes.keys, strict=True):
        keys.set_keys(runtime_id, runtime_id, {"v1": key.public_key()})
        directory.add_kyma(KCP_NAMESPACE, f"kyma-{runtime_id}", runtime_id)
    registry = CollectorRegistry()
    intake = EventIntake(
        ListenerConfig(replay_cache_entries=2_000_000),
        keys=keys,
        router=Router(directory),
        kyma_sink=_intake(),
        manifest_sink=_intake(),
        heartbeats=HeartbeatTracker(clock=time.time, max_silence=180),
        metrics=ListenerMetrics(registry),
        held_since=lambda _runtime: 0.0,  # no previous holder: the bench's first events count
    )
    app = build_asgi(intake)
    port = 8082
    signed = presign(runtimes, cycle(count * repeats, len(runtimes.ids)), port)
    common = [
        (b"host", f"{HOST}:{port}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
        (b"content-digest", DIGEST.encode()),
    ]
    scopes = [
        {
            "type": "http",
            "scheme": "http",
            "method": "POST",
            "path": PATH,
            "raw_path": PATH.encode(),
            "query_string": b"",
            "headers": [
                *common,
                (b"signature-input", item.signature_input.encode()),
                (b"signature", item.signature.encode()),
            ],
        }
        for item in signed
    ]
    message = {"type": "http.request", "body": BODY, "more_body": False}
    statuses: Counter[int] = Counter()

    async def receive() -> MutableMapping[str, Any]:
        return message

    async def send(reply: MutableMapping[str, Any]) -> None:
        if reply["type"] == "http.response.start":
            statuses[reply["status"]] += 1

    best = float("inf")
    for batch in range(repeats):
        started = time.process_time()
        for scope in scopes[batch * count : (batch + 1) * count]:
            await app(scope, receive, send)
        best = min(best, time.process_time() - started)
    assert statuses == {200: count * repeats}, statuses
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--runtimes", type=int, default=5000)
    parser.add_argument("--rate", type=float, nargs="*", default=[1000.0, 3000.0])
    parser.add_argument(
        "--compare",
        nargs="*",
        default=[],
        type=Path,
        help="other checkouts (e.g. `git archive <commit> | tar -x -C DIR`) whose listener is measured "
        "interleaved with this one's, plain FastAPI and the Ed25519 floor (runs only when given)",
    )
    parser.add_argument("--cycles", type=int, default=4, help="interleaved runs per server for --compare")
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["micro", "throughput", "latency", "storm", "fanout", "xfcc"],
    )
    parser.add_argument(
        "--xfcc-runtimes", type=int, default=1000, help="client certificates (runtimes) in the xfcc scenario"
    )
    parser.add_argument(
        "--xfcc-server",
        nargs="+",
        default=["uvicorn"],
        choices=["uvicorn", "direct"],
        help="this checkout's listener server(s) measured in the xfcc scenario (ListenerConfig.server)",
    )
    parser.add_argument(
        "--xfcc-baseline",
        nargs="*",
        default=[],
        type=Path,
        help="other checkouts whose listener (on the first --xfcc-server) the xfcc scenario measures in "
        "the same rounds, interleaved with this one's and the Go listener",
    )
    parser.add_argument(
        "--xfcc-sinks",
        nargs="+",
        default=["controllers", "count"],
        choices=["controllers", "count"],
        help="our listener's sinks in the xfcc scenario: the two real Controllers, or a counting sink",
    )
    args = parser.parse_args()
    print(
        f"# listener_bench {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores"
    )
    print(f"body {len(BODY)} bytes; runtimes {args.runtimes}")
    runtimes = Runtimes.generate(args.runtimes)
    with tempfile.TemporaryDirectory() as tmp:
        fixture = Path(tmp) / "runtimes.json"
        runtimes.write_fixture(fixture)
        if "micro" not in args.skip:
            for name, value in micro(runtimes).items():
                print(f"micro {name}: {value:.1f}")
        if "throughput" not in args.skip:
            throughput(args, runtimes, fixture)
        if "latency" not in args.skip:
            latency(args, runtimes, fixture)
        if "storm" not in args.skip:
            storm(args, runtimes, fixture)
        if "fanout" not in args.skip:
            fanout(args, runtimes, fixture)
        if "xfcc" not in args.skip:
            from benchmarks.xfcc_compare import xfcc  # its own module: certificates, Go server

            xfcc(args, runtimes.ids, Path(tmp))
        if args.compare:
            compare(args, runtimes, fixture)


def cycle(count: int, modulo: int) -> list[int]:
    return [i % modulo for i in range(count)]


def throughput(args: argparse.Namespace, runtimes: Runtimes, fixture: Path) -> None:
    results: dict[str, list[WrkResult]] = {"plain": [], "listener": [], "listener-alone": []}
    n = 12_000 * args.duration  # more than one worker can answer in the run: no nonce is reused
    for round_no in range(1, args.rounds + 1):
        with (
            server("plain") as plain_port,
            server("listener", fixture) as listener_port,
            server("listener", fixture, sink="count") as alone_port,
        ):
            indices = cycle(n, len(runtimes.ids))
            started = time.perf_counter()
            # The Host header differs per port; sign for each listener (the plain one ignores it).
            signed = presign(runtimes, indices, listener_port)
            signed_alone = presign(runtimes, indices, alone_port)
            check_sample(runtimes, signed, indices, listener_port)
            print(f"presigned 2 x {n} requests in {time.perf_counter() - started:.1f} s")
            for kind, port, requests in (
                ("plain", plain_port, signed),
                ("listener", listener_port, signed),
                ("listener-alone", alone_port, signed_alone),
            ):
                result = run_wrk(port, requests, args.duration, args.connections)
                results[kind].append(result)
                print(
                    f"round {round_no} {kind}: {result.rps:.0f} req/s, p50 {result.p50_ms:.2f} ms, "
                    f"p99 {result.p99_ms:.2f} ms, {result.requests} requests, non-2xx {result.non_2xx}, "
                    f"server CPU {result.cpu_us:.0f} us/request"
                )
            enqueued = reconciles(listener_port, "kyma")
            print(f"round {round_no} listener: kyma reconciles {enqueued[0]}, distinct kymas {enqueued[1]}")
    plain = statistics.mean(r.rps for r in results["plain"])
    listener = statistics.mean(r.rps for r in results["listener"])
    alone = statistics.mean(r.rps for r in results["listener-alone"])
    cpu = {kind: statistics.mean(r.cpu_us for r in rs) for kind, rs in results.items()}
    print(
        f"CPU per request: plain {cpu['plain']:.0f} us, listener + controllers {cpu['listener']:.0f} us "
        f"({cpu['plain'] / cpu['listener']:.1%} of plain's rate per core), listener alone "
        f"{cpu['listener-alone']:.0f} us ({cpu['plain'] / cpu['listener-alone']:.1%})"
    )
    # Where the time goes: a raw ASGI app (the uvicorn floor) and the same plus one Ed25519 verify.
    for kind in ("bare", "ed25519"):
        with server(kind) as port:
            floor = run_wrk(port, signed, args.duration, args.connections)
            print(
                f"floor {kind}: {floor.rps:.0f} req/s, server CPU {floor.cpu_us:.0f} us/request "
                f"({floor.rps / plain:.1%} of plain)"
            )
    print(
        f"THROUGHPUT mean plain {plain:.0f}/s; listener + controllers {listener:.0f}/s "
        f"({listener / plain:.1%}); listener alone {alone:.0f}/s ({alone / plain:.1%})"
    )


def compare(args: argparse.Namespace, runtimes: Runtimes, fixture: Path) -> None:
    """Before/after on the same machine at the same time: servers of several checkouts, measured in
    turn for ``--cycles`` rounds of ``--duration`` s (other load on a shared machine comes and goes;
    interleaving spreads it over all of them). The listeners use the counting sink (no controllers).
    Reports the best and the median CPU per request and the median requests/s of each."""
    trees = {"current": REPO, **{f"{tree.name}": tree.resolve() for tree in args.compare}}
    with contextlib.ExitStack() as stack:
        ports = {
            "plain": stack.enter_context(server("plain")),
            "floor-ed25519": stack.enter_context(server("ed25519")),
        }
        for name, tree in trees.items():
            ports[f"listener@{name}"] = stack.enter_context(server("listener", fixture, tree, sink="count"))
        per_run = 12_000 * args.duration
        results: dict[str, list[WrkResult]] = {kind: [] for kind in ports}
        for cycle_no in range(args.cycles):
            for kind, port in ports.items():
                # Signed just before each run: a run must stay inside the 60 s signature window.
                indices = [(i + cycle_no * per_run) % len(runtimes.ids) for i in range(per_run)]
                result = run_wrk(port, presign(runtimes, indices, port), args.duration, args.connections)
                if result.non_2xx:
                    raise RuntimeError(f"{kind}: {result.non_2xx} non-2xx answers")
                results[kind].append(result)
            print(
                f"COMPARE cycle {cycle_no + 1}: "
                + ", ".join(
                    f"{kind} {rs[-1].cpu_us:.0f} us {rs[-1].rps:.0f}/s" for kind, rs in results.items()
                )
            )
    plain = statistics.median(r.rps for r in results["plain"])
    for kind, rs in results.items():
        rps = statistics.median(r.rps for r in rs)
        print(
            f"COMPARE {kind}: CPU best {min(r.cpu_us for r in rs):.0f} / median "
            f"{statistics.median(r.cpu_us for r in rs):.0f} us per request; median {rps:.0f} req/s "
            f"({rps / plain:.1%} of plain)"
        )


def latency(args: argparse.Namespace, runtimes: Runtimes, fixture: Path) -> None:
    for rate in args.rate:
        n = int(rate * 5)
        for kind in ("plain", "listener"):
            with server(kind, fixture if kind == "listener" else None) as port:
                indices = cycle(n, len(runtimes.ids))
                raws = [s.raw(port) for s in presign(runtimes, indices, port)]
                stats = uvloop.run(fixed_rate(port, raws, rate, connections=64))
                print(
                    f"LATENCY {kind} at {rate:.0f}/s: p50 {stats['p50_ms']:.2f} ms, "
                    f"p99 {stats['p99_ms']:.2f} ms, max {stats['max_ms']:.1f} ms, "
                    f"achieved {stats['achieved_rps']:.0f}/s, non-200 {stats['non_200']}"
                )


def storm(args: argparse.Namespace, runtimes: Runtimes, fixture: Path) -> None:
    for coalesce, reconcile_seconds in ((0.5, 0.0), (0.5, 0.05), (1.0, 0.0), (0.0, 0.0), (0.0, 0.05)):
        with server("listener", fixture, coalesce=coalesce, reconcile_seconds=reconcile_seconds) as port:
            raws = [s.raw(port) for s in presign(runtimes, [0] * 10_000, port)]
            stats = uvloop.run(blast(port, raws, args.connections))
            time.sleep(coalesce + reconcile_seconds + 0.5)  # let the trailing request and reconcile finish
            total, distinct = reconciles(port, "kyma")
            print(
                f"STORM 10000 events one Kyma, throttle window {coalesce}s, "
                f"reconcile {reconcile_seconds * 1000:.0f} ms: "
                f"sent in {stats['elapsed_s']:.2f} s, 200s {stats['ok']}, other {stats['other']}, "
                f"reconciles {total} (distinct {distinct})"
            )


def fanout(args: argparse.Namespace, runtimes: Runtimes, fixture: Path) -> None:
    for channel_size in (4096, 512):
        with server("listener", fixture, channel_size=channel_size) as port:
            raws = [s.raw(port) for s in presign(runtimes, range(len(runtimes.ids)), port)]
            stats = uvloop.run(blast(port, raws, args.connections))
            deadline = time.monotonic() + 30
            while (distinct := reconciles(port, "kyma")[1]) < len(
                runtimes.ids
            ) and time.monotonic() < deadline:
                time.sleep(0.1)
            total, distinct = reconciles(port, "kyma")
            print(
                f"FANOUT {len(runtimes.ids)} runtimes x 1 event, channel {channel_size}: "
                f"sent in {stats['elapsed_s']:.2f} s, "
                f"200s {stats['ok']}, other {stats['other']}, 429 retried {stats['429_retried']}, "
                f"kyma reconciles {total}, distinct {distinct}, lost {len(runtimes.ids) - distinct}"
            )


if __name__ == "__main__":
    main()
