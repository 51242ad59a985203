"""``runtime.exposition``: the chunked ``/metrics`` text is what ``prometheus_client.generate_latest``
renders for the same data, family by family and line by line (more objects than one chunk, hostile
label values included), parses back to the same label values, and a manager serves it streamed."""

from __future__ import annotations

import asyncio
import socket

import httpx
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kyma_operator.api.kyma import Kyma
from kyma_operator.api.meta import State
from kyma_operator.controllers.kyma.metrics import KymaMetrics
from kyma_operator.controllers.manifest.metrics import ManifestMetrics
from kyma_operator.runtime import KubeClient, Manager
from kyma_operator.runtime.exposition import CHUNK_OBJECTS, ExpositionRegistry, escape, exposition_chunks
from kyma_operator.runtime.request import Request

HOSTILE = ('quote"d', "back\\slash", "new\nline", 'all\\"\n', "ünïcode ✓", "", '{a="b"}')


def kyma(i: int) -> Kyma:
    hostile = HOSTILE[i % len(HOSTILE)]
    return Kyma.model_validate(
        {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Kyma",
            "metadata": {
                "name": f"kyma-{i}",
                "namespace": "kcp-system",
                "labels": {"kyma-project.io/instance-id": f"id-{i}"} if i % 3 else {},
                "annotations": {"skr-domain": f"c-{i}.{hostile}"},
            },
            "spec": {"channel": "regular"},
        }
    )


