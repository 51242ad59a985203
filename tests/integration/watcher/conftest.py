"""Fixtures: real KCP/SKR clients and a namespace per test (see ``fixtures.py``)."""

from tests.integration.skrwatcher.fixtures import kcp_client, kcp_namespace, skr_client

__all__ = ["kcp_client", "kcp_namespace", "skr_client"]
