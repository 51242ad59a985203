"""Signed agent requests to the public listener ports of sharded operator processes, retried on 503.

Why its own module: the end-to-end hand-off test and ``benchmarks/handoff_bench.py`` both play
the agents of many runtimes against real ``python -m kyma_operator --sharding`` processes and must
record, per event, when the attempt that was finally accepted started (a reconcile of the Kyma
starting after that instant is the proof the event was not lost). The retry is the agent's
contract (DESIGN.md §4.2, docs/sharding-handoff.md): 503, 429 and a 401 with Retry-After (a
signature older than the holder's hold on the shard) are retried, every attempt signed anew (fresh
nonce and ``created``), anything else ends the delivery.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from kyma_operator.runtime.shardmap import shard_of
from kyma_wire.events import event_path
from kyma_wire.names import RUNTIME_ID_LABEL
from kyma_wire.profile import make_key_id
from skr_watcher.config import AgentConfig
from tests.integration.kcp_listener.helpers import MANAGER, event, key_secret
from tests.integration.sharding.fleet import Fleet, holders, read_trace, settled
from tests.polling import eventually
from tests.rfc9421_reference import EventSigner

RETRIED = (429, 503)


@dataclass(frozen=True)
class Runtime:
    kyma: str
    """``<namespace>/<name>`` of its KCP Kyma."""
    runtime_id: str
    shard: int


@dataclass
class Delivery:
    """One event delivered (or not) to a listener, with every attempt's answer."""

    runtime: Runtime
    route: str
    port: int
    started_ns: int
    statuses: list[int] = field(default_factory=list)
    accepted_ns: int = 0
    """Monotonic ns when the attempt that got 2xx started (0: never accepted)."""
    answered_ns: int = 0

    @property
    def accepted(self) -> bool:
        return self.accepted_ns > 0


async def create_runtimes(
    client: KubeClient, namespace: str, count: int, shards: int
) -> tuple[list[Runtime], dict[str, Ed25519PrivateKey]]:
    """``count`` Kymas ``kyma-<i>`` with runtime ids ``rt-<i>`` and each runtime's public signing key
    in KCP (what the operator publishes for the listener); returns the runtimes and private keys."""
    runtimes, keys = [], {}
    for i in range(count):
        runtime_id, name = f"rt-{i}", f"kyma-{i}"
        keys[runtime_id] = Ed25519PrivateKey.generate()
        await client.create(
            KYMAS,
            {
                "metadata": {"name": name, "namespace": namespace, "labels": {RUNTIME_ID_LABEL: runtime_id}},
                "spec": {"channel": "regular"},
            },
        )
        await client.create(SECRETS, key_secret(namespace, runtime_id, {"v1": keys[runtime_id]}))
        runtimes.append(Runtime(f"{namespace}/{name}", runtime_id, shard_of(runtime_id, shards)))
    return runtimes, keys


AGENT_SENDER_TASKS = AgentConfig.model_fields["sender_tasks"].default
"""The real agent's parallel senders (``SENDER_TASKS``), which bound its deliveries under way."""


class Agents:
    """The agents of several runtimes, posting signed requests to one listener port each time."""

    def __init__(
        self, http: httpx.AsyncClient, keys: dict[str, Ed25519PrivateKey], retry: float = 0.25
    ) -> None:
        self._http = http
        self._signers = {rid: EventSigner(key, make_key_id(rid, "v1")) for rid, key in keys.items()}
        self._retry = retry

    async def post(self, port: int, path: str, body: bytes, runtime_id: str) -> httpx.Response:
        request = self._http.build_request(
            "POST",
            f"http://127.0.0.1:{port}{path}",
            content=body,
            headers={"content-type": "application/json"},
        )
        self._signers[runtime_id].sign(request)
        return await self._http.send(request)

    async def deliver(
        self,
        port: int,
        path: str,
        body: bytes,
        runtime: Runtime,
        *,
        within: float,
        into: list[Delivery] | None = None,
    ) -> Delivery:
        """Post until the listener answers something else than 503/429 (or ``within`` seconds pass);
        a connection error counts as status 0 and is retried too. ``into``: a list the delivery is
        appended to at once (visible while under way)."""
        delivery = Delivery(runtime, path, port, time.monotonic_ns())
        if into is not None:
            into.append(delivery)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            attempt_ns = time.monotonic_ns()
            retry_after = False
            try:
                answer = await self.post(port, path, body, runtime.runtime_id)
                status, retry_after = answer.status_code, "retry-after" in answer.headers
            except httpx.TransportError:
                status = 0
            delivery.statuses.append(status)
            if 200 <= status < 300:
                delivery.accepted_ns, delivery.answered_ns = attempt_ns, time.monotonic_ns()
                return delivery
            if status not in (0, *RETRIED) and not (status == 401 and retry_after):
                return delivery
            await asyncio.sleep(self._retry)  # the agent's retry backoff, not a wait for a condition
        return delivery


