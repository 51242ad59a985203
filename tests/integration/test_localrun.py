"""The README's run command starts KCP + SKR with CRDs, reports how to reach them, and stops cleanly."""

from __future__ import annotations

import re

import kubernetes
import pytest

from tests.controlplane import localrun


def test_local_run_once_brings_up_kcp_and_skr_with_crds(capsys: pytest.CaptureFixture[str]) -> None:
    assert localrun.main(["--once", "--skrs", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ready in [0-9.]+s; 7 CRDs installed in KCP", out)
    urls = dict(re.findall(r"^\s+(kcp|skr-1)\s+(https://127\.0\.0\.1:\d+)", out, re.MULTILINE))
    assert set(urls) == {"kcp", "skr-1"}
    # Everything was stopped again: the written kubeconfig points at a server that is gone.
    api_client = kubernetes.config.new_client_from_config(
        config_file=str(localrun.RUN_DIR / "kcp.kubeconfig")
    )
    api_client.configuration.retries = 0
    try:
        with pytest.raises(Exception, match=r"Connection refused|Max retries"):
            kubernetes.client.CoreV1Api(api_client).list_namespace(_request_timeout=2)
    finally:
        api_client.close()
