"""``build_operator`` wires shared pieces once: one Kyma informer for every controller and the listener."""

from __future__ import annotations

from kyma_operator.api.resources import KYMAS
from kyma_operator.app import build_operator
from kyma_operator.runtime.kube import KubeClient
from tests.integration.kyma_operator.harness import operator_config


async def test_one_kyma_informer_and_one_heartbeat_tracker_are_shared(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    config = operator_config(kcp_namespace, listener_enabled=True)
    operator = await build_operator(config, kcp_client, kcp_addr="127.0.0.1:443")
    listener, manifest = operator.listener, operator.manifest
    assert listener is not None and manifest is not None
    kymas = operator.kyma.kymas
    assert listener.kymas is kymas and manifest.reconciler.kymas is kymas
    assert listener.manifests is manifest.manifests
    assert operator.kyma.reconciler.health.source is listener.heartbeats
    assert manifest.reconciler.health is operator.kyma.reconciler.health
    watched = [i for i in operator.manager._informers if i.resource == KYMAS]
    assert watched == [kymas], "one watch on Kymas"
    await operator.kyma.close()
    await manifest.close()
    if operator.oci is not None:
        await operator.oci.close()
