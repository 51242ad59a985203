"""KubeClient against a real API server: CRUD, patch, apply, status, pagination, watch, typed errors."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_operator.runtime import (
    AlreadyExists,
    Conflict,
    Forbidden,
    Invalid,
    KubeClient,
    KubeTransportError,
    NotFound,
    Resource,
    Unauthorized,
    WatchListUnsupported,
)
from kyma_operator.runtime.resources import CONFIGMAPS, NAMESPACES, SERVICE_ACCOUNTS
from kyma_operator.runtime.streamedlists import StreamedLists
from tests.controlplane.cluster import APIServer, ControlPlane


def configmap(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "data": data}


async def test_configmap_crud_and_typed_errors(client: KubeClient, namespace: str) -> None:
    created = await client.create(CONFIGMAPS, configmap("a", namespace, k="v"))
    assert created["metadata"]["uid"]
    assert (await client.get(CONFIGMAPS, "a", namespace))["data"] == {"k": "v"}

    with pytest.raises(AlreadyExists) as exists:
        await client.create(CONFIGMAPS, configmap("a", namespace))
    assert isinstance(exists.value, Conflict) and exists.value.status == 409

    created["data"] = {"k": "v2"}
    updated = await client.update(CONFIGMAPS, created)
    assert updated["data"] == {"k": "v2"}
    created["data"] = {"k": "stale"}
    with pytest.raises(Conflict) as conflict:
        await client.update(CONFIGMAPS, created)  # resourceVersion is now stale
    assert not isinstance(conflict.value, AlreadyExists)

    patched = await client.patch(CONFIGMAPS, "a", {"data": {"k": None, "n": "1"}}, namespace)
    assert patched["data"] == {"n": "1"}

    with pytest.raises(Invalid) as invalid:
        await client.create(CONFIGMAPS, configmap("Not_A_DNS_Name", namespace))
    assert invalid.value.status == 422 and "Not_A_DNS_Name" in invalid.value.message

    await client.delete(CONFIGMAPS, "a", namespace)
    with pytest.raises(NotFound):
        await client.get(CONFIGMAPS, "a", namespace)
    with pytest.raises(NotFound) as missing:
        await client.delete(CONFIGMAPS, "a", namespace)
    assert missing.value.status == 404 and missing.value.reason == "NotFound"


async def test_get_or_none_is_none_for_a_missing_object_and_raises_every_other_error(
    client: KubeClient, namespace: str, kcp: APIServer
) -> None:
    await client.create(CONFIGMAPS, configmap("present", namespace, k="v"))
    present = await client.get_or_none(CONFIGMAPS, "present", namespace)
    assert present is not None and present["data"] == {"k": "v"}
    assert await client.get_or_none(CONFIGMAPS, "absent", namespace) is None
    assert await client.get_or_none(NAMESPACES, f"{namespace}-absent") is None  # cluster-scoped
    with pytest.raises(ValueError):
        await client.get_or_none(CONFIGMAPS, "present")  # namespaced kind without namespace

    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "reader", "namespace": namespace}})
    review = await client.create_subresource(
        SERVICE_ACCOUNTS, "reader", "token", {"spec": {"expirationSeconds": 600}}, namespace
    )
    config = yaml.safe_load(kcp.kubeconfig)
    config["users"][0]["user"] = {"token": review["status"]["token"]}
    async with KubeClient.from_kubeconfig_bytes(yaml.safe_dump(config)) as service_account:
        with pytest.raises(Forbidden) as forbidden:  # refused before the lookup: not read as missing
            await service_account.get_or_none(CONFIGMAPS, "absent", namespace)
    assert forbidden.value.status == 403


async def test_bad_input_is_rejected_before_any_request(client: KubeClient, namespace: str) -> None:
    with pytest.raises(ValueError):
        await client.get(CONFIGMAPS, "a")  # namespaced kind without namespace
    with pytest.raises(ValueError):
        await client.create(CONFIGMAPS, {"metadata": {"namespace": namespace}})
    with pytest.raises(ValueError):
        await client.create(
            CONFIGMAPS, {"metadata": {"name": "x", "namespace": namespace, "resourceVersion": "1"}}
        )
    with pytest.raises(ValueError):
        await client.apply(CONFIGMAPS, configmap("x", namespace), field_manager="")
    with pytest.raises(ValueError):
        await client.get(CONFIGMAPS, "", namespace)
    assert (await client.list(CONFIGMAPS, namespace)).items == []


async def test_server_side_apply_owns_fields_and_detects_conflicts(
    client: KubeClient, namespace: str
) -> None:
    first = await client.apply(CONFIGMAPS, configmap("s", namespace, a="1"), field_manager="one")
    assert first["data"] == {"a": "1"}
    await client.apply(CONFIGMAPS, configmap("s", namespace, b="2"), field_manager="two")
    with pytest.raises(Conflict):
        await client.apply(
            CONFIGMAPS, configmap("s", namespace, a="changed"), field_manager="two", force=False
        )
    # "two" takes over "a" and keeps "b" (fields a manager leaves out of its apply are dropped)
    forced = await client.apply(
        CONFIGMAPS, configmap("s", namespace, a="changed", b="2"), field_manager="two"
    )
    assert forced["data"] == {"a": "changed", "b": "2"}
    # "one" no longer owns anything: applying without "a" drops nothing owned by "two".
    again = await client.apply(CONFIGMAPS, configmap("s", namespace), field_manager="one")
    assert again["data"] == {"a": "changed", "b": "2"}
    managers = {entry["manager"] for entry in again["metadata"]["managedFields"]}
    assert {"two"} <= managers


async def test_list_pagination_and_selectors(client: KubeClient, namespace: str) -> None:
    for i in range(7):
        body = configmap(f"p{i}", namespace)
        body["metadata"]["labels"] = {"parity": "even" if i % 2 == 0 else "odd"}
        await client.create(CONFIGMAPS, body)
    page = await client.list(CONFIGMAPS, namespace, limit=3)
    assert len(page.items) == 3 and page.continue_token
    assert page.items[0]["kind"] == "ConfigMap" and page.items[0]["apiVersion"] == "v1"
    second = await client.list(CONFIGMAPS, namespace, limit=3, continue_token=page.continue_token)
    assert {i["metadata"]["name"] for i in second.items}.isdisjoint(
        {i["metadata"]["name"] for i in page.items}
    )
    everything = await client.list_all(CONFIGMAPS, namespace, page_size=2)
    assert sorted(i["metadata"]["name"] for i in everything.items) == [f"p{i}" for i in range(7)]
    assert everything.resource_version and everything.continue_token is None
    odd = await client.list_all(CONFIGMAPS, namespace, label_selector="parity=odd")
    assert sorted(i["metadata"]["name"] for i in odd.items) == ["p1", "p3", "p5"]
    by_field = await client.list(CONFIGMAPS, namespace, field_selector="metadata.name=p4")
    assert [i["metadata"]["name"] for i in by_field.items] == ["p4"]


async def test_a_metadata_only_list_has_each_items_metadata_and_nothing_else(
    client: KubeClient, namespace: str
) -> None:
    for i in range(3):
        body = configmap(f"m{i}", namespace, payload="x" * 2000)
        body["metadata"]["labels"] = {"meta": "yes" if i else "no"}
        await client.create(CONFIGMAPS, body)
    full = await client.list_all(CONFIGMAPS, namespace, label_selector="meta=yes")
    lean = await client.list_all(
        CONFIGMAPS, namespace, label_selector="meta=yes", metadata_only=True, page_size=1
    )
    assert [i["metadata"] for i in lean.items] == [i["metadata"] for i in full.items]
    assert {i["kind"] for i in lean.items} == {"PartialObjectMetadata"}
    assert all("data" not in i for i in lean.items) and all("data" in i for i in full.items)
    assert lean.resource_version and lean.continue_token is None
    # an empty one comes with "items": null
    assert (
        await client.list_all(CONFIGMAPS, namespace, label_selector="meta=maybe", metadata_only=True)
    ).items == []


async def test_a_large_list_is_decoded_item_by_item_as_it_arrives(client: KubeClient, namespace: str) -> None:
    """A list of ~1.5 MB arrives in many chunks; each item reaches the transform once, whole, and
    equals the object read alone (from etcd, and from the watch cache with ``resourceVersion=0``)."""
    filler = "0123456789abcdef" * 1500  # 24 KB per object, multi-byte text included
    for i in range(60):
        await client.create(CONFIGMAPS, configmap(f"big{i}", namespace, text=f"{filler}-{i}-zwölf ☃"))
    seen: list[str] = []

    def transform(item: dict[str, Any]) -> dict[str, Any]:
        seen.append(item["metadata"]["name"])
        return {"name": item["metadata"]["name"], "kind": item["kind"], "text": item["data"]["text"]}

    for resource_version in (None, "0"):
        seen.clear()
        listed = await client.list(
            CONFIGMAPS, namespace, transform=transform, resource_version=resource_version
        )
        assert sorted(seen) == sorted(f"big{i}" for i in range(60))
        assert listed.resource_version and listed.continue_token is None
        one = await client.get(CONFIGMAPS, "big7", namespace)
        assert {"name": "big7", "kind": "ConfigMap", "text": one["data"]["text"]} in listed.items
    paged = await client.list_all(CONFIGMAPS, namespace, page_size=7, transform=transform)
    assert sorted(i["name"] for i in paged.items) == sorted(f"big{i}" for i in range(60))


async def test_watch_list_streams_the_snapshot_and_ends_at_its_bookmark(
    client: KubeClient, namespace: str
) -> None:
    """``watch_list`` gives what a list gives (selector applied, each item through the transform
    once) and a resourceVersion from which a watch brings exactly the changes made after it."""
    for i in range(40):
        body = configmap(f"s{i}", namespace, n=str(i))
        body["metadata"]["labels"] = {"shard": str(i % 4)}
        await client.create(CONFIGMAPS, body)
    seen: list[str] = []

    def transform(item: dict[str, Any]) -> dict[str, Any]:
        seen.append(item["metadata"]["name"])
        return {"metadata": {"name": item["metadata"]["name"]}, "kind": item["kind"], "data": item["data"]}

    streamed = await client.watch_list(CONFIGMAPS, namespace, label_selector="shard=1", transform=transform)
    listed = await client.list(CONFIGMAPS, namespace, label_selector="shard=1", transform=transform)
    assert sorted(seen) == sorted([f"s{i}" for i in range(1, 40, 4)] * 2)
    assert sorted(streamed.items, key=str) == sorted(listed.items, key=str) and len(streamed.items) == 10
    assert streamed.resource_version and streamed.continue_token is None

    late = configmap("late", namespace)
    late["metadata"]["labels"] = {"shard": "1"}
    await client.create(CONFIGMAPS, late)
    await client.delete(CONFIGMAPS, "s1", namespace)
    # events come in resourceVersion order: anything of the snapshot sent again would come before
    # the two later changes, so the first two events are what the watch adds to the snapshot
    after: list[tuple[str, str]] = []
    stream = client.watch(
        CONFIGMAPS,
        namespace,
        resource_version=streamed.resource_version,
        label_selector="shard=1",
        timeout_seconds=60,
    )
    async with asyncio.timeout(30), contextlib.aclosing(stream):
        async for event in stream:
            if event.type != "BOOKMARK":
                after.append((event.type, event.object["metadata"]["name"]))
            if len(after) == 2:
                break
    assert after == [("ADDED", "late"), ("DELETED", "s1")]
    empty = await client.watch_list(CONFIGMAPS, namespace, label_selector="shard=none")
    assert empty.items == [] and empty.resource_version


@pytest.fixture(scope="module")
def no_watch_list() -> Iterator[ControlPlane]:
    """An API server with the ``WatchList`` feature gate off: it refuses ``sendInitialEvents``."""
    with ControlPlane(
        ["nowatchlist"], extra_apiserver_args={"nowatchlist": ["--feature-gates=WatchList=false"]}
    ) as plane:
        yield plane


async def test_streamed_lists_fall_back_where_watch_lists_are_refused(
    no_watch_list: ControlPlane,
) -> None:
    kube = KubeClient.from_kubeconfig_file(no_watch_list["nowatchlist"].kubeconfig_path)
    try:
        for i in range(5):
            body = configmap(f"f{i}", "default")
            body["metadata"]["labels"] = {"fallback": "yes"}
            await kube.create(CONFIGMAPS, body)
        with pytest.raises(WatchListUnsupported) as refused:
            await kube.watch_list(CONFIGMAPS, "default", label_selector="fallback=yes")
        assert refused.value.status == 422 and "WatchList" in refused.value.message
        lists = StreamedLists(kube)
        first = await lists.list_all(CONFIGMAPS, "default", label_selector="fallback=yes")
        assert sorted(i["metadata"]["name"] for i in first.items) == [f"f{i}" for i in range(5)]
        assert first.resource_version and lists.stream is False
        started = kube.requests_started
        again = await lists.list_all(CONFIGMAPS, "default", label_selector="fallback=yes")
        assert len(again.items) == 5 and kube.requests_started == started + 1  # the list alone
        paged = StreamedLists(kube, fallback="paginated")
        fleet = await paged.list_all(CONFIGMAPS, "default", label_selector="fallback=yes", page_size=2)
        assert sorted(i["metadata"]["name"] for i in fleet.items) == [f"f{i}" for i in range(5)]
        assert paged.stream is False and fleet.resource_version
        started = kube.requests_started
        await paged.list_all(CONFIGMAPS, "default", label_selector="fallback=yes", page_size=2)
        assert kube.requests_started == started + 3  # three pages, no watch
    finally:
        await kube.close()


async def test_cluster_scoped_resource(client: KubeClient, unique_name: str) -> None:
    created = await client.create(NAMESPACES, {"metadata": {"name": unique_name, "labels": {"t": "1"}}})
    assert created["metadata"]["name"] == unique_name
    fetched = await client.get(NAMESPACES, unique_name)
    assert fetched["metadata"]["labels"]["t"] == "1"
    listed = await client.list_all(NAMESPACES, label_selector="t=1")
    assert unique_name in {i["metadata"]["name"] for i in listed.items}
    await client.delete(NAMESPACES, unique_name)


async def test_custom_resource_and_status_subresource(
    client: KubeClient, namespace: str, widgets: Resource
) -> None:
    body = {"metadata": {"name": "w", "namespace": namespace}, "spec": {"size": 1}}
    created = await client.create(widgets, body)
    assert (
        created["apiVersion"] == "runtime-test.kyma-project.io/v1" and created["metadata"]["generation"] == 1
    )

    created["status"] = {"state": "Ready", "observed": 1}
    created["spec"] = {"size": 99}  # ignored by the status endpoint
    with_status = await client.update_status(widgets, created)
    assert with_status["status"] == {"state": "Ready", "observed": 1}
    assert with_status["spec"] == {"size": 1} and with_status["metadata"]["generation"] == 1

    patched = await client.patch_status(widgets, "w", {"status": {"state": "Error"}}, namespace)
    assert patched["status"] == {"state": "Error", "observed": 1}

    applied = await client.apply_status(
        widgets,
        {"metadata": {"name": "w", "namespace": namespace}, "status": {"state": "Processing"}},
        field_manager="status-owner",
    )
    assert applied["status"]["state"] == "Processing"

    spec_patch = await client.patch(widgets, "w", {"spec": {"color": "red"}}, namespace)
    assert spec_patch["spec"] == {"size": 1, "color": "red"} and spec_patch["metadata"]["generation"] == 2

    with pytest.raises(Invalid):
        await client.patch(widgets, "w", {"spec": {"size": -1}}, namespace)
    with pytest.raises(NotFound):
        await client.get(widgets, "missing", namespace)


async def test_watch_streams_events_and_ends_on_server_timeout(client: KubeClient, namespace: str) -> None:
    start = await client.list(CONFIGMAPS, namespace)
    await client.create(CONFIGMAPS, configmap("w1", namespace, a="1"))
    await client.patch(CONFIGMAPS, "w1", {"data": {"a": "2"}}, namespace)
    await client.delete(CONFIGMAPS, "w1", namespace)
    seen = []
    async for event in client.watch(
        CONFIGMAPS, namespace, resource_version=start.resource_version, timeout_seconds=1
    ):
        if event.type != "BOOKMARK":
            seen.append((event.type, event.object["metadata"]["name"], event.object.get("data")))
    assert seen == [
        ("ADDED", "w1", {"a": "1"}),
        ("MODIFIED", "w1", {"a": "2"}),
        ("DELETED", "w1", {"a": "2"}),
    ]


async def test_leaving_a_watch_early_closes_it(client: KubeClient, namespace: str) -> None:
    start = await client.list(CONFIGMAPS, namespace)
    await client.create(CONFIGMAPS, configmap("e1", namespace))
    stream = client.watch(CONFIGMAPS, namespace, resource_version=start.resource_version)
    async for event in stream:
        assert event.object["metadata"]["name"] == "e1"
        break
    await stream.aclose()
    assert not client.busy  # the stream was stopped


async def test_unreachable_server_is_a_transport_error(kcp: APIServer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = yaml.safe_load(kcp.kubeconfig)
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    async with KubeClient.from_kubeconfig_bytes(yaml.safe_dump(config)) as dead:
        with pytest.raises(KubeTransportError) as err:
            await dead.get(NAMESPACES, "default")
    assert err.value.status == 0


async def test_untrusted_server_certificate_is_a_tls_transport_error(kcp: APIServer, skr: APIServer) -> None:
    config = yaml.safe_load(kcp.kubeconfig)
    # Trust the other API server's CA only: the KCP serving certificate must be rejected.
    config["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(skr.ca_pem).decode()
    async with KubeClient.from_kubeconfig_bytes(yaml.safe_dump(config)) as wrong_ca:
        with pytest.raises(KubeTransportError) as err:
            await wrong_ca.get(NAMESPACES, "default")
    assert err.value.tls


async def test_bearer_tokens_unauthorized_and_forbidden(
    client: KubeClient, namespace: str, kcp: APIServer
) -> None:
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "nobody", "namespace": namespace}})
    review = await client.create_subresource(
        SERVICE_ACCOUNTS, "nobody", "token", {"spec": {"expirationSeconds": 600}}, namespace
    )
    token = review["status"]["token"]

    def with_token(value: str) -> bytes:
        config = yaml.safe_load(kcp.kubeconfig)
        config["users"][0]["user"] = {"token": value}
        return yaml.safe_dump(config).encode()

    async with KubeClient.from_kubeconfig_bytes(with_token(token)) as service_account:
        with pytest.raises(Forbidden) as forbidden:
            await service_account.get(CONFIGMAPS, "anything", namespace)
        with pytest.raises(Forbidden):  # a list's body is streamed: the refusal is typed all the same
            await service_account.list(CONFIGMAPS, namespace)
        assert service_account.in_flight == 0
    assert forbidden.value.status == 403 and "nobody" in forbidden.value.message
    async with KubeClient.from_kubeconfig_bytes(with_token("not-a-token")) as stranger:
        with pytest.raises(Unauthorized):
            await stranger.get(CONFIGMAPS, "anything", namespace)


async def test_exec_plugin_and_token_file_authenticate(
    client: KubeClient, namespace: str, kcp: APIServer, tmp_path: Path
) -> None:
    """The two credential sources that run or read something per use: an exec plugin (a real
    program, run without blocking the loop) and a token file (re-read as it rotates)."""
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "plugged", "namespace": namespace}})
    review = await client.create_subresource(
        SERVICE_ACCOUNTS, "plugged", "token", {"spec": {"expirationSeconds": 600}}, namespace
    )
    token = review["status"]["token"]
    plugin = tmp_path / "plugin.py"
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
    answer = json.dumps(credential | {"status": {"token": token}})
    plugin.write_text(f"#!{sys.executable}\nprint({answer!r})\n")
    plugin.chmod(0o755)
    (tmp_path / "token").write_text(token)
    for user in (
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}},
        {"tokenFile": "token"},
    ):
        config = yaml.safe_load(kcp.kubeconfig)
        config["users"][0]["user"] = user
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        async with KubeClient.from_kubeconfig_file(path) as plugged:
            with pytest.raises(Forbidden) as forbidden:  # authenticated as the service account
                await plugged.get(CONFIGMAPS, "anything", namespace)
        assert "plugged" in forbidden.value.message


def test_invalid_kubeconfig_is_a_clear_error(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="YAML mapping"):
        KubeClient.from_kubeconfig_bytes(b"- just a list")
    with pytest.raises(ValueError, match="invalid kubeconfig"):
        KubeClient.from_kubeconfig_bytes(b"apiVersion: v1\nkind: Config\n")
    with pytest.raises(ValueError, match="invalid kubeconfig"):
        KubeClient.from_kubeconfig_file(tmp_path / "missing")
