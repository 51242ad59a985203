"""One bad gateway Secret does not take the fleet down: the operator, a runtime and its real agent.

Upstream's ``gateway_secret_server_cert_metric_test.go`` step (a foreign, near-expiry ``tls.crt``
merge-patched into the gateway Secret) used to send every Kyma to Error ("private key does not
match the certificate") for good. Here the step is done on a running operator with a Ready Kyma
and its agent: the next look at the Secrets (the rotator's, as on its interval) repairs it, the
Kyma keeps reconciling (the runtime's admin enables a module, the agent reports it, the Manifest
is created and the module goes Ready), the agent's credentials in the runtime are unchanged, and
the repair is counted, recorded as an Event on the Secret and shown in the Watchers' ``GatewaySecret``
condition until the next look finds the Secret good. The metric values of one look, and
the case of a Secret that is not ours, are in identity/test_gateway_secret_server_cert_metric.py.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from kyma_operator.agentinstall import artefacts
from kyma_operator.api.resources import MODULE_RELEASE_METAS, MODULE_TEMPLATES, WATCHERS
from kyma_operator.api.watcher import WatcherConditionType
from kyma_operator.identity import metrics as m
from kyma_operator.identity import secret_layout as layout
from kyma_operator.identity.ca import KeyPair
from kyma_operator.identity.store import GATEWAY_REPAIRED
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.identity.test_gateway_secret_server_cert_metric import (
    GATEWAY,
    data_of,
    events_for,
    write_foreign_cert,
)
from tests.integration.kyma_operator.modules_env import MODULE, module_env, release_meta, template
from tests.polling import eventually

WATCHER = "klm-watcher"
"""The default Kyma Watcher (manifests/kcp/watcher-kyma.yaml) that module_env creates."""


async def test_a_foreign_gateway_cert_is_repaired_while_kymas_and_agents_keep_working(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    await kcp_client.create(MODULE_TEMPLATES, template(ns, "1.0.0"))
    await kcp_client.create(MODULE_RELEASE_METAS, release_meta(ns, {"regular": "1.0.0"}))
    async with module_env(kcp_client, ns, skr_client, skr_crds[0], tmp_path) as env:
        feature = env.running.operator.watcher
        assert feature is not None
        registry = env.running.operator.manager.registry
        agent_secret = await skr_client.get(SECRETS, artefacts.SECRET_NAME, env.sync_ns)
        bundle = data_of(await kcp_client.get(SECRETS, GATEWAY, ns))[layout.CA_CRT]

        await write_foreign_cert(kcp_client, ns, datetime.datetime.now(datetime.UTC))
        wait = await feature.rotator.step()  # the next look, as on the rotator's interval
        assert wait <= feature.rotator.problem_recheck_interval  # and the one after comes soon

        data = data_of(await kcp_client.get(SECRETS, GATEWAY, ns))
        KeyPair(data[layout.TLS_CRT], data[layout.TLS_KEY]).validate()  # usable again
        assert data[layout.CA_CRT] == bundle
        assert registry.get_sample_value(m.GATEWAY_REPAIRS + "_total") == 1
        assert len(await events_for(kcp_client, ns, GATEWAY_REPAIRED)) == 1
        # the Watchers (whose VirtualServices the Gateway serves with this Secret) say so
        problem = await eventually(lambda: gateway_condition(kcp_client, ns, "False"), "condition False")
        assert "does not match" in problem["message"] and "repaired" in problem["message"]

        # the fleet keeps working: a runtime change travels agent -> listener -> Kyma reconcile
        await env.set_runtime_spec({"modules": [{"name": MODULE}]})
        await env.wait_manifest(lambda _: True, "the module's Manifest (the Kyma reconciles)")
        await env.set_manifest_state("Ready")
        await env.wait_entry(MODULE, lambda e: e["state"] == "Ready", "the module Ready")
        await env.wait_kyma(lambda k: k["status"]["state"] == "Ready", "the Kyma Ready, not Error")
        still = await skr_client.get(SECRETS, artefacts.SECRET_NAME, env.sync_ns)
        assert still["data"] == agent_secret["data"]  # the agent's certificate and bundle unchanged

        # the next look finds the repaired Secret good: the condition clears, no second repair
        await feature.rotator.step()
        await eventually(lambda: gateway_condition(kcp_client, ns, "True"), "condition True again")
        assert registry.get_sample_value(m.GATEWAY_REPAIRS + "_total") == 1


async def gateway_condition(client: KubeClient, namespace: str, status: str) -> dict[str, Any] | None:
    """The ``GatewaySecret`` condition of the default Watcher, if it has ``status``."""
    watcher = await client.get(WATCHERS, WATCHER, namespace)
    for condition in (watcher.get("status") or {}).get("conditions") or []:
        if condition["type"] == WatcherConditionType.GATEWAY_SECRET and condition["status"] == status:
            return dict(condition)
    return None
