"""Which HTTP server for the agent's ports: ours (``kyma_wire.http_server``) against uvicorn,
hypercorn and granian, on the hostile-client suite, throughput, latency at 500/s and RSS.

Run it with a scratch venv that has the candidates (they are NOT in the project's lock):

    python3.11 -m venv /tmp/server-choice
    /tmp/server-choice/bin/pip install uvicorn httptools uvloop hypercorn granian
    PYTHONPATH=. /tmp/server-choice/bin/python -m benchmarks.agent_server_choice

prints markdown (copied into ``benchmarks/results/agent_server_choice.md`` by hand). Every server
runs the same two endpoints in its own process on 127.0.0.1 over plain HTTP (TLS is the same
``ssl`` module for the Python servers): ``GET /healthz`` and ``POST /validate/lm`` (a ~4 KB
AdmissionReview parsed with ``json`` and answered allowed), one process/worker, with the limits each
offers set like the agent's (keep-alive 15 s, 64 KiB of headers where settable, 1,000 connections):

* RSS: idle after start, and peak under 8 connections sending a header that never ends for 10 s
  (summed over the server's process tree: granian runs a worker process);
* throughput: 8 keep-alive connections in a closed loop for 5 s (a client process of its own);
  latency: p50/p99 at 500/s open loop for 5 s (from the scheduled send time);
* the hostile suite of ``tests/hostile/attacks.py``: malformed heads and chunked abuse answered 2xx
  or left open; 1,000 idle connections held, then 10 new requests (answered within 2 s?); a
  slowloris head and a never-reading client (cut within 40 s, and when?).

The machine's 1-minute load average is printed beside each row (a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.hostile import attacks
from tests.hostile.attacks import Target

REPO = Path(__file__).resolve().parents[1]
_REVIEW = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "UPDATE", "object": {"spec": {"x": "y" * 3800}}},
    }
).encode()
_ALLOWED = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u-1","allowed":true}}'
)
_JSON = [(b"content-type", b"application/json")]


def answer(method: str, path: str, body: bytes) -> tuple[int, bytes]:
    if path == "/healthz":
        return 200, b'{"status":"ok"}'
    if path.startswith("/validate/") and method == "POST":
        try:
            json.loads(body)
        except ValueError:
            return 400, b'{"error":"malformed AdmissionReview"}'
        return 200, _ALLOWED
    return 404, b'{"error":"not found"}'


async def asgi_app(
    scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: Any
) -> None:
    """The two endpoints as an ASGI app (uvicorn, hypercorn, granian)."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    status, body = answer(scope["method"], scope["path"], b"".join(chunks))
    headers = [*_JSON, (b"content-length", b"%d" % len(body))]  # else chunked (uvicorn, hypercorn)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve_ours(port: int) -> None:
    import uvloop

    from kyma_wire.http_server import HttpServer, Limits, Request, Response

    def handler(request: Request) -> Response:
        if request.body_too_large:
            return Response(413, b'{"error":"too large"}', _JSON)
        status, body = answer(request.method, request.path, request.body)
        return Response(status, body, _JSON)

    async def main() -> None:
        server = HttpServer(
            handler, host="127.0.0.1", port=port, name="ours", limits=Limits(max_body_bytes=3 << 20)
        )
        await server.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


def server_argv(name: str, port: int) -> list[str]:
    app = "benchmarks.agent_server_choice:asgi_app"
    bin_ = Path(sys.executable).parent
    if name == "ours":
        return [sys.executable, "-m", "benchmarks.agent_server_choice", "--serve", str(port)]
    if name.startswith("uvicorn"):
        http = name.split("-", 1)[1]
        argv = [str(bin_ / "uvicorn"), app, "--port", str(port), "--loop", "uvloop", "--http", http]
        argv += [
            "--timeout-keep-alive",
            "15",
            "--limit-concurrency",
            "1000",
            "--no-access-log",
            "--log-level",
            "error",
        ]
        if http == "h11":
            argv += ["--h11-max-incomplete-event-size", "65536"]
        return argv
    if name == "hypercorn":
        return [
            str(bin_ / "hypercorn"), app, "--bind", f"127.0.0.1:{port}", "--keep-alive", "15",
            "--worker-class", "uvloop", "--workers", "1", "--log-level", "error",
        ]  # fmt: skip
    if name == "granian":
        return [
            str(bin_ / "granian"), "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--runtime-threads", "1", "--http", "1", "--no-ws", "--backpressure", "1000",
            "--log-level", "error", app,
        ]  # fmt: skip
    raise ValueError(name)


