"""The RFC 9421 / Ed25519 signature profile that authenticates agent events at the listener.

Why this module exists: the agent (``skr_watcher``) and the listener must agree byte for byte on
what is signed, and the listener must reject everything else cheaply. The profile is fixed:

* ``alg="ed25519"``, covered components exactly ``@method @authority @target-uri content-type
  content-digest`` (``Content-Digest`` is RFC 9530 ``sha-256`` of the raw body);
* parameters ``created``, ``expires`` (= created + 60 s), ``keyid`` (``<runtime-id>:<key-version>``),
  ``nonce`` (128-bit random) and ``tag="kcp-events"``.

Signing uses the ``http-message-signatures`` library (the reference implementation of RFC 9421 we
depend on). Verification has two implementations with the same interface:

* :class:`SignatureVerifier` - the listener's hot path. A strict parser for exactly this profile
  (a regular expression for the canonical single-signature form, the ``http_sf`` structured-field
  parser for anything else), building the RFC 9421 signature base itself. It costs about one
  Ed25519 verification plus a few microseconds, where the library costs ~4x that (python-ecosystem
  notes: ~257 us per verify), which alone would cap one worker below the 4,000 events/s target.
  The Ed25519 check itself is libsodium's (PyNaCl ``crypto_sign_open``): ~41 us against ~84 us
  for OpenSSL's through ``cryptography`` on the benchmark machine, i.e. the difference between
  reaching and missing DESIGN.md §7's "80 % of a bare FastAPI endpoint". libsodium is the
  stricter of the two (it also rejects small-order and non-canonical points), so no check is
  weaker; keys stay ``cryptography`` objects everywhere else (32 raw bytes are handed over).
* :class:`LibrarySignatureVerifier` - the same checks delegated to the library (and so to
  ``cryptography``/OpenSSL). Tests cross-check both (library-signed requests verify on the fast
  path and vice versa); benchmarks compare costs.

Replay protection (remembering nonces) is the listener's ``replay`` module; this module only
checks that a nonce is present and that ``created``/``expires`` are inside the time window.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import http_sf
import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from http_message_signatures import (
    HTTPMessageSigner,
    HTTPMessageVerifier,
    HTTPSignatureKeyResolver,
    algorithms,
)
from http_message_signatures import (
    InvalidSignature as _LibInvalidSignature,
)
from nacl.bindings import crypto_sign_open as _sodium_open
from nacl.exceptions import BadSignatureError as _SodiumBadSignature

__all__ = [
    "ALGORITHM",
    "COVERED_COMPONENTS",
    "MAX_AGE_SECONDS",
    "MAX_CLOCK_SKEW_SECONDS",
    "SIGNATURE_LABEL",
    "SIGNATURE_TAG",
    "EventSigner",
    "KeyResolver",
    "LibrarySignatureVerifier",
    "SignatureError",
    "SignatureVerifier",
    "Verified",
    "VerifiedSignature",
    "check_content_digest",
    "content_digest",
    "load_private_key",
    "load_public_key",
    "make_key_id",
    "parse_key_id",
    "private_key_pem",
    "public_key_pem",
    "signature_base",
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
_PARAM_TYPES: dict[str, type] = {
    "created": int,
    "expires": int,
    "keyid": str,
    "nonce": str,
    "tag": str,
    "alg": str,
}
_REQUIRED_PARAMS = ("created", "expires", "keyid", "nonce", "tag")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


# --- keys ------------------------------------------------------------------------------------------


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


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class KeyResolver(Protocol):
    """Trusted public keys for a key id (several during a rotation overlap); empty = unknown key."""

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]: ...


# --- signing ---------------------------------------------------------------------------------------


class _SingleKey(HTTPSignatureKeyResolver):
    def __init__(self, key_id: str, key: Ed25519PrivateKey) -> None:
        self._key_id = key_id
        self._key = key

    def resolve_private_key(self, key_id: str) -> Ed25519PrivateKey:
        if key_id != self._key_id:
            raise KeyError(key_id)
        return self._key


class EventSigner:
    """Signs outgoing ``httpx.Request`` objects in place (agent side)."""

    def __init__(
        self, private_key: Ed25519PrivateKey, key_id: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        parse_key_id(key_id)
        self.key_id = key_id
        self._clock = clock
        self._signer = HTTPMessageSigner(
            signature_algorithm=algorithms.ED25519, key_resolver=_SingleKey(key_id, private_key)
        )

    def sign(self, request: httpx.Request) -> None:
        """Set ``Content-Digest``, ``Signature-Input`` and ``Signature`` (replacing earlier ones)."""
        if "content-type" not in request.headers:
            raise ValueError("the request needs a Content-Type header: it is a covered component")
        created = int(self._clock())
        if "content-digest" in request.headers:
            del request.headers["content-digest"]  # a retry re-signs possibly changed content
        self._signer.sign(
            request,
            key_id=self.key_id,
            created=datetime.datetime.fromtimestamp(created, tz=datetime.UTC),
            expires=datetime.datetime.fromtimestamp(created + MAX_AGE_SECONDS, tz=datetime.UTC),
            nonce=secrets.token_urlsafe(16),
            label=SIGNATURE_LABEL,
            tag=SIGNATURE_TAG,
            covered_component_ids=COVERED_COMPONENTS,
            body=request.content,
        )


# --- verification ----------------------------------------------------------------------------------


class SignatureError(Exception):
    """An event failed authentication; ``reason`` is a short, metric-friendly label."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class VerifiedSignature:
    key_id: str
    runtime_id: str
    key_version: str
    nonce: str
    created: int


