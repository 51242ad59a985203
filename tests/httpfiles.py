"""A real HTTP(S) file server on 127.0.0.1 for tests that fetch module files by URL.

Why: `kyma module create` fetches `manifest`/`defaultCR` URLs (modulectl's release-asset links);
tests serve the same content locally instead of reaching the internet. The server is the standard
library's, on its own thread; ``hang`` paths accept the request and answer only when the server
stops (a URL that times out); TLS uses a throw-away CA (tests/controlplane/pki.py) whose
certificate the client is given.
"""

from __future__ import annotations

import http.server
import ssl
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.controlplane.pki import CertificateAuthority


@dataclass
class FileServer:
    base_url: str
    ca_file: Path | None
    files: dict[str, bytes]
    hang: set[str] = field(default_factory=set)
    requests: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"


@contextmanager
def serve_files(
    files: Mapping[str, bytes], *, tls: bool = True, hang: tuple[str, ...] = ()
) -> Iterator[FileServer]:
    """Serve ``files`` (path -> bytes) until the block ends; unknown paths answer 404."""
    state = FileServer("", None, dict(files), set(hang))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            state.requests.append(path)
            if path in state.hang:
                state.stopping.wait(120)
                return
            body = state.files.get(path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-yaml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with tempfile.TemporaryDirectory(prefix="httpfiles-") as tmp:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        scheme = "http"
        if tls:
            ca = CertificateAuthority("httpfiles-ca")
            pair = ca.issue("127.0.0.1", ip_addresses=("127.0.0.1",), server=True)
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            pair.write(cert, key)
            state.ca_file = Path(tmp) / "ca.crt"
            state.ca_file.write_bytes(ca.cert_pem)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            server.socket = context.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        state.base_url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, name="httpfiles", daemon=True)
        thread.start()
        try:
            yield state
        finally:
            state.stopping.set()
            server.shutdown()
            server.server_close()
            thread.join(10)
