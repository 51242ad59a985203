"""Counters, gauges and histograms in the Prometheus text exposition format 0.0.4, for the agent.

Why not ``prometheus_client``: the agent runs on every customer node, and that library costs it
~2 MB of resident memory (with the ``wsgiref``/``http.server``/``multiprocessing`` machinery it
imports for features the agent never uses: its own HTTP servers, multi-process mode, push gateways,
OpenMetrics). The agent needs four operations (``inc``, ``set``, ``set_function``, ``observe``) and
one text rendering; this module does exactly that in one event-loop thread (no locks: every update
and every scrape happens on the agent's event loop).

The output is what ``prometheus_client.generate_latest`` writes for the same metrics, so dashboards,
alerts and the scraping Prometheus see no change: counters are exported as ``<name>_total`` plus a
``<name>_created`` gauge family, histograms as cumulative ``_bucket{le=...}`` series ending in
``+Inf``, then ``_count``, ``_sum`` and ``_created``; ``# HELP`` text escapes backslash and newline,
label values escape backslash, newline and double quote; numbers are written as Go would
(``+Inf``, ``NaN``, ``1.7e+09``). ``tests/unit/skr_watcher/test_exposition.py`` parses the output
with ``prometheus_client``'s own parser and compares it line by line with the library's rendering.
"""

from __future__ import annotations

import bisect
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

