"""`kyma module deploy|list|enable|disable` against real API servers (KCP and a runtime).

Each test uses its own namespace in the runtime (``--namespace``) holding its own runtime Kyma and
catalog copy, so tests do not share the runtime's real ``kyma-system/default``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_operator.api import names
from kyma_operator.cli.catalog import KYMAS, RELEASE_METAS, TEMPLATES
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES
from tests.controlplane import pki
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import apply_crds
from tests.integration.cli.conftest import REPO, Kyma, write_module_source
from tests.polling import eventually
from tests.registry.server import LocalRegistry

SAMPLES = REPO / "manifests" / "samples"
PARALLEL = ["mod-aaa", "mod-bbb", "mod-ccc", "mod-ddd"]


@pytest.fixture(scope="session")
def skr_crds(skr: APIServer) -> APIServer:
    apply_crds(skr.kubeconfig_path)
    return skr


async def _with(server: APIServer, body: Any) -> Any:
    client = KubeClient.from_kubeconfig_file(server.kubeconfig_path)
    try:
        return await body(client)
    finally:
        await client.close()


def on(server: APIServer, body: Any) -> Any:
    return asyncio.run(_with(server, body))


def _upstream_catalog(namespace: str) -> list[dict[str, Any]]:
    docs = []
    for name in (
        "operator.kyma-project.io_v1beta2_moduletemplate.yaml",
        "operator.kyma-project.io_v1beta2_modulereleasemeta.yaml",
    ):
        doc = yaml.safe_load((SAMPLES / name).read_text())
        doc["metadata"]["namespace"] = namespace
        docs.append(doc)
    return docs


@pytest.fixture
def runtime(skr_crds: APIServer, unique_name: str) -> Iterator[str]:
    """A runtime namespace with a Kyma ``default`` (channel regular) and the upstream sample catalog."""

    async def setup(client: KubeClient) -> None:
        await client.create(NAMESPACES, {"metadata": {"name": unique_name}})
        kyma = {
            "apiVersion": KYMAS.api_version,
            "kind": KYMAS.kind,
            "metadata": {"name": "default", "namespace": unique_name},
            "spec": {"channel": "regular"},
        }
        await client.create(KYMAS, kyma)
        template, meta = _upstream_catalog(unique_name)
        await client.create(TEMPLATES, template)
        await client.create(RELEASE_METAS, meta)

    on(skr_crds, setup)
    yield unique_name

    async def teardown(client: KubeClient) -> None:
        with contextlib.suppress(NotFound):
            await client.delete(NAMESPACES, unique_name)

    on(skr_crds, teardown)


def _wait_for_modules(server: APIServer, namespace: str, *, present: bool) -> None:
    """Poll (with a deadline) until the runtime Kyma's spec.modules is non-empty (or empty)."""

    async def probe(client: KubeClient) -> None:
        async def check() -> bool:
            modules = (await client.get(KYMAS, "default", namespace))["spec"].get("modules")
            return bool(modules) == present

        await eventually(check, f"spec.modules {'set' if present else 'emptied'} by the CLI", within=30)

    on(server, probe)


def _kyma_obj(server: APIServer, namespace: str) -> dict[str, Any]:
    result: dict[str, Any] = on(server, lambda c: c.get(KYMAS, "default", namespace))
    return result