def filled(registry: CollectorRegistry, kymas: int = CHUNK_OBJECTS * 2 + 7) -> KymaMetrics:
    """Plain metrics and both bulk collectors (by default with more objects than one chunk)."""
    Counter("plain_things", "A plain counter.", registry=registry).inc(3)
    Gauge("plain_labelled", "Help with a \\ and a\nnewline.", ["who"], registry=registry).labels('x"y').set(
        2.5
    )
    metrics = KymaMetrics(registry, mandatory_count=lambda: 2)
    states = list(State)
    for i in range(kymas):
        modules = [
            (f"module-{j}{HOSTILE[j] if j == i % 4 else ''}", states[(i + j) % len(states)]) for j in range(4)
        ]
        mandatory = {"mandatory": states[i % len(states)]} if i % 5 == 0 else None
        metrics.record(kyma(i), states[i % len(states)], modules if i % 11 else None, mandatory)
    manifests = ManifestMetrics(registry)
    for i in range(kymas // 2 + 3):
        manifests.state(Request(f"ns-{HOSTILE[i % len(HOSTILE)]}", f"manifest-{i}"), states[i % len(states)])
    manifests.forget(Request(f"ns-{HOSTILE[1]}", "manifest-1"))
    return metrics


def families(text: str) -> dict[str, str]:
    """Each family's block of lines (from its ``# HELP`` on), by family name."""
    blocks: dict[str, list[str]] = {}
    name = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
        blocks.setdefault(name, []).append(line)
    return {name: "".join(lines) for name, lines in blocks.items()}


def test_the_chunks_are_generate_latests_text_family_by_family() -> None:
    registry = ExpositionRegistry()
    filled(registry)
    chunks = list(registry.chunks())
    plain = generate_latest(registry).decode()
    streamed = b"".join(chunks).decode()
    assert families(streamed) == families(plain)
    assert (
        streamed.count("\n") == plain.count("\n") > 25 * CHUNK_OBJECTS * 2
    )  # 29 lines per Kyma with 4 modules
    assert len(chunks) > 8  # the bulk families came in chunks, not as one body
    # the bulk families come after the plain ones, each family's lines together
    names = [line.split(" ")[2] for line in streamed.splitlines() if line.startswith("# HELP ")]
    assert names[-4:] == [
        "lifecycle_mgr_kyma_state",
        "lifecycle_mgr_module_state",
        "lifecycle_mgr_mandatory_module_state",
        "kyma_operator_manifest_state",
    ]
    assert len(names) == len(set(names))


def test_hostile_label_values_parse_back_unchanged() -> None:
    registry = ExpositionRegistry()
    filled(registry, 4 * len(HOSTILE))
    parsed = {f.name: f for f in text_string_to_metric_families(b"".join(registry.chunks()).decode())}
    shoots = {s.labels["shoot"] for s in parsed["lifecycle_mgr_kyma_state"].samples}
    assert {f"c-{i}.{h}" for i, h in enumerate(HOSTILE)} <= shoots
    namespaces = {s.labels["namespace"] for s in parsed["kyma_operator_manifest_state"].samples}
    assert namespaces == {f"ns-{h}" for h in HOSTILE}
    modules = {s.labels["module_name"] for s in parsed["lifecycle_mgr_module_state"].samples}
    assert {f"module-{j}{HOSTILE[j]}" for j in range(4)} <= modules
    assert escape('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert escape("plain") == "plain"


def test_unregistered_collectors_leave_the_chunks() -> None:
    registry = ExpositionRegistry()
    counter = Counter("gone_soon", "Unregistered below.", registry=registry)
    metrics = ManifestMetrics(registry)
    metrics.state(Request("ns", "m"), State.READY)
    registry.unregister(counter)
    for collector in list(registry._bulk):
        registry.unregister(collector)
    text = b"".join(registry.chunks()).decode()
    assert "gone_soon" not in text and "kyma_operator_manifest_state" not in text
    assert "kyma_operator_manifest_objects_applied_total" in text


async def test_a_manager_streams_the_chunks_on_metrics() -> None:
    client = KubeClient.from_kubeconfig_bytes(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    registry = ExpositionRegistry()
    manager = Manager(client, name="m", namespace="ns", health_port=0, metrics_port=0, registry=registry)
    metrics = filled(registry)
    task = asyncio.create_task(manager.run())
    await manager.started.wait()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{manager.metrics_port}") as http:
            response = await http.get("/metrics")
            assert response.status_code == 200
            assert response.headers["transfer-encoding"] == "chunked"
            assert response.headers["content-type"] == CONTENT_TYPE_LATEST
            assert families(response.text) == families(generate_latest(registry).decode())
            head = await http.head("/metrics")
            assert head.status_code == 200 and head.content == b""
            # a scraper that asks and never reads (a body of ~20 MB, far over what the sockets
            # buffer) holds its own response, not the loop: the others are served meanwhile
            for i in range(5000):
                metrics.record(kyma(10_000 + i), State.READY, [(f"m{j}", State.READY) for j in range(5)])
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", manager.metrics_port))
            _, stalled = await asyncio.open_connection(sock=sock)
            stalled.write(b"GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n")
            await stalled.drain()
            first, second = [(await http.get("/metrics")).text for _ in range(2)]
            assert len(first) > 20_000_000 and families(first) == families(second)
            stalled.close()
    finally:
        await manager.shutdown()
        await task
        await client.close()


def test_objects_forgotten_during_a_scrape_are_left_out_of_its_later_chunks() -> None:
    registry = ExpositionRegistry()
    metrics = KymaMetrics(registry)
    manifests = ManifestMetrics(registry)
    for i in range(3 * CHUNK_OBJECTS):
        metrics.record(kyma(i), State.READY, [("m", State.READY)])
        manifests.state(Request("ns", f"manifest-{i}"), State.READY)
    chunks = registry.chunks()
    text = [
        next(chunks),
        next(chunks),
        next(chunks),
    ]  # the plain part, the Kyma family's header and 1st chunk
    assert 'kyma_name="kyma-0"' in text[-1].decode()
    gone = CHUNK_OBJECTS + 1  # in the Kyma family's second chunk, not rendered yet
    metrics.forget(Request("kcp-system", f"kyma-{gone}"))
    manifests.forget(Request("ns", f"manifest-{gone}"))
    rest = b"".join(chunks).decode()
    assert f'kyma_name="kyma-{gone}"' not in rest and f'"manifest-{gone}"' not in rest
    assert f'kyma_name="kyma-{gone + 1}"' in rest and f'"manifest-{gone + 1}"' in rest


def test_a_plain_registry_is_rendered_whole_by_generate_latest() -> None:
    registry = CollectorRegistry()
    filled(registry, 7)
    assert list(exposition_chunks(registry)) == [generate_latest(registry)]
