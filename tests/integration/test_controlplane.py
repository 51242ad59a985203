"""The local control plane: real etcd + kube-apiservers side by side, isolated, and cleaned up."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import kubernetes
import pytest

from tests.controlplane.binaries import LivingBinaries, find_or_build_living
from tests.controlplane.cluster import APIServer, ControlPlane, ControlPlaneError


def _core(server: APIServer) -> tuple[kubernetes.client.ApiClient, kubernetes.client.CoreV1Api]:
    api_client = kubernetes.config.new_client_from_config(config_file=str(server.kubeconfig_path))
    return api_client, kubernetes.client.CoreV1Api(api_client)


def test_kcp_and_two_skrs_are_separate_clusters(
    kcp: APIServer, skr: APIServer, skr_b: APIServer, unique_name: str
) -> None:
    assert len({kcp.port, skr.port, skr_b.port}) == 3
    clients = [_core(server) for server in (kcp, skr, skr_b)]
    try:
        kcp_core = clients[0][1]
        kcp_core.create_namespace({"metadata": {"name": unique_name}})
        assert kcp_core.read_namespace(unique_name).metadata.name == unique_name
        for _, core in clients[1:]:
            with pytest.raises(kubernetes.client.ApiException) as missing:
                core.read_namespace(unique_name)
            assert missing.value.status == 404
    finally:
        for api_client, _ in clients:
            api_client.close()


def test_admin_kubeconfig_is_cluster_admin(skr: APIServer) -> None:
    api_client = kubernetes.config.new_client_from_config(config_file=str(skr.kubeconfig_path))
    try:
        review = kubernetes.client.AuthorizationV1Api(api_client).create_self_subject_access_review(
            {"spec": {"resourceAttributes": {"verb": "*", "resource": "*", "group": "*"}}}
        )
        assert review.status.allowed is True
    finally:
        api_client.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_terminates_every_process_and_removes_its_workdir(control_plane: ControlPlane) -> None:
    plane = ControlPlane(["solo"])
    with plane:
        pid = plane["solo"].pid
        workdir = plane.workdir
        assert pid is not None and _alive(pid)
    assert not _alive(pid)
    assert not workdir.exists()


def test_a_failing_apiserver_is_reported_with_its_log_and_cleaned_up(control_plane: ControlPlane) -> None:
    plane = ControlPlane(["broken"], extra_apiserver_args={"broken": ["--no-such-flag=1"]}, ready_timeout=30)
    with pytest.raises(ControlPlaneError, match="no-such-flag"):
        plane.start()
    assert plane.servers["broken"].pid is not None
    assert not _alive(plane.servers["broken"].pid)


def test_a_living_component_that_dies_is_reported_and_everything_is_stopped(
    control_plane: ControlPlane,
) -> None:
    real = find_or_build_living()
    broken = LivingBinaries(
        real.kube_controller_manager, Path(shutil.which("false") or "/bin/false"), real.kwok
    )
    plane = ControlPlane(["dying"], living=True, nodes=1, living_binaries=broken, ready_timeout=30)
    with pytest.raises(ControlPlaneError, match=r"kube-scheduler dying exited with code 1"):
        plane.start()
    pids = plane["dying"].pids()
    assert set(pids) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    assert not any(_alive(pid) for pid in pids.values())
    assert not plane.workdir.exists()