@dataclass
class KillOutcome:
    """What happened to the events sent while the holder of their shards was killed (kill -9)."""

    killed_ns: int
    taken_over_ns: int
    holders_after: dict[int, str]
    deliveries: list[Delivery]

    @property
    def during(self) -> list[Delivery]:
        """Deliveries still under way or started after the kill."""
        return [d for d in self.deliveries if d.answered_ns == 0 or d.answered_ns > self.killed_ns]

    @property
    def exposed(self) -> list[Delivery]:
        """Events sent between the kill and the takeover, or under way at the kill."""
        return [d for d in self.during if d.started_ns < self.taken_over_ns]

    def first_accepted_after_kill_s(self) -> float:
        return (
            min(d.answered_ns for d in self.during if d.accepted_ns > self.killed_ns) - self.killed_ns
        ) / 1e9

    def unreconciled(self, trace: Path, victim: str) -> list[Delivery]:
        """Accepted deliveries with no reconcile of their Kyma started afterwards by the holder
        (A before the kill; for an event A accepted just before dying, the new holder's full
        reconcile after the kill counts: level-based, the event is a hint)."""
        lines = [ln for ln in read_trace(trace) if ln.kind == "kyma" and ln.event == "start"]
        missing = []
        for d in self.deliveries:
            new = self.holders_after[d.runtime.shard]
            later = {ln.replica for ln in lines if ln.subject == d.runtime.kyma and ln.at > d.accepted_ns}
            if d.answered_ns < self.killed_ns:
                ok = victim in later or any(
                    ln.subject == d.runtime.kyma and ln.replica == new and ln.at > self.killed_ns
                    for ln in lines
                )
            else:
                ok = new in later
            if not ok:
                missing.append(d)
        return missing


async def kill_while_sending(
    fleet: Fleet,
    client: KubeClient,
    victim: str,
    runtimes: list[Runtime],
    agents: Agents,
    to_port: int,
    *,
    pace: float = 0.25,
    within: float = 30,
) -> KillOutcome:
    """Agents of ``runtimes`` (the victim's) send events to ``to_port`` (one every ``pace`` s each,
    each retried on 503 until accepted); kill -9 ``victim``; wait until the others hold all shards and
    every runtime had an event accepted after that; stop the agents."""
    deliveries: list[Delivery] = []
    stop = asyncio.Event()
    body = event()

    async def deliver(runtime: Runtime) -> None:
        await agents.deliver(to_port, event_path(MANAGER), body, runtime, within=within, into=deliveries)

    async def agent(runtime: Runtime) -> None:
        """A new event every ``pace`` s, whether or not the earlier ones are still being retried: an
        agent's queue with its ``SENDER_TASKS`` parallel senders (an event waits in the queue while
        all senders are busy). Unbounded parallel retries would model no agent and, while the
        hand-off refuses, pile up until the test's own connection pool times out."""
        under_way: set[asyncio.Task[None]] = set()
        senders = asyncio.Semaphore(AGENT_SENDER_TASKS)

        async def send() -> None:
            try:
                await deliver(runtime)
            finally:
                senders.release()

        while not stop.is_set():
            await senders.acquire()  # the queue: wait for a free sender
            task = asyncio.create_task(send())
            under_way.add(task)
            task.add_done_callback(under_way.discard)
            await asyncio.sleep(pace)  # the agent's event rate, not a wait for a condition
        await asyncio.gather(*under_way)

    rest = tuple(r for r in fleet.processes if r != victim)
    senders = [asyncio.create_task(agent(rt)) for rt in runtimes]
    try:
        await eventually(
            lambda: sum(d.accepted for d in deliveries) >= 2 * len(runtimes), "events flowing before the kill"
        )
        killed_ns = time.monotonic_ns()
        await fleet.processes[victim].stop()  # SIGKILL

        async def taken_over() -> dict[int, str] | None:
            found = await holders(client, fleet.namespace)
            return found if settled(found, rest) else None

        after = await eventually(taken_over, "the victim's shards taken over", within=within, interval=0.1)
        taken_ns = time.monotonic_ns()
        try:
            await eventually(
                lambda: {d.runtime for d in deliveries if d.accepted_ns > taken_ns} >= set(runtimes),
                "an event of every moved runtime accepted after the takeover",
                within=within,
            )
        except AssertionError as exc:
            statuses = Counter(s for d in deliveries for s in d.statuses)
            raise AssertionError(f"{exc}; answers so far: {dict(statuses)}") from exc
    finally:
        stop.set()
        await asyncio.gather(*senders)
    return KillOutcome(killed_ns, taken_ns, after, deliveries)
