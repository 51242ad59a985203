"""The agent's own Prometheus exposition writes what prometheus_client writes (format 0.0.4).

``prometheus_client`` is used here only as the reference: the same metrics, fed the same values, are
rendered by both and compared line by line (the ``_created`` timestamps aside: the library reads the
wall clock itself), and the agent's output is parsed with the library's parser.
"""

from __future__ import annotations

import math
import re
from typing import Any

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from skr_watcher import exposition
from skr_watcher.metrics import AgentMetrics

_HELP = 'Odd help: a backslash \\ and\na newline, "quotes".'
_BUCKETS = (0.001, 0.01, 0.1, 1.0, 2.5)
_ODD_LABEL = 'a"b\\c\nd'


def _feed(counter: Any, gauge: Any, function_gauge: Any, labelled: Any, histogram: Any) -> None:
    counter.inc()
    counter.inc(2.5)
    gauge.set(12345678901.0)
    function_gauge.set_function(lambda: 7)
    labelled.labels("x").inc()
    labelled.labels(_ODD_LABEL).inc(3)
    labelled.labels("x").inc()
    for value in (0.0005, 0.001, 0.001000001, 0.05, 2.5, 3.0, 1e6):  # bounds are inclusive ("le")
        histogram.observe(value)


def _reference() -> str:
    registry = prometheus_client.CollectorRegistry(auto_describe=True)
    _feed(
        prometheus_client.Counter("t_requests", _HELP, registry=registry),
        prometheus_client.Gauge("t_big", "A big gauge.", registry=registry),
        prometheus_client.Gauge("t_function", "Read at scrape time.", registry=registry),
        prometheus_client.Counter("t_errors", "By reason.", ["reason"], registry=registry),
        prometheus_client.Histogram("t_seconds", "Durations.", buckets=_BUCKETS, registry=registry),
    )
    prometheus_client.Counter("t_unused", "Labelled, never used.", ["kind"], registry=registry)
    return prometheus_client.generate_latest(registry).decode()


def _ours(wall: float = 1763960000.25) -> str:
    registry = exposition.Registry(wall=lambda: wall)
    _feed(
        exposition.Counter("t_requests", _HELP, registry=registry),
        exposition.Gauge("t_big", "A big gauge.", registry=registry),
        exposition.Gauge("t_function", "Read at scrape time.", registry=registry),
        exposition.Counter("t_errors", "By reason.", ["reason"], registry=registry),
        exposition.Histogram("t_seconds", "Durations.", buckets=_BUCKETS, registry=registry),
    )
    exposition.Counter("t_unused", "Labelled, never used.", ["kind"], registry=registry)
    return registry.exposition().decode()


def _without_created_values(text: str) -> str:
    return re.sub(r"^(\w+_created(?:\{[^}]*\})?) \S+$", r"\1 <t>", text, flags=re.MULTILINE)


def test_the_text_is_the_reference_libraries_line_by_line() -> None:
    ours = _ours()
    assert _without_created_values(ours).splitlines() == _without_created_values(_reference()).splitlines()
    # the created timestamps are the injected wall clock, written as Go writes large floats
    assert "t_requests_created 1.76396000025e+09\n" in ours
    assert 't_errors_created{reason="x"} 1.76396000025e+09\n' in ours


def test_the_reference_parser_reads_names_types_and_values() -> None:
    families = {family.name: family for family in text_string_to_metric_families(_ours())}
    assert {name: family.type for name, family in families.items()} == {
        "t_requests": "counter",
        "t_requests_created": "gauge",
        "t_big": "gauge",
        "t_function": "gauge",
        "t_errors": "counter",
        "t_errors_created": "gauge",
        "t_seconds": "histogram",
        "t_seconds_created": "gauge",
        "t_unused": "counter",
    }
    assert families["t_requests"].documentation == _HELP
    assert [(s.name, s.value) for s in families["t_requests"].samples] == [("t_requests_total", 3.5)]
    assert families["t_big"].samples[0].value == 12345678901.0
    assert families["t_function"].samples[0].value == 7.0
    assert {s.labels["reason"]: s.value for s in families["t_errors"].samples} == {"x": 2.0, _ODD_LABEL: 3.0}
    histogram = {(s.name, s.labels.get("le")): s.value for s in families["t_seconds"].samples}
    assert histogram == {
        ("t_seconds_bucket", "0.001"): 2.0,
        ("t_seconds_bucket", "0.01"): 3.0,
        ("t_seconds_bucket", "0.1"): 4.0,
        ("t_seconds_bucket", "1.0"): 4.0,
        ("t_seconds_bucket", "2.5"): 5.0,
        ("t_seconds_bucket", "+Inf"): 7.0,
        ("t_seconds_count", None): 7.0,
        ("t_seconds_sum", None): pytest.approx(0.0005 + 0.001 + 0.001000001 + 0.05 + 2.5 + 3.0 + 1e6),
    }
    assert families["t_unused"].samples == []


