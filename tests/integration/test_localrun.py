"""The README's run command brings the whole system up, routes a runtime edit to its Kyma, and stops."""

from __future__ import annotations

import os
import re

import kubernetes
import pytest

from localrun.__main__ import main as localrun_main
from localrun.kcp import RUN_DIR


def test_local_run_once_routes_a_runtime_edit_to_a_targeted_reconcile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert localrun_main(["--once", "--skrs", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ready in [0-9.]+s; 7 CRDs installed in KCP", out)
    urls = dict(re.findall(r"^\s+(kcp|skr-1)\s+(https://127\.0\.0\.1:\d+)", out, re.MULTILINE))
    assert set(urls) == {"kcp", "skr-1"}
    assert re.search(r"operator running: listener on 127\.0\.0\.1:\d+", out)
    pids = [int(pid) for pid in re.findall(r"agent for skr-1 started \(pid (\d+)\)", out)]
    assert len(pids) == 1
    assert re.search(r"agent for skr-1 running on https://127\.0\.0\.1:\d+ \(ready\)", out)
    assert "Kyma kcp-system/rt-skr-1 is Ready" in out

    # the edit, the routed event and the targeted reconcile that read the new spec, in this order
    edit = out.index(
        "--once: editing runtime Kyma kyma-system/default in skr-1: spec.channel regular -> fast"
    )
    routed = out.index(
        "event from runtime rt-skr-1 (signed, verified) -> listener enqueues Kyma kcp-system/rt-skr-1", edit
    )
    reconciled = re.compile(
        r"targeted reconcile Kyma kcp-system/rt-skr-1 \[runtime event[^\]]*\]: Ready: .*channel=fast"
    )
    assert reconciled.search(out, routed)
    assert "--once: OK" in out

    # everything was stopped again: the agent process and the API servers are gone
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)
    api_client = kubernetes.config.new_client_from_config(config_file=str(RUN_DIR / "kcp.kubeconfig"))
    api_client.configuration.retries = 0
    try:
        with pytest.raises(Exception, match=r"Connection refused|Max retries"):
            kubernetes.client.CoreV1Api(api_client).list_namespace(_request_timeout=2)
    finally:
        api_client.close()


def test_local_run_with_a_module_installs_it_and_repairs_its_drift(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert localrun_main(["--once", "--module"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"local OCI registry \(plain HTTP\) on 127\.0\.0\.1:\d+", out)
    # through the catalog: the module is enabled in the runtime's Kyma and the Kyma controller
    # creates its Manifest (upstream's name), which the Manifest controller installs
    enabled = out.index("enabled module sample in the runtime's Kyma kyma-system/default")
    installed = re.compile(
        r"Manifest kcp-system/(rt-skr-1-sample-\d+) is Ready: module sample installed"
    ).search(out, enabled)
    assert installed is not None
    deleted = out.index("--once: deleting ConfigMap kyma-system/sample-module-config", installed.end())
    assert re.compile(
        rf"--once: ConfigMap restored by Manifest kcp-system/{installed.group(1)} after \d+ ms"
    ).search(out, deleted)
