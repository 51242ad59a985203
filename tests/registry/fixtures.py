"""Session-scoped registry fixtures (registered as a pytest plugin from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.registry.server import LocalRegistry


@pytest.fixture(scope="session")
def oci_registry() -> Iterator[LocalRegistry]:
    """A plain-HTTP registry on 127.0.0.1 (clients must pass ``insecure=True``)."""
    with LocalRegistry() as registry:
        yield registry


@pytest.fixture(scope="session")
def oci_registry_auth() -> Iterator[LocalRegistry]:
    """A TLS registry with basic auth (``username``/``password``; trust ``ssl_context()``)."""
    with LocalRegistry(tls_auth=True) as registry:
        yield registry
