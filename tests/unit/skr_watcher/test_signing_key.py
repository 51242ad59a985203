"""The agent reads its PEM signing key without ``cryptography`` and signs exactly as it would.

Keys are made and written by ``cryptography`` (``kyma_wire.keys``, what the operator uses) and by the
``openssl`` tool where present; Ed25519 is deterministic, so a key loaded by the agent must produce
the very signature ``cryptography`` produces with the same PEM.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kyma_wire.keys import load_private_key, private_key_pem
from skr_watcher.signing_key import load_signing_key


def _pem(der: bytes) -> bytes:
    body = base64.encodebytes(der).replace(b"\n", b"")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return b"-----BEGIN PRIVATE KEY-----\n" + b"\n".join(lines) + b"\n-----END PRIVATE KEY-----\n"


def _der(pem: bytes) -> bytes:
    return base64.b64decode(b"".join(pem.strip().splitlines()[1:-1]))


def test_signs_exactly_as_cryptography_does_with_the_operators_pem() -> None:
    for _ in range(20):
        key = Ed25519PrivateKey.generate()
        pem = private_key_pem(key)
        agent_key = load_signing_key(pem)
        message = b"@method: POST\n" + bytes(range(256))
        assert agent_key.sign(message).signature == load_private_key(pem).sign(message)
        assert bytes(agent_key.verify_key) == key.public_key().public_bytes_raw()


def test_accepts_pkcs8_version_2_with_its_public_key() -> None:
    key = Ed25519PrivateKey.generate()
    seed, public = key.private_bytes_raw(), key.public_key().public_bytes_raw()
    # OneAsymmetricKey v2 (RFC 5958): version 1, algorithm, private key, [1] public key
    inner = bytes.fromhex("020101300506032b657004220420") + seed + b"\x81\x21\x00" + public
    der = b"\x30" + bytes([len(inner)]) + inner
    assert load_signing_key(_pem(der)).sign(b"x").signature == key.sign(b"x")
    other = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    wrong = bytes.fromhex("020101300506032b657004220420") + seed + b"\x81\x21\x00" + other
    with pytest.raises(ValueError, match="does not belong"):
        load_signing_key(_pem(b"\x30" + bytes([len(wrong)]) + wrong))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl tool")
def test_reads_what_openssl_genpkey_writes(tmp_path: Path) -> None:
    path = tmp_path / "key.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(path)], check=True)
    pem = path.read_bytes()
    assert load_signing_key(pem).sign(b"m").signature == load_private_key(pem).sign(b"m")


def test_refuses_what_is_not_an_unencrypted_ed25519_pkcs8_key() -> None:
    good = _der(private_key_pem(Ed25519PrivateKey.generate()))
    ec = generate_private_key(SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    encrypted = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    cases = {
        "no PEM block": b"not a key",
        "encrypted": encrypted,
        "EC key": ec,
        "bad base64": b"-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n",
        "truncated": _pem(good[:-1]),
        "trailing bytes": _pem(good + b"\x00"),
        "short seed": _pem(bytes.fromhex("302d020100300506032b657004210420") + good[16:47]),
        "version 2": _pem(good[:4] + b"\x02" + good[5:]),
        "not DER": _pem(b"\x31" + good[1:]),
    }
    for name, pem in cases.items():
        with pytest.raises(ValueError):
            load_signing_key(pem)
            pytest.fail(name)
