"""What the applier reads before it applies, on a real API server: one LIST per resource and
namespace holding several objects, then one GET for each other object (after the LIST, on purpose:
see ``Applier._prefetch``), and nothing applied that is up to date. With the versions of earlier
LISTs kept (``ListVersions``), a LIST is answered from the API server's cache from that version on,
and drift is still found and repaired as by a consistent read."""

from __future__ import annotations

from typing import Any

from kyma_operator.controllers.manifest.apply import Applier, ListVersions
from kyma_operator.controllers.manifest.discovery import Discovery
from kyma_operator.controllers.manifest.render import COMPONENT_LABEL
from kyma_operator.runtime.resources import CONFIGMAPS, NAMESPACES, SECRETS
from tests.controlplane.cluster import APIServer
from tests.integration.recording import recording_client
from tests.polling import eventually


def _objects(ns: str, token: str) -> list[dict[str, Any]]:
    labels = {COMPONENT_LABEL: "reads-test"}
    configmaps = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": ns, "labels": labels},
        }
        for i in range(3)
    ]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "only-secret", "namespace": ns, "labels": labels},
        "data": {"token": token},
    }
    return [*configmaps, secret]


async def test_reads_are_one_list_per_bucket_then_one_get_per_other_object(
    skr: APIServer, unique_name: str
) -> None:
    ns = unique_name
    async with recording_client(skr) as (client, sent):
        try:
            await client.create(NAMESPACES, {"metadata": {"name": ns}})
            applier = Applier(client, Discovery(client), field_manager="reads-test")
            await applier.sync(_objects(ns, "YQ=="), fresh=True)

            sent.clear()
            outcome = await applier.sync(_objects(ns, "YQ=="))
            assert outcome.applied == []
            reads = [(verb, resource) for verb, resource, _ in sent]
            assert reads == [("list", "configmaps"), ("get", "secrets")]
            assert sent[1][2] == 0  # the GET went out once the LIST was answered

            # the lone object drifted: read, applied
            await client.patch(SECRETS, "only-secret", {"data": {"token": "ZHJpZnQ="}}, ns)
            sent.clear()
            outcome = await applier.sync(_objects(ns, "YQ=="))
            assert outcome.applied == [f"Secret {ns}/only-secret"]
            assert sorted((verb, resource) for verb, resource, _ in sent) == [
                ("apply", "secrets"),
                ("get", "secrets"),
                ("list", "configmaps"),
            ]
        finally:
            await client.delete(NAMESPACES, ns)


async def test_a_list_goes_on_from_the_previous_lists_version_and_still_finds_drift(
    skr: APIServer, unique_name: str
) -> None:
    ns = unique_name
    key = ("configmaps/v1", ns, "reads-test")
    async with recording_client(skr) as (client, sent):
        try:
            await client.create(NAMESPACES, {"metadata": {"name": ns}})
            versions: ListVersions = {}
            discovery = Discovery(client)
            applier = Applier(client, discovery, field_manager="reads-test", list_versions=versions)
            await applier.sync(_objects(ns, "YQ=="), fresh=True)
            assert versions == {}  # a first install reads nothing

            # the first LIST of a bucket is a consistent read; its version is kept
            assert (await applier.sync(_objects(ns, "YQ=="))).applied == []
            first = versions[key]
            assert first

            # a ConfigMap deleted and one edited in the runtime: the LIST from the kept version on
            # finds both (at once, or at the next look, as the settle looks after an agent event)
            await client.delete(CONFIGMAPS, "cm-0", ns)
            await client.patch(CONFIGMAPS, "cm-2", {"metadata": {"labels": {COMPONENT_LABEL: "moved"}}}, ns)

            async def repaired() -> list[str] | None:
                return (await applier.sync(_objects(ns, "YQ=="))).applied or None

            applied = await eventually(repaired, "the drift repaired")
            assert sorted(applied) == [f"ConfigMap {ns}/cm-0", f"ConfigMap {ns}/cm-2"]
            assert versions[key] != first
            assert (await applier.sync(_objects(ns, "YQ=="))).applied == []

            # a version the API server refuses is forgotten: the LIST is sent again without it
            versions[key] = "not-a-version"
            sent.clear()
            assert (await applier.sync(_objects(ns, "YQ=="))).applied == []
            reads = [(verb, resource) for verb, resource, _ in sent]
            assert reads == [("list", "configmaps"), ("list", "configmaps"), ("get", "secrets")]
            assert versions[key] not in ("", "not-a-version")

            # a sync that must read consistently (woken by a runtime event) ignores the kept
            # version and keeps the new one
            versions[key] = "not-a-version"
            consistent = Applier(
                client,
                discovery,
                field_manager="reads-test",
                list_versions=versions,
                consistent_lists=True,
            )
            sent.clear()
            assert (await consistent.sync(_objects(ns, "YQ=="))).applied == []
            assert [(verb, resource) for verb, resource, _ in sent] == [
                ("list", "configmaps"),
                ("get", "secrets"),
            ]
            assert versions[key] not in ("", "not-a-version")
        finally:
            await client.delete(NAMESPACES, ns)