def test_template_then_deploy_to_kcp(
    kyma: Kyma, kcp_crds: APIServer, oci_registry: LocalRegistry, unique_name: str
) -> None:
    on(kcp_crds, lambda c: c.create(NAMESPACES, {"metadata": {"name": unique_name}}))
    base = f"{oci_registry.host}/modules"
    kubeconfig = str(kcp_crds.kubeconfig_path)
    for version, channel in (("1.0.0", "regular"), ("1.1.0", "fast")):
        config = write_module_source(kyma.cwd / version, "deploy-mod", version=version, channel=channel)
        assert (
            kyma(
                "module", "create", "-c", str(config), "-d", f"built-{version}", "-r", base, "--insecure"
            ).exit_code
            == 0
        )
        out = kyma("module", "template", f"built-{version}", "-n", unique_name, "--output", f"{version}.yaml")
        assert out.exit_code == 0, out.output
        deployed = kyma("module", "deploy", f"{version}.yaml", "--kubeconfig", kubeconfig)
        assert deployed.exit_code == 0, deployed.output
        assert f"ModuleTemplate {unique_name}/deploy-mod-{version} created" in deployed.stdout
    again = kyma("module", "deploy", "1.1.0.yaml", "--kubeconfig", kubeconfig)
    assert again.stdout.count("unchanged") == 2, again.stdout
    meta = on(kcp_crds, lambda c: c.get(RELEASE_METAS, "deploy-mod", unique_name))
    assert meta["spec"]["channels"] == [
        {"channel": "fast", "version": "1.1.0"},
        {"channel": "regular", "version": "1.0.0"},
    ]
    template = on(kcp_crds, lambda c: c.get(TEMPLATES, "deploy-mod-1.1.0", unique_name))
    assert template["spec"]["descriptor"]["component"]["name"] == "kyma-project.io/module/deploy-mod"
    # stdin works too, and bad input names the problem
    stdin = kyma(
        "module", "deploy", "-", "--kubeconfig", kubeconfig, input=(kyma.cwd / "1.0.0.yaml").read_text()
    )
    assert stdin.exit_code == 0 and "unchanged" in stdin.stdout
    (kyma.cwd / "bad.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    bad = kyma("module", "deploy", "bad.yaml", "--kubeconfig", kubeconfig)
    assert bad.exit_code == 1 and "not a ModuleTemplate or ModuleReleaseMeta" in bad.stderr


def test_list_reads_the_upstream_catalog(kyma: Kyma, skr_crds: APIServer, runtime: str) -> None:
    result = kyma(
        "module", "list", "--kubeconfig", str(skr_crds.kubeconfig_path), "-n", runtime, "-o", "json"
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows == [
        {
            "name": "template-operator",
            "channels": ["fast:1.1.0", "regular:1.0.1"],
            "versions": ["1.0.1"],
            "mandatory": None,
            "enabled": False,
            "channel": None,
            "state": None,
            "installed": None,
            "message": None,
        }
    ]
    table = kyma("module", "list", "--kubeconfig", str(skr_crds.kubeconfig_path), "-n", runtime)
    assert "template-operator" in table.stdout and "MODULE" in table.stdout


def test_enable_and_disable_edit_the_runtime_kyma(kyma: Kyma, skr_crds: APIServer, runtime: str) -> None:
    kc = str(skr_crds.kubeconfig_path)
    enabled = kyma(
        "module",
        "enable",
        "template-operator",
        "--kubeconfig",
        kc,
        "-n",
        runtime,
        "-c",
        "fast",
        "--policy",
        "Ignore",
    )
    assert enabled.exit_code == 0 and "enabled" in enabled.stdout
    obj = _kyma_obj(skr_crds, runtime)
    assert obj["spec"]["modules"] == [
        {"name": "template-operator", "channel": "fast", "customResourcePolicy": "Ignore", "managed": True}
    ]
    version = obj["metadata"]["resourceVersion"]
    again = kyma("module", "enable", "template-operator", "--kubeconfig", kc, "-n", runtime, "-c", "fast")
    assert again.exit_code == 0 and "unchanged" in again.stdout
    assert _kyma_obj(skr_crds, runtime)["metadata"]["resourceVersion"] == version
    rows = json.loads(kyma("module", "list", "--kubeconfig", kc, "-n", runtime, "-o", "json").stdout)
    assert rows[0]["enabled"] is True and rows[0]["channel"] == "fast"
    unknown = kyma("module", "enable", "no-such-module", "--kubeconfig", kc, "-n", runtime)
    assert unknown.exit_code == 1
    assert "module 'no-such-module' is not in this runtime's catalog" in unknown.stderr
    assert "available: template-operator" in unknown.stderr
    channel = kyma(
        "module", "enable", "template-operator", "--kubeconfig", kc, "-n", runtime, "-c", "nightly"
    )
    assert channel.exit_code == 1 and "has no channel 'nightly'" in channel.stderr
    disabled = kyma("module", "disable", "template-operator", "--kubeconfig", kc, "-n", runtime)
    assert disabled.exit_code == 0 and "disabled" in disabled.stdout
    assert _kyma_obj(skr_crds, runtime)["spec"].get("modules", []) == []
    twice = kyma("module", "disable", "template-operator", "--kubeconfig", kc, "-n", runtime)
    assert twice.exit_code == 0 and "not enabled (unchanged)" in twice.stdout


def _set_module_status(server: APIServer, namespace: str, state: str, message: str | None = None) -> None:
    entry: dict[str, Any] = {"name": "template-operator", "state": state}
    if message:
        entry["message"] = message
    patch = {"status": {"state": "Processing", "modules": [entry] if state != "gone" else []}}
    on(server, lambda c: c.patch_status(KYMAS, "default", patch, namespace))


@pytest.mark.parametrize("outcome", ["Ready", "Error"])
def test_enable_wait_follows_the_module_state(
    kyma: Kyma, skr_crds: APIServer, runtime: str, outcome: str
) -> None:
    kc = str(skr_crds.kubeconfig_path)
    process = kyma.process(
        "module",
        "enable",
        "template-operator",
        "--kubeconfig",
        kc,
        "-n",
        runtime,
        "--wait",
        "--timeout",
        "60",
    )
    try:
        _wait_for_modules(skr_crds, runtime, present=True)
        _set_module_status(skr_crds, runtime, "Processing")
        _set_module_status(
            skr_crds, runtime, outcome, "installation failed: no quota" if outcome == "Error" else None
        )
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    if outcome == "Ready":
        assert process.returncode == 0, stderr
        assert "module template-operator is Ready" in stdout
    else:
        assert process.returncode == 1
        assert (
            stderr.strip().splitlines()[-1]
            == "Error: module template-operator is in Error: installation failed: no quota"
        )


def test_disable_wait_until_removed(kyma: Kyma, skr_crds: APIServer, runtime: str) -> None:
    kc = str(skr_crds.kubeconfig_path)
    assert kyma("module", "enable", "template-operator", "--kubeconfig", kc, "-n", runtime).exit_code == 0
    _set_module_status(skr_crds, runtime, "Ready")
    process = kyma.process(
        "module", "disable", "template-operator", "--kubeconfig", kc, "-n", runtime, "-w", "--timeout", "60"
    )
    try:
        _wait_for_modules(skr_crds, runtime, present=False)
        _set_module_status(skr_crds, runtime, "Deleting")
        _set_module_status(skr_crds, runtime, "gone")
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "module template-operator removed" in stdout


def _read_progress_until(process: Any, text: str) -> str:
    """stderr lines of ``process`` up to the one containing ``text`` (EOF ends it: the process exited)."""
    seen = []
    while True:
        line = process.stderr.readline()
        seen.append(line)
        if not line or text in line:
            return "".join(seen)


def test_disable_wait_from_error_succeeds_once_removed(kyma: Kyma, skr_crds: APIServer, runtime: str) -> None:
    """The Error the module had before `disable` is not the answer to it: done once the entry is gone."""
    kc = str(skr_crds.kubeconfig_path)
    assert kyma("module", "enable", "template-operator", "--kubeconfig", kc, "-n", runtime).exit_code == 0
    _set_module_status(skr_crds, runtime, "Error", "installation failed: no quota")
    process = kyma.process(
        "module", "disable", "template-operator", "--kubeconfig", kc, "-n", runtime, "-w", "--timeout", "60"
    )
    try:
        progress = _read_progress_until(process, "reported before this command")
        assert "template-operator: Error (installation failed: no quota)" in progress, progress
        _wait_for_modules(skr_crds, runtime, present=False)
        _set_module_status(skr_crds, runtime, "gone")
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "module template-operator removed" in stdout


def test_enable_wait_waits_past_a_stale_error_and_fails_on_a_new_one(
    kyma: Kyma, skr_crds: APIServer, runtime: str
) -> None:
    kc = str(skr_crds.kubeconfig_path)
    assert kyma("module", "enable", "template-operator", "--kubeconfig", kc, "-n", runtime).exit_code == 0
    _set_module_status(skr_crds, runtime, "Error", "old cause")
    enable = (
        "module",
        "enable",
        "template-operator",
        "--kubeconfig",
        kc,
        "-n",
        runtime,
        "-w",
        "--timeout",
        "60",
    )
    # the cause fixed: the operator's next status (Ready) is the answer, not the old Error
    process = kyma.process(*enable)
    try:
        _read_progress_until(process, "reported before this command")
        _set_module_status(skr_crds, runtime, "Processing")
        _set_module_status(skr_crds, runtime, "Ready")
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "module template-operator is Ready" in stdout
    # an Error written after the command started fails it, with that Error's message
    _set_module_status(skr_crds, runtime, "Error", "old cause")
    process = kyma.process(*enable)
    try:
        _read_progress_until(process, "reported before this command")
        _set_module_status(skr_crds, runtime, "Error", "new cause")
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    assert stderr.strip().splitlines()[-1] == "Error: module template-operator is in Error: new cause"
    # a time-out names the stale Error
    _set_module_status(skr_crds, runtime, "Error", "old cause")
    late = kyma(*enable[:-1], "1")
    assert late.exit_code == 1
    assert "still the Error from before this command: old cause" in late.stderr.strip().splitlines()[-1]


def _operator_status(server: APIServer, namespace: str, state: str, observed: int) -> None:
    """The status as the operator copies it into a runtime copy: conditions observing ``observed``
    (the copy's own generation, see ``skrsync.runtime_status``)."""
    condition = {
        "type": "Modules",
        "status": "True" if state == "Ready" else "False",
        "reason": "Ready",
        "message": "modules",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": observed,
    }
    entry = {"name": "template-operator", "state": state}
    patch = {"status": {"state": state, "modules": [entry], "conditions": [condition]}}
    on(server, lambda c: c.patch_status(KYMAS, "default", patch, namespace))


def test_enable_wait_on_a_runtime_copy_waits_for_a_status_written_for_its_change(
    kyma: Kyma, skr_crds: APIServer, runtime: str
) -> None:
    """A runtime copy marked by the operator (conditions carry the copy's own generation): a Ready
    entry left from before the command (the module disabled, the operator not caught up) is not the
    answer; the status written for the command's generation is."""
    kc = str(skr_crds.kubeconfig_path)
    marked = {
        "metadata": {"annotations": {names.STATUS_GENERATION_ANNOTATION: names.STATUS_GENERATION_RUNTIME}}
    }
    on(skr_crds, lambda c: c.patch(KYMAS, "default", marked, runtime))
    before = int(_kyma_obj(skr_crds, runtime)["metadata"]["generation"])
    _operator_status(skr_crds, runtime, "Ready", before)  # stale: written for the spec without it
    process = kyma.process(
        "module", "enable", "template-operator", "--kubeconfig", kc, "-n", runtime, "-w", "--timeout", "60"
    )
    try:
        progress = _read_progress_until(process, "waiting for the operator to observe this change")
        assert "waiting for the operator to observe this change" in progress, progress
        assert process.poll() is None  # the stale Ready did not end the wait
        changed = int(_kyma_obj(skr_crds, runtime)["metadata"]["generation"])
        assert changed > before
        _operator_status(skr_crds, runtime, "Processing", changed)
        _operator_status(skr_crds, runtime, "Ready", changed)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "module template-operator is Ready" in stdout


def test_parallel_enables_all_land(kyma: Kyma, skr_crds: APIServer, runtime: str) -> None:
    async def more_modules(client: KubeClient) -> None:
        template, meta = _upstream_catalog(runtime)
        for i in range(4):
            t, m = copy.deepcopy(template), copy.deepcopy(meta)
            t["metadata"]["name"] = f"{PARALLEL[i]}-1.0.1"
            t["spec"]["moduleName"] = PARALLEL[i]
            m["metadata"]["name"] = m["spec"]["moduleName"] = PARALLEL[i]
            await client.create(TEMPLATES, t)
            await client.create(RELEASE_METAS, m)

    on(skr_crds, more_modules)
    kc = str(skr_crds.kubeconfig_path)
    processes = [
        kyma.process("module", "enable", PARALLEL[i], "--kubeconfig", kc, "-n", runtime) for i in range(4)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
    enabled = {m["name"] for m in _kyma_obj(skr_crds, runtime)["spec"]["modules"]}
    assert enabled == set(PARALLEL)


def test_parallel_creates_and_pushes_agree(kyma: Kyma, oci_registry: LocalRegistry, module_name: str) -> None:
    config = write_module_source(kyma.cwd / "src", module_name)
    base = f"{oci_registry.host}/modules"
    processes = [
        kyma.process(
            "module",
            "create",
            "-c",
            str(config),
            "-d",
            "shared",
            "-r",
            base,
            "--insecure",
            "-o",
            "json",
            "-q",
        )
        for _ in range(4)
    ]
    try:  # every process read to its end before any assertion: no pipe left open for a later test
        outcomes = [process.communicate(timeout=120) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    digests = set()
    for process, (stdout, stderr) in zip(processes, outcomes, strict=True):
        assert process.returncode == 0, stderr
        digests.add(json.loads(stdout)["digest"])
    assert len(digests) == 1
    leftovers = [p.name for p in kyma.cwd.iterdir() if p.name.startswith(".shared")]
    assert leftovers == []


def test_kubeconfig_without_access(kyma: Kyma, skr_crds: APIServer, tmp_path: Path, runtime: str) -> None:
    stranger = pki.CertificateAuthority("stranger").issue("intruder", client=True)
    config = pki.kubeconfig("skr", skr_crds.url, skr_crds.ca_pem, stranger)
    (tmp_path / "bad-kubeconfig").write_bytes(config)
    result = kyma("module", "list", "--kubeconfig", str(tmp_path / "bad-kubeconfig"), "-n", runtime)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: no access:") and len(result.stderr.strip().splitlines()) == 1
    missing = kyma("module", "list", "--kubeconfig", str(tmp_path / "nope"))
    assert missing.exit_code == 1 and "no such file" in missing.stderr
    no_kyma = kyma(
        "module", "list", "--kubeconfig", str(skr_crds.kubeconfig_path), "-n", names.KCP_NAMESPACE + "-absent"
    )
    assert no_kyma.exit_code == 1 and "no Kyma" in no_kyma.stderr
