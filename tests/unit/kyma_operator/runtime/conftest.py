"""Fixtures for runtime unit tests."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest

from kyma_operator.runtime import FakeClock, Informer, ObjectList, Resource, WatchEvent

WIDGETS = Resource("example.io", "v1", "widgets", "Widget")


class NeverCalled:
    """A ListWatcher for informers that are never run (handler-wiring tests)."""

    async def list_all(self, res: Resource, namespace: str | None = None, **kwargs: Any) -> ObjectList:
        raise AssertionError("not expected to list")

    async def watch(
        self, res: Resource, namespace: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[WatchEvent]:
        raise AssertionError("not expected to watch")
        yield  # pragma: no cover


@pytest.fixture
def make_idle_informer() -> Callable[[], Informer]:
    return lambda: Informer(NeverCalled(), WIDGETS, clock=FakeClock())
