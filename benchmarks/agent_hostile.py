"""The real agent process under hostile clients (issue 26, DESIGN.md §12): RSS, admissions, probes.

Run: ``.venv/bin/python -m benchmarks.agent_hostile [--duration 20] [--held 1000]``; prints markdown
(copied into ``benchmarks/results/agent_hostile.md`` by hand). The agent is the real
``python -m skr_watcher`` with its defaults, KCP is ``benchmarks.agent_receiver`` (reachable); the
attackers are the clients of ``tests/hostile/attacks.py`` on their own event loop in this process;
the admission load is ``benchmarks.agent_load`` (its own process, 8 keep-alive TLS connections
opened AFTER the hostile ones are held, open loop at ``--rate``). Scenarios, each on a fresh agent:

* ``endless``: ``--endless`` connections (half to the webhook port over TLS, half to the metrics
  port) each send a header value that never ends, as fast as they can, and reconnect when cut;
  peak RSS (sampled every 0.1 s) against the 64 MiB target, and how many 431 answers they got;
* ``held``: ``--held`` connections to the webhook port held open (60 % idle after the TLS
  handshake, 40 % slowloris: a byte per second of a head that never ends), reconnecting when
  closed, plus the metrics port's cap of idle connections; meanwhile the admission load at
  ``--rate`` and ``/healthz`` polled ten times a second. Targets: every admission answered,
  p99 <= 2 ms at 500/s, every probe answered.

The 1-minute load average of the machine is printed next to the figures (a shared machine). With
``--loop-stalls`` the agent runs under ``benchmarks/loop_stalls.py`` and the ``held`` scenario also
reports the CPU time of the agent's event-loop iterations during the load (what a waiting admission
queues behind, not inflated by waiting for a core). ``--tree`` runs the agent of another checkout
(e.g. ``git worktree add /tmp/before <commit>``) for a before/after from the same machine state.
``--pin`` gives the agent CPU 0 and everything else (this process with the attackers, the load
client, the receiver) CPU 1, as on a real node where the attackers run elsewhere: unpinned, the
attack clients' own TLS work competes with the agent for the machine's two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import signal
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import go_admission_client
from benchmarks.agent_bench import (
    AGENT_CPU,
    PEER_CPU,
    REPO,
    Agent,
    Files,
    Receiver,
    Variant,
    _cpu_seconds,
    _rss_mb,
    load,
    poll,
    process,
)
from tests.hostile import attacks
from tests.hostile.attacks import Target

_METRICS_CAP = 100
"""The agent's default ``METRICS_MAX_CONNECTIONS``."""


@dataclass
class Tally:
    answers_431: int = 0
    cut: int = 0
    probes_ok: int = 0
    probes_failed: int = 0
    reconnects: int = 0
    probe_ms: list[float] = field(default_factory=list)


