"""Request: a value naming an object, with the behaviour the frozen dataclass it replaced had.

``Request`` became a named tuple for speed (C-level hash and equality on every queue look-up).
These tests hold it to what callers relied on before: equal and hashed by value, ordered by
namespace then name, printed as ``namespace/name``, immutable, picklable; and a fresh, equal
request finds what an earlier one stored, in the work queue too.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from kyma_operator.runtime import Request, WorkQueue


def test_equal_and_hashed_by_value() -> None:
    first, second = Request("kcp-system", "kyma-a"), Request("kcp-system", "kyma-a")
    assert first is not second
    assert first == second and hash(first) == hash(second)
    assert {first: 1}[second] == 1
    assert Request("kcp-system", "kyma-b") != first and Request("other", "kyma-a") != first
    assert Request(namespace="kcp-system", name="kyma-a") == first


def test_ordered_by_namespace_then_name() -> None:
    requests = [Request("b", "a"), Request("a", "c"), Request("", "z"), Request("a", "b")]
    assert sorted(requests) == [Request("", "z"), Request("a", "b"), Request("a", "c"), Request("b", "a")]


def test_printed_for_logs_and_repr_names_the_fields() -> None:
    assert str(Request("kcp-system", "kyma-a")) == "kcp-system/kyma-a"
    assert str(Request("", "cluster-scoped")) == "cluster-scoped"
    assert repr(Request("kcp-system", "kyma-a")) == "Request(namespace='kcp-system', name='kyma-a')"


def test_immutable_copyable_and_picklable() -> None:
    request = Request("kcp-system", "kyma-a")
    with pytest.raises(AttributeError):
        request.name = "kyma-b"  # type: ignore[misc]
    assert copy.copy(request) == request and copy.deepcopy(request) == request
    restored = pickle.loads(pickle.dumps(request))
    assert restored == request and type(restored) is Request


def test_for_object_reads_metadata() -> None:
    assert Request.for_object({"metadata": {"namespace": "ns", "name": "n"}}) == Request("ns", "n")
    assert Request.for_object({"metadata": {"name": "n"}}) == Request("", "n")
    with pytest.raises(KeyError):
        Request.for_object({"metadata": {"namespace": "ns"}})


def test_a_fresh_equal_request_is_deduplicated_by_the_queue() -> None:
    queue: WorkQueue[Request] = WorkQueue("test")
    queue.add(Request("kcp-system", "kyma-a"))
    queue.add(Request("kcp-system", "kyma-a"))
    assert len(queue) == 1 and queue.is_queued(Request("kcp-system", "kyma-a"))
    taken = queue.get_nowait()
    assert taken == Request("kcp-system", "kyma-a")
    queue.add(Request("kcp-system", "kyma-a"))  # while processing: queued again after done
    queue.done(Request("kcp-system", "kyma-a"))
    assert queue.get_nowait() == Request("kcp-system", "kyma-a")
