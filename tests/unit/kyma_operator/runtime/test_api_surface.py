"""The curated public API, typed error mapping and request paths."""

from __future__ import annotations

import json
import types

import pytest

import kyma_operator.runtime as runtime
from kyma_operator.runtime import (
    AlreadyExists,
    Conflict,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Request,
    Resource,
    Result,
    ServerError,
    TooManyRequests,
)
from kyma_operator.runtime.errors import error_from_status
from kyma_operator.runtime.resources import CONFIGMAPS, CRDS, LEASES, NAMESPACES
from kyma_wire.names import KCP_NAMESPACE


def test_all_matches_the_exported_names() -> None:
    public = {
        name
        for name, value in vars(runtime).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(runtime.__all__) == public
    assert runtime.__all__ == sorted(runtime.__all__)


def status(code: int, reason: str, message: str = "m", **extra: object) -> bytes:
    return json.dumps(
        {"kind": "Status", "code": code, "reason": reason, "message": message, **extra}
    ).encode()


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (418, "Teapot", KubeError),
    ],
)
def test_error_mapping(code: int, reason: str, expected: type[KubeError]) -> None:
    error = error_from_status(code, status(code, reason, "why"))
    assert type(error) is expected
    assert (error.status, error.reason, error.message) == (code, reason, "why")


def test_throttling_carries_retry_after_and_non_json_bodies_are_kept() -> None:
    throttled = error_from_status(429, status(429, "TooManyRequests", details={"retryAfterSeconds": 3}))
    assert isinstance(throttled, TooManyRequests) and throttled.retry_after == 3.0
    header = error_from_status(429, b"", retry_after="7")
    assert isinstance(header, TooManyRequests) and header.retry_after == 7.0
    proxy = error_from_status(502, b"<html>bad gateway</html>")
    assert isinstance(proxy, ServerError) and "bad gateway" in proxy.message


def test_resource_paths() -> None:
    assert CONFIGMAPS.api_version == "v1"
    assert LEASES.api_version == "coordination.k8s.io/v1"
    assert CONFIGMAPS.path("ns", "a") == "/api/v1/namespaces/ns/configmaps/a"
    assert CONFIGMAPS.path() == "/api/v1/configmaps"
    assert NAMESPACES.path("ignored", "x") == "/api/v1/namespaces/x"
    assert CRDS.path(None, "a.b") == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/a.b"
    kyma = Resource("operator.kyma-project.io", "v1beta2", "kymas", "Kyma")
    assert (
        kyma.path(KCP_NAMESPACE, "k", "status")
        == f"/apis/operator.kyma-project.io/v1beta2/namespaces/{KCP_NAMESPACE}/kymas/k/status"
    )
    assert kyma.path("ns", "a/b") == "/apis/operator.kyma-project.io/v1beta2/namespaces/ns/kymas/a%2Fb"
    with pytest.raises(ValueError):
        kyma.path("ns", "")


def test_request_and_result() -> None:
    assert str(Request("ns", "a")) == "ns/a" and str(Request("", "cluster")) == "cluster"
    assert sorted([Request("b", "a"), Request("a", "z")])[0] == Request("a", "z")
    assert Request.for_object({"metadata": {"name": "x"}}) == Request("", "x")
    with pytest.raises(ValueError):
        Result(requeue_after=-1)
