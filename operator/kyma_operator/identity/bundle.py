"""Zero-downtime CA rotation as a pure state machine over (root CA, gateway trust, now).

Upstream's ADR 007 rotation has six steps spread over cert-manager, a gateway-secret controller and
the Kyma controller. Reduced to its invariants it is:

1. the root CA is re-created when it enters its renew-before window (``plan_root``);
2. the new CA is prepended to the trust bundle and ``caAddedToBundleAt`` is stamped
   (``advance_gateway``) -- clients holding the old or the new leaf are both accepted;
3./4. leaves issued before that stamp are re-issued by the new CA (``leaf.py``), and only by a root
   that is already in the bundle (``issuing_authority``);
5. the runtime receives the new leaf and bundle (the installer; the pod restart trigger changes);
6. after the grace period the server certificate is switched to one issued by the new CA -- by then
   every agent has the new bundle, so the switch breaks no client;
7. CAs that have expired are dropped from the bundle.

Nothing here does I/O; ``store.py`` persists the results in Secrets. ``next_action_at`` tells callers
when to look again, so rotation is driven by timers computed from the state, not by polling.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace

from cryptography import x509

from kyma_operator.identity.ca import (
    CertificateAuthority,
    KeyPair,
    fingerprint,
    issued_by,
    subject_alt_names,
)

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class RotationPolicy:
    """Lifetimes; defaults are upstream's (CA 90d/61d, leaf 60d/30d, grace 4d, expiry window 14d)."""

    ca_validity: datetime.timedelta = 90 * _DAY
    ca_renew_before: datetime.timedelta = 61 * _DAY
    server_switch_grace: datetime.timedelta = 4 * _DAY
    server_validity: datetime.timedelta = 60 * _DAY
    server_renew_before: datetime.timedelta = 14 * _DAY
    """Also upstream's "server cert close to expiry" window."""
    leaf_validity: datetime.timedelta = 60 * _DAY
    leaf_renew_before: datetime.timedelta = 30 * _DAY

    def __post_init__(self) -> None:
        pairs = (
            ("ca", self.ca_validity, self.ca_renew_before),
            ("server", self.server_validity, self.server_renew_before),
            ("leaf", self.leaf_validity, self.leaf_renew_before),
        )
        for what, validity, renew_before in pairs:
            if validity <= datetime.timedelta(0) or renew_before < datetime.timedelta(0):
                raise ValueError(f"{what}: validity must be positive and renew-before non-negative")
            if renew_before >= validity:
                raise ValueError(f"{what}: renew-before ({renew_before}) must be shorter than validity")
        if self.server_switch_grace < datetime.timedelta(0):
            raise ValueError("server switch grace period must not be negative")
        if self.server_switch_grace >= self.ca_renew_before:
            raise ValueError("the grace period must end before the old CA expires (grace < ca_renew_before)")


def root_rotation_due_at(root: CertificateAuthority, policy: RotationPolicy) -> datetime.datetime:
    return root.certificate.not_valid_after_utc - policy.ca_renew_before


def plan_root(
    root: CertificateAuthority | None, *, now: datetime.datetime, policy: RotationPolicy
) -> CertificateAuthority:
    """Step 1: keep the root CA, or create a new one if it is missing or due for rotation."""
    if root is not None and now < root_rotation_due_at(root, policy):
        return root
    return CertificateAuthority.create(now=now, validity=policy.ca_validity)


@dataclass(frozen=True)
class GatewayTrust:
    """What the KCP gateway (and the listener in direct mode) uses: trust bundle + server certificate.

    ``bundle`` is newest first (upstream prepends). ``ca_added_to_bundle_at`` is when the newest CA
    was added; leaves older than it are renewed, and the server switches ``grace`` after it.
    """

    bundle: tuple[x509.Certificate, ...]
    ca_added_to_bundle_at: datetime.datetime
    server: KeyPair

    @property
    def fingerprints(self) -> tuple[str, ...]:
        return tuple(fingerprint(cert) for cert in self.bundle)

    def contains(self, cert: x509.Certificate) -> bool:
        return fingerprint(cert) in self.fingerprints

    def server_issuer(self) -> x509.Certificate | None:
        server = self.server.certificate
        return next((ca for ca in self.bundle if issued_by(server, ca)), None)

    def server_close_to_expiry(self, *, now: datetime.datetime, policy: RotationPolicy) -> bool:
        """Upstream's ``..._server_cert_close_to_expiry`` gauge condition."""
        return now >= self.server.not_after - policy.server_renew_before


