"""Runtime identity from the Istio gateway's ``X-Forwarded-Client-Cert`` header, parsed like upstream.

Why: behind the KCP Istio gateway (mutual TLS, ``forwardClientCertDetails: SANITIZE_SET``) the
client certificate the agent presented reaches the listener only as this header. Upstream takes the
first value's ``Cert=`` token (up to ``;`` or ``,``), URL-decodes it, trims quotes, parses the PEM
and uses the subject CN as the runtime id; there is no chain verification here, the gateway's
mutual TLS is the trust anchor. We do the same, and remember parsed certificates by their token
(one runtime presents the same certificate for weeks) so the x509 parse is not paid per event.
"""

from __future__ import annotations

from collections import OrderedDict
from urllib.parse import unquote

from cryptography import x509
from cryptography.x509.oid import NameOID

__all__ = ["XfccError", "XfccParser"]


class XfccError(Exception):
    """The header is missing or unusable; ``reason`` is a short metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _cert_token(value: str) -> str:
    start = value.find("Cert=")
    if start == -1:
        raise XfccError("xfcc-no-cert", "no Cert= element in X-Forwarded-Client-Cert")
    start += len("Cert=")
    end = len(value)
    for stop in ";,":
        index = value.find(stop, start)
        if index != -1 and index < end:
            end = index
    return value[start:end]


class XfccParser:
    """``runtime_id(header) -> CN``; raises :class:`XfccError`."""

    def __init__(self, *, max_bytes: int = 32 * 1024, cache_entries: int = 10_000) -> None:
        self._max_bytes = max_bytes
        self._cache_entries = cache_entries
        self._cache: OrderedDict[str, str] = OrderedDict()

    def runtime_id(self, header: str | None) -> str:
        if header is None or not header:
            raise XfccError("xfcc-missing", "X-Forwarded-Client-Cert header missing")
        if len(header) > self._max_bytes:
            raise XfccError("xfcc-too-large", "X-Forwarded-Client-Cert header too large")
        token = _cert_token(header)
        cached = self._cache.get(token)
        if cached is not None:
            self._cache.move_to_end(token)
            return cached
        common_name = self._common_name(token)
        if self._cache_entries:
            self._cache[token] = common_name
            if len(self._cache) > self._cache_entries:
                self._cache.popitem(last=False)
        return common_name

    @staticmethod
    def _common_name(token: str) -> str:
        pem = unquote(token).strip('"')
        try:
            cert = x509.load_pem_x509_certificate(pem.encode("ascii"))
        except (ValueError, UnicodeEncodeError) as exc:
            raise XfccError(
                "xfcc-bad-cert", "client certificate in X-Forwarded-Client-Cert unparsable"
            ) from exc
        try:
            names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        except ValueError as exc:
            raise XfccError("xfcc-bad-cert", "client certificate subject unparsable") from exc
        common_name = names[0].value if names else ""
        if isinstance(common_name, bytes):
            common_name = common_name.decode("utf-8", "replace")
        if not common_name:
            raise XfccError("xfcc-empty-cn", "client certificate common name is empty")
        return common_name
