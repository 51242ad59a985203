"""Memory per queued event in the agent's send queue (tracemalloc), for this tree or another checkout.

Why: while KCP is unreachable the agent's queue holds one entry per changed object (up to
``QUEUE_SIZE``); what an entry costs decides how far the agent's peak RSS rises over its start-up
RSS (issue 18). Builds N distinct events as admission would (one shared GVK instance, interned
namespace, an owner annotation on half of them) and measures the queue's growth. Run the other
checkout with ``PYTHONPATH=<checkout> python benchmarks/agent_queue_memory.py``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tracemalloc

from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation
from skr_watcher.queue import SendQueue


def measure(n: int) -> dict[str, float]:
    gvk = GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Manifest")
    namespace = sys.intern("kyma-system")
    now = datetime.datetime.now(datetime.UTC)
    queue = SendQueue(n + 1)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        owner = ObjectKey(namespace=namespace, name=f"kyma-{i}-istio") if i % 2 else None
        event = AgentEvent(
            watched=ObjectKey(namespace=namespace, name=f"object-{i:06d}"),
            watched_gvk=gvk,
            operation=Operation.UPDATE,
            owner=owner,
            observed_at=now,
        )
        queue.put("klm", event, float(i))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"events": n, "bytes_per_event": (after - before) / n, "queue_mb": (after - before) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1000)
    print(json.dumps(measure(parser.parse_args().events)))


if __name__ == "__main__":
    main()
