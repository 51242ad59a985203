"""Several ``python -m kyma_operator --sharding`` processes on one KCP, and what an outsider reads:
shard Lease holders, the leader, ``kyma_operator_shards_held``, and the shared reconcile trace
(``--reconcile-trace-file``) with its overlap detector. Used by the sharding tests and
``benchmarks/shard_bench.py``.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import LEASES
from kyma_operator.runtime.sharding import assign
from tests.integration.kyma_operator.operator_process import OperatorProcess, _get
from tests.polling import eventually

SHARDS = 16
FLAGS = (
    "--sharding",
    f"--shards={SHARDS}",
    "--watcher-enabled=false",
    "--failure-base-delay=3",
    "--failure-max-delay=3",
)
"""No runtimes: Kymas without access Secret fail fast with a status and are retried every 3 s."""


@dataclass(frozen=True)
class Line:
    event: str
    kind: str
    subject: str
    replica: str
    at: int


def read_trace(path: Path) -> list[Line]:
    lines = []
    for raw in path.read_text().splitlines():
        event, kind, subject, replica, at, *_cpu = raw.split(" ")  # ``end`` lines: then CPU ns
        lines.append(Line(event, kind, subject, replica, int(at)))
    return lines


Intervals = dict[tuple[str, str], list[tuple[int, float]]]
"""(replica, subject) -> intervals in monotonic ns (an open one ends at +inf)."""


def intervals_of(lines: list[Line], kind: str, opening: str, closing: str) -> Intervals:
    """(replica, subject) -> its intervals of ``kind`` lines, from an ``opening`` line to the next
    ``closing`` one (a second opening while open changes nothing); one never closed runs to +inf."""
    found: Intervals = defaultdict(list)
    since: dict[tuple[str, str], int] = {}
    for line in lines:
        if line.kind != kind:
            continue
        key = (line.replica, line.subject)
        if line.event == opening:
            since.setdefault(key, line.at)
        elif line.event == closing and key in since:
            found[key].append((since.pop(key), line.at))
    for key, start in since.items():
        found[key].append((start, float("inf")))
    return dict(found)


def overlaps(lines: list[Line]) -> list[str]:
    """Kymas with reconcile intervals of two replicas that overlap (an open interval runs to +inf)."""
    intervals: dict[str, list[tuple[int, float, str]]] = defaultdict(list)
    for (replica, subject), reconciled in intervals_of(lines, "kyma", "start", "end").items():
        intervals[subject].extend((start, end, replica) for start, end in reconciled)
    found = []
    for subject, reconciles in intervals.items():
        reconciles.sort()
        for i, (s2, e2, r2) in enumerate(reconciles):
            for s1, e1, r1 in reconciles[:i]:
                if r1 != r2 and s2 < e1:
                    found.append(f"{subject}: {r1} [{s1}, {e1}] and {r2} [{s2}, {e2}]")
    return found


def gauge(process: OperatorProcess, name: str) -> float:
    """An unlabelled gauge from the process's ``/metrics`` (-1: unreachable or not exported)."""
    status, text = _get(f"http://127.0.0.1:{process.metrics}/metrics")
    for line in text.splitlines() if status == 200 else ():
        if line.startswith(f"{name} "):
            return float(line.split(" ")[1])
    return -1.0


def shards_held(process: OperatorProcess) -> float:
    return gauge(process, "kyma_operator_shards_held")


def kymas_exported(process: OperatorProcess) -> list[str]:
    """Kymas whose ``lifecycle_mgr_kyma_state`` series this process exports (current state = 1)."""
    status, text = _get(f"http://127.0.0.1:{process.metrics}/metrics")
    found = []
    for line in text.splitlines() if status == 200 else ():
        if line.startswith("lifecycle_mgr_kyma_state{") and line.endswith(" 1.0"):
            found.append(line.split('kyma_name="', 1)[1].split('"', 1)[0])
    return found


