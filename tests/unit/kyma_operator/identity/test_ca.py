"""The operator CA: self-signed root, leaves it issues, PEM round trips and refusal of bad material."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509

from kyma_operator.identity.ca import (
    CertificateAuthority,
    CertificateError,
    KeyPair,
    certificates_pem,
    issued_by,
    load_certificates,
    material_digest,
    subject_alt_names,
    subject_common_name,
)

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, 654321, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


def test_root_is_a_self_signed_ca_with_second_resolution_validity() -> None:
    ca = CertificateAuthority.create(now=T0, validity=90 * DAY)
    cert = ca.certificate
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert issued_by(cert, cert)
    assert cert.not_valid_before_utc == T0.replace(microsecond=0)
    assert cert.not_valid_after_utc == T0.replace(microsecond=0) + 90 * DAY
    assert CertificateAuthority.from_pair(ca.pair) == ca


def test_leaf_names_and_issuer() -> None:
    ca = CertificateAuthority.create(now=T0, validity=90 * DAY)
    leaf = ca.issue(common_name="rt-1", names=["a.example.com", "127.0.0.1"], now=T0, validity=10 * DAY)
    leaf.validate()
    cert = leaf.certificate
    assert subject_common_name(cert) == "rt-1"
    assert subject_alt_names(cert) == ("a.example.com", "127.0.0.1")
    assert issued_by(cert, ca.certificate)
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    other = CertificateAuthority.create(now=T0, validity=90 * DAY)
    assert not issued_by(cert, other.certificate)


def test_leaf_never_outlives_its_ca_and_an_expired_ca_cannot_issue() -> None:
    ca = CertificateAuthority.create(now=T0, validity=10 * DAY)
    leaf = ca.issue(common_name="rt", names=[], now=T0 + 5 * DAY, validity=60 * DAY)
    assert leaf.not_after == ca.certificate.not_valid_after_utc
    with pytest.raises(CertificateError, match="expired"):
        ca.issue(common_name="rt", names=[], now=T0 + 11 * DAY, validity=DAY)
    with pytest.raises(ValueError, match="common name"):
        ca.issue(common_name="", names=[], now=T0, validity=DAY)


def test_mismatched_or_broken_material_is_rejected() -> None:
    a = CertificateAuthority.create(now=T0, validity=DAY)
    b = CertificateAuthority.create(now=T0, validity=DAY)
    with pytest.raises(CertificateError, match="does not match"):
        KeyPair(a.pair.cert_pem, b.pair.key_pem).validate()
    with pytest.raises(CertificateError, match="invalid PEM"):
        KeyPair(b"garbage", a.pair.key_pem).validate()
    with pytest.raises(CertificateError, match="invalid PEM private key"):
        KeyPair(a.pair.cert_pem, b"garbage").validate()
    leaf = a.issue(common_name="x", names=[], now=T0, validity=DAY)
    with pytest.raises(CertificateError, match="not a CA"):
        CertificateAuthority.from_pair(leaf)


def test_naive_timestamps_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        CertificateAuthority.create(now=datetime.datetime(2026, 1, 1), validity=DAY)


def test_bundle_pem_round_trip_and_digest() -> None:
    a = CertificateAuthority.create(now=T0, validity=DAY).certificate
    b = CertificateAuthority.create(now=T0, validity=DAY).certificate
    pem = certificates_pem([a, b])
    assert load_certificates(pem) == [a, b]
    with pytest.raises(CertificateError):
        load_certificates(b"")
    assert material_digest(b"ab", b"c") != material_digest(b"a", b"bc")
    assert material_digest(b"x") == material_digest(b"x")
