"""The README's run command brings the whole system up, routes a runtime edit to its Kyma, and stops."""

from __future__ import annotations

import os
import re

import kubernetes
import pytest

from localrun.__main__ import main as localrun_main
from localrun.kcp import RUN_DIR
from tests.controlplane.crds import crd_documents


def test_local_run_once_routes_a_runtime_edit_to_a_targeted_reconcile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert localrun_main(["--once", "--skrs", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"ready in [0-9.]+s; {len(crd_documents())} CRDs installed in KCP", out)
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
    # published by the real `kyma module create/template/deploy`, two versions in two channels
    for version, channel in (("1.0.0", "regular"), ("1.1.0", "fast")):
        assert re.search(
            rf"kyma module create \+ push: kyma-project\.io/module/sample:{version} -> "
            rf"127\.0\.0\.1:\d+/modules \(channel {channel}\)",
            out,
        )
    assert "ModuleReleaseMeta sample (regular -> 1.0.0, fast -> 1.1.0) in KCP kcp-system" in out
    # through the catalog: the module is enabled in the runtime's Kyma and the Kyma controller
    # creates its Manifest (upstream's name), which the Manifest controller installs
    enabled = out.index("--once: enabled module sample in the runtime's Kyma kyma-system/default")
    installed = re.compile(
        r"Manifest kcp-system/(rt-skr-1-sample-\d+) is Ready: module sample installed"
    ).search(out, enabled)
    assert installed is not None
    deleted = out.index("--once: deleting ConfigMap sample-system/sample-config", installed.end())
    assert re.compile(
        rf"--once: ConfigMap restored by Manifest kcp-system/{installed.group(1)} after \d+ ms"
    ).search(out, deleted)


DEMO_ROWS = [
    ("catalog", "ModuleReleaseMeta in the runtime"),
    ("enable sample (regular)", "Manifest in KCP"),
    ("enable sample (regular)", "module Ready (1.0.0) in the runtime"),
    ("delete module Deployment", "Deployment restored"),
    ("delete module Deployment", "restored Deployment available"),
    ("switch channel regular -> fast", "Manifest at 1.1.0"),
    ("switch channel regular -> fast", "Deployment rolled to 1.1.0"),
    ("switch channel regular -> fast", "module Ready (1.1.0)"),
    ("3 s outage", "agent seen alive before the cut"),
    ("3 s outage", "no edit landed while cut"),
    ("3 s outage (from restore)", "Deployment restored"),
    ("3 s outage (from restore)", "ConfigMap restored"),
    ("3 s outage (from restore)", "KCP read channel=fast"),
    ("3 s outage (from restore)", "restored Deployment available"),
    ("disable sample", "Manifest deleted in KCP"),
    ("disable sample", "module Deployment gone"),
    ("disable sample", "module gone from status"),
]


def test_demo_walks_through_the_module_session_with_a_short_outage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert localrun_main(["--demo", "--demo-outage", "3"]) == 0
    out = capsys.readouterr().out
    assert "demo: kyma module list" in out
    assert re.search(r"^sample\s", out, re.MULTILINE)  # the CLI's list shows the published module
    table = out[out.index("\nstep  ") + 1 :]
    rows = table.splitlines()[2 : 2 + len(DEMO_ROWS)]
    for (step, what), row in zip(DEMO_ROWS, rows, strict=True):
        cells = [c.strip() for c in re.split(r"\s{2,}", row)]
        assert cells[:2] == [step, what], row
        assert re.fullmatch(r"\d+ ms", cells[2]), row
        assert cells[3] == "ok", row
    outage = next(r for r in rows if "no edit landed while cut" in r)
    assert int(re.findall(r"(\d+) ms", outage)[0]) >= 3000
    assert f"{len(DEMO_ROWS)} of {len(DEMO_ROWS)} ok" in table
    assert "demo: all steps OK; stopping" in out
