"""The listener's verifier of the RFC 9421 / Ed25519 profile (``kyma_wire.profile``).

Why this module exists: the listener must reject everything but exactly the profile, cheaply.
:class:`SignatureVerifier` is a strict parser for that profile (a regular expression for the
canonical single-signature form the agent emits, the ``http_sf`` structured-field parser for
anything else), building the RFC 9421 signature base itself. It costs about one Ed25519
verification plus a few microseconds, where the ``http-message-signatures`` library costs ~4x that
(python-ecosystem notes: ~257 us per verify), which alone would cap one worker below the 4,000
events/s target. The Ed25519 check itself is libsodium's (PyNaCl ``crypto_sign_open``): ~41 us
against ~84 us for OpenSSL's through ``cryptography`` on the benchmark machine. libsodium is the
stricter of the two (it also rejects small-order and non-canonical points), so no check is weaker;
keys stay ``cryptography`` objects everywhere else (32 raw bytes are handed over).

The library's verifier (``tests/rfc9421_reference.py``) checks the same profile in tests, which
cross-check both (library-signed requests verify here and vice versa); benchmarks compare costs.

Replay protection (remembering nonces) is the listener's ``replay`` module; this module only
checks that a nonce is present and that ``created``/``expires`` are inside the time window.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import http_sf
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.bindings import crypto_sign_open as _sodium_open
from nacl.exceptions import BadSignatureError as _SodiumBadSignature

from kyma_wire.profile import (
    ALGORITHM,
    COVERED_COMPONENTS,
    MAX_AGE_SECONDS,
    MAX_CLOCK_SKEW_SECONDS,
    MAX_NONCE_LENGTH,
    SIGNATURE_TAG,
    SignatureError,
    content_digest,
    origin,
    parse_key_id,
    signature_base,
    split_raw,
)

__all__ = [
    "KeyResolver",
    "SignatureVerifier",
    "Verified",
    "VerifiedSignature",
    "check_content_digest",
]

_PARAM_TYPES: dict[str, type] = {
    "created": int,
    "expires": int,
    "keyid": str,
    "nonce": str,
    "tag": str,
    "alg": str,
}
_REQUIRED_PARAMS = ("created", "expires", "keyid", "nonce", "tag")


class KeyResolver(Protocol):
    """Trusted public keys for a key id (several during a rotation overlap); empty = unknown key."""

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]: ...


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


# What the agent's signer emits (components and parameters in this order) is matched by one regular
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
        scheme, authority, path = split_raw(url)
        return VerifiedSignature(*self.verify_parts(method, scheme, authority, path, fields, body))

    def verify_parts(
        self, method: str, scheme: str, authority: str, path: str, fields: Mapping[str, str], body: bytes
    ) -> Verified:
        """The listener's hot path: the request URL in parts, as received.

        ``scheme`` and ``authority`` (``host[:port]``) are normalised here like
        ``kyma_wire.profile.split_url`` does, ``path`` is the request target's path plus
        ``?query``. ``fields`` has lower-case names. Checks, in this order: signature headers
        present, Content-Digest, Signature-Input structure and profile, nonce, time window, key
        id, trusted key, Ed25519. Raises :class:`SignatureError`.
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
        scheme, authority = origin(scheme, authority)
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