async def holders(client: KubeClient, namespace: str) -> dict[int, str]:
    """Shard -> holder of its Lease (shards without a holder are left out)."""
    leases = await client.list(LEASES, namespace)
    found = {}
    for lease in leases.items:
        name = lease["metadata"]["name"]
        if name.startswith("klm-shard-") and lease["spec"].get("holderIdentity"):
            found[int(name.rsplit("-", 1)[1])] = lease["spec"]["holderIdentity"]
    return found


def settled(found: dict[int, str], replicas: tuple[str, ...], shards: int = SHARDS) -> bool:
    """Every shard held by the owner :func:`assign` gives it among ``replicas`` (what each replica
    computes once all see the same live members): no shard is still on its way. Shares within one
    of each other are not enough: during a rebalance they can be even while shards still move, and
    whatever a test reads as "A's shards" then is not."""
    return found == dict(enumerate(assign(shards, replicas)))


@dataclass(frozen=True)
class Holdings:
    """When each replica held each shard, from the trace's ``acquired``/``released shard`` lines:
    from acquiring it (the replica acts on it only from then) to its ``released`` line (written
    after the Lease was given back, so the interval covers the draining too); a shard never released
    (still held, or its replica was killed) runs to the end."""

    spans: dict[tuple[str, int], list[tuple[int, float]]]

    @classmethod
    def of(cls, lines: list[Line]) -> Holdings:
        # acquired again after a fenced gap: still held (a second opening changes nothing)
        held = intervals_of(lines, "shard", "acquired", "released")
        return cls({(replica, int(shard)): found for (replica, shard), found in held.items()})

    def held(self, replica: str, shard: int, at: int) -> bool:
        return any(start <= at < end for start, end in self.spans.get((replica, shard), ()))


class Fleet:
    def __init__(
        self, kubeconfig: Path, namespace: str, trace: Path, *extra: str, env: dict[str, str] | None = None
    ) -> None:
        """``env``: added to each process's environment (a benchmark's other operator code)."""
        self.kubeconfig = kubeconfig
        self.env = env or {}
        self.namespace = namespace
        self.trace = trace
        self.extra = extra
        self.processes: dict[str, OperatorProcess] = {}

    async def start(self, replica: str, *, shards: int = SHARDS) -> OperatorProcess:
        process = await OperatorProcess.start(
            self.kubeconfig,
            self.namespace,
            *(flag for flag in FLAGS if not flag.startswith("--shards=")),
            f"--shards={shards}",
            *self.extra,
            f"--replica-id={replica}",
            f"--reconcile-trace-file={self.trace}",
            env_extra={**self.env, "POD_NAME": replica},
        )
        self.processes[replica] = process
        return process

    def joined(self, *replicas: str) -> bool:
        """Each of ``replicas`` is up and has joined the shard group (its caches synced, its
        membership Lease written: from now on its shards are a matter of coordination only)."""
        return all(
            any(f"{replica}: joined the shard group" in line for line in self.processes[replica].output)
            for replica in replicas
        )

    async def wait_joined(self, *replicas: str, within: float = 90.0) -> None:
        """Until ``joined(*replicas)``; on time-out the assertion carries each replica's exit code
        and output tail (a replica that exited or never synced says why there)."""
        try:
            await eventually(
                lambda: self.joined(*replicas), f"{', '.join(replicas)} started and joined", within=within
            )
        except AssertionError as error:
            codes = {r: self.processes[r].process.returncode for r in replicas}
            raise AssertionError(f"{error}; exit codes {codes}\n{self.output()}") from None

    async def stop(self) -> None:
        for process in self.processes.values():
            process.signal(signal.SIGCONT)
            process.signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                await process.wait(20)
            except TimeoutError:
                await process.stop()

    def output(self) -> str:
        return "\n".join(f"--- {r}\n{p.text()[-3000:]}" for r, p in self.processes.items())


async def leader(client: KubeClient, namespace: str) -> str:
    lease = await client.get(LEASES, "klm-leadership-test", namespace)
    return str(lease["spec"].get("holderIdentity") or "").split("_", 1)[0]
