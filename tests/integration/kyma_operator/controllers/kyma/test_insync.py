"""The runtime's CRDs and catalog found in sync by metadata alone (``insync``), on real API servers.

The shortcut is held to the plain path: whenever it answers "unchanged", a sync without it (the
full comparison) finds nothing to write either; and every change that matters, in the runtime (a
hand edit, a deletion) or in KCP (a new source version), makes it take the full comparison, which
repairs what it must.
"""

from __future__ import annotations

from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.resources import MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.catalog import Catalog
from kyma_operator.controllers.kyma.runtimecatalog import RuntimeCatalogSync
from kyma_operator.controllers.kyma.runtimecrds import RuntimeCrdSync, crd_informers
from kyma_operator.controllers.shared_informers import release_meta_informer, template_informer
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS, NAMESPACES
from tests.controlplane.cluster import APIServer
from tests.integration.informers import running_informers
from tests.integration.kyma_operator.harness import kyma_body
from tests.integration.kyma_operator.modules_env import MODULE, release_meta, template
from tests.polling import eventually


async def _seen(informer: Informer, namespace: str | None, name: str, version: str) -> None:
    async def caught_up() -> bool:
        obj = informer.get(namespace, name)
        return obj is not None and obj["metadata"]["resourceVersion"] == version

    await eventually(caught_up, f"{name} at resourceVersion {version} in the informer")


async def test_runtime_crds_found_in_sync_by_metadata_alone(
    kcp_client: KubeClient, skr_client: KubeClient, skr_crds: tuple[APIServer, APIServer]
) -> None:
    informers = crd_informers(kcp_client)
    crds = RuntimeCrdSync(informers)
    async with running_informers(informers):
        await crds.sync(skr_client)  # whatever the shared runtime held before: now in line
        settled = await crds.sync(skr_client)
        assert settled.applied == [] and settled.in_sync is not None and not settled.unchanged

        before = skr_client.requests_started
        quick = await crds.sync(skr_client, settled.in_sync)
        assert quick.unchanged and quick.applied == [] and quick.in_sync == settled.in_sync
        assert skr_client.requests_started - before == 1  # one metadata-only list
        plain = await crds.sync(skr_client)
        assert plain.applied == [] and plain.in_sync == settled.in_sync

        # a hand edit in the runtime (our label taken off: the copy no longer counts as ours)
        name = names.KYMA.crd_name
        await skr_client.patch(CRDS, name, {"metadata": {"labels": {names.MANAGED_BY_LABEL: None}}})
        repaired = await crds.sync(skr_client, settled.in_sync)
        assert not repaired.unchanged and repaired.applied == [name] and repaired.in_sync is None
        again = await crds.sync(skr_client, repaired.in_sync)
        assert again.applied == [] and again.in_sync not in (None, settled.in_sync)

        # a new version of the KCP source, the same content: compared in full, nothing written
        kcp_crd = await kcp_client.patch(CRDS, name, {"metadata": {"annotations": {"insync-test": "1"}}})
        await _seen(informers[0], None, name, kcp_crd["metadata"]["resourceVersion"])
        moved = await crds.sync(skr_client, again.in_sync)
        assert not moved.unchanged and moved.applied == [] and moved.in_sync not in (None, again.in_sync)
        assert (await crds.sync(skr_client, moved.in_sync)).unchanged
        await kcp_client.patch(CRDS, name, {"metadata": {"annotations": {"insync-test": None}}})


async def test_runtime_catalog_found_in_sync_by_metadata_alone(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    unique_name: str,
) -> None:
    ns = kcp_namespace
    await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.0.0"))
    await kcp_client.create(MODULE_RELEASE_METAS, release_meta(ns, {"regular": "1.0.0"}))
    sync_ns = f"rt-{unique_name}"[:63]
    await skr_client.create(NAMESPACES, {"metadata": {"name": sync_ns}})
    templates, metas = template_informer(kcp_client, ns), release_meta_informer(kcp_client, ns)
    catalog = RuntimeCatalogSync(Catalog(templates, metas), sync_namespace=sync_ns)
    kyma = Kyma.from_object(kyma_body("kyma-insync", ns, "rt-insync"))
    copy = f"{MODULE}-1.0.0"
    try:
        async with running_informers([templates, metas]):
            first = await catalog.sync(kyma, skr_client)
            assert sorted(first.applied) == [f"ModuleReleaseMeta {MODULE}", f"ModuleTemplate {copy}"]
            assert first.in_sync is None
            settled = await catalog.sync(kyma, skr_client, first.in_sync)
            assert settled.applied == [] and settled.deleted == [] and settled.in_sync is not None

            before = skr_client.requests_started
            quick = await catalog.sync(kyma, skr_client, settled.in_sync)
            assert quick.unchanged and quick.applied == [] and quick.in_sync == settled.in_sync
            assert quick.visible == 2
            assert skr_client.requests_started - before == 2  # two metadata-only lists
            plain = await catalog.sync(kyma, skr_client)
            assert plain.applied == [] and plain.deleted == [] and plain.in_sync == settled.in_sync

            # a hand edit in the runtime is reset
            edit: dict[str, Any] = {"spec": {"version": "6.6.6"}}
            await skr_client.patch(MODULE_TEMPLATES, copy, edit, sync_ns)
            reset = await catalog.sync(kyma, skr_client, settled.in_sync)
            assert not reset.unchanged and reset.applied == [f"ModuleTemplate {copy}"]
            edited = await catalog.sync(kyma, skr_client, reset.in_sync)
            assert edited.in_sync not in (None, settled.in_sync)

            # a runtime copy deleted is restored
            await skr_client.delete(MODULE_RELEASE_METAS, MODULE, sync_ns)
            restored = await catalog.sync(kyma, skr_client, edited.in_sync)
            assert restored.applied == [f"ModuleReleaseMeta {MODULE}"]
            current = (await catalog.sync(kyma, skr_client)).in_sync
            assert current is not None

            # a new KCP template version is compared in full and copied
            kcp_template = await kcp_client.patch(
                MODULE_TEMPLATES, copy, {"metadata": {"annotations": {"insync-test": "1"}}}, ns
            )
            await _seen(templates, ns, copy, kcp_template["metadata"]["resourceVersion"])
            moved = await catalog.sync(kyma, skr_client, current)
            assert not moved.unchanged and moved.applied == [f"ModuleTemplate {copy}"]
            live = await skr_client.get(MODULE_TEMPLATES, copy, sync_ns)
            assert live["metadata"]["annotations"]["insync-test"] == "1"

            # a template no longer visible is pruned, also when the digest was current
            latest = (await catalog.sync(kyma, skr_client)).in_sync
            await kcp_client.delete(MODULE_RELEASE_METAS, MODULE, ns)
            await eventually(lambda: metas.get(ns, MODULE) is None, "the release meta gone from the informer")
            pruned = await catalog.sync(kyma, skr_client, latest)
            assert sorted(pruned.deleted) == [f"ModuleReleaseMeta {MODULE}", f"ModuleTemplate {copy}"]
    finally:
        await skr_client.delete(NAMESPACES, sync_ns)
