"""Fixtures: a real KCP client and a namespace per test (shared with the watcher/skrwatcher tests)."""

from tests.integration.skrwatcher.fixtures import kcp_client, kcp_namespace

__all__ = ["kcp_client", "kcp_namespace"]
