"""OCM RSASSA-PKCS1-V1_5 signatures: vectors made by OpenSSL, tamper and wrong-key detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from kyma_operator.modules import constants as c
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.signing import (
    KeyFileError,
    SignatureError,
    generate_key,
    load_private_key,
    load_public_key,
    sign,
    verify,
    verify_blob,
)

DATA = Path(__file__).parent / "data"
# jsonNormalisation/v3 (= v4alpha1 here) digest of introspect-v2.yaml; the signature file was produced
# independently with `openssl pkeyutl -sign -inkey test-rsa-key.pem -pkeyopt digest:sha256` over these
# 32 bytes. ocmcli-0.27.0-signed-v3.yaml is OCM's own jsonNormalisation/v3 conformance input (the OCM CLI
# 0.27.0 component, see data/README.md) with a signature made the OCM CLI's way (RSASSA-PKCS1-V1_5 over the
# hex-decoded digest, value hex-encoded) by the same openssl command.
INTROSPECT_DIGEST = "2f8f029e45f0e158b7e9a5fa6523be0ae9ab9eadc6f3c7f2e37ebb6d8e79bb01"


@pytest.fixture(scope="module")
def descriptor() -> ComponentDescriptor:
    return ComponentDescriptor.from_yaml((DATA / "introspect-v2.yaml").read_text())


@pytest.fixture(scope="module")
def private_pem() -> bytes:
    return (DATA / "test-rsa-key.pem").read_bytes()


@pytest.fixture(scope="module")
def public_pem() -> bytes:
    return (DATA / "test-rsa-pub.pem").read_bytes()


def test_signature_equals_the_openssl_vector(descriptor, private_pem) -> None:
    signed = sign(descriptor, load_private_key(private_pem), name="acme")
    signature = signed.signatures[0]
    assert signature.digest.value == INTROSPECT_DIGEST
    assert signature.digest.normalisation_algorithm == c.JSON_NORMALISATION_V3
    assert signature.signature.algorithm == c.RSA_PKCS1_V15
    assert signature.signature.media_type == c.RSA_SIGNATURE_MEDIA_TYPE
    assert signature.signature.value == (DATA / "introspect.sig.hex").read_text().strip()


def test_openssl_signature_verifies(descriptor, public_pem) -> None:
    signed = ComponentDescriptor.parse(
        {
            **descriptor.to_v2(),
            "signatures": [
                {
                    "name": "acme",
                    "digest": {
                        "hashAlgorithm": "SHA-256",
                        "normalisationAlgorithm": "jsonNormalisation/v3",
                        "value": INTROSPECT_DIGEST,
                    },
                    "signature": {
                        "algorithm": "RSASSA-PKCS1-V1_5",
                        "mediaType": "application/vnd.ocm.signature.rsa",
                        "value": (DATA / "introspect.sig.hex").read_text().strip(),
                    },
                }
            ],
        }
    )
    assert verify(signed, load_public_key(public_pem)).name == "acme"


def test_signature_survives_serialisation_round_trips(descriptor, private_pem, public_pem) -> None:
    signed = sign(descriptor, load_private_key(private_pem), name="acme")
    for copy in (
        ComponentDescriptor.from_yaml(signed.to_yaml()),
        ComponentDescriptor.parse(signed.to_v3()),
        signed.with_repository_context("other.example/base"),
    ):
        verify(copy, load_public_key(public_pem), name="acme")


def test_tampered_descriptor_fails(descriptor, private_pem, public_pem) -> None:
    signed = sign(descriptor, load_private_key(private_pem), name="acme")
    tampered = signed.model_copy(deep=True)
    assert tampered.component.resources[1].digest is not None
    tampered.component.resources[1].digest.value = "0" * 64
    with pytest.raises(SignatureError, match="descriptor was changed after signing"):
        verify(tampered, load_public_key(public_pem))


def test_forged_digest_fails_the_rsa_check(descriptor, private_pem, public_pem) -> None:
    signed = sign(descriptor, load_private_key(private_pem), name="acme")
    tampered = signed.model_copy(deep=True)
    tampered.component.version = "9.9.9"
    from kyma_operator.modules.normalise import descriptor_digest

    tampered.signatures[0].digest.value = descriptor_digest(tampered)
    with pytest.raises(SignatureError, match="not valid for the given public key"):
        verify(tampered, load_public_key(public_pem))


def test_wrong_key_and_missing_signature(descriptor, private_pem) -> None:
    signed = sign(descriptor, load_private_key(private_pem), name="acme")
    with pytest.raises(SignatureError, match="not valid for the given public key"):
        verify(signed, generate_key().public_key())
    with pytest.raises(SignatureError, match="has no signature 'other'"):
        verify(signed, load_public_key(private_pem), name="other")
    with pytest.raises(SignatureError, match=r"has no signature$"):
        verify(descriptor, load_public_key(private_pem))


def test_resigning_replaces_the_signature_of_that_name(descriptor, private_pem) -> None:
    key = load_private_key(private_pem)
    twice = sign(sign(descriptor, key, name="acme"), key, name="acme")
    assert [s.name for s in twice.signatures] == ["acme"]
    both = sign(twice, key, name="second")
    assert [s.name for s in both.signatures] == ["acme", "second"]


def test_bad_key_files_are_clear_errors() -> None:
    with pytest.raises(KeyFileError, match="not an unencrypted PEM private key"):
        load_private_key(b"nonsense", source="key.pem")
    with pytest.raises(KeyFileError, match="not a PEM public key"):
        load_public_key(b"nonsense")


def test_blob_digest_check(descriptor) -> None:
    from kyma_operator.modules.signing import blob_digest_spec

    resource = descriptor.component.resources[1].model_copy(update={"digest": blob_digest_spec(b"data")})
    verify_blob(resource, b"data")
    with pytest.raises(SignatureError, match="blob digest"):
        verify_blob(resource, b"other")


def test_signature_made_the_ocm_cli_way_verifies_and_is_reproduced(private_pem, public_pem) -> None:
    vector = ComponentDescriptor.from_yaml((DATA / "ocmcli-0.27.0-signed-v3.yaml").read_text())
    checked = verify(vector, load_public_key(public_pem), name="ocm-cli-way")
    assert checked.digest.normalisation_algorithm == c.JSON_NORMALISATION_V3
    unsigned = vector.model_copy(update={"signatures": []})
    ours = sign(unsigned, load_private_key(private_pem), name="ocm-cli-way").signatures[0]
    assert ours.model_dump() == checked.model_dump()


def test_v4alpha1_on_request_and_verified(descriptor, private_pem, public_pem) -> None:
    signed = sign(
        descriptor, load_private_key(private_pem), name="acme", normalisation=c.JSON_NORMALISATION_V4ALPHA1
    )
    assert signed.signatures[0].digest.normalisation_algorithm == c.JSON_NORMALISATION_V4ALPHA1
    assert verify(signed, load_public_key(public_pem)).name == "acme"
    vector = ComponentDescriptor.from_yaml((DATA / "ocmcli-0.27.0-signed-v3.yaml").read_text())
    renamed = vector.model_copy(deep=True)
    renamed.signatures[0].digest.normalisation_algorithm = c.JSON_NORMALISATION_V4ALPHA1
    verify(renamed, load_public_key(public_pem))


def test_unknown_normalisation_is_refused(descriptor, private_pem, public_pem) -> None:
    with pytest.raises(SignatureError, match="unsupported normalisation 'jsonNormalisation/v9'"):
        sign(descriptor, load_private_key(private_pem), name="acme", normalisation="jsonNormalisation/v9")
    signed = sign(descriptor, load_private_key(private_pem), name="acme")
    signed.signatures[0].digest.normalisation_algorithm = "jsonNormalisation/v9"
    with pytest.raises(SignatureError, match="unsupported normalisation"):
        verify(signed, load_public_key(public_pem))
