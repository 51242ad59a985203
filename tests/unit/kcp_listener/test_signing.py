"""The RFC 9421 event profile: round trips, cross-checks with the library, every rejection reason."""

from __future__ import annotations

import base64
import datetime
import hashlib
from collections.abc import Sequence

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from http_message_signatures import HTTPMessageSigner, MappingKeyResolver, algorithms

from kcp_listener import verifier as listener_verifier
from kcp_listener.verifier import SignatureVerifier
from kyma_wire import keys as wire_keys
from kyma_wire import profile
from kyma_wire.names import OPERATOR_NAME
from kyma_wire.profile import COVERED_COMPONENTS, SIGNATURE_TAG, SignatureError, make_key_id, parse_key_id
from tests.rfc9421_reference import EventSigner, LibrarySignatureVerifier

NOW = 1_800_000_000.0
URL = f"https://kcp.example.com/v2/{OPERATOR_NAME}/event"
BODY = b'{"watched":{"namespace":"kyma-system","name":"default"}}'
KEY_ID = make_key_id("runtime-1", "v1")


class Keys:
    def __init__(self, keys: dict[str, list[Ed25519PublicKey]]) -> None:
        self.keys = keys

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]:
        return self.keys.get(key_id, [])


@pytest.fixture
def private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def keys(private_key: Ed25519PrivateKey) -> Keys:
    return Keys({KEY_ID: [private_key.public_key()]})


def signed(
    private_key: Ed25519PrivateKey, *, at: float = NOW, body: bytes = BODY, url: str = URL
) -> httpx.Request:
    request = httpx.Request("POST", url, content=body, headers={"Content-Type": "application/json"})
    EventSigner(private_key, KEY_ID, clock=lambda: at).sign(request)
    return request


def verifiers(keys: Keys, now: float = NOW) -> list[SignatureVerifier | LibrarySignatureVerifier]:
    return [SignatureVerifier(keys, clock=lambda: now), LibrarySignatureVerifier(keys, clock=lambda: now)]


def reason(
    verifier: SignatureVerifier | LibrarySignatureVerifier, request: httpx.Request, **over: object
) -> str:
    headers = dict(request.headers)
    headers.update({k: v for k, v in over.items() if isinstance(v, str) and k not in ("method", "url")})
    for k, v in over.items():
        if v is None:
            headers.pop(k, None)
    body = over.get("body", request.content)
    assert isinstance(body, bytes)
    with pytest.raises(SignatureError) as info:
        verifier.verify(
            str(over.get("method", request.method)), str(over.get("url", request.url)), headers, body
        )
    return info.value.reason


# --- key ids and keys --------------------------------------------------------------------------------


def test_key_id_round_trip() -> None:
    assert make_key_id("c7f2a0e1-5b4d-4e8b-9a3f-0123456789ab", "2026-07") == (
        "c7f2a0e1-5b4d-4e8b-9a3f-0123456789ab:2026-07"
    )
    assert parse_key_id("rt.1:v2") == ("rt.1", "v2")


@pytest.mark.parametrize(
    "bad", ["", "rt", ":v1", "rt:", "rt:v1:x", "r t:v1", "rt:v/1", "-rt:v1", "x" * 64 + ":v1"]
)
def test_parse_key_id_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_key_id(bad)


@pytest.mark.parametrize(("runtime_id", "version"), [("", "v1"), ("rt", ""), ("rt:x", "v1"), ("rt", "v:1")])
def test_make_key_id_rejects_bad_parts(runtime_id: str, version: str) -> None:
    with pytest.raises(ValueError):
        make_key_id(runtime_id, version)


def test_pem_round_trip(private_key: Ed25519PrivateKey) -> None:
    loaded = wire_keys.load_private_key(wire_keys.private_key_pem(private_key))
    public = wire_keys.load_public_key(wire_keys.public_key_pem(private_key.public_key()))
    assert wire_keys.public_key_pem(loaded.public_key()) == wire_keys.public_key_pem(public)


def test_pem_loaders_reject_other_key_types() -> None:
    other = ec.generate_private_key(ec.SECP256R1())
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(ValueError):
        wire_keys.load_private_key(pem)
    pub = other.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(ValueError):
        wire_keys.load_public_key(pub)


# --- signing -------------------------------------------------------------------------------------------


