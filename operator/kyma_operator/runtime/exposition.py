"""``/metrics`` of a replica that holds thousands of Kymas: per-object series rendered as text in
chunks, without a sample object per line, and served chunk by chunk.

Why: upstream's per-Kyma state series (``lifecycle_mgr_kyma_state``, ``lifecycle_mgr_module_state``:
35 lines per Kyma with 5 modules) and the per-Manifest state make a replica's exposition hundreds
of thousands of lines. ``prometheus_client.generate_latest`` builds a ``Sample`` with a label dict
for every line and then the whole body at once, on the event loop. Measured
(``benchmarks/metrics_bench.py``, ``benchmarks/results/scale.md`` "scrape"): at 5,000 Kymas x 5
modules one scrape took 4.7 s of CPU and +129 MB of peak RSS, at 50,000 Kymas 32 s and
+1,275 MB, the event loop held all the while: a Prometheus scrape every 30 s would stall each
replica's reconciles (and its Lease renewals) for seconds and double its memory. Rendered here:
0.23 s and +3 MB at 5,000 Kymas, 1.7 s and +3 MB at 50,000, the loop held 5-13 ms at most.

A collector of many series (``BulkCollector``) therefore renders its own exposition text, a chunk
of objects at a time (``expose``), with label values escaped as ``generate_latest`` does; it still
yields the same series as ``prometheus_client`` metrics from ``collect`` (other registries, tests).
``ExpositionRegistry`` keeps the other collectors apart so that ``generate_latest`` renders only
them, and ``chunks`` yields their text, then every bulk collector's chunks. The manager streams
them, letting other tasks run between two chunks. A test holds the chunks to ``generate_latest``'s
text for the same data, hostile label values included.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

CHUNK_OBJECTS = 100
"""Objects (Kymas, Manifests) per chunk of a bulk collector's text: at most 3,000 lines (a Kyma's
30 module lines with 5 modules); 500 held the loop 30-80 ms per chunk, 100 holds it 5-13 ms."""

__all__ = [
    "CHUNK_OBJECTS",
    "BulkCollector",
    "ExpositionRegistry",
    "chunked",
    "escape",
    "exposition_chunks",
    "family_header",
]

_T = TypeVar("_T")


@runtime_checkable
class BulkCollector(Protocol):
    """A collector with one or more series per object of a large set."""

    def collect(self) -> Iterable[Metric]:
        """The series as ``prometheus_client`` metrics (as any collector)."""
        ...

    def expose(self) -> Iterator[str]:
        """The same series in the text exposition format, each family's lines together, a chunk
        of at most ``CHUNK_OBJECTS`` objects at a time."""
        ...


class ExpositionRegistry(CollectorRegistry):
    """A ``CollectorRegistry`` whose ``/metrics`` text comes in chunks (``chunks``): the plain
    collectors through ``generate_latest``, the bulk ones rendering their own."""

    def __init__(self) -> None:
        super().__init__()
        self._plain = CollectorRegistry()
        self._bulk: list[BulkCollector] = []

    def register(self, collector: Collector) -> None:
        super().register(collector)
        if isinstance(collector, BulkCollector):
            self._bulk.append(collector)
        else:
            self._plain.register(collector)

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        if isinstance(collector, BulkCollector):
            self._bulk.remove(collector)
        else:
            self._plain.unregister(collector)

    def chunks(self) -> Iterator[bytes]:
        """The exposition of every collector, as ``generate_latest`` would render it (families in
        another order: the bulk ones last)."""
        yield generate_latest(self._plain)
        for collector in list(self._bulk):
            for text in collector.expose():
                yield text.encode()


def exposition_chunks(registry: CollectorRegistry) -> Iterator[bytes]:
    """``registry``'s text in chunks: an ``ExpositionRegistry``'s, else all of it at once."""
    if isinstance(registry, ExpositionRegistry):
        return registry.chunks()
    return iter((generate_latest(registry),))


def escape(value: str) -> str:
    """A label value as the text format quotes it (``generate_latest``'s escaping)."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def family_header(name: str, documentation: str, kind: str = "gauge") -> str:
    """The ``# HELP`` and ``# TYPE`` lines of a family, as ``generate_latest`` writes them."""
    help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


def chunked(objects: Sequence[_T]) -> Iterator[Sequence[_T]]:
    """``objects`` ``CHUNK_OBJECTS`` at a time."""
    for start in range(0, len(objects), CHUNK_OBJECTS):
        yield objects[start : start + CHUNK_OBJECTS]
