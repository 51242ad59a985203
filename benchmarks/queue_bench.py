"""CPU of the work queue's own bookkeeping per request: add, take, done.

Why: every reconcile passes through ``runtime/queue.py`` (5,000 Kymas and 25,000 Manifests at each
start-up), and the two lanes (events before bulk work) added a branch, a counter and, for bulk work,
an entry number per add. This measures what that costs against another checkout's queue, in one
process, alternating: 5,000 keys added, then each taken and done, best of ``--rounds``.

``--requests``: the keys are each checkout's own ``Request``s, built fresh for every add as the
listener and the informers' handlers build them, and each added twice (the second a new, equal
request: an event for a Kyma already queued), so the cost of creating, hashing and comparing
requests is measured with the queue's.

Run: ``.venv/bin/python -m benchmarks.queue_bench [--tree DIR] [--requests]`` (``DIR/operator``
holds the other ``kyma_operator``; default: only this checkout). Results:
``benchmarks/results/scale.md``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

KEYS = 5000


def _runtime_class(tree: Path | None, module: str, name: str) -> Any:
    """``kyma_operator.runtime.<module>.<name>`` of this checkout, or of ``tree`` (imported under its
    own module names)."""
    if tree is None:
        return getattr(importlib.import_module(f"kyma_operator.runtime.{module}"), name)
    saved = {key: loaded for key, loaded in sys.modules.items() if key.startswith("kyma_operator")}
    for key in saved:
        del sys.modules[key]
    sys.path.insert(0, str(tree / "operator"))
    try:
        return getattr(importlib.import_module(f"kyma_operator.runtime.{module}"), name)
    finally:
        sys.path.pop(0)
        for key in [k for k in sys.modules if k.startswith("kyma_operator")]:
            del sys.modules[key]
        sys.modules.update(saved)


def _cycle(queue_class: Any, add: Callable[[Any, str], None]) -> float:
    queue = queue_class("bench")
    keys = [f"kyma-{i:05d}" for i in range(KEYS)]
    started = time.perf_counter()
    for key in keys:
        add(queue, key)
    while (key := queue.get_nowait()) is not None:
        queue.done(key)
    return (time.perf_counter() - started) / KEYS


def _request_cycle(queue_class: Any, request_class: Any) -> float:
    queue = queue_class("bench")
    names = [f"kyma-{i:05d}" for i in range(KEYS)]
    started = time.perf_counter()
    for name in names:
        queue.add(request_class("kcp-system", name))
        queue.add(request_class("kcp-system", name))
    while (key := queue.get_nowait()) is not None:
        queue.done(key)
    return (time.perf_counter() - started) / KEYS


def _promoting(queue: Any, key: str) -> None:
    queue.add(key, low=True)
    if key.endswith("7"):
        queue.add(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="another checkout whose queue is measured too")
    parser.add_argument("--rounds", type=int, default=30, help="best of this many rounds per case")
    parser.add_argument(
        "--requests",
        action="store_true",
        help="keys are each checkout's Requests, built fresh for every add and added twice",
    )
    args = parser.parse_args()
    if args.requests:
        _compare_requests(args.tree, args.rounds)
        return
    cases: list[tuple[str, Any, Callable[[Any, str], None]]] = []
    mine = _runtime_class(None, "queue", "WorkQueue")
    cases.append(("this checkout: event adds", mine, lambda q, k: q.add(k)))
    cases.append(("this checkout: bulk adds", mine, lambda q, k: q.add(k, low=True)))
    cases.append(("this checkout: bulk adds, every 10th moved by an event", mine, _promoting))
    if args.tree is not None:
        other = _runtime_class(args.tree, "queue", "WorkQueue")
        cases.insert(0, (f"{args.tree}: adds (one lane)", other, lambda q, k: q.add(k)))
    best = {name: float("inf") for name, _, _ in cases}
    for _ in range(args.rounds):
        for name, queue_class, add in cases:
            best[name] = min(best[name], _cycle(queue_class, add))
    print(f"work queue: add + take + done of {KEYS} keys, best of {args.rounds} rounds, alternating")
    for name, seconds in best.items():
        print(f"  {name}: {seconds * 1e6:.2f} us per key")


def _compare_requests(tree: Path | None, rounds: int) -> None:
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    if tree is not None:
        trees.insert(0, (str(tree), tree))
    checkouts = [
        (name, _runtime_class(path, "queue", "WorkQueue"), _runtime_class(path, "request", "Request"))
        for name, path in trees
    ]
    best = {name: float("inf") for name, _, _ in checkouts}
    for _ in range(rounds):
        for name, queue_class, request_class in checkouts:
            best[name] = min(best[name], _request_cycle(queue_class, request_class))
    print(f"work queue with fresh Requests: 2 adds + take + done of {KEYS} keys, best of {rounds} rounds")
    for name, seconds in best.items():
        print(f"  {name}: {seconds * 1e6:.2f} us per key")


if __name__ == "__main__":
    main()