@pytest.mark.parametrize(
    "value", [0.0, 1.0, -2.5, 0.1, 1e-9, 123456.0, 1234567.0, 1.5e300, math.inf, -math.inf, math.nan]
)
def test_numbers_are_written_as_the_reference_writes_them(value: float) -> None:
    reference: str = prometheus_client.utils.floatToGoString(value)  # type: ignore[no-untyped-call]
    assert exposition.format_value(value) == reference


def test_agent_metric_families_are_unchanged() -> None:
    """The families (and types) the agent exported with prometheus_client, before this module."""
    metrics = AgentMetrics()
    metrics.admission_errors.labels("too-large").inc()
    metrics.heartbeats.labels("ok").inc()
    metrics.queue_depth.set_function(lambda: 4.0)
    metrics.admission_duration.observe(0.0007)
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    counters = [
        *("watcher_admission_request", "watcher_events_queued", "watcher_events_coalesced"),
        *("watcher_events_superseded", "watcher_resync_events", "watcher_kcp_requests"),
        *("watcher_events_sent", "watcher_kcp_batches", "watcher_kcp_batched_events"),
        "watcher_kcp_batch_fallbacks",
    ]
    labelled = [
        *("watcher_admission_request_error", "watcher_admission_decision", "watcher_events_dropped"),
        *("watcher_failed_kcp", "watcher_heartbeats", "watcher_tls_reloads"),
        "watcher_http_connections_cut",
    ]
    histograms = [
        "watcher_admission_duration_seconds",
        "watcher_kcp_request_duration_seconds",
        "watcher_event_delivery_latency_seconds",
    ]
    gauges = ["watcher_queue_depth", "watcher_last_successful_send_timestamp_seconds"]
    expected = {
        **{name: "counter" for name in counters + labelled},
        **{f"{name}_created": "gauge" for name in counters + histograms},
        **{name: "histogram" for name in histograms},
        **{name: "gauge" for name in gauges},
        "watcher_admission_request_error_created": "gauge",  # used once above
        "watcher_heartbeats_created": "gauge",
    }
    assert {name: family.type for name, family in families.items()} == expected
    assert families["watcher_queue_depth"].samples[0].value == 4.0
    assert metrics.registry.get_sample_value("watcher_heartbeats_total", {"result": "ok"}) == 1.0
    value = metrics.registry.get_sample_value
    assert value("watcher_admission_duration_seconds_bucket", {"le": "0.001"}) == 1
    assert value("watcher_admission_duration_seconds_count") == 1
    assert metrics.registry.get_sample_value("watcher_heartbeats_total", {"result": "error"}) is None


def test_misuse_is_refused() -> None:
    registry = exposition.Registry()
    counter = exposition.Counter("t_c", "c", ["reason"], registry=registry)
    with pytest.raises(ValueError, match="labels"):
        counter.inc()
    with pytest.raises(ValueError, match="labels"):
        counter.labels("a", "b")
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("a").inc(-1)
    with pytest.raises(ValueError, match="duplicate"):
        exposition.Gauge("t_c", "again", registry=registry)
    with pytest.raises(ValueError, match="invalid metric name"):
        exposition.Gauge("t-c", "dash", registry=registry)
    with pytest.raises(ValueError, match="increasing"):
        exposition.Histogram("t_h", "h", buckets=(1.0, 0.5), registry=registry)