class Attack:
    """Runs attack coroutines on their own event loop in a thread until ``stop``."""

    idle_priority = False
    """Run the attackers' thread at ``SCHED_IDLE`` (``--attackers-idle``): it then gets CPU 1 only
    when the load client and the receiver do not want it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.stopping = threading.Event()
        self.tally = Tally()
        self._futures: list[Any] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.idle_priority:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread (Linux)
        self.loop.run_forever()

    def __enter__(self) -> Attack:
        self._thread.start()
        return self

    def start(self, coroutine: Any) -> None:
        # the loop keeps only weak references to tasks: keep the handles, or idle ones are collected
        self._futures.append(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)

    async def endless(self, target: Target) -> None:
        while not self.stopping.is_set():
            outcome = await attacks.endless_header(target, give_up_after=1 << 30, chunk=65536)
            if 431 in attacks.statuses(outcome.answer):
                self.tally.answers_431 += 1
            self.tally.cut += 1

    async def idle(self, target: Target) -> None:
        while not self.stopping.is_set():
            try:
                reader, writer = await attacks.connect(target)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            try:
                await reader.read()  # until the server closes it (shed or idle timeout)
            except OSError:
                pass
            finally:
                writer.transport.abort()
            self.tally.reconnects += 1
            await asyncio.sleep(1.0)  # an attacker's reconnect pace (not a wait for the server)

    async def slowloris(self, target: Target) -> None:
        while not self.stopping.is_set():
            try:
                await attacks.slowloris(target, interval=1.0, give_up_after=3600)
            except OSError:
                await asyncio.sleep(0.5)
            self.tally.reconnects += 1

    async def probes(self, target: Target) -> None:
        while not self.stopping.is_set():
            started = time.perf_counter()
            try:
                outcome = await attacks.exchange(target, b"GET /healthz HTTP/1.0\r\n\r\n", deadline=2.0)
                ok = attacks.statuses(outcome.answer) == [200]
            except OSError:
                ok = False
            if ok:
                self.tally.probes_ok += 1
                self.tally.probe_ms.append((time.perf_counter() - started) * 1000)
            else:
                self.tally.probes_failed += 1
            await asyncio.sleep(0.1)  # ten probes a second


def _client_context(files: Files) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files.dir / "runtime-ca.crt"))
    return context


_LOOP_STALLS = Path(__file__).with_name("loop_stalls.py")


def endless_scenario(
    files: Files, kcp: str, connections: int, seconds: float, tree: Path, pin: bool
) -> dict[str, Any]:
    agent = Agent(files, kcp, Variant(tree.name, tree))
    with agent.running(AGENT_CPU if pin else None) as proc:
        poll(agent.ready, 30, "agent")
        rss_start = _rss_mb(proc.pid)
        webhook = Target("127.0.0.1", agent.webhook_port, _client_context(files), "/validate/lm")
        metrics = Target("127.0.0.1", agent.metrics_port, path="/healthz")
        peak = rss_start
        with Attack() as attack:
            for index in range(connections):
                attack.start(attack.endless(webhook if index % 2 == 0 else metrics))
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                peak = max(peak, _rss_mb(proc.pid))
                time.sleep(0.1)  # the sampling period
            alive = agent.ready()
        rss_end = _rss_mb(proc.pid)
    return {
        "connections": connections,
        "seconds": seconds,
        "rss_start_mb": rss_start,
        "rss_peak_mb": peak,
        "rss_end_mb": rss_end,
        "answers_431": attack.tally.answers_431,
        "connections_cut": attack.tally.cut,
        "ready_after": alive,
        "load_average_1m": os.getloadavg()[0],
    }


def held_scenario(
    files: Files,
    kcp: str,
    held: int,
    rate: float,
    seconds: float,
    tree: Path,
    loop_stalls: bool,
    pin: bool,
    client: str = "python",
) -> dict[str, Any]:
    agent = Agent(files, kcp, Variant(tree.name, tree))
    stalls = files.dir / "loop-stalls.json"
    wrapper = [str(_LOOP_STALLS), str(stalls)] if loop_stalls else []
    with agent.running(AGENT_CPU if pin else None, wrapper=wrapper) as proc:
        poll(agent.ready, 30, "agent")
        webhook = Target("127.0.0.1", agent.webhook_port, _client_context(files), "/validate/lm")
        metrics = Target("127.0.0.1", agent.metrics_port, path="/healthz")
        with Attack() as attack:
            slow = held * 4 // 10
            for index in range(held):
                attack.start(attack.slowloris(webhook) if index < slow else attack.idle(webhook))
            for _ in range(_METRICS_CAP):
                attack.start(attack.idle(metrics))
            cap = int(Files.overrides.get("WEBHOOK_MAX_CONNECTIONS", held))
            at_agent = min(held, cap) + _METRICS_CAP  # past the cap, the agent sheds as they come
            poll(lambda: _connections(proc.pid) >= at_agent, 120, "hostile connections held")
            held_before = _connections(proc.pid)
            attack.start(attack.probes(metrics))
            rss_held = _rss_mb(proc.pid)
            cpu, wall = _cpu_seconds(proc.pid), time.monotonic()
            if loop_stalls:
                proc.send_signal(signal.SIGUSR1)  # count from here
            if client == "go":
                result = go_admission_client.load(
                    files, agent, rate=rate, duration=seconds, cpus=PEER_CPU if pin else None
                )
            else:
                result = load(
                    files,
                    agent,
                    "--mode",
                    "open",
                    "--rate",
                    str(rate),
                    "--duration",
                    str(seconds),
                    cpus=PEER_CPU if pin else None,
                )
            cpu, wall = _cpu_seconds(proc.pid) - cpu, time.monotonic() - wall
            held_after = _connections(proc.pid)
            rss_after = _rss_mb(proc.pid)
            tally = attack.tally
            if loop_stalls:
                proc.send_signal(signal.SIGUSR1)  # the load is over: written now
                poll(stalls.exists, 10, "loop statistics")
    loop = json.loads(stalls.read_text()) if loop_stalls else None
    probe_ms = sorted(tally.probe_ms)
    return {
        "held": held,
        "connections_at_agent_before": held_before,
        "connections_at_agent_after": held_after,
        "rss_held_mb": rss_held,
        "rss_after_mb": rss_after,
        "load": result,
        "probes_ok": tally.probes_ok,
        "probes_failed": tally.probes_failed,
        "probe_p99_ms": probe_ms[int(len(probe_ms) * 0.99) - 1] if probe_ms else float("nan"),
        "attacker_reconnects": tally.reconnects,
        "agent_cpu_s": cpu,
        "agent_cpu_share": cpu / wall,
        "agent_cpu_ms_per_admission": cpu / result["requests"] * 1000,
        "load_average_1m": os.getloadavg()[0],
        "loop": loop,
    }


def _connections(pid: int) -> int:
    """Open TCP sockets of a process (its fds pointing at sockets, minus the two listening ones)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd).startswith("socket:"):
                count += 1
        except OSError:
            pass
    return max(0, count - 2)


