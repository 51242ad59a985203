"""CA rotation end to end, over real mutual TLS, without losing an event.

The operator's PKI lives in the real KCP; a TLS gateway stand-in terminates mutual TLS with the
credential the operator writes for Istio (``klm-istio-gateway``) and forwards to the real listener.
Agents send with the agent's own delivery client (``skr_watcher.kcp_client``) and credential loader,
from files as the kubelet would mount them.

The wall clock of the PKI is a settable clock that runs 40 days *behind* real time: certificates are
verified by OpenSSL against the real time, so every certificate issued during the simulated 33 days
must already be valid "now".
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kyma_operator.agentinstall.installer import KymaRef
from kyma_operator.api import names
from kyma_operator.api.resources import resource_for
from kyma_operator.identity.bundle import RotationPolicy
from kyma_operator.identity.ca import issued_by
from kyma_operator.identity.store import IdentityConfig, IdentityStore, RuntimeIdentity
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import SECRETS
from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, event_path
from kyma_wire.http_client import HttpTransportError
from kyma_wire.names import OPERATOR_NAME, SKR_NAMESPACE
from skr_watcher import credentials
from skr_watcher.kcp_client import KcpClient
from tests.integration.kyma_operator.identity.e2e import TlsGateway, agent_config, running_listener
from tests.integration.kyma_operator.identity.helpers import WallClock
from tests.polling import eventually

KYMAS = resource_for(names.KYMA)
DAY = datetime.timedelta(days=1)
POLICY = RotationPolicy()


def counter_total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """Sum of a counter's ``_total`` samples whose labels include ``labels``."""
    return sum(
        sample.value
        for metric in registry.collect()
        if metric.name == name
        for sample in metric.samples
        if sample.name == f"{name}_total" and labels.items() <= sample.labels.items()
    )


class AgentStandIn:
    """One agent generation: credential files as mounted, and the agent's KCP client built from them.

    Every ``send`` uses a fresh client, so every request makes a new TLS handshake with the gateway's
    current certificate and trust bundle (a pooled connection would hide a rotation).
    """

    def __init__(self, identity: RuntimeIdentity, directory: Path, gateway_port: int) -> None:
        directory.mkdir(parents=True)
        files = {
            "TLS_CERT": identity.leaf.cert_pem,
            "TLS_KEY": identity.leaf.key_pem,
            "CA_CERT": identity.bundle_pem,
            "SIGNING_KEY": identity.signing_key.private_pem,
            "SIGNING_KEY_ID_FILE": identity.key_id.encode(),
        }
        paths = {}
        for env, content in files.items():
            path = directory / env.lower()
            path.write_bytes(content)
            paths[env] = str(path)
        self.config = agent_config(paths, kcp_addr=f"127.0.0.1:{gateway_port}", scheme="https")
        self.delivered = 0

    async def send(self) -> int:
        """POST one event; returns the HTTP status (transport errors propagate)."""
        loaded = credentials.load(self.config, lambda: datetime.datetime.now(datetime.UTC).timestamp())
        client = KcpClient(self.config.kcp_base_url, ssl_context=loaded.client_context, signer=loaded.signer)
        event = AgentEvent(
            watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
            watched_gvk=GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma"),
        )
        try:
            response = await client.post(event_path(OPERATOR_NAME), event.to_wire())
        finally:
            await client.aclose()
        if response.status_code == 200:
            self.delivered += 1
        return response.status_code


