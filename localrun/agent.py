"""One runtime's agent in the local run: a real ``python -m skr_watcher``, the container of a kwok pod."""

from __future__ import annotations

import asyncio
import base64
import ctypes
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kyma_operator.agentinstall import artefacts
from kyma_operator.runtime.informer import FuncHandler, Informer
from kyma_operator.runtime.resources import DEPLOYMENTS, PODS, SECRETS
from localrun.kcp import SYNC_NAMESPACE, Runtime
from localrun.output import Say
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import free_port

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


# -- the agent of one runtime ------------------------------------------------------------------


class LocalAgent:
    """Runs a runtime's agent as a local process, as the kubelet of its pod's node would.

    The runtime is a living cluster: the operator's Deployment gets a ReplicaSet and a pod, the
    scheduler binds the pod to a kwok node, and kwok reports it Running and Ready, so the
    Deployment's status (what the operator's ``SKRWebhook`` condition reads) comes from the cluster.
    A kwok pod runs nothing, so this class plays the container runtime: once a pod of the Deployment
    is bound to a node it writes the ``skr-webhook-tls`` Secret's keys as files (again whenever the
    Secret changes: the agent reloads rotated files) and starts ``python -m skr_watcher`` with the
    Deployment's environment (``/app/etc/ssl`` mapped to the files, ``WEBHOOK_PORT`` = the port the
    webhook URL names, bound to 127.0.0.1). ``ready`` is set once the agent's own ``/readyz``
    answers (its readiness probe); it never writes any status.
    """

    def __init__(self, runtime: Runtime, say: Say, *, directory: Path) -> None:
        self.runtime = runtime
        self.say = say
        self.directory = directory
        self.process: asyncio.subprocess.Process | None = None
        self.metrics_port = 0
        self.ready = asyncio.Event()
        self._secret = asyncio.Event()
        self._deployment: dict[str, Any] | None = None
        self._deployment_seen = asyncio.Event()
        self._available_said = False
        self._bound: dict[str, Any] | None = None
        self._pod_bound = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def ssl_dir(self) -> Path:
        return self.directory / "ssl"

    def _write_files(self, secret: dict[str, Any]) -> None:
        self.ssl_dir.mkdir(parents=True, exist_ok=True)
        for key, value in (secret.get("data") or {}).items():
            path = self.ssl_dir / key
            data = base64.b64decode(value)
            if not path.exists() or path.read_bytes() != data:
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(data)
                tmp.chmod(0o600)
                tmp.replace(path)
        self._secret.set()

    def _remember_deployment(self, deployment: dict[str, Any]) -> None:
        self._deployment = deployment
        self._deployment_seen.set()
        status = deployment.get("status") or {}
        if not self._available_said and int(status.get("availableReplicas") or 0) > 0:
            self._available_said = True
            self.say(
                f"runtime {self.runtime.name}: Deployment {SYNC_NAMESPACE}/{artefacts.SERVICE_NAME} "
                f"available ({status.get('readyReplicas', 0)}/{status.get('replicas', 0)} pods Ready, "
                "reported by kwok)"
            )

    def _remember_pod(self, pod: dict[str, Any]) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and not (pod.get("metadata") or {}).get("deletionTimestamp") and not self._pod_bound.is_set():
            self._bound = pod
            self._pod_bound.set()

    def environment(self, deployment: dict[str, Any]) -> dict[str, str]:
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        mount = next(m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] == "ssl")
        env: dict[str, str] = {}
        for entry in container.get("env", []):
            if "value" in entry:
                value = str(entry["value"])
                env[entry["name"]] = (
                    value.replace(mount, str(self.ssl_dir)) if value.startswith(mount) else value
                )
        self.metrics_port = free_port()
        env.update(
            {
                "POD_NAME": f"skr-webhook-{self.runtime.name}",
                "BIND_ADDRESS": "127.0.0.1",
                "WEBHOOK_PORT": str(self.runtime.agent_port),
                "METRICS_PORT": str(self.metrics_port),
            }
        )
        return env

    async def run(self) -> None:
        """Until cancelled: wait for a scheduled pod and the credentials, run the agent, probe it."""
        skr = self.runtime.client
        secrets = Informer(
            skr, SECRETS, namespace=SYNC_NAMESPACE, field_selector=f"metadata.name={artefacts.SECRET_NAME}"
        )
        secrets.add_handler(
            FuncHandler(on_add=self._write_files, on_update=lambda _o, n: self._write_files(n))
        )
        deployments = Informer(
            skr,
            DEPLOYMENTS,
            namespace=SYNC_NAMESPACE,
            field_selector=f"metadata.name={artefacts.SERVICE_NAME}",
        )
        deployments.add_handler(
            FuncHandler(
                on_add=self._remember_deployment, on_update=lambda _o, n: self._remember_deployment(n)
            )
        )
        self._tasks = [asyncio.create_task(secrets.run()), asyncio.create_task(deployments.run())]
        try:
            await self._deployment_seen.wait()
            assert self._deployment is not None
            labels = self._deployment["spec"]["selector"]["matchLabels"]
            pods = Informer(
                skr,
                PODS,
                namespace=SYNC_NAMESPACE,
                label_selector=",".join(f"{key}={value}" for key, value in sorted(labels.items())),
            )
            pods.add_handler(
                FuncHandler(on_add=self._remember_pod, on_update=lambda _o, n: self._remember_pod(n))
            )
            self._tasks.append(asyncio.create_task(pods.run()))
            await self._pod_bound.wait()
            assert self._bound is not None
            pod, node = self._bound["metadata"]["name"], self._bound["spec"]["nodeName"]
            self.say(
                f"runtime {self.runtime.name}: pod {SYNC_NAMESPACE}/{pod} scheduled on kwok node {node}; "
                "starting its container here"
            )
            await self._secret.wait()
            await self._start(self.environment(self._deployment))
            await self._probe_ready()
            assert self.process is not None
            code = await self.process.wait()
            self.say(f"agent for {self.runtime.name} exited with code {code}")
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.stop()

    async def _start(self, env: dict[str, str]) -> None:
        full_env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            **env,
        }
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "skr_watcher",
            env=full_env,
            cwd=str(REPO_ROOT),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        self._tasks.append(asyncio.create_task(self._relay()))
        self.say(
            f"agent for {self.runtime.name} started (pid {self.process.pid}): webhook "
            f"{self.runtime.webhook_url}/validate/<manager>, sends to {env.get('KCP_SCHEME', 'https')}://"
            f"{env.get('KCP_ADDR')}, credentials in {self.ssl_dir}"
        )

    async def _relay(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while line := await self.process.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            if text and "/heartbeat" not in text:  # one per interval: noise here
                self.say(f"  [agent {self.runtime.name}] {text}")

    async def _probe_ready(self) -> None:
        """The agent's readiness probe: its ``/readyz``, as the Deployment's probe would call it."""
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        loop = asyncio.get_running_loop()

        def probe() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    return bool(response.status == 200)
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                return False

        while not await loop.run_in_executor(None, probe):
            if self.process is not None and self.process.returncode is not None:
                return
            await asyncio.sleep(0.05)  # a kubelet's readiness probe period, shortened
        self.ready.set()
        self.say(f"agent for {self.runtime.name} running on {self.runtime.webhook_url} (ready)")

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(10.0):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
