"""Per-runtime certificates: who they name, and when they must be re-issued.

The agent uses one certificate twice: as the serving certificate of its admission webhook (the SKR
API server verifies it against the webhook ``caBundle``) and as its mTLS client certificate towards
the KCP gateway (CN = runtime id, upstream's identity). Renewal is decided here, purely, so the rules
are unit-tested on a fake clock: missing or broken material, a changed identity, expiry within the
renew-before window, or issuance before the newest CA was added to the bundle (upstream's
``NotBefore < caAddedToBundleAt``) -- the last one is what makes a CA rotation reach every runtime.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from kyma_operator.api.names import SKR_NAMESPACE
from kyma_operator.identity.bundle import GatewayTrust, RotationPolicy, issuing_authority
from kyma_operator.identity.ca import (
    CertificateAuthority,
    CertificateError,
    KeyPair,
    issued_by,
    subject_alt_names,
    subject_common_name,
)

AGENT_SERVICE = "skr-webhook"
"""The agent's Service name in the runtime (upstream)."""


def agent_service_names(namespace: str) -> tuple[str, str]:
    return (f"{AGENT_SERVICE}.{namespace}.svc", f"{AGENT_SERVICE}.{namespace}.svc.cluster.local")


@dataclass(frozen=True)
class LeafSpec:
    """The identity a runtime's certificate must carry."""

    runtime_id: str
    names: tuple[str, ...]

    @classmethod
    def for_runtime(
        cls,
        *,
        runtime_id: str,
        skr_domain: str,
        sync_namespace: str = SKR_NAMESPACE,
        additional_names: tuple[str, ...] = (),
    ) -> LeafSpec:
        """CN = runtime id; SANs = the ``skr-domain`` annotation, extra names, the agent Service names."""
        if not runtime_id.strip():
            raise ValueError("the Kyma has no runtime id (label kyma-project.io/runtime-id)")
        if not skr_domain.strip():
            raise ValueError("the Kyma has no or an empty skr-domain annotation")
        names: list[str] = []
        for name in (skr_domain.strip(), *additional_names, *agent_service_names(sync_namespace)):
            if name and name not in names:
                names.append(name)
        return cls(runtime_id=runtime_id, names=tuple(names))


def renewal_reason(
    leaf: KeyPair | None,
    spec: LeafSpec,
    *,
    root: CertificateAuthority,
    trust: GatewayTrust,
    now: datetime.datetime,
    policy: RotationPolicy,
) -> str | None:
    """Why ``leaf`` must be (re-)issued, or ``None`` when it is fine as it is."""
    if leaf is None:
        return "no certificate yet"
    try:
        leaf.validate()
        cert = leaf.certificate
    except CertificateError as exc:
        return f"stored certificate is unusable ({exc})"
    if subject_common_name(cert) != spec.runtime_id:
        return "runtime id changed"
    if set(subject_alt_names(cert)) != set(spec.names):
        return "DNS names changed"
    if cert.not_valid_before_utc < trust.ca_added_to_bundle_at:
        return "issued before the current CA was added to the trust bundle"
    if not issued_by(cert, root.certificate):
        return "not issued by the current CA"
    renew_at = cert.not_valid_after_utc - policy.leaf_renew_before
    if now >= renew_at:
        return f"expires at {cert.not_valid_after_utc.isoformat()} (renewal due since {renew_at.isoformat()})"
    return None


def issue_leaf(
    spec: LeafSpec,
    *,
    root: CertificateAuthority,
    trust: GatewayTrust,
    now: datetime.datetime,
    policy: RotationPolicy,
) -> KeyPair:
    return issuing_authority(root, trust).issue(
        common_name=spec.runtime_id, names=spec.names, now=now, validity=policy.leaf_validity
    )


def renew_at(leaf: KeyPair, policy: RotationPolicy) -> datetime.datetime:
    return leaf.not_after - policy.leaf_renew_before