def test_signer_sets_the_profile(private_key: Ed25519PrivateKey) -> None:
    request = signed(private_key)
    assert request.headers["content-digest"].startswith("sha-256=:")
    sig_input = request.headers["signature-input"]
    assert sig_input.startswith('kcp=("@method" "@authority" "@target-uri" "content-type" "content-digest")')
    assert f";created={int(NOW)};" in sig_input
    assert f";expires={int(NOW) + 60};" in sig_input
    assert f'keyid="{KEY_ID}"' in sig_input
    assert 'alg="ed25519"' in sig_input
    assert f'tag="{SIGNATURE_TAG}"' in sig_input


def test_resigning_replaces_headers_and_nonce(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    first = SignatureVerifier(keys, clock=lambda: NOW).verify("POST", URL, request.headers, request.content)
    EventSigner(private_key, KEY_ID, clock=lambda: NOW + 1).sign(request)
    assert len(request.headers.get_list("signature")) == 1
    second = SignatureVerifier(keys, clock=lambda: NOW).verify("POST", URL, request.headers, request.content)
    assert first.nonce != second.nonce
    assert second.created == int(NOW) + 1


def test_signer_requires_content_type(private_key: Ed25519PrivateKey) -> None:
    request = httpx.Request("POST", URL, content=BODY)
    with pytest.raises(ValueError, match="Content-Type"):
        EventSigner(private_key, KEY_ID).sign(request)


def test_signer_rejects_malformed_key_id(private_key: Ed25519PrivateKey) -> None:
    with pytest.raises(ValueError):
        EventSigner(private_key, "no-version")


# --- verification: success --------------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1], ids=["fast", "library"])
def test_round_trip(private_key: Ed25519PrivateKey, keys: Keys, which: int) -> None:
    request = signed(private_key)
    result = verifiers(keys)[which].verify("POST", URL, request.headers, request.content)
    assert result.key_id == KEY_ID
    assert (result.runtime_id, result.key_version) == ("runtime-1", "v1")
    assert result.created == int(NOW)
    assert len(result.nonce) >= 22  # 128 random bits, base64url


def test_fast_verifier_accepts_mixed_case_header_names(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    headers = {k.title(): v for k, v in request.headers.items()}
    SignatureVerifier(keys, clock=lambda: NOW).verify("POST", URL, headers, request.content)


def test_url_normalisation_matches_the_signer(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key, url=f"https://KCP.Example.com:443/v2/{OPERATOR_NAME}/event?x=1")
    SignatureVerifier(keys, clock=lambda: NOW).verify(
        "POST", f"https://kcp.example.com:443/v2/{OPERATOR_NAME}/event?x=1", request.headers, request.content
    )


def test_rotation_overlap_trusts_old_and_new(private_key: Ed25519PrivateKey) -> None:
    new_key = Ed25519PrivateKey.generate()
    keys = Keys({KEY_ID: [new_key.public_key(), private_key.public_key()]})
    for key in (private_key, new_key):
        request = signed(key)
        SignatureVerifier(keys, clock=lambda: NOW).verify("POST", URL, request.headers, request.content)


def test_skew_tolerance(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    for at in (NOW + 5, NOW - 64):
        request = signed(private_key, at=at)
        for verifier in verifiers(keys):
            verifier.verify("POST", URL, request.headers, request.content)


def library_sign(
    private_key: Ed25519PrivateKey,
    *,
    components: Sequence[str] = COVERED_COMPONENTS,
    nonce: str | None = "n-0123456789abcdef",
    tag: str | None = SIGNATURE_TAG,
    label: str = "sig1",
    request: httpx.Request | None = None,
    key_id: str = KEY_ID,
    append: bool = False,
) -> httpx.Request:
    if request is None:
        request = httpx.Request("POST", URL, content=BODY, headers={"Content-Type": "application/json"})
    signer = HTTPMessageSigner(
        signature_algorithm=algorithms.ED25519,
        key_resolver=MappingKeyResolver(public_keys={}, private_keys={key_id: private_key}),
    )
    created = datetime.datetime.fromtimestamp(NOW, tz=datetime.UTC)
    signer.sign(
        request,
        key_id=key_id,
        created=created,
        expires=created + datetime.timedelta(seconds=60),
        nonce=nonce,
        label=label,
        tag=tag,
        covered_component_ids=components,
        body=request.content,
        use_existing_digest=True,
        append_if_signature_exists=append,
    )
    return request


def test_library_signed_other_order_verifies_on_fast_path(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = library_sign(private_key, components=tuple(reversed(COVERED_COMPONENTS)))
    for verifier in verifiers(keys):
        assert verifier.verify("POST", URL, request.headers, request.content).nonce == "n-0123456789abcdef"


def test_selects_our_signature_among_several(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    other = Ed25519PrivateKey.generate()
    request = library_sign(other, tag="proxy", label="proxy", key_id="proxy:v1")
    request = library_sign(private_key, request=request, append=True)
    assert "proxy=" in request.headers["signature-input"]
    for verifier in verifiers(keys):
        assert verifier.verify("POST", URL, request.headers, request.content).key_id == KEY_ID


def test_signature_base_matches_the_library(private_key: Ed25519PrivateKey) -> None:
    """What our fast path signs over is byte-identical to the library's signature base."""
    request = signed(private_key)
    fast = listener_verifier._parse_canonical(
        request.headers["signature-input"], request.headers["signature"]
    )
    assert fast is not None
    raw, canonical = fast[:2]
    _scheme, authority, target = profile.split_url(URL)
    ours = listener_verifier._canonical_base("POST", authority, target, dict(request.headers), canonical)
    general = listener_verifier._parse_general(
        request.headers["signature-input"], request.headers["signature"], "kcp-events"
    )
    assert general.signature == raw
    assert profile.signature_base("POST", URL, request.headers, general.params, general.components) == ours
    private_key.public_key().verify(raw, ours)


def test_canonical_form_is_parsed_exactly(private_key: Ed25519PrivateKey) -> None:
    request = signed(private_key)
    sig_input, signature = request.headers["signature-input"], request.headers["signature"]
    fast = listener_verifier._parse_canonical(sig_input, signature)
    general = listener_verifier._parse_general(sig_input, signature, SIGNATURE_TAG)
    assert fast is not None
    _raw, _canonical, created, key_id, expires, nonce, tag = fast
    assert dict(general.params) == {
        "created": created,
        "keyid": key_id,
        "alg": "ed25519",
        "expires": expires,
        "nonce": nonce,
        "tag": tag,
    }
    # Anything else takes the general parser: other label in Signature, bad base64, extra parameter.
    assert listener_verifier._parse_canonical(sig_input, signature.replace("kcp=", "sig=")) is None
    assert listener_verifier._parse_canonical(sig_input, "kcp=:AAA*:") is None
    assert listener_verifier._parse_canonical(sig_input + ';x="1"', signature) is None


def test_content_digest_fast_form_and_other_forms() -> None:
    assert profile.content_digest(BODY) == (
        "sha-256=:" + base64.b64encode(hashlib.sha256(BODY).digest()).decode() + ":"
    )
    listener_verifier.check_content_digest(profile.content_digest(BODY), BODY)
    sha512 = "sha-512=:" + base64.b64encode(hashlib.sha512(BODY).digest()).decode() + ":"
    listener_verifier.check_content_digest(sha512, BODY)
    listener_verifier.check_content_digest(f"{profile.content_digest(BODY)}, {sha512}", BODY)
    with pytest.raises(SignatureError) as info:
        listener_verifier.check_content_digest(profile.content_digest(BODY + b" "), BODY)
    assert info.value.reason == "bad-digest"


# --- verification: every rejection reason -------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1], ids=["fast", "library"])
@pytest.mark.parametrize(
    ("change", "expected_fast", "expected_library"),
    [
        ({"signature": None}, "missing", "bad-signature"),
        ({"signature-input": None}, "missing", "bad-signature"),
        ({"body": BODY + b" "}, "bad-digest", "bad-signature"),
        ({"content-digest": None}, "missing", "bad-signature"),
        ({"content-digest": "sha-256=:AAAA:"}, "malformed", "bad-signature"),
        ({"content-digest": "md5=:AAAA:"}, "bad-digest", "bad-signature"),
        ({"method": "PUT"}, "bad-signature", "bad-signature"),
        ({"url": f"https://evil.example.com/v2/{OPERATOR_NAME}/event"}, "bad-signature", "bad-signature"),
        ({"url": "https://kcp.example.com/v2/other/event"}, "bad-signature", "bad-signature"),
        ({"content-type": "text/plain"}, "bad-signature", "bad-signature"),
        ({"signature-input": "garbage(("}, "malformed", "bad-signature"),
        ({"signature": "kcp=:AAAA:"}, "bad-signature", "bad-signature"),
    ],
)
def test_rejections(
    private_key: Ed25519PrivateKey,
    keys: Keys,
    which: int,
    change: dict[str, object],
    expected_fast: str,
    expected_library: str,
) -> None:
    """The fast path names the exact reason; the library reference only has to reject too."""
    request = signed(private_key)
    got = reason(verifiers(keys)[which], request, **change)
    assert got == (expected_fast if which == 0 else expected_library)


def test_tampered_body_with_recomputed_digest_fails_signature(
    private_key: Ed25519PrivateKey, keys: Keys
) -> None:
    request = signed(private_key)
    other = BODY.replace(b"default", b"other00")
    digest = hashlib.sha256(other).digest()
    new_digest = "sha-256=:" + base64.b64encode(digest).decode() + ":"
    assert (
        reason(verifiers(keys)[0], request, body=other, **{"content-digest": new_digest}) == "bad-signature"
    )


def test_digest_is_checked_before_the_signature_is_parsed(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    assert reason(verifiers(keys)[0], request, body=b"x", **{"signature-input": "garbage(("}) == "bad-digest"


@pytest.mark.parametrize("which", [0, 1], ids=["fast", "library"])
def test_unknown_key(private_key: Ed25519PrivateKey, which: int) -> None:
    request = signed(private_key)
    expected = "unknown-key" if which == 0 else "bad-signature"
    assert reason(verifiers(Keys({}))[which], request) == expected


@pytest.mark.parametrize("which", [0, 1], ids=["fast", "library"])
def test_wrong_key(private_key: Ed25519PrivateKey, which: int) -> None:
    keys = Keys({KEY_ID: [Ed25519PrivateKey.generate().public_key()]})
    assert reason(verifiers(keys)[which], signed(private_key)) == "bad-signature"


@pytest.mark.parametrize("which", [0, 1], ids=["fast", "library"])
def test_stale(private_key: Ed25519PrivateKey, keys: Keys, which: int) -> None:
    assert reason(verifiers(keys)[which], signed(private_key, at=NOW - 66)) == "stale"


@pytest.mark.parametrize("which", [0, 1], ids=["fast", "library"])
def test_future(private_key: Ed25519PrivateKey, keys: Keys, which: int) -> None:
    assert reason(verifiers(keys)[which], signed(private_key, at=NOW + 6)) == "future"


def test_expired_before_max_age(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    sig_input = request.headers["signature-input"].replace(
        f"expires={int(NOW) + 60}", f"expires={int(NOW) - 10}"
    )
    assert reason(verifiers(keys)[0], request, **{"signature-input": sig_input}) == "stale"


def test_wrong_tag(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = library_sign(private_key, tag="other-app")
    assert reason(verifiers(keys)[0], request) == "tag"
    assert reason(verifiers(keys)[1], request) == "bad-signature"


def test_missing_tag(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    assert reason(verifiers(keys)[0], library_sign(private_key, tag=None)) == "tag"


def test_missing_component(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = library_sign(private_key, components=("@method", "@authority", "@target-uri", "content-digest"))
    assert reason(verifiers(keys)[0], request) == "components"
    assert reason(verifiers(keys)[1], request) == "bad-signature"


def test_extra_component(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = library_sign(private_key, components=(*COVERED_COMPONENTS, "host"))
    assert reason(verifiers(keys)[0], request) == "components"


def test_nonce_required(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = library_sign(private_key, nonce=None)
    for verifier in verifiers(keys):
        assert reason(verifier, request) == "malformed"


def test_malformed_key_id(private_key: Ed25519PrivateKey) -> None:
    keys = Keys({"nonsense": [private_key.public_key()]})
    request = library_sign(private_key, key_id="nonsense")
    assert reason(verifiers(keys)[0], request) == "malformed"


def test_wrong_algorithm_parameter(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    sig_input = request.headers["signature-input"].replace('alg="ed25519"', 'alg="hmac-sha256"')
    assert reason(verifiers(keys)[0], request, **{"signature-input": sig_input}) == "malformed"


def test_unexpected_parameter(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    sig_input = request.headers["signature-input"] + ';extra="1"'
    assert reason(verifiers(keys)[0], request, **{"signature-input": sig_input}) == "malformed"


def test_wrongly_typed_parameter(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    sig_input = request.headers["signature-input"].replace(f"created={int(NOW)}", f'created="{int(NOW)}"')
    assert reason(verifiers(keys)[0], request, **{"signature-input": sig_input}) == "malformed"


def test_labels_must_match(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    signature = request.headers["signature"].replace("kcp=", "other=")
    assert reason(verifiers(keys)[0], request, signature=signature) == "malformed"


def test_two_signatures_with_our_tag_are_ambiguous(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = library_sign(private_key, label="a")
    request = library_sign(private_key, request=request, label="b", append=True)
    assert reason(verifiers(keys)[0], request) == "malformed"


def test_non_ascii_covered_value(private_key: Ed25519PrivateKey, keys: Keys) -> None:
    request = signed(private_key)
    assert reason(verifiers(keys)[0], request, **{"content-type": "application/jsön"}) == "malformed"


@pytest.mark.parametrize("url", ["kcp.example.com/v2/x", "https://user@kcp/x", "https:///x", "1https://h/x"])
def test_bad_urls(private_key: Ed25519PrivateKey, keys: Keys, url: str) -> None:
    assert reason(verifiers(keys)[0], signed(private_key), url=url) == "malformed"


ED25519_ORDER = 2**252 + 27742317777372353535851937790883648493


@pytest.mark.parametrize("which", [0, 1], ids=["fast", "library"])
def test_malleated_signature_is_rejected(private_key: Ed25519PrivateKey, keys: Keys, which: int) -> None:
    """S + L verifies the same equation; RFC 8032 requires S < L, so both verifiers refuse it."""
    request = signed(private_key)
    label, _, value = request.headers["signature"].partition("=")
    raw = base64.b64decode(value.strip(":"))
    s_plus_l = (int.from_bytes(raw[32:], "little") + ED25519_ORDER).to_bytes(32, "little")
    forged = f"{label}=:{base64.b64encode(raw[:32] + s_plus_l).decode()}:"
    assert reason(verifiers(keys)[which], request, signature=forged) == "bad-signature"


def test_small_order_key_cannot_validate_a_forgery() -> None:
    """A degenerate (identity point) key in the store must not accept the all-zero "signature".

    OpenSSL (``cryptography``) accepts that forgery for any message; libsodium, which the fast
    verifier uses, rejects small-order points.
    """
    identity = b"\x01" + bytes(31)
    degenerate = Ed25519PublicKey.from_public_bytes(identity)
    keys = Keys({KEY_ID: [degenerate]})
    digest = "sha-256=:" + base64.b64encode(hashlib.sha256(BODY).digest()).decode() + ":"
    inner = " ".join(f'"{c}"' for c in COVERED_COMPONENTS)
    headers = {
        "content-type": "application/json",
        "content-digest": digest,
        "signature-input": f'kcp=({inner});created={int(NOW)};keyid="{KEY_ID}";alg="ed25519"'
        f';expires={int(NOW) + 60};nonce="forged";tag="{SIGNATURE_TAG}"',
        "signature": "kcp=:" + base64.b64encode(identity + bytes(32)).decode() + ":",
    }
    with pytest.raises(SignatureError) as info:
        SignatureVerifier(keys, clock=lambda: NOW).verify("POST", URL, headers, BODY)
    assert info.value.reason == "bad-signature"


def test_split_url() -> None:
    assert profile.split_url("HTTPS://Kcp.Example:443/a?b=1#frag") == (
        "https",
        "kcp.example",
        "https://kcp.example/a?b=1",
    )
    assert profile.split_url("http://h:8082") == ("http", "h:8082", "http://h:8082/")
    assert profile.split_url("http://[::1]:80/x") == ("http", "[::1]", "http://[::1]/x")


def test_request_signed_over_our_signature_base_verifies_with_the_library(
    private_key: Ed25519PrivateKey,
) -> None:
    """Cross-check the other direction: our base + raw Ed25519 is a valid RFC 9421 signature."""
    digest = "sha-256=:" + base64.b64encode(hashlib.sha256(BODY).digest()).decode() + ":"
    headers = {"content-type": "application/json", "content-digest": digest}
    params: list[tuple[str, int | str]] = [
        ("created", int(NOW)),
        ("keyid", KEY_ID),
        ("alg", "ed25519"),
        ("expires", int(NOW) + 60),
        ("nonce", "our-own-nonce"),
        ("tag", SIGNATURE_TAG),
    ]
    signature = private_key.sign(profile.signature_base("POST", URL, headers, params))
    inner = " ".join(f'"{c}"' for c in COVERED_COMPONENTS)
    serialized = "".join(f";{k}={v}" if isinstance(v, int) else f';{k}="{v}"' for k, v in params)
    headers["signature-input"] = f"kcp=({inner}){serialized}"
    headers["signature"] = "kcp=:" + base64.b64encode(signature).decode() + ":"
    keys = Keys({KEY_ID: [private_key.public_key()]})
    for verifier in verifiers(keys):
        assert verifier.verify("POST", URL, headers, BODY).nonce == "our-own-nonce"
