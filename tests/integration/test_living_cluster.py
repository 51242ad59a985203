"""The living local cluster: workloads roll out on kwok nodes, garbage collection and namespace deletion work.

Against the session's living cluster (real kube-apiserver, kube-controller-manager, kube-scheduler
from k8s.io/kubernetes v1.36.3, and kwok): nothing here writes a status; every state comes from the
controllers, the scheduler and kwok. The node-failure test has a living cluster of its own (one
node, short node-monitor periods) since it takes that node away.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import (
    CONFIGMAPS,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    PODS,
    SECRETS,
    Resource,
)
from tests.controlplane.cluster import APIServer, ControlPlane
from tests.controlplane.living import node_names
from tests.polling import eventually

REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.test/app:1.0.0"}]},
            },
        },
    }


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


@pytest.fixture
async def namespace(living_client: KubeClient, unique_name: str) -> AsyncIterator[str]:
    await living_client.create(NAMESPACES, {"metadata": {"name": unique_name}})
    try:
        yield unique_name
    finally:
        with contextlib.suppress(NotFound):
            await living_client.delete(NAMESPACES, unique_name)


async def test_a_deployment_becomes_available_with_ready_pods_on_kwok_nodes(
    living_client: KubeClient, namespace: str
) -> None:
    await living_client.create(
        DEPLOYMENTS, {**deployment("web", 3), "metadata": {"name": "web", "namespace": namespace}}
    )

    async def available() -> dict[str, Any] | None:
        obj = await living_client.get(DEPLOYMENTS, "web", namespace)
        status = obj.get("status") or {}
        done = status.get("availableReplicas") == 3 and status.get("readyReplicas") == 3
        return obj if done and _condition(obj, "Available") == "True" else None

    rolled_out = await eventually(available, "Deployment web Available with 3 ready replicas", within=60)
    assert rolled_out["status"]["observedGeneration"] == rolled_out["metadata"]["generation"]

    (replica_set,) = (await living_client.list(REPLICA_SETS, namespace)).items
    assert replica_set["metadata"]["ownerReferences"][0]["uid"] == rolled_out["metadata"]["uid"]
    pods = (await living_client.list(PODS, namespace, label_selector="app=web")).items
    assert len(pods) == 3
    kwok_nodes = set(node_names(3))
    for pod in pods:
        assert pod["metadata"]["ownerReferences"][0]["uid"] == replica_set["metadata"]["uid"]
        assert pod["spec"]["nodeName"] in kwok_nodes, "bound by the scheduler to a kwok node"
        assert pod["status"]["phase"] == "Running" and _condition(pod, "Ready") == "True"
        assert pod["status"]["podIP"].startswith("10.244."), "an address from kwok's pod CIDR"

    # a rollout: new template -> new ReplicaSet, old pods replaced, Available again
    await living_client.patch(
        DEPLOYMENTS,
        "web",
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "app", "image": "registry.test/app:1.1.0"}]}}
            }
        },
        namespace,
    )

    async def rolled() -> bool:
        obj = await living_client.get(DEPLOYMENTS, "web", namespace)
        status = obj.get("status") or {}
        pods = (await living_client.list(PODS, namespace, label_selector="app=web")).items
        images = {pod["spec"]["containers"][0]["image"] for pod in pods}
        return (
            status.get("observedGeneration") == obj["metadata"]["generation"]
            and status.get("updatedReplicas") == 3
            and status.get("availableReplicas") == 3
            and images == {"registry.test/app:1.1.0"}
            and len(pods) == 3
        )

    await eventually(rolled, "rollout to app:1.1.0 complete, old pods gone", within=60)


async def test_deleting_an_owner_garbage_collects_its_dependents(
    living_client: KubeClient, namespace: str
) -> None:
    owner = await living_client.create(CONFIGMAPS, {"metadata": {"name": "owner", "namespace": namespace}})
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    for name in ("dependent-a", "dependent-b"):
        await living_client.create(
            SECRETS, {"metadata": {"name": name, "namespace": namespace, "ownerReferences": [reference]}}
        )
    await living_client.create(CONFIGMAPS, {"metadata": {"name": "bystander", "namespace": namespace}})
    await living_client.create(
        DEPLOYMENTS, {**deployment("job", 2), "metadata": {"name": "job", "namespace": namespace}}
    )

    async def two_pods() -> bool:
        return len((await living_client.list(PODS, namespace, label_selector="app=job")).items) == 2

    await eventually(two_pods, "the Deployment's two pods", within=60)

    await living_client.delete(CONFIGMAPS, "owner", namespace)
    await living_client.delete(DEPLOYMENTS, "job", namespace)

    async def collected() -> bool:
        secrets = {s["metadata"]["name"] for s in (await living_client.list(SECRETS, namespace)).items}
        replica_sets = (await living_client.list(REPLICA_SETS, namespace)).items
        pods = (await living_client.list(PODS, namespace)).items
        return not ({"dependent-a", "dependent-b"} & secrets) and not replica_sets and not pods

    await eventually(collected, "Secrets owned by the ConfigMap, ReplicaSet and pods collected", within=60)
    assert (await living_client.get(CONFIGMAPS, "bystander", namespace))["metadata"]["name"] == "bystander"


async def test_a_deleted_namespace_goes_away_with_its_content(
    living_client: KubeClient, unique_name: str
) -> None:
    await living_client.create(NAMESPACES, {"metadata": {"name": unique_name}})
    await living_client.create(CONFIGMAPS, {"metadata": {"name": "data", "namespace": unique_name}})
    await living_client.create(
        DEPLOYMENTS, {**deployment("app", 1), "metadata": {"name": "app", "namespace": unique_name}}
    )

    async def running() -> bool:
        pods = (await living_client.list(PODS, unique_name)).items
        return len(pods) == 1 and _condition(pods[0], "Ready") == "True"

    await eventually(running, "the namespace's pod Ready", within=60)
    await living_client.delete(NAMESPACES, unique_name)

    async def gone() -> bool:
        try:
            await living_client.get(NAMESPACES, unique_name)
        except NotFound:
            return True
        return False

    await eventually(gone, f"namespace {unique_name} deleted (content removed, finalizer cleared)", within=60)


async def test_nodes_are_kwok_nodes_that_stay_ready(living_client: KubeClient) -> None:
    nodes = {
        n["metadata"]["name"]: n for n in (await living_client.list(NODES, label_selector="type=kwok")).items
    }
    assert set(nodes) == set(node_names(3))
    for node in nodes.values():
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert _condition(node, "Ready") == "True"
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok-")


def _listening(pid: int) -> set[str]:
    """``host:port`` of every TCP socket ``pid`` listens on (from /proc, Linux)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                host = (
                    ".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0))
                    if len(address) == 8
                    else address
                )
                found.add(f"{host}:{int(port, 16)}")
    return found