Verified = tuple[str, str, str, str, int]
"""``(key_id, runtime_id, key_version, nonce, created)``: what :meth:`SignatureVerifier.verify_parts`
returns (a plain tuple: the listener's hot path does not pay for a dataclass)."""


@dataclass(frozen=True)
class _SignatureInput:
    components: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]
    signature: bytes


# What EventSigner emits (components and parameters in this order) is matched by one regular
# expression; anything else goes through the general structured-field parser.
_SF_KEY = r"[a-z*][a-z0-9_\-.*]*"
_SF_PLAIN = r"[\x20\x21\x23-\x5b\x5d-\x7e]*"  # string content: printable ASCII without quote/backslash
_CANONICAL_INPUT = re.compile(  # groups: label, then the rest (the params as sent), then each value
    rf"({_SF_KEY})=(\(\"@method\" \"@authority\" \"@target-uri\" \"content-type\" \"content-digest\"\)"
    rf";created=(0|[1-9][0-9]{{0,14}});keyid=\"({_SF_PLAIN})\";alg=\"ed25519\""
    rf";expires=(0|[1-9][0-9]{{0,14}});nonce=\"({_SF_PLAIN})\";tag=\"({_SF_PLAIN})\")"
)
_FAST_DIGEST = re.compile(r"sha-256=:([A-Za-z0-9+/]{43}=):")
_DIGESTS = {"sha-256": hashlib.sha256, "sha-512": hashlib.sha512}


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _serialize_params(params: tuple[tuple[str, int | str], ...]) -> str:
    return "".join(f";{k}={v}" if isinstance(v, int) else f";{k}={_quote(v)}" for k, v in params)


