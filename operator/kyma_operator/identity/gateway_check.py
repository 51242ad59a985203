"""What is wrong with the gateway Secret as found, and what of it can be kept, without I/O.

Why: the gateway Secret (``istio-system/klm-istio-gateway``) is the one object every runtime
depends on (its ``ca.crt`` is the trust bundle handed to every agent). Anyone with write access can
break it -- upstream's e2e writes a foreign, near-expiry ``tls.crt`` into it on purpose. Parsing it
strictly and failing made every Kyma go to Error and stay there. Instead ``inspect_gateway`` says
what is wrong (``problem``), what the found server certificate says about expiry (for the
``..._server_cert_close_to_expiry`` gauge, as upstream computes it from the Secret's ``tls.crt``),
whether the Secret is ours to repair (it carries our managed-by label) and which parts are still
good (the bundle and its ``caAddedToBundleAt`` stamp), so the store can re-issue only the server
certificate and keep the runtimes' trust unchanged.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509

from kyma_operator.api import names
from kyma_operator.identity import secret_layout as layout
from kyma_operator.identity.bundle import GatewayTrust
from kyma_operator.identity.ca import CertificateError, load_certificates


@dataclass(frozen=True)
class GatewayInspection:
    """One look at the gateway Secret (``secret`` is None: it does not exist)."""

    trust: GatewayTrust | None
    """The parsed trust if the Secret is fully usable, else None."""
    problem: str | None
    """Why the Secret is not usable as it is (None: usable or missing)."""
    ours: bool
    """It carries our managed-by label: repairing it is ours to do."""
    server_not_after: datetime.datetime | None
    """Expiry of the ``tls.crt`` as found (whoever wrote it), if it parses."""
    bundle: tuple[x509.Certificate, ...] = ()
    """The ``ca.crt`` bundle, if it parses (kept on a repair: the agents trust exactly these)."""
    ca_added_to_bundle_at: datetime.datetime | None = None

    @property
    def missing(self) -> bool:
        return self.trust is None and self.problem is None


def _server_not_after(data: Mapping[str, bytes]) -> datetime.datetime | None:
    try:
        return x509.load_pem_x509_certificate(data.get(layout.TLS_CRT) or b"").not_valid_after_utc
    except ValueError:
        return None


def inspect_gateway(secret: Mapping[str, Any] | None) -> GatewayInspection:
    if secret is None:
        return GatewayInspection(trust=None, problem=None, ours=True, server_not_after=None)
    labels = (secret.get("metadata") or {}).get("labels") or {}
    ours = labels.get(names.MANAGED_BY_LABEL) == names.OPERATOR_NAME
    try:
        data = layout.decode(secret)
    except layout.SecretFormatError as exc:
        return GatewayInspection(trust=None, problem=str(exc), ours=ours, server_not_after=None)
    not_after = _server_not_after(data)
    try:
        trust = layout.trust_from_secret(secret)
    except layout.SecretFormatError as exc:
        bundle: tuple[x509.Certificate, ...] = ()
        try:
            bundle = tuple(load_certificates(data.get(layout.CA_CRT) or b""))
        except CertificateError:
            bundle = ()
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        stamp: datetime.datetime | None = None
        try:
            stamp = layout.parse_stamp(str(annotations.get(layout.CA_ADDED_TO_BUNDLE_AT) or ""))
        except ValueError:
            stamp = None
        return GatewayInspection(
            trust=None,
            problem=str(exc),
            ours=ours,
            server_not_after=not_after,
            bundle=bundle,
            ca_added_to_bundle_at=stamp,
        )
    if trust.server_issuer() is None:
        # A valid pair, but no agent can verify it: the gateway refuses every runtime's connection.
        return GatewayInspection(
            trust=None,
            problem=f"{layout.where(secret)}: the server certificate ({layout.TLS_CRT}) is not issued "
            f"by any CA of the trust bundle ({layout.CA_CRT})",
            ours=ours,
            server_not_after=trust.server.not_after,
            bundle=trust.bundle,
            ca_added_to_bundle_at=trust.ca_added_to_bundle_at,
        )
    return GatewayInspection(trust=trust, problem=None, ours=ours, server_not_after=trust.server.not_after)
