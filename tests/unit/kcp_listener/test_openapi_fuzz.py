"""Fuzz the listener from its own OpenAPI document (schemathesis): never a 5xx, responses as documented.

Two configurations: ``signature`` (generated requests are unsigned, so they exercise the header
parsers and the rejection path) and ``xfcc`` with a valid gateway header (generated bodies reach
body validation and routing). Bounded: a few dozen examples each, no example database on disk.
"""

from __future__ import annotations

from typing import Any

import hypothesis
import schemathesis
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from kcp_listener.config import AuthMode, ListenerConfig
from tests.unit.kcp_listener.harness import Harness, istio_xfcc

SETTINGS = hypothesis.settings(
    max_examples=40,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def _harness(mode: AuthMode) -> Harness:
    harness = Harness(ListenerConfig(auth_mode=mode))
    harness.add_runtime("rt-1", "kyma-1", ["kyma-1-istio"])
    return harness


SIGNED = _harness(AuthMode.SIGNATURE)
GATEWAY = _harness(AuthMode.XFCC)
XFCC = istio_xfcc("rt-1")
signed_schema = schemathesis.openapi.from_asgi("/openapi.json", SIGNED.app)
gateway_schema = schemathesis.openapi.from_asgi("/openapi.json", GATEWAY.app)


def test_openapi_documents_the_event_routes() -> None:
    paths = signed_schema.raw_schema["paths"]
    assert set(paths) == {"/v2/{manager}/event", "/v2/{manager}/events", "/v2/{manager}/heartbeat"}
    operation = paths["/v2/{manager}/event"]["post"]
    assert {"200", "400", "401", "404", "405", "413", "429", "503"} <= set(operation["responses"])
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/WatchEvent"}
    schemas = signed_schema.raw_schema["components"]["schemas"]
    assert {"watched", "watchedGvk"} <= set(schemas["WatchEvent"]["required"])
    batch = paths["/v2/{manager}/events"]["post"]
    assert batch["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/EventBatch"
    }
    assert schemas["EventBatch"]["required"] == ["events"]


@signed_schema.parametrize()
@SETTINGS
def test_fuzz_signature_mode(case: Case[Any]) -> None:
    response = case.call_and_validate(checks=CHECKS)
    assert response.status_code < 500
    assert response.status_code != 200  # nothing generated is signed
    assert SIGNED.enqueued == []


@gateway_schema.parametrize()
@SETTINGS
def test_fuzz_xfcc_mode(case: Case[Any]) -> None:
    response = case.call_and_validate(checks=CHECKS, headers={"X-Forwarded-Client-Cert": XFCC})
    assert response.status_code < 500
    if response.status_code != 200:
        assert response.status_code in (400, 404, 405, 413), response.text