async def test_ca_rotation_keeps_every_client_working(
    kcp_client: KubeClient, kcp_namespace: str, tmp_path: Path
) -> None:
    ns = kcp_namespace
    clock = WallClock(datetime.datetime.now(datetime.UTC) - 40 * DAY)
    store = IdentityStore(
        kcp_client,
        config=IdentityConfig(namespace=ns, public_key_namespace=ns, server_names=("127.0.0.1",)),
        policy=POLICY,
        wall_clock=clock,
    )
    kyma = KymaRef(name="kyma-rot", runtime_id="rt-rot", skr_domain="rt-rot.example.com")
    await kcp_client.create(
        KYMAS,
        {
            "metadata": {
                "name": kyma.name,
                "namespace": ns,
                "labels": {names.RUNTIME_ID_LABEL: kyma.runtime_id},
            },
            "spec": {"channel": "regular"},
        },
    )

    async def runtime_identity() -> RuntimeIdentity:
        return await store.ensure_runtime(
            kyma_name=kyma.name, runtime_id=kyma.runtime_id, skr_domain=kyma.skr_domain
        )

    agents: list[AgentStandIn] = []
    # The listener must know the public origin the agents sign (the gateway's address) before it
    # starts, and the gateway forwards to the listener's port once that is known.
    gateway = TlsGateway()
    await gateway.start()
    try:
        first = await runtime_identity()
        async with running_listener(
            kcp_client, ns, public_origin=f"https://127.0.0.1:{gateway.port}"
        ) as running:
            gateway.upstream_port = running.port

            async def reload_gateway() -> None:
                gateway.load(await kcp_client.get(SECRETS, "klm-istio-gateway", ns))

            async def key_known(key_id: str) -> None:
                async def probe() -> bool:
                    return bool(running.listener.keys.public_keys(key_id))

                await eventually(probe, what=f"listener trusts {key_id}")

            await reload_gateway()
            await key_known(first.key_id)
            old_agent = AgentStandIn(first, tmp_path / "gen0", gateway.port)
            agents.append(old_agent)
            assert await old_agent.send() == 200

            # Steps 1+2: the CA enters its renew-before window; the new CA joins the bundle.
            clock.advance(29 * DAY)
            trust = await store.ensure_trust()
            await reload_gateway()
            new_ca, old_ca = trust.trust.bundle
            assert new_ca == trust.root.certificate
            assert issued_by(first.leaf.certificate, old_ca)
            assert issued_by(trust.trust.server.certificate, old_ca)
            # During the grace period the old agent (old certificate, old bundle) keeps working.
            assert await old_agent.send() == 200

            # Steps 3-5: the runtime certificate is re-issued by the new CA; the new agent works too.
            second = await runtime_identity()
            assert second.renewed == "issued before the current CA was added to the trust bundle"
            assert issued_by(second.leaf.certificate, trust.root.certificate)
            new_agent = AgentStandIn(second, tmp_path / "gen1", gateway.port)
            agents.append(new_agent)
            assert await new_agent.send() == 200
            assert await old_agent.send() == 200  # the pod roll takes time: both generations coexist

            # Step 6: after the grace period the server switches to the new CA.
            clock.advance(POLICY.server_switch_grace)
            switched = await store.ensure_trust()
            assert issued_by(switched.trust.server.certificate, switched.root.certificate)
            await reload_gateway()
            newest = AgentStandIn(await runtime_identity(), tmp_path / "gen2", gateway.port)
            agents.append(newest)
            assert await new_agent.send() == 200
            assert await newest.send() == 200
            # Why the grace period exists: an agent that never received the new bundle cannot verify the
            # new server certificate (this is the client failing, not the listener rejecting an event).
            failures_before = gateway.handshake_failures
            with pytest.raises(HttpTransportError, match="CERTIFICATE_VERIFY_FAILED"):
                await old_agent.send()

            async def handshake_refused() -> bool:
                return gateway.handshake_failures > failures_before

            await eventually(handshake_refused, what="the gateway saw the failed handshake")

            # No event was rejected: the listener answered 200 to every request that reached it,
            # authenticated all of them and enqueued the Kyma (bursts for one Kyma coalesce).
            delivered = sum(agent.delivered for agent in agents)
            assert delivered == 6  # old agent 3x, re-issued agent 2x, newest 1x
            registry = running.listener.metrics.registry
            assert counter_total(registry, "kcp_listener_requests", code="200") == delivered
            assert counter_total(registry, "kcp_listener_requests") == delivered
            assert counter_total(registry, "kcp_listener_auth_failures") == 0
            assert counter_total(registry, "kcp_listener_rejected_events") == 0
            assert set(running.kymas.items) == {Request(ns, kyma.name)}
            assert gateway.handshake_failures == failures_before + 1
    finally:
        await gateway.stop()
