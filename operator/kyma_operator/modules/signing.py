"""OCM signatures of component versions: RSASSA-PKCS1-V1_5 over the normalised descriptor digest.

Why: the Manifest controller can be told to install only verified component versions (README.md),
and ``kyma module sign|verify`` must produce/accept signatures other OCM tools accept. OCM's default
handler ``RSASSA-PKCS1-V1_5`` signs the SHA-256 digest of the normalised descriptor (the digest bytes
are signed as a pre-hashed SHA-256 value) and stores the signature hex-encoded with media type
``application/vnd.ocm.signature.rsa`` (``api/tech/signing/handlers/rsa`` of the OCM CLI: hex-decode the
digest, ``rsa.SignPKCS1v15(.., crypto.SHA256, digest)``, hex-encode). We sign with
``jsonNormalisation/v3`` by default, the newest algorithm the OCM CLI v0.x knows, and verify v3,
v4alpha1 and v1 signatures. Verification recomputes the normalised digest with the
algorithm named in the signature, compares it, and checks the RSA signature with the public key.
Resource digests (``genericBlobDigest/v1`` = SHA-256 of the blob) are part of the normalised form, so
a signature also pins every local blob; ``verify_blob`` checks a pulled blob against its resource.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

from kyma_operator.modules import constants as c
from kyma_operator.modules.descriptor import (
    ComponentDescriptor,
    DigestSpec,
    Resource,
    Signature,
    SignatureSpec,
)
from kyma_operator.modules.normalise import SUPPORTED as _SUPPORTED_NORMALISATIONS
from kyma_operator.modules.normalise import NormalisationError, descriptor_digest


class SignatureError(ValueError):
    """A signature is missing, malformed, made with another key, or the descriptor was changed."""


class KeyFileError(ValueError):
    """A key file cannot be used (not PEM, not RSA, private where public is needed, ...)."""


def load_private_key(pem: bytes, *, source: str = "private key") -> rsa.RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{source}: not an unencrypted PEM private key ({exc})") from exc
    if not isinstance(key, rsa.RSAPrivateKey):
        raise KeyFileError(f"{source}: not an RSA key (OCM's RSASSA-PKCS1-V1_5 needs RSA)")
    return key


def load_public_key(pem: bytes, *, source: str = "public key") -> rsa.RSAPublicKey:
    """A PEM public key, or the public key of a PEM certificate or private key."""
    key: object
    try:
        if b"CERTIFICATE" in pem:
            key = x509.load_pem_x509_certificate(pem).public_key()
        elif b"PRIVATE KEY" in pem:
            key = load_private_key(pem, source=source).public_key()
        else:
            key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{source}: not a PEM public key or certificate ({exc})") from exc
    if not isinstance(key, rsa.RSAPublicKey):
        raise KeyFileError(f"{source}: not an RSA key (OCM's RSASSA-PKCS1-V1_5 needs RSA)")
    return key


def generate_key(bits: int = 2048) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def private_key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(key: rsa.RSAPublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def sign(
    descriptor: ComponentDescriptor,
    key: rsa.RSAPrivateKey,
    *,
    name: str,
    normalisation: str = c.JSON_NORMALISATION_V3,
) -> ComponentDescriptor:
    """A copy of ``descriptor`` with signature ``name`` added (replacing one of the same name).

    ``jsonNormalisation/v3`` by default: the OCM CLI lifecycle-manager pins (v0.47.0) verifies only
    algorithms it knows, and ``v4alpha1`` is not one of them.
    """
    if not name:
        raise SignatureError("a signature needs a name")
    if normalisation not in _SUPPORTED_NORMALISATIONS:
        raise SignatureError(
            f"unsupported normalisation {normalisation!r} (supported: {', '.join(_SUPPORTED_NORMALISATIONS)})"
        )
    missing = [r.name for r in descriptor.component.resources if r.digest is None and not _none_access(r)]
    if missing:
        raise SignatureError(
            f"resources without a digest cannot be signed: {', '.join(missing)} (pin images by digest, or "
            "sign with `kyma module create --key`, which asks their registries)"
        )
    digest = descriptor_digest(descriptor, normalisation)
    value = key.sign(bytes.fromhex(digest), padding.PKCS1v15(), utils.Prehashed(hashes.SHA256()))
    signature = Signature(
        name=name,
        digest=DigestSpec(hash_algorithm=c.HASH_SHA256, normalisation_algorithm=normalisation, value=digest),
        signature=SignatureSpec(
            algorithm=c.RSA_PKCS1_V15, value=value.hex(), media_type=c.RSA_SIGNATURE_MEDIA_TYPE
        ),
    )
    others = [s for s in descriptor.signatures if s.name != name]
    return descriptor.model_copy(update={"signatures": [*others, signature]})


def verify(descriptor: ComponentDescriptor, key: rsa.RSAPublicKey, *, name: str | None = None) -> Signature:
    """Check signature ``name`` (or the only/first RSA one); returns it or raises ``SignatureError``."""
    component = f"{descriptor.component.name}:{descriptor.component.version}"
    candidates = [s for s in descriptor.signatures if name is None or s.name == name]
    if not candidates:
        which = f"signature {name!r}" if name else "signature"
        raise SignatureError(f"{component} has no {which}")
    signature = candidates[0]
    if signature.signature.algorithm != c.RSA_PKCS1_V15:
        raise SignatureError(
            f"{component}: signature {signature.name!r} uses {signature.signature.algorithm!r}, "
            f"only {c.RSA_PKCS1_V15} is supported"
        )
    if signature.digest.hash_algorithm != c.HASH_SHA256:
        raise SignatureError(f"{component}: unsupported hash {signature.digest.hash_algorithm!r}")
    if signature.digest.normalisation_algorithm not in _SUPPORTED_NORMALISATIONS:
        raise SignatureError(
            f"{component}: unsupported normalisation {signature.digest.normalisation_algorithm!r}"
        )
    try:
        actual = descriptor_digest(descriptor, signature.digest.normalisation_algorithm)
    except NormalisationError as exc:
        raise SignatureError(f"{component}: {exc}") from exc
    if not hmac.compare_digest(actual, signature.digest.value.lower()):
        raise SignatureError(
            f"{component}: descriptor digest {actual} does not match signature {signature.name!r} "
            f"({signature.digest.value}): the descriptor was changed after signing"
        )
    try:
        value = bytes.fromhex(signature.signature.value)
        key.verify(value, bytes.fromhex(actual), padding.PKCS1v15(), utils.Prehashed(hashes.SHA256()))
    except (ValueError, InvalidSignature) as exc:
        raise SignatureError(
            f"{component}: signature {signature.name!r} is not valid for the given public key"
        ) from exc
    return signature


def blob_digest_spec(data: bytes) -> DigestSpec:
    """The ``genericBlobDigest/v1`` digest of a local blob."""
    return DigestSpec(
        hash_algorithm=c.HASH_SHA256,
        normalisation_algorithm=c.GENERIC_BLOB_DIGEST,
        value=hashlib.sha256(data).hexdigest(),
    )


def verify_blob(resource: Resource, data: bytes) -> None:
    """Raise ``SignatureError`` unless ``data`` has the digest recorded for ``resource``."""
    if resource.digest is None:
        raise SignatureError(f"resource {resource.name!r} has no digest")
    if resource.digest.normalisation_algorithm != c.GENERIC_BLOB_DIGEST:
        raise SignatureError(
            f"resource {resource.name!r}: cannot check digest {resource.digest.normalisation_algorithm!r}"
        )
    actual = hashlib.sha256(data).hexdigest()
    if not hmac.compare_digest(actual, resource.digest.value.lower()):
        raise SignatureError(f"resource {resource.name!r}: blob digest {actual} != {resource.digest.value}")


def _none_access(resource: Resource) -> bool:
    return resource.access is not None and resource.access.type in c.ACCESS_NONE