def test_every_component_listens_on_loopback_only(living: APIServer) -> None:
    pids = living.pids()
    assert set(pids) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    for name, pid in pids.items():
        addresses = _listening(pid)
        assert all(address.startswith("127.0.0.1:") for address in addresses), (name, addresses)
    assert _listening(pids["kube-apiserver"]) >= {f"127.0.0.1:{living.port}"}


def test_living_names_must_be_clusters_of_the_plane() -> None:
    with pytest.raises(ValueError, match="living clusters must be among the names: skr-x"):
        ControlPlane(["kcp"], living=["skr-x"])
    with pytest.raises(ValueError, match="at least one node"):
        ControlPlane(["kcp"], living=True, nodes=0)
    with pytest.raises(
        ValueError, match="living_args are for kube-controller-manager, kube-scheduler, kwok, not kubelet"
    ):
        ControlPlane(["kcp"], living=True, living_args={"kubelet": ["--v=2"]})


# A node is lost 6 s after its last Lease renewal (kube-controller-manager checks every second);
# kwok renews every second (a quarter of its 4 s lease), so a node never counts as lost by accident.
# Real clusters: 50 s grace, 40 s leases renewed every 10 s; the behaviour is the same.
NODE_FAILURE_ARGS = {
    # --v=2: its "Node hasn't been updated" line (node lifecycle controller) ends the API outage below
    "kube-controller-manager": ["--node-monitor-period=1s", "--node-monitor-grace-period=6s", "--v=2"],
    "kwok": ["--node-lease-duration-seconds=4"],
}


@pytest.fixture(scope="module")
def lonely_node() -> Iterator[APIServer]:
    """A living cluster of its own with one kwok node that the test may take away."""
    with ControlPlane(["heal"], living=True, nodes=1, living_args=NODE_FAILURE_ARGS) as plane:
        yield plane["heal"]


async def _node(client: KubeClient, name: str) -> tuple[str | None, set[str]]:
    """The node's Ready condition status and its taints' keys."""
    node = await client.get(NODES, name)
    return _condition(node, "Ready"), {t["key"] for t in (node.get("spec") or {}).get("taints") or []}


