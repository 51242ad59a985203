"""Requests the operator sends to runtime API servers, by controller, verb and resource.

Why: the cost of running a fleet is mostly what each runtime's API server has to answer, and
the target (requests per Ready Kyma per hour <= 10% of upstream's polling, benchmarks/RESULTS.md) can only be
checked if every request is counted. One counter, ``kyma_operator_runtime_api_requests_total``,
created once by the operator and handed to every runtime client factory (``observer``); verbs and
resources are named as the API server's own ``apiserver_request_total`` names them
(``runtime.kube.classify_request``).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

RequestObserver = Callable[[str, str], None]


class RuntimeApiRequests:
    """The counter, plus an in-memory tally (benchmarks and tests read it without scraping)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._counter: Counter | None = None
        if registry is not None:
            self._counter = Counter(
                "kyma_operator_runtime_api_requests",
                "Requests sent to runtime API servers, by controller, verb and resource.",
                ["controller", "verb", "resource"],
                registry=registry,
            )
        self.tally: Tally[tuple[str, str, str]] = Tally()

    def observer(self, controller: str) -> RequestObserver:
        counter = self._counter

        def observe(verb: str, resource: str) -> None:
            self.tally[(controller, verb, resource)] += 1
            if counter is not None:
                counter.labels(controller, verb, resource).inc()

        return observe

    def total(self, controller: str | None = None, *, writes: bool | None = None) -> int:
        """Requests counted so far (of one controller; only writes or only reads)."""
        return sum(
            n
            for (who, verb, _), n in self.tally.items()
            if (controller is None or who == controller)
            and (writes is None or writes == (verb in WRITE_VERBS))
        )


WRITE_VERBS = frozenset({"create", "update", "patch", "apply", "delete"})
