"""The runtime's sync namespace and Kyma copy (``RemoteKymaSync.ensure``) on a real API server:
created when missing (the namespace before the copy), mended when their labels were taken off,
and in a steady state two reads sent together and no write."""

from __future__ import annotations

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.resources import KYMAS
from kyma_operator.controllers.kyma.skrsync import NAMESPACE_LABELS, RemoteKymaSync
from kyma_operator.runtime.resources import NAMESPACES
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.harness import kyma_body
from tests.integration.recording import recording_client


def _kyma() -> Kyma:
    body = kyma_body("kyma-skrsync", "kcp-system", "rt-skrsync")
    body["spec"]["modules"] = [{"name": "template-operator"}]
    return Kyma.from_object(body)


async def test_namespace_and_copy_created_mended_and_read_together(
    skr: APIServer, skr_crds: tuple[APIServer, APIServer], unique_name: str
) -> None:
    ns = unique_name
    async with recording_client(skr) as (client, sent):
        sync = RemoteKymaSync(sync_namespace=ns)
        kyma = _kyma()
        try:
            first = await sync.ensure(kyma, client)
            assert first.created and first.namespace_applied
            assert first.spec["channel"] == "regular"
            assert [m["name"] for m in first.spec["modules"]] == ["template-operator"]
            namespace = await client.get(NAMESPACES, ns)
            assert NAMESPACE_LABELS.items() <= namespace["metadata"]["labels"].items()
            verbs = [(verb, resource) for verb, resource, _ in sent]
            assert verbs.index(("apply", "namespaces")) < verbs.index(("create", "kymas"))

            sent.clear()
            steady = await sync.ensure(kyma, client)
            assert not (steady.created or steady.metadata_applied or steady.namespace_applied)
            assert sorted((verb, resource) for verb, resource, _ in sent) == [
                ("get", "kymas"),
                ("get", "namespaces"),
            ]
            assert sent[1][2] == 1  # the second read went out while the first was in flight

            # labels taken off the namespace and the copy are put back; the copy's spec is the runtime's
            await client.patch(NAMESPACES, ns, {"metadata": {"labels": {"istio-injection": None}}})
            await client.patch(
                KYMAS,
                names.DEFAULT_REMOTE_KYMA_NAME,
                {"metadata": {"labels": {names.WATCHED_BY_LABEL: None}}, "spec": {"modules": []}},
                ns,
            )
            mended = await sync.ensure(kyma, client)
            assert mended.namespace_applied and mended.metadata_applied and not mended.created
            assert mended.obj["metadata"]["labels"][names.WATCHED_BY_LABEL] == names.MANAGED_BY_KYMA
            assert mended.spec.get("modules") in (None, [])
            labels = (await client.get(NAMESPACES, ns))["metadata"]["labels"]
            assert labels["istio-injection"] == NAMESPACE_LABELS["istio-injection"]
        finally:
            await client.delete(NAMESPACES, ns)
