"""The operator's own certificate authority and the certificates it issues, as pure values.

Upstream delegates the CA and every per-runtime certificate to cert-manager (or Gardener's cert
management) and then spends a controller and several metrics working around its timing. Here the
operator issues certificates itself with ``cryptography``: every function takes ``now`` explicitly, so
the whole rotation story (``bundle.py``, ``leaf.py``) is testable on a fake clock and the only side
effect, persisting PEM in Secrets, lives in ``store.py``.

Keys are ECDSA P-256: accepted by Envoy/Istio, Go's TLS stack (kube-apiserver webhook client) and
Python's ``ssl``, and about a thousand times cheaper to generate than upstream's RSA 4096.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORGANIZATION = "kyma-project.io"
CA_COMMON_NAME = "klm-watcher-selfsigned-ca"
"""Upstream's CA common name; a rotated CA keeps it (certificates are told apart by key and serial)."""


class CertificateError(ValueError):
    """PEM that does not parse, or a certificate/key pair that does not belong together."""


def _truncate(now: datetime.datetime) -> datetime.datetime:
    """X.509 times have second resolution; truncating keeps comparisons with stored stamps exact."""
    if now.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return now.astimezone(datetime.UTC).replace(microsecond=0)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    """All certificates of a PEM bundle, in order; an empty or broken bundle is an error."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateError(f"invalid PEM certificate bundle: {exc}") from exc
    return certs


def certificates_pem(certs: Sequence[x509.Certificate]) -> bytes:
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the DER encoding, hex; how bundles compare certificates (like upstream's DER equality)."""
    return cert.fingerprint(hashes.SHA256()).hex()


def issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Whether ``issuer``'s key signed ``cert`` (a real signature check, not a name comparison)."""
    if cert.issuer != issuer.subject:
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM; what a ``kubernetes.io/tls`` Secret holds."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return load_certificates(self.cert_pem)[0]

    @property
    def not_after(self) -> datetime.datetime:
        return self.certificate.not_valid_after_utc

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        try:
            key = serialization.load_pem_private_key(self.key_pem, password=None)
        except (ValueError, TypeError) as exc:
            raise CertificateError(f"invalid PEM private key: {exc}") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CertificateError(f"unsupported private key type {type(key).__name__}")
        return key

    def validate(self) -> KeyPair:
        """Raise ``CertificateError`` unless the PEM parses and the key matches the certificate."""
        key = self.private_key()
        if key.public_key() != self.certificate.public_key():
            raise CertificateError("private key does not match the certificate")
        return self


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA able to issue leaf certificates."""

    pair: KeyPair

    @property
    def certificate(self) -> x509.Certificate:
        return self.pair.certificate

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.certificate)

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        return self.pair.private_key()

    @classmethod
    def create(
        cls,
        *,
        now: datetime.datetime,
        validity: datetime.timedelta,
        common_name: str = CA_COMMON_NAME,
    ) -> CertificateAuthority:
        start = _truncate(now)
        key = _new_key()
        name = _name(common_name)
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)))

    @classmethod
    def from_pair(cls, pair: KeyPair) -> CertificateAuthority:
        pair.validate()
        constraints = pair.certificate.extensions.get_extension_for_class(x509.BasicConstraints)
        if not constraints.value.ca:
            raise CertificateError("certificate is not a CA")
        return cls(pair)

    def issue(
        self,
        *,
        common_name: str,
        names: Sequence[str],
        now: datetime.datetime,
        validity: datetime.timedelta,
    ) -> KeyPair:
        """A leaf for both TLS roles (agent: serving for the webhook, client towards KCP; gateway: server).

        ``notAfter`` never exceeds the CA's own, so a leaf cannot outlive what verifies it.
        """
        if not common_name:
            raise ValueError("common name must not be empty")
        start = _truncate(now)
        ca_cert = self.certificate
        end = min(start + validity, ca_cert.not_valid_after_utc)
        if end <= start:
            raise CertificateError("the CA has expired; cannot issue")
        key = _new_key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.private_key().public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(_san(names), critical=False)
        cert = builder.sign(self.private_key(), hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def subject_common_name(cert: x509.Certificate) -> str:
    attrs = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = attrs[0].value if attrs else ""
    return value if isinstance(value, str) else value.decode()


def subject_alt_names(cert: x509.Certificate) -> tuple[str, ...]:
    """DNS SANs, then IP SANs, as strings."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return ()
    dns: list[str] = ext.value.get_values_for_type(x509.DNSName)
    ips = [str(ip) for ip in ext.value.get_values_for_type(x509.IPAddress)]
    return (*dns, *ips)


def material_digest(*parts: bytes) -> str:
    """A short, stable content version of secret material (used as the agent pod's restart trigger)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:16]
