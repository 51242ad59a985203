"""How long the HTTP server's event loop is held by a burst of new connections (issue 26).

Run: ``.venv/bin/python -m benchmarks.accept_burst [--compare before=PATH] [--rounds 3]``; prints
markdown (copied into ``benchmarks/results/agent_hostile.md`` by hand). Why: under 1,000 hostile
connections the agent's admissions waited behind event-loop turns of several milliseconds; held
connections cut together reconnect together, and asyncio sets up every connection it accepted in one
turn. This measures exactly that, without TLS or attack clients: ``kyma_wire.http_server.HttpServer``
of each checkout (the agent's server, standard event loop, default ``Limits``) in its own process on
CPU 0, the CPU time of every loop turn recorded (``time.thread_time``: not inflated by waiting for a
core on a loaded machine); a client on CPU 1 opens ``--burst`` connections at once, ``--bursts``
times 0.4 s apart, and holds them; the server is stopped (SIGSTOP) while a burst connects, so it
finds the whole burst in the kernel's queue (as after a busy moment; without that, the client's
own pace of connects spreads a burst over many turns). Checkouts alternate, ``--rounds`` times
each, same machine state.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

_SERVER = """
import asyncio, kyma_wire
print(kyma_wire.__file__, flush=True)
import asyncio, json, signal, sys, time
from kyma_wire.http_server import HttpServer, Response

turns = []

class Timed(asyncio.SelectorEventLoop):
    def _run_once(self):
        started = time.thread_time()
        super()._run_once()
        turns.append(time.thread_time() - started)

async def main():
    server = HttpServer(lambda request: Response(200, b"ok"), host="127.0.0.1", port=0, name="burst")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, turns.clear)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await server.start()
    print(server.port, flush=True)
    await stop.wait()
    measured = sorted(turns)  # before the stop, which closes every connection in one turn
    print(json.dumps({"turns": measured, "connections": len(server.connections)}), flush=True)
    await server.stop()

with asyncio.Runner(loop_factory=Timed) as runner:
    runner.run(main())
"""


def _pinned(cpu: int) -> Any:
    return lambda: os.sched_setaffinity(0, {cpu})


def one_run(tree: Path, burst: int, bursts: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tree,  # ``-c`` puts the working directory first on sys.path
        preexec_fn=_pinned(0),
    )
    assert server.stdout is not None
    imported = server.stdout.readline().strip()
    assert imported.startswith(str(tree)), (imported, tree)
    port = int(server.stdout.readline())
    clients: list[socket.socket] = []
    try:
        server.send_signal(signal.SIGUSR1)  # count from here
        for _ in range(bursts):
            server.send_signal(signal.SIGSTOP)  # the burst is all queued when the server looks
            for _ in range(burst):
                client = socket.socket()
                client.setblocking(False)
                client.connect_ex(("127.0.0.1", port))
                clients.append(client)
            server.send_signal(signal.SIGCONT)
            time.sleep(0.4)  # the pace of the bursts, not a wait for the server
        server.send_signal(signal.SIGTERM)
        result: dict[str, Any] = json.loads(server.stdout.readline())
        server.wait(30)
    finally:
        for client in clients:
            client.close()
        if server.poll() is None:
            server.kill()
    turns = result["turns"]
    return {
        "turns": len(turns),
        "max_ms": turns[-1] * 1000,
        "over_1ms": sum(1 for t in turns if t > 0.001),
        "over_2ms": sum(1 for t in turns if t > 0.002),
        "burst_cpu_ms": sum(turns) * 1000,
        "admitted": result["connections"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--compare", action="append", default=[], metavar="NAME=PATH", help="another checkout"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs per checkout, alternating")
    parser.add_argument("--burst", type=int, default=200, help="connections opened at once")
    parser.add_argument("--bursts", type=int, default=4, help="bursts per run, 0.4 s apart")
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})  # the client
    trees = [tuple(item.split("=", 1)) for item in args.compare] + [("this tree", str(REPO))]
    print(f"Command: `{' '.join(['.venv/bin/python -m benchmarks.accept_burst', *sys.argv[1:]])}`\n")
    print(
        "| checkout | round | load avg 1m | turns | longest turn | turns > 1 ms | turns > 2 ms | CPU "
        "| admitted |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for round_ in range(1, args.rounds + 1):
        for name, path in trees:
            run = one_run(Path(path), args.burst, args.bursts)
            print(
                f"| {name} | {round_} | {os.getloadavg()[0]:.1f} | {run['turns']} | {run['max_ms']:.2f} ms "
                f"| {run['over_1ms']} | {run['over_2ms']} | {run['burst_cpu_ms']:.1f} ms "
                f"| {run['admitted']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
