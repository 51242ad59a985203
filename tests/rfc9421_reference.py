"""Reference signer and verifier of the event profile, built on ``http-message-signatures``.

Why in the tests: no product code uses them. The agent signs with its own ``FastEventSigner`` and the
listener verifies with its own ``SignatureVerifier``, both written for speed; this RFC 9421
reference implementation (and so ``cryptography``/OpenSSL) cross-checks both in tests, and the
benchmarks compare costs against it.
"""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from http_message_signatures import (
    HTTPMessageSigner,
    HTTPMessageVerifier,
    HTTPSignatureKeyResolver,
    algorithms,
)
from http_message_signatures import InvalidSignature as _LibInvalidSignature

from kcp_listener.verifier import KeyResolver, VerifiedSignature
from kyma_wire.profile import (
    COVERED_COMPONENTS,
    MAX_AGE_SECONDS,
    MAX_CLOCK_SKEW_SECONDS,
    SIGNATURE_LABEL,
    SIGNATURE_TAG,
    SignatureError,
    parse_key_id,
)

__all__ = ["EventSigner", "LibrarySignatureVerifier"]


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

    def headers(self, method: str, url: str, content_type: str, body: bytes) -> dict[str, str]:
        """The signature headers for a request (the agent's ``KcpClient`` signer interface)."""
        request = httpx.Request(method, url, content=body, headers={"content-type": content_type})
        self.sign(request)
        return {name: request.headers[name] for name in ("content-digest", "signature-input", "signature")}


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
