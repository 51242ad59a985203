"""Per-runtime certificate identity and the renewal rules."""

from __future__ import annotations

import datetime

import pytest

from kyma_operator.identity.bundle import RotationPolicy, advance_gateway, plan_root
from kyma_operator.identity.ca import KeyPair, subject_alt_names, subject_common_name
from kyma_operator.identity.leaf import LeafSpec, issue_leaf, renew_at, renewal_reason
from kyma_wire.names import SKR_NAMESPACE

T0 = datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
POLICY = RotationPolicy()


def test_spec_names_runtime_domain_and_agent_service() -> None:
    spec = LeafSpec.for_runtime(runtime_id="rt-7", skr_domain="api.rt7.example.com")
    assert spec.runtime_id == "rt-7"
    assert spec.names == (
        "api.rt7.example.com",
        f"skr-webhook.{SKR_NAMESPACE}.svc",
        f"skr-webhook.{SKR_NAMESPACE}.svc.cluster.local",
    )
    extra = LeafSpec.for_runtime(
        runtime_id="rt", skr_domain="d", sync_namespace="ns", additional_names=("127.0.0.1", "d")
    )
    assert extra.names == ("d", "127.0.0.1", "skr-webhook.ns.svc", "skr-webhook.ns.svc.cluster.local")


@pytest.mark.parametrize(
    ("runtime_id", "domain", "message"),
    [("", "d", "runtime id"), ("rt", "", "skr-domain"), ("rt", "  ", "skr-domain")],
)
def test_spec_requires_runtime_id_and_domain(runtime_id: str, domain: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LeafSpec.for_runtime(runtime_id=runtime_id, skr_domain=domain)


def test_renewal_reasons() -> None:
    root = plan_root(None, now=T0, policy=POLICY)
    trust = advance_gateway(None, root, now=T0, policy=POLICY, server_names=("h",))
    spec = LeafSpec.for_runtime(runtime_id="rt", skr_domain="d.example.com")
    leaf = issue_leaf(spec, root=root, trust=trust, now=T0, policy=POLICY)
    assert subject_common_name(leaf.certificate) == "rt"
    assert set(subject_alt_names(leaf.certificate)) == set(spec.names)

    def reason(pair: KeyPair | None, s: LeafSpec = spec, now: datetime.datetime = T0) -> str | None:
        return renewal_reason(pair, s, root=root, trust=trust, now=now, policy=POLICY)

    assert reason(leaf) is None
    assert reason(None) == "no certificate yet"
    assert reason(KeyPair(leaf.cert_pem, root.pair.key_pem)) is not None
    assert reason(leaf, LeafSpec(runtime_id="other", names=spec.names)) == "runtime id changed"
    assert reason(leaf, LeafSpec.for_runtime(runtime_id="rt", skr_domain="new.example.com")) == (
        "DNS names changed"
    )
    due = renew_at(leaf, POLICY)
    assert due == T0 + POLICY.leaf_validity - POLICY.leaf_renew_before
    assert reason(leaf, now=due - datetime.timedelta(seconds=1)) is None
    assert (reason(leaf, now=due) or "").startswith("expires at")

    stranger_root = plan_root(None, now=T0, policy=POLICY)
    stranger_trust = advance_gateway(None, stranger_root, now=T0, policy=POLICY, server_names=("h",))
    foreign = issue_leaf(spec, root=stranger_root, trust=stranger_trust, now=T0, policy=POLICY)
    assert reason(foreign) == "not issued by the current CA"
