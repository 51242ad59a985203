"""The HTTP layer of the agent (in-process ASGI, no sockets): routes, size limits, health, metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from kyma_wire.names import OPERATOR_NAME
from skr_watcher.metrics import AgentMetrics
from skr_watcher.webhook import MAX_REVIEW_BYTES, AdmissionHandler, health_app, webhook_app
from tests.unit.skr_watcher.fakes import FakeClock, RecordingSink, body, obj, review


def client(app: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://agent")  # type: ignore[arg-type]


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


async def test_oversized_bodies_are_refused_with_and_without_length() -> None:
    sink, metrics = RecordingSink(), AgentMetrics()
    async with client(webhook_app(AdmissionHandler(sink, metrics, FakeClock()))) as http:
        big = b"x" * (MAX_REVIEW_BYTES + 1)
        assert (await http.post("/validate/lm", content=big)).status_code == 413

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(9):
                yield b"x" * (1024 * 1024)

        assert (await http.post("/validate/lm", content=chunks())).status_code == 413

        async def small() -> AsyncIterator[bytes]:
            yield body(review("CREATE", new=obj(), uid="chunked"))

        response = await http.post("/validate/lm", content=small())
        assert response.status_code == 200 and response.json()["response"]["uid"] == "chunked"
    assert (
        metrics.registry.get_sample_value("watcher_admission_request_error_total", {"reason": "too-large"})
        == 2
    )


async def test_health_readiness_and_metrics() -> None:
    metrics = AgentMetrics()
    ready = False
    async with client(health_app(metrics, lambda: ready)) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 503
        ready = True
        assert (await http.get("/readyz")).status_code == 200
        text = (await http.get("/metrics")).text
        for name in (
            "watcher_admission_request_total",
            "watcher_admission_request_error_total",
            "watcher_kcp_requests_total",
            "watcher_failed_kcp_total",
            "watcher_queue_depth",
            "watcher_kcp_request_duration_seconds",
            "watcher_last_successful_send_timestamp_seconds",
        ):
            assert name in text, name
