"""``classify_request``: verbs and resources named as the API server's own request metrics name them."""

from __future__ import annotations

import pytest

from kyma_operator.runtime.kube import classify_request


@pytest.mark.parametrize(
    ("method", "path", "content_type", "expected"),
    [
        ("GET", "/api/v1/namespaces/ns/secrets", None, ("list", "secrets")),
        ("GET", "/api/v1/namespaces/ns/secrets/s1", None, ("get", "secrets")),
        ("GET", "/api/v1/namespaces", None, ("list", "namespaces")),
        ("GET", "/api/v1/namespaces/kyma-system", None, ("get", "namespaces")),
        (
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?labelSelector=x",
            None,
            ("list", "customresourcedefinitions"),
        ),
        (
            "PATCH",
            "/apis/operator.kyma-project.io/v1beta2/namespaces/ns/kymas/k/status",
            "application/merge-patch+json",
            ("patch", "kymas/status"),
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ns/deployments/d",
            "application/apply-patch+yaml",
            ("apply", "deployments"),
        ),
        ("POST", "/api/v1/namespaces/ns/configmaps", "application/json", ("create", "configmaps")),
        ("PUT", "/api/v1/namespaces/ns/configmaps/c", "application/json", ("update", "configmaps")),
        ("DELETE", "/api/v1/namespaces/ns/configmaps/c", "application/json", ("delete", "configmaps")),
        ("GET", "/apis/apps/v1", None, ("get", "discovery")),
        ("GET", "/version", None, ("get", "other")),
    ],
)
def test_classify_request(
    method: str, path: str, content_type: str | None, expected: tuple[str, str]
) -> None:
    assert classify_request(method, path, content_type) == expected
