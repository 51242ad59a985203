"""`kyma module rollout status|pause|resume|abort` against a real KCP API server with the rollout CRDs.

The ModuleRollout objects and their status are written here as the operator's rollout leader would
write them, so these tests pin the CLI (its output, its writes, its exit codes), independent of the
controller (tests/integration/rollouts/ drives the real thing). Each test uses its own namespace.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from kyma_operator.api import names
from kyma_operator.api.modulerollout import ModuleRollout
from kyma_operator.api.resources import KYMAS, MODULE_ROLLOUTS
from kyma_operator.cli import rolloutview as view
from kyma_operator.rollouts.waves import placement_of_object
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES
from tests.controlplane.cluster import APIServer
from tests.integration.cli.conftest import REPO, Kyma

T = TypeVar("T")
MODULE = "serverless"
HALT_REASON = "wave canary: 2 failed > maxFailures 0 (kyma-0007: Manifest Error: Deployment not available)"
HALF_REASON = "5 failed > maxFailures 4 (kyma-0042: not Ready within progressDeadline 20s)"
WAVES = [
    {"name": "canary", "selector": {"matchLabels": {names.ROLLOUT_RING_LABEL: "canary"}}, "soakTime": "2s"},
    {"name": "half", "upToPercent": 50, "soakTime": "2s", "maxFailures": "10%"},
    {"name": "rest", "upToPercent": 100},
]


def on(server: APIServer, body: Callable[[KubeClient], Awaitable[T]]) -> T:
    async def run() -> T:
        async with KubeClient.from_kubeconfig_file(server.kubeconfig_path) as client:
            return await body(client)

    return asyncio.run(run())


@pytest.fixture
def namespace(kcp_crds: APIServer, unique_name: str) -> str:
    on(kcp_crds, lambda c: c.create(NAMESPACES, {"metadata": {"name": unique_name}}))
    return unique_name


@pytest.fixture
def kubeconfig(kcp_crds: APIServer) -> str:
    return str(kcp_crds.kubeconfig_path)


def rollout_body(namespace: str, to_version: str, channel: str = "regular") -> dict[str, Any]:
    return {
        "apiVersion": names.MODULE_ROLLOUT.api_version,
        "kind": names.MODULE_ROLLOUT.kind,
        "metadata": {
            "name": f"{MODULE}-{channel}-{to_version}",
            "namespace": namespace,
            "labels": {names.MODULE_NAME_LABEL: MODULE, names.CHANNEL_LABEL: channel},
        },
        "spec": {
            "module": MODULE,
            "channel": channel,
            "fromVersion": "1.4.0",
            "toVersion": to_version,
            "policyRef": "gated",
            "state": "Running",
            "policy": {"modules": [{"name": MODULE, "channels": [channel]}], "waves": WAVES},
        },
    }


def create_run(server: APIServer, namespace: str, to_version: str, status: dict[str, Any]) -> dict[str, Any]:
    """Create a run and write its status as the rollout leader would."""

    async def body(client: KubeClient) -> dict[str, Any]:
        created = await client.create(MODULE_ROLLOUTS, rollout_body(namespace, to_version))
        return await write_status(client, created, status)

    return on(server, body)


async def write_status(client: KubeClient, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    updated = await client.update_status(MODULE_ROLLOUTS, {**obj, "status": status})
    return updated


def progressing(**extra: Any) -> dict[str, Any]:
    return {
        "phase": "Soaking",
        "startedAt": "2026-11-25T07:00:00Z",
        "soakStartedAt": "2026-11-25T07:01:00Z",
        "frontier": {"wave": 1, "threshold": 1.0},
        "waves": [
            {"name": "canary", "members": 3, "upgraded": 3, "ready": 3},
            {"name": "half", "members": 40, "upgraded": 40, "ready": 39, "failed": 1},
            {"name": "rest", "members": 57},
        ],
        "totals": {"members": 100, "upgraded": 43, "ready": 42, "failed": 1, "held": 57},
        **extra,
    }


def halted() -> dict[str, Any]:
    return {
        "phase": "Halted",
        "startedAt": "2026-11-25T07:00:00Z",
        "haltedAt": "2026-11-25T07:01:12Z",
        "haltReason": HALT_REASON,
        "frontier": {"wave": 0, "threshold": 1.0},
        "waves": [{"name": "canary", "members": 3, "upgraded": 3, "ready": 1, "failed": 2}],
        "totals": {"members": 100, "upgraded": 3, "ready": 1, "failed": 2, "held": 97},
        "failedKymas": ["kyma-0007", "kyma-0012"],
    }


def read_run(server: APIServer, namespace: str, name: str) -> dict[str, Any]:
    return on(server, lambda c: c.get(MODULE_ROLLOUTS, name, namespace))


def test_status_as_a_table_json_and_yaml(
    kyma: Kyma, kcp_crds: APIServer, namespace: str, kubeconfig: str
) -> None:
    create_run(
        kcp_crds, namespace, "1.4.0", {"phase": "Completed", "frontier": {"wave": 2, "threshold": 1.0}}
    )
    create_run(kcp_crds, namespace, "1.5.0", progressing())

    table = kyma("module", "rollout", "status", MODULE, "--kubeconfig", kubeconfig, "-n", namespace)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "ROLLOUT",
        "PHASE",
        "WAVE",
        "UPGRADED",
        "READY",
        "FAILED",
        "WAITING",
        "HELD",
        "AGE",
    ]
    assert lines[1].split()[:8] == [
        "serverless-regular-1.4.0",
        "Completed",
        "rest",
        "0/0",
        "0",
        "0",
        "0",
        "0",
    ]
    assert lines[2].split()[:8] == [
        "serverless-regular-1.5.0",
        "Soaking",
        "half",
        "43/100",
        "42",
        "1",
        "0",
        "57",
    ]
    assert (
        "serverless-regular-1.5.0: module serverless, channel regular, 1.4.0 -> 1.5.0, policy gated"
        in table.stdout
    )
    assert any(line.split() == ["half", "40", "yes", "40", "39", "1", "0", "0"] for line in lines)
    assert any(line.split() == ["rest", "57", "no", "0", "0", "0", "0", "0"] for line in lines)

    as_json = kyma(
        "module",
        "rollout",
        "status",
        "--rollout",
        "serverless-regular-1.5.0",
        "-o",
        "json",
        "--kubeconfig",
        kubeconfig,
        "-n",
        namespace,
    )
    assert as_json.exit_code == 0, as_json.output
    (doc,) = json.loads(as_json.stdout)
    assert doc["name"] == "serverless-regular-1.5.0" and doc["namespace"] == namespace
    assert doc["spec"]["toVersion"] == "1.5.0" and doc["spec"]["policy"]["waves"][0]["name"] == "canary"
    assert doc["status"]["phase"] == "Soaking" and doc["status"]["totals"]["upgraded"] == 43

    as_yaml = kyma("module", "rollout", "status", "-o", "yaml", "--kubeconfig", kubeconfig, "-n", namespace)
    assert as_yaml.exit_code == 0, as_yaml.output
    docs = yaml.safe_load(as_yaml.stdout)
    assert [d["name"] for d in docs] == ["serverless-regular-1.4.0", "serverless-regular-1.5.0"]
    assert docs[1]["status"]["frontier"] == {"wave": 1, "threshold": 1.0}


def test_a_halted_rollout_exits_1_with_one_line(
    kyma: Kyma, kcp_crds: APIServer, namespace: str, kubeconfig: str
) -> None:
    create_run(kcp_crds, namespace, "1.4.0", {"phase": "Completed"})
    create_run(kcp_crds, namespace, "1.5.0", halted())
    result = kyma(
        "module", "rollout", "status", MODULE, "-o", "json", "--kubeconfig", kubeconfig, "-n", namespace
    )
    assert result.exit_code == 1
    assert len(json.loads(result.stdout)) == 2  # stdout stays clean JSON; the line goes to stderr
    assert result.stderr.strip().splitlines() == [
        "rollout serverless-regular-1.5.0 halted in wave canary: 2 failed > maxFailures 0 (kyma-0007: "
        "Manifest Error: Deployment not available)"
    ]


def test_pause_resume_abort_write_the_state_and_the_reason(
    kyma: Kyma, kcp_crds: APIServer, namespace: str, kubeconfig: str
) -> None:
    create_run(kcp_crds, namespace, "1.4.0", {"phase": "Completed"})
    name = create_run(kcp_crds, namespace, "1.5.0", progressing())["metadata"]["name"]
    args = ("--kubeconfig", kubeconfig, "-n", namespace)

    paused = kyma("module", "rollout", "pause", MODULE, "--reason", "ticket 4711", *args)
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.startswith(f"rollout {name} paused")
    obj = read_run(kcp_crds, namespace, name)
    assert obj["spec"]["state"] == "Paused"
    assert obj["metadata"]["annotations"][names.STATE_REASON_ANNOTATION] == "ticket 4711"
    assert obj["status"]["phase"] == "Soaking"  # the CLI writes intent only; the leader owns status

    again = kyma("module", "rollout", "pause", MODULE, *args)
    assert again.exit_code == 0 and "already paused (unchanged)" in again.stdout
    assert (
        read_run(kcp_crds, namespace, name)["metadata"]["resourceVersion"]
        == obj["metadata"]["resourceVersion"]
    )

    resumed = kyma("module", "rollout", "resume", "--rollout", name, *args)
    assert resumed.exit_code == 0, resumed.output
    obj = read_run(kcp_crds, namespace, name)
    assert obj["spec"]["state"] == "Running"
    assert "resumed" in obj["metadata"]["annotations"][names.STATE_REASON_ANNOTATION]

    aborted = kyma(
        "module", "rollout", "abort", MODULE, "--channel", "regular", "--reason", "bad release", *args
    )
    assert aborted.exit_code == 0, aborted.output
    obj = read_run(kcp_crds, namespace, name)
    assert obj["spec"]["state"] == "Aborted"
    assert obj["metadata"]["annotations"][names.STATE_REASON_ANNOTATION] == "bad release"
    # the spec fields the CLI does not own are untouched (the CRD's CEL rules would refuse it anyway)
    assert obj["spec"]["toVersion"] == "1.5.0" and obj["spec"]["policy"]["waves"][0]["name"] == "canary"


def test_resume_of_a_halted_rollout_needs_ignore_failed(
    kyma: Kyma, kcp_crds: APIServer, namespace: str, kubeconfig: str
) -> None:
    name = create_run(kcp_crds, namespace, "1.5.0", halted())["metadata"]["name"]
    args = ("--kubeconfig", kubeconfig, "-n", namespace)
    before = read_run(kcp_crds, namespace, name)

    refused = kyma("module", "rollout", "resume", MODULE, *args)
    assert refused.exit_code == 1
    halt_line, hint = refused.stderr.strip().splitlines()
    assert halt_line == view.halt_line(ModuleRollout.from_object(before))
    assert hint.startswith(
        f"hint: `kyma module rollout resume --rollout {name} -n {namespace} --ignore-failed`"
    )
    assert (
        read_run(kcp_crds, namespace, name)["metadata"]["resourceVersion"]
        == before["metadata"]["resourceVersion"]
    )

    resumed = kyma("module", "rollout", "resume", MODULE, "--ignore-failed", *args)
    assert resumed.exit_code == 0, resumed.output
    obj = read_run(kcp_crds, namespace, name)
    assert obj["spec"]["ignoredKymas"] == ["kyma-0007", "kyma-0012"]
    assert obj["spec"]["state"] == "Running"


def create_kyma(server: APIServer, namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    async def body(client: KubeClient) -> dict[str, Any]:
        kyma = await client.create(
            KYMAS,
            {
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"channel": "regular", "modules": [{"name": MODULE}]},
            },
        )
        status = {"state": "Ready", "modules": [{"name": MODULE, "state": "Ready", "version": "1.4.0"}]}
        updated: dict[str, Any] = await client.update_status(KYMAS, {**kyma, "status": status})
        return updated

    return on(server, body)


def test_status_of_one_kyma_says_its_wave_and_why_it_is_held(
    kyma: Kyma, kcp_crds: APIServer, namespace: str, kubeconfig: str
) -> None:
    run = create_run(kcp_crds, namespace, "1.5.0", progressing(phase="Progressing"))
    canary = create_kyma(kcp_crds, namespace, "kyma-canary", {names.ROLLOUT_RING_LABEL: "canary"})
    # the first Kymas the hash puts into wave "rest" (held) and into wave "half" (released)
    others: dict[int, dict[str, str]] = {}
    for index in range(200):
        labels = {names.RUNTIME_ID_LABEL: f"rt-{index}"}
        wave = placement_of_object(ModuleRollout.from_object(run), {"metadata": {"labels": labels}}).wave
        others.setdefault(wave, labels)
        if {1, 2} <= set(others):
            break
    create_kyma(kcp_crds, namespace, "kyma-half", others[1])
    create_kyma(kcp_crds, namespace, "kyma-rest", others[2])
    args = ("--kubeconfig", kubeconfig, "-n", namespace)

    rows = {}
    for name in ("kyma-canary", "kyma-half", "kyma-rest"):
        result = kyma("module", "rollout", "status", MODULE, "--kyma", name, "-o", "json", *args)
        assert result.exit_code == 0, result.output
        (rows[name],) = json.loads(result.stdout)
    assert rows["kyma-canary"] == {
        "rollout": "serverless-regular-1.5.0",
        "kyma": "kyma-canary",
        "wave": "canary",
        "released": "yes",
        "installed": "1.4.0",
        "gets": "1.5.0",
        "reason": "released in wave canary (1/3): upgrades to 1.5.0",
    }
    assert rows["kyma-half"]["wave"] == "half" and rows["kyma-half"]["released"] == "yes"
    assert rows["kyma-rest"]["wave"] == "rest" and rows["kyma-rest"]["released"] == "no"
    assert rows["kyma-half"]["gets"] == "1.5.0" and rows["kyma-rest"]["gets"] == "1.4.0"
    assert rows["kyma-rest"]["reason"] == (
        "held: wave rest (3/3) not released yet (the rollout is in wave half); keeps 1.4.0"
    )
    assert canary["metadata"]["name"] == "kyma-canary"

    table = kyma(
        "module", "rollout", "status", "--rollout", run["metadata"]["name"], "--kyma", "kyma-rest", *args
    )
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0].split() == [
        "ROLLOUT",
        "KYMA",
        "WAVE",
        "RELEASED",
        "INSTALLED",
        "GETS",
        "REASON",
    ]
    missing = kyma("module", "rollout", "status", MODULE, "--kyma", "kyma-nope", *args)
    assert missing.exit_code == 2 and f"no Kyma {namespace}/kyma-nope" in missing.stderr


def test_no_such_rollout_exits_2(kyma: Kyma, namespace: str, kubeconfig: str) -> None:
    args = ("--kubeconfig", kubeconfig, "-n", namespace)
    missing = kyma("module", "rollout", "status", "--rollout", "nope-regular-1.0.0", *args)
    assert missing.exit_code == 2
    assert missing.stderr.strip() == f"Error: no ModuleRollout {namespace}/nope-regular-1.0.0"
    for command in ("status", "pause", "resume", "abort"):
        result = kyma("module", "rollout", command, "eventing", *args)
        assert result.exit_code == 2, (command, result.output)
        assert f"no ModuleRollout for module eventing in namespace {namespace}" in result.stderr


def test_an_unreachable_api_exits_3(kyma: Kyma, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "unreachable.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "unused"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    for command in (("status",), ("pause", MODULE)):
        result = kyma("module", "rollout", *command, "--kubeconfig", str(kubeconfig))
        assert result.exit_code == 3, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("Error: cannot reach the API server")


def test_watch_exits_1_with_the_line_when_the_rollout_halts(
    kcp_crds: APIServer, namespace: str, kubeconfig: str
) -> None:
    created = create_run(kcp_crds, namespace, "1.5.0", progressing(phase="Progressing"))
    name = created["metadata"]["name"]

    async def scenario() -> tuple[int, list[str], str]:
        env = {**os.environ, "PYTHONPATH": f"{REPO / 'operator'}:{REPO}"}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kyma_operator.cli",
            "module",
            "rollout",
            "status",
            "--rollout",
            name,
            "--watch",
            "--kubeconfig",
            kubeconfig,
            "-n",
            namespace,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None and process.stderr is not None
        try:
            lines = [(await asyncio.wait_for(process.stdout.readline(), 60)).decode()]
            assert f"rollout {name} Progressing wave half" in lines[0], lines
            async with KubeClient.from_kubeconfig_file(kcp_crds.kubeconfig_path) as client:
                current = await client.get(MODULE_ROLLOUTS, name, namespace)
                current = await write_status(client, current, progressing(phase="Soaking"))
                lines.append((await asyncio.wait_for(process.stdout.readline(), 60)).decode())
                await write_status(
                    client,
                    current,
                    {
                        **halted(),
                        "frontier": {"wave": 1, "threshold": 1.0},
                        "haltReason": f"wave half: {HALF_REASON}",
                    },
                )
            code = await asyncio.wait_for(process.wait(), 60)
            rest, err = await process.stdout.read(), await process.stderr.read()
            lines += rest.decode().splitlines(keepends=True)
            return code, lines, err.decode()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()

    code, lines, err = asyncio.run(scenario())
    assert code == 1, (lines, err)
    assert [line.split(" ", 1)[1].split()[2] for line in lines] == ["Progressing", "Soaking", "Halted"]
    assert err.strip().splitlines() == [f"rollout {name} halted in wave half: {HALF_REASON}"]