def report(endless: dict[str, Any], held: dict[str, Any], args: argparse.Namespace) -> str:
    load_ = held["load"]
    admissions = load_["statuses"]
    answered = sum(admissions.values())
    lines = [
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; command: "
        f"`{' '.join(['.venv/bin/python -m benchmarks.agent_hostile', *sys.argv[1:]])}`",
        "",
        "| scenario | figure | target | load avg 1m |",
        "|---|---|---|---|",
        f"| {endless['connections']} endless headers, {endless['seconds']:g} s | "
        f"RSS {endless['rss_start_mb']:.1f} -> peak {endless['rss_peak_mb']:.1f} MiB "
        f"({endless['answers_431']} answers 431, "
        f"{endless['connections_cut']} connections cut; ready after: {endless['ready_after']}) | <= 64 MiB "
        f"| {endless['load_average_1m']:.2f} |",
        f"| {held['held']} hostile connections held on the webhook port (+{_METRICS_CAP} on metrics), "
        f"admissions at {args.rate:g}/s for {args.duration:g} s | {answered} of {load_['requests']} "
        f"answered, statuses {admissions}, p50 {load_['from_write_ms']['p50']:.2f} ms, "
        f"p99 {load_['from_write_ms']['p99']:.2f} ms "
        f"(from schedule {load_['from_schedule_ms']['p99']:.2f} ms), "
        f"max {load_['from_schedule_ms']['max']:.1f} ms | all "
        f"answered, p99 <= 2 ms | {held['load_average_1m']:.2f} |",
        f"| same, `/healthz` 10/s | {held['probes_ok']} answered, {held['probes_failed']} failed, "
        f"p99 {held['probe_p99_ms']:.1f} ms | all answered | |",
        f"| same, agent CPU during the load | {held['agent_cpu_s']:.1f} s, "
        f"{held['agent_cpu_share']:.0%} of a core (of the wall time), "
        f"{held['agent_cpu_ms_per_admission']:.2f} ms per admission incl. the attack | | |",
        f"| same, sockets at the agent before / after the load | {held['connections_at_agent_before']} / "
        f"{held['connections_at_agent_after']}; "
        f"RSS {held['rss_held_mb']:.1f} / {held['rss_after_mb']:.1f} MiB | | |",
    ]
    loop = held.get("loop")
    if loop:
        lines.append(
            f"| same, agent event-loop iterations during the load (CPU time each) | {loop['iterations']} "
            f"iterations, p50 {loop['p50_ms']:.2f} ms, p99 {loop['p99_ms']:.2f} ms, "
            f"max {loop['max_ms']:.1f} ms, "
            f"{loop['over_2ms']} over 2 ms; CPU-weighted p99 {loop['cpu_weighted_p99_ms']:.1f} ms; "
            f"{loop['full_gc']} full collections, longest {loop['full_gc_max_ms']:.1f} ms; "
            f"speed probe p50 {loop.get('speed_probe', {}).get('p50_us', 0.0):.0f} us | | |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of admission load")
    parser.add_argument("--rate", type=float, default=500.0, help="admissions per second")
    parser.add_argument("--held", type=int, default=1000, help="hostile connections held on the webhook port")
    parser.add_argument("--endless", type=int, default=8, help="endless-header connections")
    parser.add_argument("--endless-seconds", type=float, default=20.0, help="how long they send")
    parser.add_argument(
        "--tree", type=Path, default=REPO, help="the checkout whose agent runs (default: this one)"
    )
    parser.add_argument(
        "--loop-stalls", action="store_true", help="also record the agent's event-loop iteration CPU times"
    )
    parser.add_argument(
        "--agent-env", action="append", default=[], metavar="KEY=VALUE", help="extra agent environment"
    )
    parser.add_argument(
        "--pin", action="store_true", help="the agent on CPU 0, attackers, load client and receiver on CPU 1"
    )
    parser.add_argument(
        "--attackers-idle",
        action="store_true",
        help="run the attack clients at SCHED_IDLE: their own TLS and reconnect work then does not delay "
        "the admission load client's reading of its answers (what a latency measured at a client "
        "that shares its core with 1,100 attackers would otherwise include)",
    )
    parser.add_argument(
        "--receiver-idle",
        action="store_true",
        help="run the KCP receiver at SCHED_IDLE too: with --pin and --attackers-idle the load client "
        "(standing in for the API server) then has CPU 1 whenever it wants it, as on a machine of its own",
    )
    parser.add_argument(
        "--client",
        choices=("go", "python"),
        default="go",
        help="the admission load client: go = Go's net/http like kube-apiserver's webhook client "
        "(benchmarks/admission_client), python = benchmarks.agent_load on uvloop",
    )
    args = parser.parse_args()
    Attack.idle_priority = args.attackers_idle
    Files.overrides = dict(item.split("=", 1) for item in args.agent_env)
    if args.pin:
        os.sched_setaffinity(0, PEER_CPU)  # this process runs the attackers
    with tempfile.TemporaryDirectory(prefix="agent-hostile-") as tmp:
        files = Files(Path(tmp))
        receiver = Receiver(files)
        with process(receiver.argv(), cpus=PEER_CPU if args.pin else None) as receiver_process:
            if args.receiver_idle:  # its threads, started later, inherit the policy
                os.sched_setscheduler(receiver_process.pid, os.SCHED_IDLE, os.sched_param(0))
            poll(receiver.ready, 30, "receiver")
            kcp = f"127.0.0.1:{receiver.port}"
            endless = endless_scenario(files, kcp, args.endless, args.endless_seconds, args.tree, args.pin)
            held = held_scenario(
                files,
                kcp,
                args.held,
                args.rate,
                args.duration,
                args.tree,
                args.loop_stalls,
                args.pin,
                args.client,
            )
    print(report(endless, held, args))
    print("\n<details><summary>raw</summary>\n\n```json")
    print(json.dumps({"endless": endless, "held": held}, indent=1, default=str))
    print("```\n</details>")


if __name__ == "__main__":
    main()