__all__ = ["CONTENT_TYPE", "Counter", "Family", "Gauge", "Histogram", "Registry", "Sample"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The ``Content-Type`` of ``Registry.exposition()`` (Prometheus text format 0.0.4)."""

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_INF = float("inf")

Wall = Callable[[], float]
"""Unix time in seconds (the ``_created`` timestamps); injectable for tests."""


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family as ``prometheus_client``'s ``collect()`` describes it (name without suffix)."""

    name: str
    type: str
    documentation: str
    samples: list[Sample]


class Registry:
    """The metrics of one agent; renders them in registration order."""

    def __init__(self, wall: Wall = time.time) -> None:
        self.wall = wall
        self._metrics: list[_Metric] = []
        self._names: set[str] = set()

    def register(self, metric: _Metric) -> None:
        if metric.name in self._names:
            raise ValueError(f"duplicate metric {metric.name!r}")
        self._names.add(metric.name)
        self._metrics.append(metric)

    def collect(self) -> Iterator[Family]:
        for metric in self._metrics:
            yield Family(metric.name, metric.type, metric.documentation, list(metric.samples()))

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The value of one sample (``None`` if there is none), as ``CollectorRegistry`` offers it."""
        wanted = labels or {}
        for family in self.collect():
            for sample in family.samples:
                if sample.name == name and sample.labels == wanted:
                    return sample.value
        return None

    def exposition(self) -> bytes:
        out: list[str] = []
        for metric in self._metrics:
            metric.render(out)
        return "".join(out).encode()


def format_value(value: float) -> str:
    """A sample value or bucket bound as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` style writes it."""
    if value == _INF:
        return "+Inf"
    if value == -_INF:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label_value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(names: Sequence[str], values: Sequence[str]) -> str:
    """``{a="x",b="y"}`` with names sorted (as ``prometheus_client`` writes them); ``""`` for none."""
    pairs = sorted(zip(names, values, strict=True))
    parts = [f'{name}="{_escape_label_value(value)}"' for name, value in pairs]
    return "{" + ",".join(parts) + "}" if parts else ""


class _Metric:
    type = "untyped"

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: Registry | None
    ) -> None:
        if not _METRIC_NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL_NAME.match(label) or label.startswith("__") or label == "le":
                raise ValueError(f"invalid label name {label!r} of {name}")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._wall: Wall = registry.wall if registry is not None else time.time
        if registry is not None:
            registry.register(self)

    def samples(self) -> Iterator[Sample]:
        raise NotImplementedError

    def render(self, out: list[str]) -> None:
        raise NotImplementedError

    def _header(self, out: list[str], name: str, kind: str) -> None:
        out.append(f"# HELP {name} {_escape_help(self.documentation)}\n")
        out.append(f"# TYPE {name} {kind}\n")


class _CounterValue:
    __slots__ = ("created", "value")

    def __init__(self, created: float) -> None:
        self.value = 0.0
        self.created = created

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount


class Counter(_Metric):
    """A monotonic counter, exported as ``<name>_total`` (and ``<name>_created``)."""

    type = "counter"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry)
        self._children: dict[tuple[str, ...], _CounterValue] = {}
        self._value = None if self.labelnames else _CounterValue(self._wall())

    def labels(self, *values: str) -> _CounterValue:
        """The child for these label values (created, at 0, on first use)."""
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            child = self._children[values] = _CounterValue(self._wall())
        return child

    def inc(self, amount: float = 1.0) -> None:
        if self._value is None:
            raise ValueError(f"{self.name} has labels {self.labelnames}: use .labels(...).inc()")
        self._value.inc(amount)

    def _series(self) -> Iterator[tuple[tuple[str, ...], _CounterValue]]:
        if self._value is not None:
            yield (), self._value
        yield from self._children.items()

    def samples(self) -> Iterator[Sample]:
        for values, child in self._series():
            labels = dict(zip(self.labelnames, values, strict=True))
            yield Sample(self.name + "_total", labels, child.value)
            yield Sample(self.name + "_created", labels, child.created)

    def render(self, out: list[str]) -> None:
        self._header(out, self.name + "_total", "counter")
        created: list[str] = []
        for values, child in self._series():
            labels = _label_text(self.labelnames, values)
            out.append(f"{self.name}_total{labels} {format_value(child.value)}\n")
            created.append(f"{self.name}_created{labels} {format_value(child.created)}\n")
        if created:
            self._header(out, self.name + "_created", "gauge")
            out.extend(created)


class Gauge(_Metric):
    """A value that goes up and down, or is read from a function at every scrape (no labels)."""

    type = "gauge"

    def __init__(self, name: str, documentation: str, *, registry: Registry | None = None) -> None:
        super().__init__(name, documentation, (), registry)
        self._value = 0.0
        self._function: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self._value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self._value += amount

    def dec(self, amount: float = 1.0) -> None:
        self._value -= amount

    def set_function(self, function: Callable[[], float]) -> None:
        """Read the value from ``function`` at every scrape instead."""
        self._function = function

    @property
    def value(self) -> float:
        return float(self._function()) if self._function is not None else self._value

    def samples(self) -> Iterator[Sample]:
        yield Sample(self.name, {}, self.value)

    def render(self, out: list[str]) -> None:
        self._header(out, self.name, "gauge")
        out.append(f"{self.name} {format_value(self.value)}\n")


class Histogram(_Metric):
    """Observations counted into fixed buckets (no labels), with their count and sum."""

    type = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        *,
        buckets: Sequence[float],
        registry: Registry | None = None,
    ) -> None:
        super().__init__(name, documentation, (), registry)
        bounds = [float(bound) for bound in buckets]
        if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be strictly increasing")
        if not bounds or bounds[-1] != _INF:
            bounds.append(_INF)
        self._bounds = tuple(bounds)
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._created = self._wall()

    def observe(self, value: float) -> None:
        # the first bucket whose upper bound is >= value ("le": less than or equal); a NaN is in
        # no bucket but in the sum, as prometheus_client counts it
        if value != value:
            self._sum += value
            return
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def _cumulative(self) -> Iterator[tuple[str, float]]:
        total = 0
        for bound, count in zip(self._bounds, self._counts, strict=True):
            total += count
            yield format_value(bound), float(total)

    def samples(self) -> Iterator[Sample]:
        total = 0.0
        for le, total in self._cumulative():
            yield Sample(self.name + "_bucket", {"le": le}, total)
        yield Sample(self.name + "_count", {}, total)
        yield Sample(self.name + "_sum", {}, self._sum)
        yield Sample(self.name + "_created", {}, self._created)

    def render(self, out: list[str]) -> None:
        self._header(out, self.name, "histogram")
        total = 0.0
        for le, total in self._cumulative():
            out.append(f'{self.name}_bucket{{le="{le}"}} {format_value(total)}\n')
        out.append(f"{self.name}_count {format_value(total)}\n")
        out.append(f"{self.name}_sum {format_value(self._sum)}\n")
        self._header(out, self.name + "_created", "gauge")
        out.append(f"{self.name}_created {format_value(self._created)}\n")
