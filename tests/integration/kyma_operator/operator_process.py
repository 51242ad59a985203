"""``python -m kyma_operator`` as a real process in tests and benchmarks: start, probe, read metrics.

Leader-election tests need real processes (SIGSTOP pauses a whole process, kill -9 gives no chance
to release the Lease). This helper starts one with short Lease timings on its own health, metrics
and listener ports, and reads what an orchestrator or an agent would see: ``/readyz``, the
listener's status for an event, the reconcile counter.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kyma_wire.events import event_path
from kyma_wire.names import OPERATOR_NAME
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import free_port
from tests.process_output import collect_lines

LEASE_FLAGS = (
    "--leader-elect-lease-duration=4",
    "--leader-elect-renew-deadline=3",
    "--leader-elect-retry-period=0.5",
)
"""Short Lease timings (failover ~4-5 s) with the production ratios."""


def _get(url: str, *, method: str = "GET", body: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, OSError):
        return 0, ""


@dataclass
class OperatorProcess:
    process: asyncio.subprocess.Process
    health: int
    metrics: int
    listener: int
    output: list[str] = field(default_factory=list)
    _reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        kubeconfig: Path,
        namespace: str,
        *extra: str,
        env_extra: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> OperatorProcess:
        """Start the operator; ``prefix``: a command it runs under (e.g. valgrind, from
        ``benchmarks/instruction_count.py``)."""
        health, metrics, listener, handoff = free_port(), free_port(), free_port(), free_port()
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'operator'}"}
        env.update(env_extra or {})
        process = await asyncio.create_subprocess_exec(
            *prefix,
            sys.executable,
            "-m",
            "kyma_operator",
            f"--kubeconfig={kubeconfig}",
            f"--namespace={namespace}",
            f"--istio-namespace={namespace}",
            f"--health-port={health}",
            f"--metrics-port={metrics}",
            f"--listener-port={listener}",
            f"--handoff-port={handoff}",
            "--kcp-addr=127.0.0.1:443",
            "--leader-election-id=klm-leadership-test",
            *LEASE_FLAGS,
            *extra,
            env=env,
            cwd=str(REPO_ROOT),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        started = cls(process, health, metrics, listener)
        started._reader = asyncio.create_task(started._read())
        return started

    async def _read(self) -> None:
        assert self.process.stdout is not None
        await collect_lines(self.process.stdout, self.output)

    def text(self) -> str:
        return "\n".join(self.output)

    def readyz(self) -> int:
        return _get(f"http://127.0.0.1:{self.health}/readyz")[0]

    def event_status(self) -> int:
        """The listener's answer to an (unsigned) event: 503 = not serving, 401 = serving; 0 = closed."""
        return _get(
            f"http://127.0.0.1:{self.listener}{event_path(OPERATOR_NAME)}",
            method="POST",
            body=b'{"watched":{"namespace":"kyma-system","name":"default"},'
            b'"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}',
        )[0]

    def metric(self, name: str, controller: str = "kyma") -> float | None:
        """Counter ``name`` of ``controller``, summed over other labels (None: metrics unreachable)."""
        status, text = _get(f"http://127.0.0.1:{self.metrics}/metrics")
        if status != 200:
            return None
        total = 0.0
        label = f'controller="{controller}"'
        for line in text.splitlines():
            if line.startswith(name + "{") and label in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, sig: signal.Signals) -> None:
        if self.process.returncode is None:
            os.kill(self.pid, sig)

    async def wait(self, seconds: float) -> int:
        try:
            code = await asyncio.wait_for(self.process.wait(), seconds)
        except TimeoutError:
            tail = "\n".join(self.output[-60:])
            raise AssertionError(
                f"operator still running {seconds} s later; its last lines:\n{tail}"
            ) from None
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 5)
        return code

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        if self._reader is not None:
            self._reader.cancel()
