"""Controller: outcome handling (errors, requeue_after), workers, sources. Fake clock, no sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import pytest
from prometheus_client import CollectorRegistry

from kyma_operator.runtime import (
    AnyOf,
    Controller,
    EnqueueForObject,
    EnqueueForOwner,
    EnqueueMapped,
    Enqueuer,
    FakeClock,
    GenerationChanged,
    InformerSource,
    ItemExponentialFailureRateLimiter,
    LabelsChanged,
    Request,
    Result,
    RuntimeMetrics,
    TerminalError,
    current_triggers,
    settle,
)

REQ = Request("ns", "obj")


class ScriptedReconciler:
    """Plays back outcomes: an exception instance is raised, a Result returned; then Result()."""

    def __init__(self, outcomes: list[Result | Exception] | None = None) -> None:
        self.outcomes = list(outcomes or [])
        self.calls: list[tuple[Request, float]] = []
        self.clock: FakeClock | None = None
        self.gate: asyncio.Event | None = None
        self.active: set[Request] = set()
        self.overlap = False

    async def reconcile(self, request: Request) -> Result:
        assert self.clock is not None
        self.calls.append((request, self.clock.now()))
        if request in self.active:
            self.overlap = True
        self.active.add(request)
        try:
            if self.gate is not None:
                await self.gate.wait()
            outcome = self.outcomes.pop(0) if self.outcomes else Result()
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        finally:
            self.active.discard(request)


@asynccontextmanager
async def running(
    reconciler: ScriptedReconciler, *, workers: int = 1, metrics: RuntimeMetrics | None = None
) -> AsyncIterator[tuple[Controller, FakeClock]]:
    clock = FakeClock(start=0.0)
    reconciler.clock = clock
    controller = Controller(
        "test",
        reconciler,
        workers=workers,
        clock=clock,
        rate_limiter=ItemExponentialFailureRateLimiter(0.005, 1000.0),
        metrics=metrics,
    )
    task = asyncio.create_task(controller.run())
    try:
        yield controller, clock
    finally:
        if reconciler.gate is not None:
            reconciler.gate.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_errors_requeue_with_exponential_backoff_then_success_forgets() -> None:
    reconciler = ScriptedReconciler([RuntimeError("1"), RuntimeError("2"), RuntimeError("3")])
    metrics = RuntimeMetrics(CollectorRegistry())
    async with running(reconciler, metrics=metrics) as (controller, clock):
        controller.enqueue(REQ, "test")
        await settle()
        for delay in (0.005, 0.01, 0.02):
            ready_at = controller.queue.ready_at(REQ)
            assert ready_at is not None
            assert ready_at == pytest.approx(clock.now() + delay)
            calls = len(reconciler.calls)
            clock.advance(delay * 0.9)
            await settle()
            assert len(reconciler.calls) == calls
            clock.advance(ready_at - clock.now())
            await settle()
            assert len(reconciler.calls) == calls + 1
        assert [t for _, t in reconciler.calls] == pytest.approx([0.0, 0.005, 0.015, 0.035])
        assert controller.queue.num_requeues(REQ) == 0, "success must forget the backoff"
        assert controller.queue.waiting == 0
    sample = metrics.registry.get_sample_value
    assert sample("controller_runtime_reconcile_total", {"controller": "test", "result": "error"}) == 3
    assert sample("controller_runtime_reconcile_total", {"controller": "test", "result": "success"}) == 1
    assert sample("controller_runtime_reconcile_errors_total", {"controller": "test"}) == 3
    assert sample("controller_runtime_max_concurrent_reconciles", {"controller": "test"}) == 1
    assert sample("controller_runtime_active_workers", {"controller": "test"}) == 0
    assert sample("workqueue_retries_total", {"controller": "test", "name": "test"}) == 3


async def test_requeue_after_forgets_backoff_and_waits_exactly() -> None:
    reconciler = ScriptedReconciler([RuntimeError("boom"), Result(requeue_after=30.0)])
    async with running(reconciler) as (controller, clock):
        controller.enqueue(REQ, "test")
        await settle()
        assert controller.queue.num_requeues(REQ) == 1
        clock.advance(0.005)
        await settle()
        assert len(reconciler.calls) == 2
        assert controller.queue.num_requeues(REQ) == 0
        assert controller.queue.ready_at(REQ) == pytest.approx(clock.now() + 30.0)
        clock.advance(29.9)
        await settle()
        assert len(reconciler.calls) == 2
        clock.advance(0.1)
        await settle()
        assert len(reconciler.calls) == 3


async def test_event_during_requeue_after_reconciles_immediately() -> None:
    reconciler = ScriptedReconciler([Result(requeue_after=60.0)])
    async with running(reconciler) as (controller, _):
        controller.enqueue(REQ, "test")
        await settle()
        controller.enqueue(REQ, "test")  # a new event does not wait for the requeue timer
        await settle()
        assert len(reconciler.calls) == 2


async def test_requeue_flag_uses_rate_limiter() -> None:
    reconciler = ScriptedReconciler([Result(requeue=True)])
    async with running(reconciler) as (controller, clock):
        controller.enqueue(REQ, "test")
        await settle()
        assert controller.queue.ready_at(REQ) == pytest.approx(clock.now() + 0.005)


async def test_terminal_error_is_not_retried() -> None:
    reconciler = ScriptedReconciler([TerminalError("bad spec")])
    async with running(reconciler) as (controller, clock):
        controller.enqueue(REQ, "test")
        await settle()
        clock.advance(100)
        await settle()
        assert len(reconciler.calls) == 1
        assert controller.queue.waiting == 0


async def test_same_request_never_reconciled_concurrently_but_others_are() -> None:
    reconciler = ScriptedReconciler()
    reconciler.gate = asyncio.Event()
    async with running(reconciler, workers=3) as (controller, _):
        controller.enqueue(REQ, "test")
        await settle()
        for _ in range(5):
            controller.enqueue(REQ, "test")
        controller.enqueue(Request("ns", "other"), "test")
        await settle()
        assert reconciler.active == {REQ, Request("ns", "other")}
        reconciler.gate.set()
        await settle()
        await controller.queue.wait_idle()
        assert not reconciler.overlap
        assert [r for r, _ in reconciler.calls].count(REQ) == 2


async def test_cancel_lets_in_flight_reconcile_finish() -> None:
    reconciler = ScriptedReconciler()
    reconciler.gate = asyncio.Event()
    clock = FakeClock()
    reconciler.clock = clock
    controller = Controller("c", reconciler, clock=clock, workers=2)
    task = asyncio.create_task(controller.run())
    controller.enqueue(REQ, "test")
    await settle()
    assert reconciler.active == {REQ}
    task.cancel()
    await settle()
    assert not task.done(), "the controller waits for the running reconcile"
    reconciler.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert reconciler.active == set()
    assert controller.queue.processing == frozenset()


async def test_runnable_sources_run_while_the_controller_runs() -> None:
    class Ticker:
        def __init__(self) -> None:
            self.queue: Enqueuer | None = None
            self.started = asyncio.Event()
            self.cancelled = False

        def bind(self, queue: Enqueuer) -> None:
            self.queue = queue

        async def run(self) -> None:
            assert self.queue is not None
            self.queue.add(Request("a", "tick"), "timer")
            self.started.set()
            try:
                await asyncio.Event().wait()
            finally:
                self.cancelled = True

    reconciler = ScriptedReconciler()
    clock = FakeClock()
    reconciler.clock = clock
    controller = Controller("c", reconciler, clock=clock)
    ticker = Ticker()
    controller.add_source(ticker)
    task = asyncio.create_task(controller.run())
    await ticker.started.wait()
    await settle()
    assert [r for r, _ in reconciler.calls] == [Request("a", "tick")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ticker.cancelled, "a runnable source stops with its controller"


async def test_result_reason_is_the_next_runs_trigger() -> None:
    seen: list[tuple[str, ...]] = []

    class Once:
        async def reconcile(self, request: Request) -> Result:
            seen.append(current_triggers())
            return Result(requeue_after=1.0, reason="re-read") if len(seen) == 1 else Result()

    clock = FakeClock()
    controller = Controller("c", Once(), clock=clock)
    controller.enqueue(REQ, "event")
    assert await controller.process_next()
    clock.advance(1.0)
    assert await controller.process_next()
    assert seen == [("event",), ("re-read",)]


def test_bad_worker_count_is_refused() -> None:
    with pytest.raises(ValueError):
        Controller("c", ScriptedReconciler(), workers=0)


def _obj(name: str, ns: str = "ns", **meta: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": ns, **meta}}


OWNER_REFS = [
    {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "name": "k1",
        "uid": "1",
        "controller": True,
    },
    {"apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Manifest", "name": "m1", "uid": "2"},
    {"apiVersion": "other.io/v1", "kind": "Kyma", "name": "foreign", "uid": "3"},
    {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "4"},
]


@pytest.mark.parametrize(
    ("mapper", "expected"),
    [
        (EnqueueForObject(), [Request("ns", "child")]),
        (EnqueueForOwner("Kyma", "operator.kyma-project.io"), [Request("ns", "k1")]),
        (EnqueueForOwner("Manifest", "operator.kyma-project.io", only_controller=True), []),
        (EnqueueForOwner("Kyma", "operator.kyma-project.io", owner_namespaced=False), [Request("", "k1")]),
        (EnqueueForOwner("ConfigMap", ""), [Request("ns", "cm")]),
        (
            EnqueueMapped(lambda o: [Request("x", "y"), Request("x", "z")]),
            [Request("x", "y"), Request("x", "z")],
        ),
    ],
)
def test_mappers(mapper: object, expected: list[Request]) -> None:
    obj = _obj("child", ownerReferences=OWNER_REFS)
    assert list(mapper.requests_for(obj)) == expected  # type: ignore[attr-defined]


def test_predicates() -> None:
    old = _obj("a", generation=1, labels={"x": "1"}, resourceVersion="1")
    status_only = _obj("a", generation=1, labels={"x": "1"}, resourceVersion="2")
    spec = _obj("a", generation=2, labels={"x": "1"}, resourceVersion="3")
    relabel = _obj("a", generation=1, labels={"x": "2"}, resourceVersion="4")
    assert not GenerationChanged().update(old, status_only)
    assert GenerationChanged().update(old, spec)
    assert GenerationChanged().create(old) and GenerationChanged().delete(old)
    either = AnyOf(GenerationChanged(), LabelsChanged())
    assert [either.update(old, new) for new in (status_only, spec, relabel)] == [False, True, True]


class _Recorder:
    def __init__(self) -> None:
        self.handlers: list[object] = []


def _drive(controller: Controller, events: Iterator[tuple[str, tuple[dict[str, object], ...]]]) -> None:
    """Feed events through the informer source the controller registered."""
    sources = [h for h in controller._informers[0]._handlers if isinstance(h, InformerSource)]
    for kind, objs in events:
        getattr(sources[0], f"on_{kind}")(*objs)


async def test_watch_applies_predicates_and_enqueues_old_and_new_owner(
    make_idle_informer: Callable[[], object],
) -> None:
    controller = Controller("c", ScriptedReconciler(), clock=FakeClock())
    informer = make_idle_informer()
    controller.watch(informer, EnqueueForOwner("Kyma", "g"), GenerationChanged())  # type: ignore[arg-type]

    def child(owner: str, generation: int) -> dict[str, object]:
        refs = [{"apiVersion": "g/v1", "kind": "Kyma", "name": owner, "uid": owner}]
        return _obj("child", generation=generation, ownerReferences=refs)

    _drive(controller, iter([("update", (child("k1", 1), child("k1", 1)))]))
    assert len(controller.queue) == 0, "filtered by GenerationChanged"
    _drive(controller, iter([("update", (child("k1", 1), child("k2", 2)))]))
    assert {controller.queue.get_nowait(), controller.queue.get_nowait()} == {
        Request("ns", "k1"),
        Request("ns", "k2"),
    }
    _drive(controller, iter([("delete", (child("k3", 1),))]))
    assert controller.queue.get_nowait() == Request("ns", "k3")


@pytest.mark.parametrize("periodic", [True, False])
async def test_a_periodic_requeue_may_run_a_little_early_with_another_request(periodic: bool) -> None:
    other = Request("ns", "other")
    reconciler = ScriptedReconciler(
        [Result(requeue_after=100.0, periodic=periodic), Result(requeue_after=97.0)]
    )
    assert Result(requeue_after=100.0, periodic=periodic).early == (5.0 if periodic else 0.0)
    async with running(reconciler) as (controller, clock):
        controller.enqueue(REQ, "test")
        controller.enqueue(other, "test")
        await settle()
        assert [r for r, _ in reconciler.calls] == [REQ, other]
        clock.advance(96.9)
        await settle()
        assert len(reconciler.calls) == 2
        clock.advance(0.1)  # t = 97: other's deadline; REQ (due at 100) may come from 95 if periodic
        await settle()
        assert reconciler.calls[2:] == ([(other, 97.0), (REQ, 97.0)] if periodic else [(other, 97.0)])
        clock.advance(3.0)
        await settle()
        assert len(reconciler.calls) == 4, "exactly one more reconcile of REQ either way"
