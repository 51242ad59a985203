"""Certificate and key files for agent tests (from the control plane's throw-away CA)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kyma_wire.keys import private_key_pem
from tests.controlplane.pki import CertificateAuthority


@dataclass(frozen=True)
class AgentFiles:
    directory: Path
    ca: CertificateAuthority

    @property
    def tls_cert(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def tls_key(self) -> Path:
        return self.directory / "tls.key"

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def signing_key(self) -> Path:
        return self.directory / "signing.key"

    @property
    def signing_key_id(self) -> Path:
        return self.directory / "signing.keyid"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "KCP_ADDR": "127.0.0.1:9443",
            "TLS_CERT": str(self.tls_cert),
            "TLS_KEY": str(self.tls_key),
            "CA_CERT": str(self.ca_cert),
            "SIGNING_KEY": str(self.signing_key),
            "SIGNING_KEY_ID_FILE": str(self.signing_key_id),
            "BIND_ADDRESS": "127.0.0.1",
            **extra,
        }

    def write_identity(self, common_name: str = "runtime-1") -> None:
        pair = self.ca.issue(
            common_name, dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True, client=True
        )
        pair.write(self.tls_cert, self.tls_key)

    def write_signing_key(self, key_id: str = "runtime-1:v1") -> Ed25519PrivateKey:
        key = Ed25519PrivateKey.generate()
        self.signing_key.write_bytes(private_key_pem(key))
        self.signing_key_id.write_text(key_id + "\n")
        return key


def agent_files(directory: Path, ca: CertificateAuthority | None = None) -> AgentFiles:
    files = AgentFiles(directory, ca or CertificateAuthority("agent-test-ca"))
    files.ca_cert.write_bytes(files.ca.cert_pem)
    files.write_identity()
    files.write_signing_key()
    return files
