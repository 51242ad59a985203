"""Upstream's certificate metrics, with upstream's names, labels and help texts, plus one of ours.

* ``lifecycle_mgr_gateway_secret_server_cert_close_to_expiry``: 1 when the server certificate found
  in the gateway Secret at the last look expires within the renew window (14 days), else 0 --
  computed from the Secret's ``tls.crt`` as upstream does, whoever wrote it; after we re-issue it,
  the next look (a Kyma reconcile within ``trust_cache_seconds``, or the rotator) reads 0 again;
* ``lifecycle_mgr_self_signed_cert_not_renew{kyma_name}``: 1 while a runtime's certificate is due
  for renewal and the renewed one could not be stored (upstream: cert-manager has not renewed it);
  as upstream, only such Kymas have a series;
* ``lifecycle_mgr_gateway_secret_invalid`` (ours): 1 while the gateway Secret as found is not a
  usable credential (e.g. a ``tls.crt`` that does not match ``tls.key``); see docs/security.md;
* ``lifecycle_mgr_gateway_secret_repairs_total`` (ours): server certificates re-issued because the
  Secret held an unusable one -- a counter, so no scrape misses a repair that the gauges show only
  until the next look.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

GATEWAY_CLOSE_TO_EXPIRY = "lifecycle_mgr_gateway_secret_server_cert_close_to_expiry"
GATEWAY_CLOSE_TO_EXPIRY_HELP = (
    "Indicates whether the server certificate in the gateway secret is close to expiry (1) or not (0)"
)
CERT_NOT_RENEW = "lifecycle_mgr_self_signed_cert_not_renew"
CERT_NOT_RENEW_HELP = "Indicates the self-signed Certificate of related Kyma is not renewed yet"
GATEWAY_INVALID = "lifecycle_mgr_gateway_secret_invalid"
GATEWAY_REPAIRS = "lifecycle_mgr_gateway_secret_repairs"
KYMA_NAME_LABEL = "kyma_name"


class IdentityMetrics:
    """The gauges above in ``registry``; without one every call is a no-op (tests, tools)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._close: Gauge | None = None
        self._invalid: Gauge | None = None
        self._not_renewed: Gauge | None = None
        self._repairs: Counter | None = None
        if registry is None:
            return
        self._close = Gauge(GATEWAY_CLOSE_TO_EXPIRY, GATEWAY_CLOSE_TO_EXPIRY_HELP, registry=registry)
        self._invalid = Gauge(
            GATEWAY_INVALID,
            "Indicates whether the gateway secret as found is not a usable credential (1) or is (0)",
            registry=registry,
        )
        self._not_renewed = Gauge(CERT_NOT_RENEW, CERT_NOT_RENEW_HELP, [KYMA_NAME_LABEL], registry=registry)
        self._repairs = Counter(
            GATEWAY_REPAIRS,
            "Server certificates of the gateway secret re-issued because the secret held an unusable one",
            registry=registry,
        )

    def gateway_repaired(self) -> None:
        if self._repairs is not None:
            self._repairs.inc()

    def gateway_seen(self, *, close_to_expiry: bool, invalid: bool) -> None:
        if self._close is not None and self._invalid is not None:
            self._close.set(1 if close_to_expiry else 0)
            self._invalid.set(1 if invalid else 0)

    def certificate_renewed(self, kyma_name: str, *, renewed: bool) -> None:
        """As upstream: a series (value 1) only for a Kyma whose due certificate is not renewed, removed
        once it is -- not one series per Kyma of the fleet."""
        if self._not_renewed is None:
            return
        if renewed:
            self.forget(kyma_name)
        else:
            self._not_renewed.labels(kyma_name).set(1)

    def forget(self, kyma_name: str) -> None:
        if self._not_renewed is not None:
            try:
                self._not_renewed.remove(kyma_name)
            except KeyError:
                return
