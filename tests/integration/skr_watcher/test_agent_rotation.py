"""Rotated Secret files are picked up without a restart: signing key, mTLS client cert, serving cert."""

from __future__ import annotations

import socket
import ssl
import uuid
from collections.abc import Iterator

import pytest
from cryptography import x509

from tests.controlplane.cluster import APIServer
from tests.controlplane.pki import CertificateAuthority
from tests.integration.skr_watcher.harness import WATCH_LABEL, AgentRig, agent_rig
from tests.integration.skr_watcher.receiver import named

NEW_CA = CertificateAuthority("runtime-ca-rotated")


@pytest.fixture(scope="module")
def rig(skr: APIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentRig]:
    tag = f"agent-rot-{uuid.uuid4().hex[:6]}"
    settings = {"HEARTBEAT_INTERVAL": "0", "TLS_CHECK_INTERVAL": "200ms"}
    # the webhook's caBundle trusts the old and the new runtime CA (as during a real CA rotation)
    directory = tmp_path_factory.mktemp("agent-rotation")
    with agent_rig(skr, directory, tag, extra_ca=NEW_CA.cert_pem, **settings) as rig:
        yield rig


def serving_certificate(rig: AgentRig, ca_pem: bytes) -> x509.Certificate:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", rig.agent.webhook_port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def watched_configmap(rig: AgentRig, name: str) -> None:
    rig.core.create_namespaced_config_map(
        rig.namespace, {"metadata": {"name": name, "labels": {WATCH_LABEL: rig.label}}}
    )


def test_rotation_without_restart(rig: AgentRig) -> None:
    watched_configmap(rig, "before")
    rig.receiver.wait_for(lambda: bool(rig.receiver.events(named(rig.namespace, "before"))), what="before")
    assert rig.receiver.events(named(rig.namespace, "before"))[0].key_id == "runtime-1:v1"
    pid = rig.agent.process.pid if rig.agent.process else None

    # the Secret rotates: new signing key (v2), new certificate from a new CA
    new_key = rig.pki.write_signing_key("runtime-1:v2")
    rig.receiver.trust("runtime-1:v2", new_key.public_key())
    new_pair = rig.pki.write_agent_identity(NEW_CA)
    rig.receiver.wait_for(
        lambda: rig.agent.metric("watcher_tls_reloads_total", result="ok") >= 1, what="credential reload"
    )
    # KCP now only accepts client certificates from the new CA
    rig.receiver.stop()
    rig.receiver.trust_client_ca(NEW_CA.cert_pem)
    rig.receiver.start()

    watched_configmap(rig, "after")
    rig.receiver.wait_for(lambda: bool(rig.receiver.events(named(rig.namespace, "after"))), what="after")
    assert rig.receiver.events(named(rig.namespace, "after"))[0].key_id == "runtime-1:v2"
    assert rig.receiver.rejected == []
    # the webhook now serves the new certificate to new connections
    served = serving_certificate(rig, NEW_CA.cert_pem)
    assert served == x509.load_pem_x509_certificate(new_pair.cert_pem)
    assert rig.agent.process is not None and rig.agent.process.pid == pid and rig.agent.process.poll() is None


def test_broken_files_keep_the_working_credentials(rig: AgentRig) -> None:
    errors = rig.agent.metric("watcher_tls_reloads_total", result="error")
    (rig.pki.directory / "tls.key").write_text("half-written")
    rig.receiver.wait_for(
        lambda: rig.agent.metric("watcher_tls_reloads_total", result="error") > errors, what="failed reload"
    )
    watched_configmap(rig, "still-working")
    rig.receiver.wait_for(
        lambda: bool(rig.receiver.events(named(rig.namespace, "still-working"))), what="still-working"
    )
    rig.pki.write_agent_identity(NEW_CA)  # repaired: the next check switches again
    rig.receiver.wait_for(
        lambda: rig.agent.metric("watcher_tls_reloads_total", result="ok") >= 2, what="repair"
    )
