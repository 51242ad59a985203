"""The agent's start-up loads only what the agent uses: never the listener or its verifiers.

The agent runs on every customer's nodes (its memory is their cost); the wire contract it shares with
the listener lives in ``kyma_wire`` so that importing it does not drag in http-message-signatures or
the listener package. (PyNaCl is the agent's own signer since issue 18; ``cryptography``, ~10 MB of
resident memory, is not loaded at all.) A fresh interpreter is needed to see what an import
really loads (this test process has imported everything already).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

_PROBE = """
import json, sys
import skr_watcher.__main__
import skr_watcher.agent
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(probe: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(json.loads(out))


def test_agent_entry_point_does_not_load_the_listener_or_its_libraries() -> None:
    loaded = _modules_after(_PROBE)
    assert "skr_watcher.agent" in loaded  # the probe really imported the agent
    assert "kyma_wire.profile" in loaded
    assert "kyma_wire.http_client" in loaded
    forbidden = (
        *("http_message_signatures", "http_sf", "kcp_listener", "kyma_operator"),
        *("fastapi", "starlette", "rich", "pygments", "yaml"),  # frameworks and a CLI the agent never uses
        # replaced by the agent's own small modules (issue 18, memory): the HTTP server
        # (kyma_wire.http_server), the exposition (skr_watcher.exposition), the signing key
        # (skr_watcher.signing_key, PyNaCl)
        *("uvicorn", "embedded_server", "click", "prometheus_client", "cryptography"),
        # the KCP client is kyma_wire.http_client (asyncio streams + httptools), not httpx
        *("httpx", "httpcore", "anyio", "h11", "sniffio", "certifi", "idna"),
        # the standard library's event loop (issue 23: uvloop was 14 MB of the agent's installed 33)
        "uvloop",
    )
    offending = sorted(m for m in loaded if m.split(".")[0] in forbidden)
    assert offending == []
