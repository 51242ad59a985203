"""``python -m kyma_operator.listener --print`` against the real KCP: a signed event is routed and printed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kyma_operator.listener.kube import KYMAS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from kyma_wire.events import event_path
from kyma_wire.profile import make_key_id
from tests.controlplane.cluster import APIServer
from tests.integration.kcp_listener.helpers import DEADLINE, MANAGER, event, key_secret, kyma
from tests.rfc9421_reference import EventSigner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@contextlib.asynccontextmanager
async def cli(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(REPO, "operator"), REPO])}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kyma_operator.listener",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def post_until_served(url: str, key: Ed25519PrivateKey) -> httpx.Response:
    """Retry while the process starts up (connection refused), its caches sync (503) or, during its
    first seconds, it refuses signatures older than its start plus the skew (401 with Retry-After;
    docs/sharding-handoff.md, "Replays across failovers"): every attempt is signed anew, as an agent's."""
    deadline = time.monotonic() + DEADLINE
    async with httpx.AsyncClient(base_url=url) as http:
        while True:
            request = http.build_request(
                "POST", event_path(MANAGER), content=event(), headers={"content-type": "application/json"}
            )
            EventSigner(key, make_key_id("rt-cli", "v1")).sign(request)
            try:
                response = await http.send(request)
                retry = response.status_code == 401 and "retry-after" in response.headers
                if response.status_code != 503 and not retry:
                    return response
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("listener did not start serving")
            await asyncio.sleep(0.1)


async def test_print_mode_routes_and_prints(
    kcp_crds: APIServer, kcp_client: KubeClient, kcp_namespace: str, unused_tcp_port: int
) -> None:
    key = Ed25519PrivateKey.generate()
    await kcp_client.create(KYMAS, kyma(kcp_namespace, "kyma-cli", "rt-cli"))
    await kcp_client.create(SECRETS, key_secret(kcp_namespace, "rt-cli", {"v1": key}))
    args = ("--kubeconfig", str(kcp_crds.kubeconfig_path), "--print", "--namespace", kcp_namespace)
    async with cli(*args, "--port", str(unused_tcp_port)) as process:
        response = await post_until_served(f"http://127.0.0.1:{unused_tcp_port}", key)
        assert response.status_code == 200, response.text
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), DEADLINE)
        assert line.decode().strip().endswith(f"reconcile kyma {kcp_namespace}/kyma-cli")
        process.terminate()
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0


@pytest.mark.parametrize(
    "args", [(), ("--kubeconfig", "x"), ("--kubeconfig", "x", "--print", "--manager", "Bad")]
)
async def test_cli_rejects_bad_arguments(args: tuple[str, ...]) -> None:
    async with cli(*args) as process:
        _, stderr = await asyncio.wait_for(process.communicate(), DEADLINE)
        assert process.returncode == 2
        assert b"error" in stderr