def _lower_headers(headers: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _parse_dictionary(value: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    try:
        parsed = http_sf.parse(value.encode("ascii"), tltype="dictionary")
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise SignatureError("malformed", "not a structured-field dictionary") from exc
    if not isinstance(parsed, dict):
        raise SignatureError("malformed", "not a structured-field dictionary")
    return cast(dict[str, tuple[Any, dict[str, Any]]], parsed)


def content_digest(body: bytes) -> str:
    """The RFC 9530 ``Content-Digest`` field value our signer sends: ``sha-256=:<base64>:``."""
    return "sha-256=:" + binascii.b2a_base64(hashlib.sha256(body).digest(), newline=False).decode() + ":"


def check_content_digest(field: str | None, body: bytes) -> None:
    """RFC 9530 check of the raw body; every supplied sha-256/sha-512 member must match."""
    if field is None:
        raise SignatureError("missing", "Content-Digest header missing")
    if field == content_digest(body):
        return  # the signer's form, and it matches (the body and its digest are not secret)
    match = _FAST_DIGEST.fullmatch(field)
    if match is not None:
        expected = base64.b64decode(match.group(1))
        if not hmac.compare_digest(expected, hashlib.sha256(body).digest()):
            raise SignatureError("bad-digest", "Content-Digest does not match the body")
        return
    members = _parse_dictionary(field)
    checked = 0
    for algorithm, (value, _params) in members.items():
        hasher = _DIGESTS.get(algorithm)
        if hasher is None:
            continue
        if not isinstance(value, bytes) or len(value) != hasher().digest_size:
            raise SignatureError("malformed", "Content-Digest member is not a digest")
        if not hmac.compare_digest(value, hasher(body).digest()):
            raise SignatureError("bad-digest", "Content-Digest does not match the body")
        checked += 1
    if not checked:
        raise SignatureError("bad-digest", "Content-Digest has no sha-256 or sha-512 member")


_Canonical = tuple[bytes, str, int, str, int, str, str]
"""``(signature, params as sent, created, keyid, expires, nonce, tag)`` of a canonical input."""


def _parse_canonical(sig_input: str, signature: str) -> _Canonical | None:
    """The signer's single-signature form: one regular expression and a strict base64 decode.

    A match fixes the components, the parameter names, order and types, and ``alg``; the
    Signature field must be exactly ``<same label>=:<base64>:``. Anything else: None.
    """
    m_in = _CANONICAL_INPUT.fullmatch(sig_input)
    if m_in is None:
        return None
    label, params, created, keyid, expires, nonce, tag = m_in.groups()
    start = len(label) + 2
    if len(signature) <= start + 1 or not signature.startswith(label + "=:") or signature[-1] != ":":
        return None
    try:  # strict: only the base64 alphabet and correct padding (a ':' inside fails too)
        raw = binascii.a2b_base64(signature[start:-1], strict_mode=True)
    except ValueError:
        return None
    return raw, params, int(created), keyid, int(expires), nonce, tag


def _parse_general(sig_input: str, signature: str, tag: str) -> _SignatureInput:
    inputs = _parse_dictionary(sig_input)
    signatures = _parse_dictionary(signature)
    if inputs.keys() != signatures.keys():
        raise SignatureError("malformed", "Signature-Input and Signature labels differ")
    found: list[_SignatureInput] = []
    for label, (members, params) in inputs.items():
        if params.get("tag") != tag:
            continue
        sig_value = signatures[label][0]
        if not isinstance(members, list) or not isinstance(sig_value, bytes):
            raise SignatureError("malformed", "signature member has the wrong structure")
        components: list[str] = []
        for item, item_params in members:
            if not isinstance(item, str) or item_params:
                raise SignatureError("components", "covered components must be plain strings")
            components.append(item)
        found.append(_SignatureInput(tuple(components), tuple(params.items()), sig_value))
    if not found:
        raise SignatureError("tag", f'no signature with tag "{tag}"')
    if len(found) > 1:
        raise SignatureError("malformed", f'more than one signature with tag "{tag}"')
    return found[0]


_AUTHORITY = re.compile(r"([A-Za-z0-9\-._~%!$&'()*+,;=]+|\[[0-9A-Fa-f:.]+\])(?::([0-9]{1,5}))?")


def _split_raw(url: str) -> tuple[str, str, str]:
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


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, @authority, @target-uri)`` of an absolute URL, as RFC 9421 derives them.

    The host is lower-cased and a default port dropped (what ``httpx`` does to the URL it signs).
    """
    scheme, authority, path = _split_raw(url)
    scheme, authority = _origin(scheme, authority)
    return scheme, authority, f"{scheme}://{authority}{path}"


@functools.lru_cache(maxsize=256)
def _origin(scheme: str, authority: str) -> tuple[str, str]:
    """Normalised ``(scheme, authority)``; memoised: a listener sees a handful of distinct hosts."""
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


def _canonical_base(
    method: str, authority: str, target: str, fields: Mapping[str, str], params: str
) -> bytes:
    """The signature base for a canonical Signature-Input (``params`` = its inner list + parameters).

    One f-string instead of :func:`signature_base`'s general loop; equal to it (tests cross-check).
    """
    content_type = (fields.get("content-type") or "").strip()
    digest = (fields.get("content-digest") or "").strip()
    covered = f"{method}{authority}{target}{content_type}{digest}"
    if not content_type or not covered.isascii() or not covered.isprintable():
        raise SignatureError("malformed", "covered components must be present and printable ASCII")
    return (
        f'"@method": {method}\n"@authority": {authority}\n"@target-uri": {target}\n'
        f'"content-type": {content_type}\n"content-digest": {digest}\n"@signature-params": {params}'
    ).encode("ascii")


_parse_key_id_cached = functools.lru_cache(maxsize=16_384)(parse_key_id)
"""``parse_key_id`` memoised: a listener sees the same few thousand key ids all day (a malformed
id raises and is not cached, so it cannot push good entries out)."""


class SignatureVerifier:
    """Fast, strict verifier for exactly this profile (the listener's hot path)."""

    def __init__(
        self,
        keys: KeyResolver,
        *,
        clock: Callable[[], float] = time.time,
        max_age: int = MAX_AGE_SECONDS,
        skew: int = MAX_CLOCK_SKEW_SECONDS,
        tag: str = SIGNATURE_TAG,
    ) -> None:
        self._keys = keys
        self._clock = clock
        self._max_age = max_age
        self._skew = skew
        self._tag = tag

    def verify(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> VerifiedSignature:
        """Authenticate one request; raises :class:`SignatureError` with a short reason."""
        return self.verify_fields(method, url, _lower_headers(headers), body)

    def verify_fields(
        self, method: str, url: str, fields: Mapping[str, str], body: bytes
    ) -> VerifiedSignature:
        """:meth:`verify` for headers whose names are already lower-case."""
        scheme, authority, path = _split_raw(url)
        return VerifiedSignature(*self.verify_parts(method, scheme, authority, path, fields, body))

    def verify_parts(
        self, method: str, scheme: str, authority: str, path: str, fields: Mapping[str, str], body: bytes
    ) -> Verified:
        """The listener's hot path: the request URL in parts, as received.

        ``scheme`` and ``authority`` (``host[:port]``) are normalised here like :func:`split_url`
        does, ``path`` is the request target's path plus ``?query``. ``fields`` has lower-case
        names. Checks, in this order: signature headers present, Content-Digest, Signature-Input
        structure and profile, nonce, time window, key id, trusted key, Ed25519. Raises
        :class:`SignatureError`.
        """
        sig_input = fields.get("signature-input")
        signature = fields.get("signature")
        if sig_input is None or signature is None:
            raise SignatureError("missing", "Signature-Input and Signature headers required")
        # The body is untrusted until its digest matches: check it before parsing anything else.
        digest = fields.get("content-digest")
        if digest is None or digest != content_digest(body):
            check_content_digest(digest, body)  # raises with the exact reason, or accepts other forms
        fast = _parse_canonical(sig_input, signature)
        if fast is not None:
            raw, canonical, created, key_id, expires, nonce, tag = fast
            if tag != self._tag:
                raise SignatureError("tag", f'signature tag must be "{self._tag}"')
        else:
            canonical = None
            parsed = _parse_general(sig_input, signature, self._tag)
            params = self._check_general(parsed)
            raw = parsed.signature
            nonce, created, expires, key_id = (
                params["nonce"],
                params["created"],
                params["expires"],
                params["keyid"],
            )
        if not nonce or len(nonce) > MAX_NONCE_LENGTH:
            raise SignatureError("malformed", "nonce must be 1-128 characters")
        now = self._clock()
        if created > now + self._skew:
            raise SignatureError("future", "signature created in the future")
        if created + self._max_age < now - self._skew or expires < now - self._skew:
            raise SignatureError("stale", "signature too old or expired")
        try:
            runtime_id, key_version = _parse_key_id_cached(key_id)
        except ValueError as exc:
            raise SignatureError("malformed", str(exc)) from exc
        public_keys = self._keys.public_keys(key_id)
        if not public_keys:
            raise SignatureError("unknown-key", "no trusted key for this keyid")
        if len(raw) != 64:
            raise SignatureError("bad-signature", "an Ed25519 signature has 64 bytes")
        scheme, authority = _origin(scheme, authority)
        if canonical is None:
            base = signature_base(
                method, f"{scheme}://{authority}{path}", fields, parsed.params, parsed.components
            )
        else:
            base = _canonical_base(method, authority, f"{scheme}://{authority}{path}", fields, canonical)
        signed = raw + base  # libsodium's input: signature, then message
        for key in public_keys:
            try:
                _sodium_open(signed, key.public_bytes_raw())
            except _SodiumBadSignature:
                continue
            return key_id, runtime_id, key_version, nonce, created
        raise SignatureError("bad-signature", "signature does not verify")

    def _check_general(self, parsed: _SignatureInput) -> dict[str, Any]:
        params = dict(parsed.params)
        for name, value in parsed.params:
            expected_type = _PARAM_TYPES.get(name)
            if expected_type is None:
                raise SignatureError("malformed", f'unexpected signature parameter "{name}"')
            if type(value) is not expected_type:
                raise SignatureError("malformed", f'signature parameter "{name}" has the wrong type')
        if params.get("tag") != self._tag:
            raise SignatureError("tag", f'signature tag must be "{self._tag}"')
        for name in _REQUIRED_PARAMS:
            if name not in params:
                raise SignatureError("malformed", f'signature parameter "{name}" missing')
        if params.get("alg", ALGORITHM) != ALGORITHM:
            raise SignatureError("malformed", "signature algorithm must be ed25519")
        if sorted(parsed.components) != sorted(COVERED_COMPONENTS) or len(parsed.components) != len(
            COVERED_COMPONENTS
        ):
            raise SignatureError("components", "signature must cover " + " ".join(COVERED_COMPONENTS))
        return params


def signature_base(
    method: str,
    url: str,
    headers: Mapping[str, str],
    params: Sequence[tuple[str, int | str]],
    components: Sequence[str] = COVERED_COMPONENTS,
) -> bytes:
    """The RFC 9421 signature base of this profile (``headers`` with lower-case names).

    What the verifier checks a signature against; also usable by a signer that does not need the
    library (benchmarks pre-sign many requests this way; tests cross-check it with the library).
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
    lines.append(f'"@signature-params": {inner}{_serialize_params(tuple(params))}')
    try:
        return "\n".join(lines).encode("ascii")
    except UnicodeEncodeError as exc:
        raise SignatureError("malformed", "signature base is not ASCII") from exc


# --- reference verifier (library) ------------------------------------------------------------------


@dataclass
class _Message:
    method: str
    url: str
    headers: Mapping[str, str]


class _Resolver(HTTPSignatureKeyResolver):
    def __init__(self, keys: KeyResolver) -> None:
        self._keys = keys

    def resolve_public_key(self, key_id: str) -> Ed25519PublicKey | None:
        found = self._keys.public_keys(key_id)
        return found[0] if found else None


class _ClockedVerifier(HTTPMessageVerifier):
    """The library's verifier with our clock (it reads ``datetime.now`` itself otherwise)."""

    def __init__(self, keys: KeyResolver, clock: Callable[[], float], skew: int) -> None:
        super().__init__(signature_algorithm=algorithms.ED25519, key_resolver=_Resolver(keys))
        self._clock = clock
        self.max_clock_skew = datetime.timedelta(seconds=skew)

    def validate_created_and_expires(self, sig_input: Any, max_age: Any = None) -> None:
        now = self._clock()
        skew = self.max_clock_skew.total_seconds()
        created = sig_input.params.get("created")
        if type(created) is not int:
            raise SignatureError("malformed", "created missing")
        if created > now + skew:
            raise SignatureError("future", "signature created in the future")
        expires = sig_input.params.get("expires")
        if expires is not None and expires < now - skew:
            raise SignatureError("stale", "signature expired")
        if max_age is not None and created + max_age.total_seconds() < now - skew:
            raise SignatureError("stale", "signature too old")


class LibrarySignatureVerifier:
    """The same profile checked by ``http-message-signatures`` (reference for tests and benchmarks).

    Uses only the first trusted key per keyid (the library resolves one key per id).
    """

    def __init__(
        self,
        keys: KeyResolver,
        *,
        clock: Callable[[], float] = time.time,
        max_age: int = MAX_AGE_SECONDS,
        skew: int = MAX_CLOCK_SKEW_SECONDS,
    ) -> None:
        self._verifier = _ClockedVerifier(keys, clock, skew)
        self._keys = keys
        self._max_age = datetime.timedelta(seconds=max_age)

    def verify(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> VerifiedSignature:
        message = _Message(method, url, dict(headers))
        try:
            results = self._verifier.verify(
                message,
                max_age=self._max_age,
                expect_tag=SIGNATURE_TAG,
                require_components=COVERED_COMPONENTS,
                body=body,
            )
        except SignatureError:
            raise
        except _LibInvalidSignature as exc:
            raise SignatureError("bad-signature", str(exc)) from exc
        except Exception as exc:  # the library raises its base exception for malformed input
            raise SignatureError("malformed", str(exc)) from exc
        if len(results) != 1:
            raise SignatureError("malformed", "expected exactly one signature")
        params = results[0].parameters
        nonce = params.get("nonce")
        key_id = params.get("keyid")
        if not isinstance(nonce, str) or not nonce or not isinstance(key_id, str):
            raise SignatureError("malformed", "nonce and keyid required")
        runtime_id, key_version = parse_key_id(key_id)
        return VerifiedSignature(key_id, runtime_id, key_version, nonce, int(params["created"]))
