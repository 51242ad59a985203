"""The admission handler: always a valid answer where a uid is known, metrics for every outcome."""

from __future__ import annotations

import json
import logging

import pytest

from kyma_wire.names import OPERATOR_NAME
from skr_watcher.config import MAX_REVIEW_BYTES
from skr_watcher.metrics import AgentMetrics
from skr_watcher.webhook import AdmissionHandler
from tests.unit.skr_watcher.fakes import FakeClock, RecordingSink, body, obj, review


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def metrics() -> AgentMetrics:
    return AgentMetrics()


@pytest.fixture
def handler(sink: RecordingSink, metrics: AgentMetrics) -> AdmissionHandler:
    return AdmissionHandler(sink, metrics, FakeClock())


def value(metrics: AgentMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    result = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if result is None else result


def test_change_is_submitted_and_allowed(
    handler: AdmissionHandler, sink: RecordingSink, metrics: AgentMetrics
) -> None:
    status, payload = handler.handle(OPERATOR_NAME, body(review("CREATE", new=obj(uid := "x"), uid="u-1")))
    assert uid == "x"
    assert status == 200
    assert json.loads(payload)["response"] == {"uid": "u-1", "allowed": True}
    assert [(m, e.watched.name) for m, e in sink.events] == [(OPERATOR_NAME, "x")]
    assert value(metrics, "watcher_admission_request_total") == 1
    assert value(metrics, "watcher_admission_decision_total", {"decision": "changed"}) == 1
    assert value(metrics, "watcher_admission_duration_seconds_count") == 1


def test_unchanged_update_is_allowed_without_event(
    handler: AdmissionHandler, sink: RecordingSink, metrics: AgentMetrics
) -> None:
    document = review("UPDATE", new=obj(spec={"a": 1}), old=obj(spec={"a": 1}))
    status, _ = handler.handle(OPERATOR_NAME, body(document))
    assert status == 200
    assert sink.events == []
    assert value(metrics, "watcher_admission_decision_total", {"decision": "unchanged"}) == 1
    assert value(metrics, "watcher_admission_request_error_total", {"reason": "invalid-subresource"}) == 0


def test_other_subresource_counts_an_error(
    handler: AdmissionHandler, sink: RecordingSink, metrics: AgentMetrics
) -> None:
    document = review("UPDATE", new=obj(spec={"a": 2}), old=obj(spec={"a": 1}), sub_resource="scale")
    status, payload = handler.handle(OPERATOR_NAME, body(document))
    assert status == 200 and json.loads(payload)["response"]["allowed"] is True
    assert sink.events == []
    assert value(metrics, "watcher_admission_request_error_total", {"reason": "invalid-subresource"}) == 1


def test_malformed_body_without_uid_is_a_clear_400(
    handler: AdmissionHandler, metrics: AgentMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    status, payload = handler.handle(OPERATOR_NAME, b"{not json")
    assert status == 400
    assert "malformed AdmissionReview" in json.loads(payload)["error"]
    assert value(metrics, "watcher_admission_request_error_total", {"reason": "invalid-json"}) == 1
    assert "malformed AdmissionReview" in caplog.text


def test_a_flood_of_malformed_reviews_is_counted_each_and_logged_once_per_interval(
    sink: RecordingSink, metrics: AgentMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    handler = AdmissionHandler(sink, metrics, clock, log_interval=10.0)
    caplog.set_level(logging.WARNING, "skr_watcher.webhook")
    for _ in range(500):
        assert handler.handle(OPERATOR_NAME, b"{not json")[0] == 400
        assert handler.handle("Bad", body(review("CREATE", new=obj(), uid="u-3")))[0] == 200
    assert value(metrics, "watcher_admission_request_error_total", {"reason": "invalid-json"}) == 500
    assert value(metrics, "watcher_admission_request_error_total", {"reason": "invalid-manager"}) == 500
    assert len(caplog.records) == 2  # one line per reason
    clock.advance(10.0)
    handler.handle(OPERATOR_NAME, b"{not json")
    assert len(caplog.records) == 3 and "(499 more since the last line)" in caplog.records[-1].getMessage()
    assert sink.events == []


def test_malformed_body_with_uid_is_still_allowed(
    handler: AdmissionHandler, sink: RecordingSink, metrics: AgentMetrics
) -> None:
    raw = json.dumps({"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-9", "operation": ["x"]}})
    status, payload = handler.handle(OPERATOR_NAME, raw.encode())
    assert status == 200
    assert json.loads(payload)["response"] == {"uid": "u-9", "allowed": True}
    assert sink.events == []
    assert value(metrics, "watcher_admission_request_error_total", {"reason": "invalid-review"}) == 1


@pytest.mark.parametrize("manager", ["", "Upper", "a/b", "-x"])
def test_invalid_manager_path_is_allowed_without_event(
    handler: AdmissionHandler, sink: RecordingSink, metrics: AgentMetrics, manager: str
) -> None:
    status, payload = handler.handle(manager, body(review("CREATE", new=obj(), uid="u-2")))
    assert status == 200 and json.loads(payload)["response"]["uid"] == "u-2"
    assert sink.events == []
    assert value(metrics, "watcher_admission_request_error_total", {"reason": "invalid-manager"}) == 1


def test_too_large_is_counted(handler: AdmissionHandler, metrics: AgentMetrics) -> None:
    status, payload = handler.too_large()
    assert status == 413 and str(MAX_REVIEW_BYTES) in json.loads(payload)["error"]
    assert value(metrics, "watcher_admission_request_error_total", {"reason": "too-large"}) == 1


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"null",
        b"0",
        b'"x"',
        b"{}",
        b'{"request": null}',
        b'{"request": []}',
        b"\xff\xfe",
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_garbage_never_raises(handler: AdmissionHandler, raw: bytes) -> None:
    status, payload = handler.handle(OPERATOR_NAME, raw)
    assert status == 400
    assert json.loads(payload)["error"]