def _issue_server(
    root: CertificateAuthority, names: tuple[str, ...], now: datetime.datetime, policy: RotationPolicy
) -> KeyPair:
    common_name = names[0] if names else "klm-watcher-gateway"
    return root.issue(common_name=common_name, names=names, now=now, validity=policy.server_validity)


def rebuild_gateway(
    bundle: tuple[x509.Certificate, ...],
    ca_added_to_bundle_at: datetime.datetime,
    root: CertificateAuthority,
    *,
    now: datetime.datetime,
    policy: RotationPolicy,
    server_names: tuple[str, ...],
) -> GatewayTrust:
    """The trust to repair a gateway whose server certificate is unusable (e.g. not matching its key):
    the bundle and its stamp stay (every agent keeps trusting what it trusts), the server certificate
    is issued anew by ``root``. ``advance_gateway`` then runs on the result as usual."""
    return GatewayTrust(
        bundle=bundle or (root.certificate,),
        ca_added_to_bundle_at=ca_added_to_bundle_at,
        server=_issue_server(root, server_names, now, policy),
    )


def advance_gateway(
    current: GatewayTrust | None,
    root: CertificateAuthority,
    *,
    now: datetime.datetime,
    policy: RotationPolicy,
    server_names: tuple[str, ...],
) -> GatewayTrust:
    """Steps 2, 6 and 7: bundle the root, switch the server after the grace period, drop expired CAs.

    Idempotent: calling it again with the same inputs returns an equal state (no rewrite).
    """
    stamp_now = now.astimezone(datetime.UTC).replace(microsecond=0)
    if current is None:
        return GatewayTrust(
            bundle=(root.certificate,),
            ca_added_to_bundle_at=stamp_now,
            server=_issue_server(root, server_names, now, policy),
        )
    state = current
    if not state.contains(root.certificate):
        state = replace(state, bundle=(root.certificate, *state.bundle), ca_added_to_bundle_at=stamp_now)
    kept = tuple(
        ca for ca in state.bundle if ca.not_valid_after_utc > now or fingerprint(ca) == root.fingerprint
    )
    if kept != state.bundle:
        state = replace(state, bundle=kept)

    issuer = state.server_issuer()
    if issuer is None:
        # The server certificate is not verifiable by anything we hand out: no client can currently
        # connect, so re-issuing at once can only help.
        return replace(state, server=_issue_server(root, server_names, now, policy))
    if fingerprint(issuer) == root.fingerprint:
        expiring = now >= state.server.not_after - policy.server_renew_before
        renamed = set(server_names) != set(subject_alt_names(state.server.certificate))
        if expiring or renamed:
            state = replace(state, server=_issue_server(root, server_names, now, policy))
        return state
    grace_over = now >= state.ca_added_to_bundle_at + policy.server_switch_grace
    expiring = now >= state.server.not_after - policy.server_renew_before
    if grace_over or expiring:
        state = replace(state, server=_issue_server(root, server_names, now, policy))
    return state


def issuing_authority(root: CertificateAuthority, trust: GatewayTrust) -> CertificateAuthority:
    """The CA allowed to sign leaves: the root, and only once it is in the bundle (step 3 after step 2)."""
    if not trust.contains(root.certificate):
        raise RuntimeError("the root CA is not in the trust bundle yet; refusing to issue leaves")
    return root


def next_action_at(
    root: CertificateAuthority, trust: GatewayTrust, *, policy: RotationPolicy
) -> datetime.datetime:
    """The earliest moment at which ``plan_root``/``advance_gateway`` would change something."""
    candidates = [root_rotation_due_at(root, policy), trust.server.not_after - policy.server_renew_before]
    issuer = trust.server_issuer()
    if issuer is not None and fingerprint(issuer) != root.fingerprint:
        candidates.append(trust.ca_added_to_bundle_at + policy.server_switch_grace)
    candidates.extend(ca.not_valid_after_utc for ca in trust.bundle if fingerprint(ca) != root.fingerprint)
    return min(candidates)
