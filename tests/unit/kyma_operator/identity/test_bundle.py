"""CA rotation on a fake clock: the six upstream steps, their ordering invariants and idempotency."""

from __future__ import annotations

import datetime

import pytest

from kyma_operator.identity.bundle import (
    GatewayTrust,
    RotationPolicy,
    advance_gateway,
    issuing_authority,
    next_action_at,
    plan_root,
    root_rotation_due_at,
)
from kyma_operator.identity.ca import CertificateAuthority, fingerprint, issued_by
from kyma_operator.identity.leaf import LeafSpec, issue_leaf, renewal_reason

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
POLICY = RotationPolicy()
NAMES = ("listener.kcp.example.com",)


def _start() -> tuple[CertificateAuthority, GatewayTrust]:
    root = plan_root(None, now=T0, policy=POLICY)
    trust = advance_gateway(None, root, now=T0, policy=POLICY, server_names=NAMES)
    return root, trust


def test_policy_rejects_inconsistent_lifetimes() -> None:
    with pytest.raises(ValueError, match="renew-before"):
        RotationPolicy(leaf_validity=DAY, leaf_renew_before=2 * DAY)
    with pytest.raises(ValueError, match="grace"):
        RotationPolicy(server_switch_grace=70 * DAY)
    with pytest.raises(ValueError, match="positive"):
        RotationPolicy(ca_validity=-DAY)


def test_bootstrap_bundles_the_root_and_issues_the_server_from_it() -> None:
    root, trust = _start()
    assert trust.fingerprints == (root.fingerprint,)
    assert trust.ca_added_to_bundle_at == T0
    assert issued_by(trust.server.certificate, root.certificate)
    # steady state: same inputs, same state, nothing to write
    assert plan_root(root, now=T0 + DAY, policy=POLICY) is root
    assert advance_gateway(trust, root, now=T0 + DAY, policy=POLICY, server_names=NAMES) == trust


def test_full_rotation_never_leaves_a_client_untrusted() -> None:
    root1, trust = _start()
    spec = LeafSpec.for_runtime(runtime_id="rt-1", skr_domain="skr.example.com")
    leaf1 = issue_leaf(spec, root=root1, trust=trust, now=T0, policy=POLICY)
    assert renewal_reason(leaf1, spec, root=root1, trust=trust, now=T0 + DAY, policy=POLICY) is None

    # step 1: the root enters its renew-before window (90d - 61d = day 29)
    due = T0 + 29 * DAY
    assert next_action_at(root1, trust, policy=POLICY) == due
    assert plan_root(root1, now=due - datetime.timedelta(seconds=1), policy=POLICY) is root1
    root2 = plan_root(root1, now=due, policy=POLICY)
    assert root2.fingerprint != root1.fingerprint

    # step 2: the new CA is prepended and stamped; the server still presents the old CA's cert
    trust = advance_gateway(trust, root2, now=due, policy=POLICY, server_names=NAMES)
    assert trust.fingerprints == (root2.fingerprint, root1.fingerprint)
    assert trust.ca_added_to_bundle_at == due
    assert issued_by(trust.server.certificate, root1.certificate)
    # the old leaf is still trusted by the bundle
    assert any(issued_by(leaf1.certificate, ca) for ca in trust.bundle)

    # steps 3/4: the leaf is older than the stamp -> re-issued by the new CA, which the bundle trusts
    reason = renewal_reason(leaf1, spec, root=root2, trust=trust, now=due, policy=POLICY)
    assert reason == "issued before the current CA was added to the trust bundle"
    leaf2 = issue_leaf(spec, root=root2, trust=trust, now=due + datetime.timedelta(minutes=1), policy=POLICY)
    assert issued_by(leaf2.certificate, root2.certificate)
    assert renewal_reason(leaf2, spec, root=root2, trust=trust, now=due + DAY, policy=POLICY) is None

    # step 6: the server switches only after the grace period
    switch_at = due + POLICY.server_switch_grace
    assert next_action_at(root2, trust, policy=POLICY) == switch_at
    before = advance_gateway(
        trust, root2, now=switch_at - datetime.timedelta(seconds=1), policy=POLICY, server_names=NAMES
    )
    assert before == trust
    trust = advance_gateway(trust, root2, now=switch_at, policy=POLICY, server_names=NAMES)
    assert issued_by(trust.server.certificate, root2.certificate)
    assert trust.fingerprints == (root2.fingerprint, root1.fingerprint)

    # step 7: the old CA is dropped once it has expired, never before
    expiry = root1.certificate.not_valid_after_utc
    assert next_action_at(root2, trust, policy=POLICY) == min(
        expiry, trust.server.not_after - POLICY.server_renew_before, root_rotation_due_at(root2, POLICY)
    )
    kept = advance_gateway(
        trust, root2, now=expiry - datetime.timedelta(seconds=1), policy=POLICY, server_names=NAMES
    )
    assert root1.fingerprint in kept.fingerprints
    dropped = advance_gateway(kept, root2, now=expiry, policy=POLICY, server_names=NAMES)
    assert dropped.fingerprints == (root2.fingerprint,)


def test_leaves_are_only_issued_by_a_bundled_root() -> None:
    _root1, trust = _start()
    root2 = CertificateAuthority.create(now=T0, validity=POLICY.ca_validity)
    with pytest.raises(RuntimeError, match="not in the trust bundle"):
        issuing_authority(root2, trust)


def test_server_from_an_unknown_issuer_is_replaced_at_once() -> None:
    root, trust = _start()
    stranger = CertificateAuthority.create(now=T0, validity=POLICY.ca_validity)
    foreign = GatewayTrust(
        bundle=trust.bundle,
        ca_added_to_bundle_at=trust.ca_added_to_bundle_at,
        server=stranger.issue(common_name="x", names=NAMES, now=T0, validity=DAY),
    )
    fixed = advance_gateway(foreign, root, now=T0 + DAY, policy=POLICY, server_names=NAMES)
    assert issued_by(fixed.server.certificate, root.certificate)


def test_server_is_renewed_before_expiry_and_on_a_host_change() -> None:
    root, trust = _start()
    renew_at = trust.server.not_after - POLICY.server_renew_before
    assert not trust.server_close_to_expiry(now=renew_at - DAY, policy=POLICY)
    assert trust.server_close_to_expiry(now=renew_at, policy=POLICY)
    renewed = advance_gateway(trust, root, now=renew_at, policy=POLICY, server_names=NAMES)
    assert renewed.server != trust.server
    assert renewed.server.not_after > trust.server.not_after
    renamed = advance_gateway(trust, root, now=T0 + DAY, policy=POLICY, server_names=("other.example.com",))
    assert renamed.server != trust.server
    assert renamed.fingerprints == trust.fingerprints


def test_bundle_keeps_order_newest_first_across_two_rotations() -> None:
    root1, trust = _start()
    root2 = plan_root(root1, now=T0 + 29 * DAY, policy=POLICY)
    trust = advance_gateway(trust, root2, now=T0 + 29 * DAY, policy=POLICY, server_names=NAMES)
    root3 = plan_root(root2, now=T0 + 58 * DAY, policy=POLICY)
    trust = advance_gateway(trust, root3, now=T0 + 58 * DAY, policy=POLICY, server_names=NAMES)
    assert trust.fingerprints == tuple(fingerprint(r.certificate) for r in (root3, root2, root1))
