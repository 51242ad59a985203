"""The RFC 9421 / Ed25519 signature profile that authenticates agent requests at the listener.

Why this module exists: the agent (signer, ``skr_watcher.signer``) and the listener (verifier,
``kcp_listener.verifier``) must agree byte for byte on what is signed. The profile is fixed:

* ``alg="ed25519"``, covered components exactly ``@method @authority @target-uri content-type
  content-digest`` (``Content-Digest`` is RFC 9530 ``sha-256`` of the raw body);
* parameters ``created``, ``keyid`` (``<runtime-id>:<key-version>``), ``alg``, ``expires``
  (= created + 60 s), ``nonce`` (128-bit random) and ``tag="kcp-events"``, in this order.

Only the standard library: the agent imports this at start-up. Tests cross-check
:func:`signature_base` against the ``http-message-signatures`` reference implementation.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import re
from collections.abc import Mapping, Sequence

__all__ = [
    "ALGORITHM",
    "COVERED_COMPONENTS",
    "MAX_AGE_SECONDS",
    "MAX_CLOCK_SKEW_SECONDS",
    "MAX_NONCE_LENGTH",
    "SIGNATURE_LABEL",
    "SIGNATURE_TAG",
    "SignatureError",
    "content_digest",
    "make_key_id",
    "origin",
    "parse_key_id",
    "serialize_params",
    "signature_base",
    "split_raw",
    "split_url",
]

SIGNATURE_TAG = "kcp-events"
SIGNATURE_LABEL = "kcp"
ALGORITHM = "ed25519"
COVERED_COMPONENTS = ("@method", "@authority", "@target-uri", "content-type", "content-digest")
MAX_AGE_SECONDS = 60
MAX_CLOCK_SKEW_SECONDS = 5
MAX_NONCE_LENGTH = 128
_KEYID_SEPARATOR = ":"
# Runtime ids are Kubernetes label values; key versions are Secret data-key stems.
_RUNTIME_ID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_KEY_VERSION = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,62}")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


class SignatureError(Exception):
    """A request failed authentication; ``reason`` is a short, metric-friendly label."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# --- key ids ---------------------------------------------------------------------------------------


def make_key_id(runtime_id: str, key_version: str) -> str:
    """``<runtime-id>:<key-version>``; ``:`` cannot occur in either part."""
    if not _RUNTIME_ID.fullmatch(runtime_id):
        raise ValueError(f"invalid runtime id {runtime_id!r} (must be a Kubernetes label value)")
    if not _KEY_VERSION.fullmatch(key_version):
        raise ValueError(f"invalid key version {key_version!r} (letters, digits, '-', '_', '.')")
    return f"{runtime_id}{_KEYID_SEPARATOR}{key_version}"


def parse_key_id(key_id: str) -> tuple[str, str]:
    """The ``(runtime_id, key_version)`` named by a key id; ``ValueError`` if malformed."""
    runtime_id, sep, key_version = key_id.partition(_KEYID_SEPARATOR)
    if not sep or not _RUNTIME_ID.fullmatch(runtime_id) or not _KEY_VERSION.fullmatch(key_version):
        raise ValueError("malformed key id (expected '<runtime-id>:<key-version>')")
    return runtime_id, key_version


# --- covered components ----------------------------------------------------------------------------


def content_digest(body: bytes) -> str:
    """The RFC 9530 ``Content-Digest`` field value our signer sends: ``sha-256=:<base64>:``."""
    return "sha-256=:" + binascii.b2a_base64(hashlib.sha256(body).digest(), newline=False).decode() + ":"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def serialize_params(params: Sequence[tuple[str, int | str]]) -> str:
    """RFC 8941 serialisation of signature parameters: ``;created=1;keyid="a:b";...``."""
    return "".join(f";{k}={v}" if isinstance(v, int) else f";{k}={_quote(v)}" for k, v in params)


_AUTHORITY = re.compile(r"([A-Za-z0-9\-._~%!$&'()*+,;=]+|\[[0-9A-Fa-f:.]+\])(?::([0-9]{1,5}))?")


def split_raw(url: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of a URL as written (not normalised); fragment dropped."""
    scheme, sep, rest = url.partition("://")
    cut = len(rest)
    for stop in "/?#":
        index = rest.find(stop)
        if index != -1 and index < cut:
            cut = index
    path = rest[cut:].partition("#")[0]
    if not path.startswith("/"):
        path = "/" + path
    return (scheme if sep else ""), rest[:cut], path


@functools.lru_cache(maxsize=256)
def origin(scheme: str, authority: str) -> tuple[str, str]:
    """Normalised ``(scheme, authority)``; memoised: a listener sees a handful of distinct hosts.

    The host is lower-cased and a default port dropped (what ``httpx`` does to the URL it signs).
    """
    if not scheme.isalpha():
        raise SignatureError("malformed", "request URL is not absolute")
    scheme = scheme.lower()
    match = _AUTHORITY.fullmatch(authority)
    if match is None:
        raise SignatureError("malformed", "request URL has no valid host")
    host, port = match.group(1).lower(), match.group(2)
    if port is None or port.lstrip("0") == _DEFAULT_PORTS.get(scheme):
        return scheme, host
    return scheme, f"{host}:{port}"


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, @authority, @target-uri)`` of an absolute URL, as RFC 9421 derives them."""
    scheme, authority, path = split_raw(url)
    scheme, authority = origin(scheme, authority)
    return scheme, authority, f"{scheme}://{authority}{path}"


def signature_base(
    method: str,
    url: str,
    headers: Mapping[str, str],
    params: Sequence[tuple[str, int | str]],
    components: Sequence[str] = COVERED_COMPONENTS,
) -> bytes:
    """The RFC 9421 signature base of this profile (``headers`` with lower-case names).

    What the signer signs and the verifier checks a signature against (tests cross-check it with
    the ``http-message-signatures`` library).
    """
    _scheme, authority, target = split_url(url)
    values = {
        "@method": method,
        "@authority": authority,
        "@target-uri": target,
        "content-type": headers.get("content-type"),
        "content-digest": headers.get("content-digest"),
    }
    lines = []
    for component in components:
        value = values.get(component)
        if value is None:
            raise SignatureError("malformed", f'covered component "{component}" missing')
        value = value.strip()
        if not value.isascii() or not value.isprintable():
            raise SignatureError("malformed", f'covered component "{component}" is not printable ASCII')
        lines.append(f'"{component}": {value}')
    inner = "(" + " ".join(f'"{c}"' for c in components) + ")"
    lines.append(f'"@signature-params": {inner}{serialize_params(params)}')
    try:
        return "\n".join(lines).encode("ascii")
    except UnicodeEncodeError as exc:
        raise SignatureError("malformed", "signature base is not ASCII") from exc