async def test_a_node_that_comes_back_readies_its_running_pods_again(lonely_node: APIServer) -> None:
    """kwok stops (SIGSTOP: the node's kubelet hangs, no Lease renewal): kube-controller-manager
    marks the node not ready, taints it and sets its pod's Ready condition False. kwok resumes: the
    node renews its Lease and is Ready again, untainted, and the same pod (not a replacement) is
    Ready again, so its Deployment is Available again -- as a real node that comes back."""
    (node_name,) = node_names(1)
    kwok = lonely_node.components["kwok"]
    client = KubeClient.from_kubeconfig_file(lonely_node.kubeconfig_path)
    namespace = "node-failure"
    try:
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        await client.create(
            DEPLOYMENTS, {**deployment("app", 1), "metadata": {"name": "app", "namespace": namespace}}
        )

        async def ready_pod() -> dict[str, Any] | None:
            pods = (await client.list(PODS, namespace, label_selector="app=app")).items
            ready = [p for p in pods if _condition(p, "Ready") == "True"]
            return ready[0] if len(pods) == 1 and ready else None

        pod = await eventually(ready_pod, "the Deployment's pod Ready", within=60)
        uid, pod_name = pod["metadata"]["uid"], pod["metadata"]["name"]

        kwok.signal(signal.SIGSTOP)
        try:

            async def lost() -> bool:
                ready, taints = await _node(client, node_name)
                pod = await client.get(PODS, pod_name, namespace)
                return (
                    ready == "Unknown"
                    and "node.kubernetes.io/unreachable" in taints
                    and _condition(pod, "Ready") == "False"
                )

            await eventually(lost, "node Unknown and tainted, its pod not Ready", within=60, interval=0.2)
            paused_until = time.time()
        finally:
            kwok.signal(signal.SIGCONT)

        async def healed() -> bool:
            ready, taints = await _node(client, node_name)
            pod = await client.get(PODS, pod_name, namespace)
            app = await client.get(DEPLOYMENTS, "app", namespace)
            return (
                ready == "True"
                and not any(key.startswith("node.kubernetes.io/") for key in taints)
                and _condition(pod, "Ready") == "True"
                and (app.get("status") or {}).get("availableReplicas") == 1
            )

        await eventually(healed, "node Ready and untainted, its pod Ready again", within=60, interval=0.2)
        pods = (await client.list(PODS, namespace, label_selector="app=app")).items
        assert [p["metadata"]["uid"] for p in pods] == [uid], "the same pod, not a replacement"
        assert pods[0]["status"]["phase"] == "Running"

        async def renewing() -> bool:  # the node's heartbeats resumed
            lease = await client.get(LEASES, node_name, "kube-node-lease")
            renewed = datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
            return renewed.timestamp() > paused_until

        await eventually(renewing, "the node's Lease renewed after the pause", within=30, interval=0.2)
    finally:
        await client.close()


def _stale_node_lines(log: str, node: str) -> int:
    """kube-controller-manager's "Node hasn't been updated" lines (``--v=2``) about ``node``."""
    return sum(
        1 for line in log.splitlines() if "Node hasn't been updated" in line and f'node="{node}"' in line
    )


async def _available(client: KubeClient, namespace: str) -> dict[str, Any] | None:
    """The Deployment ``app``'s one pod, once it is Ready and the Deployment Available."""
    pods = (await client.list(PODS, namespace, label_selector="app=app")).items
    app = await client.get(DEPLOYMENTS, "app", namespace)
    done = (app.get("status") or {}).get("availableReplicas") == 1 and len(pods) == 1
    return pods[0] if done and _condition(pods[0], "Ready") == "True" else None


async def test_the_cluster_heals_after_an_api_server_outage_longer_than_the_grace_period(
    lonely_node: APIServer,
) -> None:
    """The issue as `make run` met it: the runtime's API server is away for longer than the node
    grace period. Neither kwok nor the controller manager can write meanwhile; when it is back the
    controller manager may find the node's Lease stale and mark the node and its pod not ready
    before kwok renews it (a race on their clocks), so the test asserts the end state: the node
    renews its Lease, is Ready and untainted, and the same pod is Ready, its Deployment Available."""
    (node_name,) = node_names(1)
    namespace = "api-outage"
    client = KubeClient.from_kubeconfig_file(lonely_node.kubeconfig_path)
    try:
        await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        await client.create(
            DEPLOYMENTS, {**deployment("app", 1), "metadata": {"name": "app", "namespace": namespace}}
        )

        uid = (
            await eventually(lambda: _available(client, namespace), "the Deployment Available", within=60)
        )["metadata"]["uid"]
    finally:
        await client.close()

    # The outage lasts until the controller manager, which keeps running on its caches, has judged
    # the node stale (no Lease renewal it could see for the grace period): from then on it marks
    # the node and its pod not ready as soon as the API server is back, the case of the issue.
    manager_log = lonely_node.components["kube-controller-manager"].log_path
    judged_before = _stale_node_lines(manager_log.read_text(errors="replace"), node_name)
    lonely_node.process.stop()
    await eventually(
        lambda: _stale_node_lines(manager_log.read_text(errors="replace"), node_name) > judged_before,
        "the controller manager judged the node stale during the outage",
        within=60,
        interval=0.2,
    )
    lonely_node.process.start()
    back_at = time.time()

    client = KubeClient.from_kubeconfig_file(lonely_node.kubeconfig_path)
    try:

        async def healed() -> bool:
            try:
                ready, taints = await _node(client, node_name)
                lease = await client.get(LEASES, node_name, "kube-node-lease")
                pod = await _available(client, namespace)
            except KubeError:  # still starting
                return False
            renewed = datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
            return (
                ready == "True"
                and not any(key.startswith("node.kubernetes.io/") for key in taints)
                and renewed.timestamp() > back_at
                and pod is not None
                and pod["metadata"]["uid"] == uid
            )

        await eventually(
            healed, "node renewed, Ready, untainted; the same pod Ready", within=90, interval=0.5
        )
    finally:
        await client.close()
