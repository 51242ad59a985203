"""A Helm chart repository on 127.0.0.1: a folder (``index.yaml`` and chart archives) over HTTP.

Why not a mock: the operator's chart store fetches the real ``index.yaml`` that ``helm repo
index`` wrote and the archives it names, over a real socket; the server records every path it
served, so tests can see what the operator's caches saved.
"""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any


class _Handler(SimpleHTTPRequestHandler):
    served: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.served.append(self.path)
        super().do_GET()


class ChartRepository:
    """``with ChartRepository(folder) as repo:`` -> ``repo.url`` (``http://127.0.0.1:<port>``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.served: list[str] = []
        handler = type("Handler", (_Handler,), {"served": self.served})
        self._server = ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(directory))
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="chart-repository", daemon=True
        )

    @property
    def host(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def requests_for(self, suffix: str) -> int:
        return sum(1 for path in list(self.served) if path.endswith(suffix))

    def __enter__(self) -> ChartRepository:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)
