"""inspect_gateway: what is wrong with a gateway Secret, whether it is ours, and what can be kept."""

from __future__ import annotations

import base64
import datetime
from typing import Any

from kyma_operator.api import names
from kyma_operator.identity import secret_layout as layout
from kyma_operator.identity.bundle import RotationPolicy, advance_gateway, plan_root, rebuild_gateway
from kyma_operator.identity.ca import CertificateAuthority, issued_by
from kyma_operator.identity.gateway_check import inspect_gateway

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
POLICY = RotationPolicy()
NAMES = ("listener.kcp.example.com",)


def _secret() -> tuple[CertificateAuthority, dict[str, Any]]:
    root = plan_root(None, now=T0, policy=POLICY)
    trust = advance_gateway(None, root, now=T0, policy=POLICY, server_names=NAMES)
    return root, layout.trust_to_secret(trust, name="klm-istio-gateway", namespace="istio-system")


def _with(secret: dict[str, Any], key: str, value: bytes) -> dict[str, Any]:
    return {**secret, "data": {**secret["data"], key: base64.b64encode(value).decode()}}


def test_missing_and_good_secrets_have_no_problem() -> None:
    assert inspect_gateway(None).missing
    _, secret = _secret()
    found = inspect_gateway(secret)
    assert found.problem is None and found.ours and found.trust is not None
    assert found.server_not_after == found.trust.server.not_after


def test_a_foreign_tls_crt_is_a_problem_but_bundle_stamp_and_its_expiry_are_read() -> None:
    _, secret = _secret()
    other = CertificateAuthority.create(now=T0, validity=datetime.timedelta(days=7))
    found = inspect_gateway(_with(secret, layout.TLS_CRT, other.pair.cert_pem))
    assert found.trust is None and found.problem is not None and "does not match" in found.problem
    assert found.server_not_after == other.certificate.not_valid_after_utc
    assert len(found.bundle) == 1 and found.ca_added_to_bundle_at == T0
    assert found.ours


def test_a_valid_pair_no_agent_can_verify_is_a_problem() -> None:
    _, secret = _secret()
    other = CertificateAuthority.create(now=T0, validity=datetime.timedelta(days=7))
    broken = _with(_with(secret, layout.TLS_CRT, other.pair.cert_pem), layout.TLS_KEY, other.pair.key_pem)
    found = inspect_gateway(broken)
    assert found.problem is not None and "not issued by any CA of the trust bundle" in found.problem


def test_garbage_everywhere_and_a_removed_label() -> None:
    _, secret = _secret()
    broken = _with(_with(secret, layout.TLS_CRT, b"junk"), layout.CA_CRT, b"junk")
    broken["metadata"] = {**broken["metadata"], "labels": {}}
    found = inspect_gateway(broken)
    assert found.problem is not None and not found.ours
    assert found.server_not_after is None and found.bundle == ()
    not_base64 = {**secret, "data": {**secret["data"], layout.TLS_CRT: "***"}}
    assert "not base64" in (inspect_gateway(not_base64).problem or "")
    assert secret["metadata"]["labels"][names.MANAGED_BY_LABEL] == names.OPERATOR_NAME


def test_rebuild_keeps_the_bundle_and_issues_a_server_of_the_root() -> None:
    root, secret = _secret()
    found = inspect_gateway(_with(secret, layout.TLS_CRT, b"junk"))
    assert found.ca_added_to_bundle_at is not None
    now = T0 + datetime.timedelta(days=3)
    trust = rebuild_gateway(
        found.bundle, found.ca_added_to_bundle_at, root, now=now, policy=POLICY, server_names=NAMES
    )
    assert trust.bundle == found.bundle and trust.ca_added_to_bundle_at == T0
    assert issued_by(trust.server.certificate, root.certificate)
    assert advance_gateway(trust, root, now=now, policy=POLICY, server_names=NAMES) == trust
