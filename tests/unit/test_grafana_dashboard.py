"""manifests/observability/grafana-dashboard.json queries only metrics the code really exports.

The names come from the Prometheus registries the code builds: the operator's (``build_operator``
wires the controllers, the listener and the Manifest controller into the Manager's registry; built
here, once without and once with ``--sharding``, against an unreachable API server and never
started, so no network is used) and the agent's
(``AgentMetrics``, what ``skr_watcher.agent.Agent`` creates). A renamed or removed metric fails this
test instead of leaving an empty panel behind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from kyma_operator.app import build_operator
from kyma_operator.config import OperatorConfig
from kyma_operator.runtime.kube import KubeClient
from skr_watcher.metrics import AgentMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "manifests" / "observability" / "grafana-dashboard.json"

# Series names Prometheus stores per metric family type (text exposition format).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}
_PROMQL_WORDS = frozenset(
    [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
    ]
)
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


class _Family(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...


class _Collects(Protocol):
    """prometheus_client's ``CollectorRegistry`` (operator) or ``skr_watcher.exposition.Registry``."""

    def collect(self) -> Iterable[_Family]: ...


def series_names(registry: _Collects) -> set[str]:
    return {family.name + suffix for family in registry.collect() for suffix in _SUFFIXES[family.type]}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords and label lists removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # string literals
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "", text)  # Grafana variables ($__rate_interval, ${ds})
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        word = match.group()
        if text[match.end() :].lstrip().startswith("(") or word.lower() in _PROMQL_WORDS:
            continue  # a function or aggregation call, or a keyword
        names.add(word)
    return names


@pytest.fixture
async def exported(tmp_path: Path) -> set[str]:
    kubeconfig = tmp_path / "unreachable.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "unused"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    client = KubeClient.from_kubeconfig_file(kubeconfig)
    names = series_names(AgentMetrics().registry)
    try:
        # one leader-elected operator and one sharded replica (shard and hand-off metrics)
        for sharding in (False, True):
            config = OperatorConfig(
                kubeconfig=kubeconfig,
                health_port=0,
                metrics_port=None,
                sharding=sharding,
                replica_id="dashboard-test",
            )
            operator = await build_operator(config, client, kcp_addr="127.0.0.1:443")
            assert operator.listener is not None and operator.manifest is not None
            assert (operator.coordinator is not None) == sharding
            names |= series_names(operator.manager.registry)
            await operator.kyma.close()
            await operator.manifest.close()
            if operator.oci is not None:
                await operator.oci.close()
    finally:
        await client.close()
    return names


def _targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def test_the_promql_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (route, le) (rate(kcp_listener_request_duration_seconds_bucket"
        '{code=~"2..",route!="other"}[$__rate_interval]))) / on (x) group_left (y) '
        "topk(10, time() - max by (runtime_id) (kcp_listener_runtime_last_heartbeat_timestamp_seconds))"
    )
    assert metric_names(expr) == {
        "kcp_listener_request_duration_seconds_bucket",
        "kcp_listener_runtime_last_heartbeat_timestamp_seconds",
    }


def test_every_queried_metric_is_exported(exported: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    missing = {}
    queried: set[str] = set()
    for title, expr in _targets(dashboard):
        names = metric_names(expr)
        assert names, f"panel {title!r}: no metric in {expr!r}"
        queried |= names
        if names - exported:
            missing[title] = sorted(names - exported)
    assert missing == {}, f"not exported by the code: {missing}"
    # each component has its panels
    for prefix in (
        "controller_runtime_",
        "workqueue_",
        "kyma_operator_manifest_",
        "kcp_listener_",
        "watcher_",
        "kyma_operator_shard",
        "kcp_listener_handoff_",
        "kyma_operator_rollout_",
    ):
        assert any(name.startswith(prefix) for name in queried), prefix


def test_the_dashboard_is_importable(exported: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["description"] and panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    # every operator/listener/agent family with a dashboard-worthy name is on the dashboard somewhere
    text = DASHBOARD.read_text()
    unused = sorted(
        name.removesuffix("_total")
        for name in exported
        if name.endswith("_total") and name.removesuffix("_total") not in text
    )
    assert unused == [], f"counters exported but not on the dashboard: {unused}"
