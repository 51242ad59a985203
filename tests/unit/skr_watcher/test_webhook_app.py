"""The agent's HTTP handlers behind the real server (sockets on 127.0.0.1): routes, size limit, health.

The server's own limits and protocol handling are tested in ``test_http_server.py``; here the
question is what the admission and health handlers answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from kyma_wire.http_server import Handler, HttpServer, Limits
from kyma_wire.names import OPERATOR_NAME
from skr_watcher import agent
from skr_watcher.config import MAX_REVIEW_BYTES, AgentConfig
from skr_watcher.metrics import AgentMetrics
from skr_watcher.webhook import AdmissionHandler, health_app, webhook_app
from tests.unit.skr_watcher.certs import agent_files
from tests.unit.skr_watcher.fakes import FakeClock, RecordingSink, body, obj, review


@asynccontextmanager
async def client(handler: Handler, limits: Limits | None = None) -> AsyncIterator[httpx.AsyncClient]:
    server = HttpServer(handler, host="127.0.0.1", port=0, name="test", limits=limits or Limits())
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            yield http
    finally:
        await server.stop()


async def test_validate_route() -> None:
    sink, metrics = RecordingSink(), AgentMetrics()
    async with client(webhook_app(AdmissionHandler(sink, metrics, FakeClock()))) as http:
        response = await http.post(
            f"/validate/{OPERATOR_NAME}", content=body(review("CREATE", new=obj(), uid="u"))
        )
        assert response.status_code == 200
        assert response.json()["response"] == {"uid": "u", "allowed": True}
        assert response.headers["strict-transport-security"].startswith("max-age=")
        assert [m for m, _ in sink.events] == [OPERATOR_NAME]
        assert (await http.get(f"/validate/{OPERATOR_NAME}")).status_code == 405
        assert (await http.post("/other")).status_code == 404
        assert (await http.post("/validate/")).status_code == 404
        malformed = await http.post(f"/validate/{OPERATOR_NAME}", content=b"{not json")
        assert malformed.status_code == 400 and "malformed AdmissionReview" in malformed.json()["error"]


async def test_oversized_reviews_are_refused_with_and_without_length(tmp_path: Path) -> None:
    config = AgentConfig.from_env(agent_files(tmp_path).env())
    assert agent.server_limits(config, webhook=True).max_body_bytes == MAX_REVIEW_BYTES  # as served
    assert agent.server_limits(config, webhook=True).handshake_thread  # TLS on the webhook port only
    assert not agent.server_limits(config, webhook=False).handshake_thread
    assert (
        agent.server_limits(config, webhook=True).max_buffered_body_bytes == config.webhook_max_buffered_bytes
    )
    sink, metrics = RecordingSink(), AgentMetrics()
    limit = 4096
    app = webhook_app(AdmissionHandler(sink, metrics, FakeClock()))
    async with client(app, Limits(max_body_bytes=limit)) as http:
        for chunked in (False, True):
            reader, writer = await asyncio.open_connection("127.0.0.1", int(http.base_url.port or 0))
            if chunked:
                writer.write(b"POST /validate/lm HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
                writer.write(b"%x\r\n%s\r\n" % (limit + 1, b"x" * (limit + 1)))
            else:
                writer.write(
                    b"POST /validate/lm HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % (limit + 1)
                )
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 413 ") and b"larger than" in answer
        response = await http.post("/validate/lm", content=body(review("CREATE", new=obj(), uid="small")))
        assert response.status_code == 200 and response.json()["response"]["uid"] == "small"
    assert (
        metrics.registry.get_sample_value("watcher_admission_request_error_total", {"reason": "too-large"})
        == 2
    )


async def test_health_readiness_and_metrics() -> None:
    metrics = AgentMetrics()
    ready = False
    async with client(health_app(metrics, lambda: ready)) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.head("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 503
        ready = True
        assert (await http.get("/readyz")).status_code == 200
        assert (await http.post("/healthz")).status_code == 405
        assert (await http.get("/nothing")).status_code == 404
        scrape = await http.get("/metrics")
        assert scrape.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        for name in (
            "watcher_admission_request_total",
            "watcher_admission_request_error_total",
            "watcher_kcp_requests_total",
            "watcher_failed_kcp_total",
            "watcher_queue_depth",
            "watcher_kcp_request_duration_seconds",
            "watcher_last_successful_send_timestamp_seconds",
        ):
            assert name in scrape.text, name
