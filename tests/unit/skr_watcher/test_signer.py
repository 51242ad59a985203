"""The agent's fast signer emits the listener's profile exactly: both verifiers accept it."""

from __future__ import annotations

import re
from collections.abc import Sequence

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from nacl.signing import SigningKey

from kcp_listener.verifier import SignatureVerifier
from kyma_wire.names import OPERATOR_NAME
from kyma_wire.profile import SignatureError
from skr_watcher.signer import FastEventSigner
from tests.rfc9421_reference import EventSigner, LibrarySignatureVerifier

KEY_ID = "runtime-1:v1"
NOW = 1_795_000_000.0
URL = f"https://listener.cp.example:443/v2/{OPERATOR_NAME}/event"
BODY = b'{"watched":{"namespace":"kyma-system","name":"default"}}'


class Keys:
    def __init__(self, key: Ed25519PublicKey) -> None:
        self.key = key

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]:
        return [self.key] if key_id == KEY_ID else []


def nacl(key: Ed25519PrivateKey) -> SigningKey:
    """The agent signs with PyNaCl; the tests make and check keys with cryptography."""
    return SigningKey(key.private_bytes_raw())


def signed(signer: FastEventSigner | EventSigner, url: str = URL, body: bytes = BODY) -> httpx.Request:
    request = httpx.Request("POST", url, content=body, headers={"content-type": "application/json"})
    signer.sign(request)
    return request


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.mark.parametrize("url", [URL, "https://127.0.0.1:9443/v2/m/heartbeat", "http://kcp/v2/m/event?x=1"])
def test_both_verifiers_accept(key: Ed25519PrivateKey, url: str) -> None:
    request = signed(FastEventSigner(nacl(key), KEY_ID, clock=lambda: NOW), url)
    for verifier in (
        SignatureVerifier(Keys(key.public_key()), clock=lambda: NOW + 1),
        LibrarySignatureVerifier(Keys(key.public_key()), clock=lambda: NOW + 1),
    ):
        # verify against the URL as sent (httpx drops a default port, as RFC 9421 normalisation does)
        result = verifier.verify("POST", str(request.url), request.headers, BODY)
        assert result.key_id == KEY_ID
        assert result.created == int(NOW)


def test_header_layout_matches_the_library_signer(key: Ed25519PrivateKey) -> None:
    fast = signed(FastEventSigner(nacl(key), KEY_ID, clock=lambda: NOW))
    library = signed(EventSigner(key, KEY_ID, clock=lambda: NOW))
    assert fast.headers["content-digest"] == library.headers["content-digest"]

    def without_nonce(value: str) -> str:
        return re.sub(r'nonce="[^"]+"', 'nonce="N"', value)

    assert without_nonce(fast.headers["signature-input"]) == without_nonce(library.headers["signature-input"])
    assert re.fullmatch(r"kcp=:[A-Za-z0-9+/]{86}==:", fast.headers["signature"])


def test_tampering_is_detected(key: Ed25519PrivateKey) -> None:
    request = signed(FastEventSigner(nacl(key), KEY_ID, clock=lambda: NOW))
    verifier = SignatureVerifier(Keys(key.public_key()), clock=lambda: NOW)
    with pytest.raises(SignatureError, match="bad-digest"):
        verifier.verify("POST", URL, request.headers, BODY + b" ")
    with pytest.raises(SignatureError, match="bad-signature"):
        verifier.verify("POST", URL.replace("event", "heartbeat"), request.headers, BODY)
    other = Ed25519PrivateKey.generate()
    with pytest.raises(SignatureError, match="bad-signature"):
        SignatureVerifier(Keys(other.public_key()), clock=lambda: NOW).verify(
            "POST", URL, request.headers, BODY
        )


def test_re_signing_replaces_headers_and_uses_a_fresh_nonce(key: Ed25519PrivateKey) -> None:
    signer = FastEventSigner(nacl(key), KEY_ID, clock=lambda: NOW)
    request = signed(signer)
    first = request.headers["signature-input"]
    signer.sign(request)
    assert len(request.headers.get_list("signature")) == 1
    assert len(request.headers.get_list("content-digest")) == 1
    assert request.headers["signature-input"] != first
    SignatureVerifier(Keys(key.public_key()), clock=lambda: NOW).verify("POST", URL, request.headers, BODY)


def test_invalid_use(key: Ed25519PrivateKey) -> None:
    with pytest.raises(ValueError):
        FastEventSigner(nacl(key), "no-version")
    with pytest.raises(ValueError, match="Content-Type"):
        FastEventSigner(nacl(key), KEY_ID).sign(httpx.Request("POST", URL, content=BODY))


def test_sniffio_is_installed() -> None:
    """httpcore imports sniffio on every request; when it is missing each import fails afresh (~0.1 ms)."""
    import importlib.util

    assert importlib.util.find_spec("sniffio") is not None
