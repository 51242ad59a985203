"""One Manifest per enabled module on the real KCP API server: resolution through the namespace's
ModuleReleaseMeta and ModuleTemplate, the upstream name/labels/owner, no write while nothing changed,
the Manifest's status becoming the module's, and a disabled module's Manifest deleted and its entry
dropped once the Manifest is gone. Manifest status is written directly (no Manifest controller)."""

from __future__ import annotations

from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.meta import State
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.controllers.kyma.modulesync import FIELD_MANAGER, ModuleSync
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from tests.polling import eventually

COMPONENT = "kyma-project.io/module/template-operator"
DIGEST = "sha256:" + "b" * 64


def template(ns: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": names.MODULE_TEMPLATE.api_version,
        "kind": names.MODULE_TEMPLATE.kind,
        "metadata": {"name": f"template-operator-{version}", "namespace": ns},
        "spec": {
            "moduleName": "template-operator",
            "version": version,
            "data": {"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "Sample", "spec": {}},
            "descriptor": {
                "meta": {"schemaVersion": "v2"},
                "component": {
                    "name": COMPONENT,
                    "version": version,
                    "provider": "kyma-project.io",
                    "repositoryContexts": [{"type": "OCIRegistry", "baseUrl": "127.0.0.1:5000"}],
                    "resources": [
                        {
                            "name": "raw-manifest",
                            "type": "directoryTree",
                            "version": version,
                            "relation": "local",
                            "access": {"type": "localBlob", "localReference": DIGEST},
                        }
                    ],
                    "componentReferences": [],
                    "sources": [],
                },
            },
        },
    }


async def read_kyma(client: KubeClient, ns: str) -> Kyma:
    return Kyma.from_object(await client.get(KYMAS, "k1", ns))


async def test_module_manifest_lifecycle(kcp_client: KubeClient, kcp_namespace: str) -> None:
    ns = kcp_namespace
    await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.0.0"))
    await kcp_client.create(
        MODULE_RELEASE_METAS,
        {
            "apiVersion": names.MODULE_RELEASE_META.api_version,
            "kind": names.MODULE_RELEASE_META.kind,
            "metadata": {"name": "template-operator", "namespace": ns},
            "spec": {
                "moduleName": "template-operator",
                "ocmComponentName": COMPONENT,
                "channels": [{"channel": "regular", "version": "1.0.0"}],
            },
        },
    )
    await kcp_client.create(
        KYMAS,
        {
            "apiVersion": names.KYMA.api_version,
            "kind": names.KYMA.kind,
            "metadata": {"name": "k1", "namespace": ns},
            "spec": {"channel": "regular", "modules": [{"name": "template-operator"}, {"name": "missing"}]},
        },
    )
    sync = ModuleSync(kcp_client)
    kyma = await read_kyma(kcp_client, ns)
    result = await sync.sync(kyma)
    name = manifest_name("k1", COMPONENT, "template-operator")
    assert result.applied == [name]
    raw = await kcp_client.get(MANIFESTS, name, ns)
    assert raw["metadata"]["labels"] == {
        names.KYMA_NAME_LABEL: "k1",
        names.MODULE_NAME_LABEL: "template-operator",
        names.CHANNEL_LABEL: "regular",
        names.MANAGED_BY_LABEL: names.OPERATOR_NAME,
    }
    (owner,) = raw["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Kyma", kyma.metadata.uid, True)
    assert {f["manager"] for f in raw["metadata"]["managedFields"]} == {FIELD_MANAGER}
    assert raw["spec"]["install"]["source"]["ref"] == DIGEST
    entries = {m.name: m for m in result.modules}
    assert entries["template-operator"].state is State.PROCESSING
    assert entries["missing"].state is State.ERROR
    assert "no ModuleReleaseMeta 'missing'" in (entries["missing"].message or "")

    # Status as the Manifest controller would write it; the next pass writes no Manifest.
    patched = await kcp_client.patch_status(MANIFESTS, name, {"status": {"state": "Ready"}}, ns)
    modules = [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in result.modules]
    patch = {"status": {"modules": modules}}
    await kcp_client.patch_status(KYMAS, "k1", patch, ns)
    rv = patched["metadata"]["resourceVersion"]
    result = await sync.sync(await read_kyma(kcp_client, ns))
    assert result.applied == []
    assert (await kcp_client.get(MANIFESTS, name, ns))["metadata"]["resourceVersion"] == rv
    assert {m.name: m.state for m in result.modules}["template-operator"] is State.READY

    # Disable the module: its Manifest is deleted; the entry stays Deleting while it exists.
    await kcp_client.patch(KYMAS, "k1", {"spec": {"modules": [{"name": "missing"}]}}, ns)
    kyma = await read_kyma(kcp_client, ns)
    result = await sync.sync(kyma)
    assert result.deleted == [name]

    async def gone() -> bool:
        try:
            await kcp_client.get(MANIFESTS, name, ns)
        except NotFound:
            return True
        return False

    await eventually(gone, "the disabled module's Manifest deleted")
    result = await sync.sync(await read_kyma(kcp_client, ns))
    assert [m.name for m in result.modules] == ["missing"]
