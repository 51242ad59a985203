"""Access-Secret changes as a ``Source``, like every other trigger of a controller.

An access Secret appearing, going or changing lets a Kyma (or its Manifests) that failed for lack
of access recover at once instead of on its backoff. ``SecretChanges`` binds to the controller's
queue like informer sources do, and maps each change (``remote.secrets.AccessSecrets.on_change``:
the Kyma and ``"added"`` / ``"changed"`` / ``"deleted"``) to the requests it concerns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kyma_operator.remote.secrets import AccessSecrets
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.source import Enqueuer

SecretMapper = Callable[[Request, str], Iterable[Request]]
"""(the Secret's Kyma, what happened) -> the requests to reconcile."""


class SecretChanges:
    def __init__(self, access: AccessSecrets, mapper: SecretMapper, *, reason: str) -> None:
        self.access = access
        self.mapper = mapper
        self.reason = reason
        self._bound = False

    def bind(self, queue: Enqueuer) -> None:
        if self._bound:
            raise RuntimeError("source is already bound to a controller")
        self._bound = True

        def changed(kyma: Request, what: str) -> None:
            for request in self.mapper(kyma, what):
                queue.add(request, self.reason)

        self.access.on_change(changed)
