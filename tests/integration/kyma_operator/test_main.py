"""``python -m kyma_operator`` as a process against the real KCP: start-up, readiness, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.resources import resource_for
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import LEASES
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import APIServer, free_port

GATEWAYS = resource_for(names.GATEWAY)


def gateway(namespace: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((REPO_ROOT / "manifests" / "kcp" / "gateway.yaml").read_text())
    body["metadata"]["namespace"] = namespace
    return body


def readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, OSError):
        return 0


async def start(argv: list[str]) -> asyncio.subprocess.Process:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'operator'}"}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kyma_operator",
        *argv,
        env=env,
        cwd=str(REPO_ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def test_operator_process_serves_until_sigterm(
    kcp_client: KubeClient, kcp_namespace: str, kcp_crds: APIServer
) -> None:
    ns = kcp_namespace
    await kcp_client.create(GATEWAYS, gateway(ns))  # the agents' address comes from it (upstream)
    health, listener = free_port(), free_port()
    process = await start(
        [
            f"--kubeconfig={Path(kcp_crds.kubeconfig_path)}",
            f"--namespace={ns}",
            f"--istio-namespace={ns}",
            f"--health-port={health}",
            f"--metrics-port={free_port()}",
            f"--listener-port={listener}",
            "--listener-port-overwrite=443",
            "--leader-election-id=klm-test",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while readyz(health) != 200:
            assert process.returncode is None, "the operator exited during start-up"
            assert time.monotonic() < deadline, "/readyz did not turn 200 (caches synced and leading)"
            await asyncio.sleep(0.1)
        lease = await kcp_client.get(LEASES, "klm-test", ns)
        assert lease["spec"]["holderIdentity"]
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
        assert process.stdout is not None
        output = (await process.stdout.read()).decode()
        assert code == 0, output
        assert "agents send to listener.kcp.example.com:443" in output  # from the Gateway, port overwritten
        assert "received SIGTERM" in output
        lease = await kcp_client.get(LEASES, "klm-test", ns)
        assert not lease["spec"].get("holderIdentity")  # released for a successor
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_operator_without_kcp_address_refuses_to_start(kcp_namespace: str, kcp_crds: APIServer) -> None:
    process = await start(
        [f"--kubeconfig={kcp_crds.kubeconfig_path}", f"--namespace={kcp_namespace}", "--health-port=0"]
    )
    code = await asyncio.wait_for(process.wait(), 30)
    assert process.stdout is not None
    output = (await process.stdout.read()).decode()
    assert code == 1
    assert f"Gateway {kcp_namespace}/klm-watcher not found: set --kcp-addr or create the Gateway" in output


async def test_operator_with_log_format_json_writes_only_json_lines(
    kcp_namespace: str, kcp_crds: APIServer
) -> None:
    process = await start(
        [
            f"--kubeconfig={kcp_crds.kubeconfig_path}",
            f"--namespace={kcp_namespace}",
            "--health-port=0",
            "--log-format=json",
        ]
    )
    code = await asyncio.wait_for(process.wait(), 30)
    assert process.stdout is not None
    lines = (await process.stdout.read()).decode().splitlines()
    assert code == 1
    records = [json.loads(line) for line in lines if line.strip()]  # every line is one JSON object
    failure = records[-1]
    assert (failure["level"], failure["logger"]) == ("error", "kyma_operator")
    assert failure["msg"] == (
        f"cannot start: Gateway {kcp_namespace}/klm-watcher not found: set --kcp-addr or create the Gateway"
    )