def tree(pid: int) -> list[int]:
    """``pid`` and its children (granian's worker)."""
    pids = [pid]
    for child in Path("/proc").iterdir():
        if child.name.isdigit():
            try:
                if int((child / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    pids.append(int(child.name))
            except (OSError, IndexError, ValueError):
                pass
    return pids


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU time of the server's processes: robust against other load on the machine."""
    total = 0.0
    for each in tree(pid):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


def tree_rss_mb(pid: int) -> float:
    total = 0.0
    for each in tree(pid):
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_serving(proc: subprocess.Popen[bytes], port: int, timeout: float = 90.0) -> bool:
    """True once the server answers ``/healthz``; False if the process exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                if sock.recv(100)[8:13] == b" 200 ":  # HTTP/1.0 or 1.1
                    return True
        except OSError:
            pass
        time.sleep(0.05)  # poll period while the server starts
    raise RuntimeError(f"nothing serves on {port} after {timeout:g} s")


def start(name: str) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``name`` on a free port (again on another port if it lost a bind race, as granian can)."""
    for _ in range(5):
        port = free_port()
        print(f"measuring {name} on port {port}", file=sys.stderr)
        proc = subprocess.Popen(server_argv(name, port), cwd=REPO, stdin=subprocess.DEVNULL)
        try:
            if wait_serving(proc, port):
                return proc, port
        except BaseException:
            proc.kill()  # never leave a server behind
            proc.wait()
            raise
    raise RuntimeError(f"{name} did not start")


# --- the client process (throughput and latency) --------------------------------------------------------


async def client(port: int, mode: str, seconds: float, rate: float) -> dict[str, Any]:
    request = (
        b"POST /validate/lm HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(_REVIEW), _REVIEW)
    )
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(8):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    latencies: list[float] = []
    done = 0
    errors = 0

    async def roundtrip(target: float) -> None:
        nonlocal done, errors
        reader, writer = await pool.get()
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line[15:])
            await reader.readexactly(length)
            if head[8:13] != b" 200 ":
                errors += 1
            done += 1
            latencies.append(time.perf_counter() - target)
        finally:
            pool.put_nowait((reader, writer))

    started = time.perf_counter()
    if mode == "throughput":

        async def worker() -> None:
            while time.perf_counter() - started < seconds:
                await roundtrip(time.perf_counter())

        await asyncio.gather(*(worker() for _ in range(8)))
        elapsed = time.perf_counter() - started
        return {"rps": done / elapsed, "errors": errors, "requests": done}
    tasks = []
    for index in range(int(rate * seconds)):
        target = started + index / rate
        delay = target - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(roundtrip(target)))
    await asyncio.gather(*tasks)
    ms = sorted(value * 1000 for value in latencies)
    return {"p50": ms[len(ms) // 2], "p99": ms[int(len(ms) * 0.99) - 1], "errors": errors, "answered": done}


def run_client(port: int, mode: str, seconds: float, rate: float = 500.0) -> dict[str, Any]:
    argv = [sys.executable, "-m", "benchmarks.agent_server_choice", "--client", str(port), mode, str(seconds)]
    output = subprocess.run([*argv, str(rate)], cwd=REPO, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(output)
    return result


# --- the hostile part --------------------------------------------------------------------------------------


async def hostile(target: Target, pid: int) -> dict[str, Any]:
    bad = 0
    for raw in (*attacks.MALFORMED, *attacks.CHUNKED_ABUSE):
        outcome = await attacks.exchange(target, raw, deadline=5.0)
        if any(200 <= code < 300 for code in attacks.statuses(outcome.answer)) or not outcome.closed:
            bad += 1
    slow = asyncio.create_task(attacks.slowloris(target, interval=1.0, give_up_after=40.0))
    never = asyncio.create_task(
        attacks.never_reading(target, request=b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", give_up_after=40.0)
    )
    async with attacks.held_connections(target, 1000):
        await asyncio.sleep(1.0)  # let the server accept them all (it has no signal for it)
        answered = 0
        for _ in range(10):
            outcome = await attacks.exchange(target, b"GET /healthz HTTP/1.0\r\n\r\n", deadline=2.0)
            answered += attacks.statuses(outcome.answer) == [200]
    peak = tree_rss_mb(pid)
    endless_tasks = [
        asyncio.create_task(attacks.endless_header(target, give_up_after=1 << 30, chunk=65536))
        for _ in range(8)
    ]
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and not all(task.done() for task in endless_tasks):
        peak = max(peak, tree_rss_mb(pid))
        await asyncio.sleep(0.1)  # the sampling period
    endless_cut = sum(1 for task in endless_tasks if task.done())
    for task in endless_tasks:
        task.cancel()
    await asyncio.gather(*endless_tasks, return_exceptions=True)
    slow_outcome, never_outcome = await slow, await never
    return {
        "malformed_or_smuggling_not_refused": bad,
        "idle_1000_then_new_answered_of_10": answered,
        "endless_peak_rss_mb": peak,
        "endless_connections_cut_within_10s": endless_cut,
        "slowloris_cut_s": slow_outcome.seconds if slow_outcome.closed else None,
        "never_reading_cut_s": never_outcome.seconds if never_outcome.closed else None,
    }


def measure(name: str) -> dict[str, Any]:
    proc, port = start(name)
    try:
        time.sleep(1.0)  # settle before the idle RSS figure
        row: dict[str, Any] = {"server": name, "rss_idle_mb": tree_rss_mb(proc.pid)}
        cpu = tree_cpu_seconds(proc.pid)
        row["throughput"] = run_client(port, "throughput", 5.0)
        row["cpu_us_per_request"] = (tree_cpu_seconds(proc.pid) - cpu) / row["throughput"]["requests"] * 1e6
        row["latency_500"] = run_client(port, "latency", 5.0, 500.0)
        row.update(asyncio.run(hostile(Target("127.0.0.1", port, path="/healthz"), proc.pid)))
        row["load_average_1m"] = os.getloadavg()[0]
        return row
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| server | RSS idle MiB | RSS peak, 8 endless headers | endless cut (of 8, 10 s) "
        "| server CPU µs/request | req/s (8 conns) "
        "| p50 / p99 ms at 500/s | malformed/smuggling not refused (of 21) "
        "| new requests answered with 1,000 idle held (of 10) | slowloris cut after "
        "| never-reading cut after | load avg 1m |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        slow = f"{row['slowloris_cut_s']:.1f} s" if row["slowloris_cut_s"] is not None else "> 40 s"
        never = f"{row['never_reading_cut_s']:.1f} s" if row["never_reading_cut_s"] is not None else "> 40 s"
        latency = row["latency_500"]
        lines.append(
            f"| {row['server']} | {row['rss_idle_mb']:.1f} | {row['endless_peak_rss_mb']:.1f} "
            f"| {row['endless_connections_cut_within_10s']} | {row['cpu_us_per_request']:.0f} "
            f"| {row['throughput']['rps']:.0f} "
            f"| {latency['p50']:.2f} / {latency['p99']:.2f} | {row['malformed_or_smuggling_not_refused']} "
            f"| {row['idle_1000_then_new_answered_of_10']} | {slow} | {never} "
            f"| {row['load_average_1m']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--servers", default="ours,uvicorn-httptools,uvicorn-h11,hypercorn,granian")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_ours(args.serve)
        return
    if args.client:
        port, mode, seconds, rate = args.client
        print(json.dumps(asyncio.run(client(int(port), mode, float(seconds), float(rate)))))
        return
    rows = [measure(name) for name in args.servers.split(",")]
    print(report(rows))
    print("\n<details><summary>raw</summary>\n\n```json")
    print(json.dumps(rows, indent=1))
    print("```\n</details>")


if __name__ == "__main__":
    main()
