"""The agent's Ed25519 signing key: read from its PEM file (PKCS#8, RFC 8410) into PyNaCl.

Why not ``kyma_wire.keys`` (``cryptography``): the agent only needs to load one private key and sign
with it, and ``cryptography``'s Rust module maps its own copy of OpenSSL: ~10 MB of resident memory
on every customer node, against ~1 MB for PyNaCl (libsodium), which the project already depends on.
PyNaCl signs but does not read PEM, so this module decodes the one structure the operator writes
(``kyma_wire.keys.private_key_pem``, also what ``openssl genpkey -algorithm ed25519`` writes):

    PrivateKeyInfo ::= SEQUENCE { version INTEGER (0 | 1),
                                  algorithm SEQUENCE { OBJECT IDENTIFIER 1.3.101.112 },
                                  privateKey OCTET STRING { OCTET STRING (32 bytes: the seed) },
                                  attributes [0] ... OPTIONAL,
                                  publicKey [1] ... OPTIONAL }   -- version 1 (RFC 5958) only

Anything else (encrypted keys, other algorithms, trailing bytes, a public key that does not belong
to the seed) is refused with ``ValueError``. Ed25519 signatures are deterministic, so the tests can
check that a key loaded here signs byte for byte as ``cryptography`` does with the same PEM.
"""

from __future__ import annotations

import base64
import binascii
import re

from nacl.signing import SigningKey

__all__ = ["load_signing_key"]

_PEM = re.compile(rb"-----BEGIN PRIVATE KEY-----\s*([A-Za-z0-9+/=\s]+?)\s*-----END PRIVATE KEY-----")
_ED25519_OID = bytes.fromhex("06032b6570")  # OBJECT IDENTIFIER 1.3.101.112
_SEQUENCE, _INTEGER, _OCTET_STRING = 0x30, 0x02, 0x04


class _Der:
    """A cursor over DER bytes: definite lengths only, as DER requires."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def peek_tag(self) -> int:
        return self.data[self.pos] if self.pos < len(self.data) else -1

    def element(self, tag: int) -> bytes:
        """The contents of the next element, which must have ``tag``."""
        if self.peek_tag() != tag:
            raise ValueError(f"expected DER tag {tag:#04x} at offset {self.pos}")
        self.pos += 1
        if self.pos >= len(self.data):
            raise ValueError("truncated DER")
        length = self.data[self.pos]
        self.pos += 1
        if length & 0x80:
            count = length & 0x7F
            if count == 0 or count > 2 or self.pos + count > len(self.data):
                raise ValueError("unsupported DER length")
            length = int.from_bytes(self.data[self.pos : self.pos + count], "big")
            self.pos += count
        end = self.pos + length
        if end > len(self.data):
            raise ValueError("truncated DER")
        contents = self.data[self.pos : end]
        self.pos = end
        return contents


def _seed_of(der: bytes) -> bytes:
    outer = _Der(der)
    info = _Der(outer.element(_SEQUENCE))
    if not outer.at_end():
        raise ValueError("trailing bytes after the key")
    version = info.element(_INTEGER)
    if version not in (b"\x00", b"\x01"):
        raise ValueError("unsupported PKCS#8 version")
    if info.element(_SEQUENCE) != _ED25519_OID:
        raise ValueError("not an Ed25519 private key")
    inner = _Der(info.element(_OCTET_STRING))
    seed = inner.element(_OCTET_STRING)
    if not inner.at_end() or len(seed) != 32:
        raise ValueError("an Ed25519 private key is 32 bytes")
    if info.peek_tag() == 0xA0:  # attributes: not used for Ed25519
        info.element(0xA0)
    if info.peek_tag() == 0x81:  # publicKey [1] IMPLICIT BIT STRING (version 1)
        public = info.element(0x81)
        if version != b"\x01" or public[:1] != b"\x00":
            raise ValueError("malformed public key")
        if public[1:] != bytes(SigningKey(seed).verify_key):
            raise ValueError("the public key does not belong to the private key")
    if not info.at_end():
        raise ValueError("unexpected fields in the key")
    return seed


def load_signing_key(pem: bytes) -> SigningKey:
    """The PyNaCl signing key in a ``-----BEGIN PRIVATE KEY-----`` PEM (raises ``ValueError``)."""
    match = _PEM.search(pem)
    if match is None:
        raise ValueError("no unencrypted PKCS#8 PEM block (-----BEGIN PRIVATE KEY-----)")
    try:
        der = base64.b64decode(b"".join(match.group(1).split()), validate=True)
    except binascii.Error as error:
        raise ValueError(f"invalid base64 in the PEM block: {error}") from None
    return SigningKey(_seed_of(der))
