"""What the applier reads before it applies, on a real API server: one LIST per resource and
namespace holding several objects, then one GET for each other object (after the LIST, on purpose:
see ``Applier._prefetch``), and nothing applied that is up to date."""

from __future__ import annotations

from typing import Any

from kyma_operator.controllers.manifest.apply import Applier
from kyma_operator.controllers.manifest.discovery import Discovery
from kyma_operator.controllers.manifest.render import COMPONENT_LABEL
from kyma_operator.runtime.resources import NAMESPACES, SECRETS
from tests.controlplane.cluster import APIServer
from tests.integration.recording import recording_client


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
