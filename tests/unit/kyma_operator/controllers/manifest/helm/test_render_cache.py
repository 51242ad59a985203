"""The render cache: equal inputs share one render, concurrent misses render once, LRU bounded."""

from __future__ import annotations

import asyncio

from kyma_operator.controllers.manifest.helm.engine import helm_message, isolated_env
from kyma_operator.controllers.manifest.helm.source import RenderCache, Rendered, render_key
from kyma_operator.controllers.manifest.source import SourceNote

NOTE = SourceNote("HelmHooks", True, "HooksSupported", "none")


def rendered(text: str) -> Rendered:
    return Rendered(text, f"sha256:{text}", NOTE)


async def test_concurrent_misses_of_one_key_render_once() -> None:
    cache = RenderCache(8)
    calls = 0
    gate = asyncio.Event()

    async def render() -> Rendered:
        nonlocal calls
        calls += 1
        await gate.wait()
        return rendered("a")

    tasks = [asyncio.create_task(cache.get("k", render)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert calls == 1
    assert [hit for _, hit in results].count(False) == 1
    assert {r.text for r, _ in results} == {"a"}
    assert (cache.hits, cache.misses) == (9, 1)


async def test_least_recently_used_entries_go_first() -> None:
    cache = RenderCache(2)
    await cache.get("a", lambda: _value("a"))
    await cache.get("b", lambda: _value("b"))
    await cache.get("a", lambda: _value("x"))  # a is now the most recent
    await cache.get("c", lambda: _value("c"))  # evicts b
    assert len(cache) == 2
    _, hit = await cache.get("b", lambda: _value("b"))
    assert not hit
    result, hit = await cache.get("c", lambda: _value("other"))
    assert hit and result.text == "c"


async def test_size_zero_renders_every_time() -> None:
    cache = RenderCache(0)
    await cache.get("a", lambda: _value("a"))
    _, hit = await cache.get("a", lambda: _value("a"))
    assert not hit and len(cache) == 0


async def _value(text: str) -> Rendered:
    return rendered(text)


def test_render_key_changes_with_every_input() -> None:
    def key(
        digest: str = "sha256:1",
        release: str = "rel",
        namespace: str = "ns",
        layers: tuple[bytes, ...] = (b"{}",),
        set_values: tuple[tuple[str, str], ...] = (("a", "1"),),
        binary: str = "helm",
    ) -> str:
        return render_key(digest, release, namespace, layers, set_values, binary)

    keys = {
        key(),
        key(digest="sha256:2"),
        key(release="other"),
        key(namespace="ns2"),
        key(layers=(b'{"x":1}',)),
        key(layers=(b"{}", b"{}")),
        key(set_values=(("a", "2"),)),
        key(binary="/other/helm"),
    }
    assert len(keys) == 8
    assert key() == key()


def test_helm_message_keeps_the_error_and_drops_warnings() -> None:
    stderr = (
        "walk.go:75: found symbolic link in path\n"
        "Error: values don't meet the specifications of the schema(s) in the following chart(s):\n"
        "sample-chart:\n- replicaCount: Invalid type. Expected: integer, given: string\n"
    )
    assert helm_message(stderr) == (
        "values don't meet the specifications of the schema(s) in the following chart(s): "
        "sample-chart: - replicaCount: Invalid type. Expected: integer, given: string"
    )
    assert helm_message("just noise\n") == "just noise"
    assert len(helm_message("Error: " + "x" * 5000)) == 1500


def test_isolated_env_keeps_every_helm_folder_in_the_call_directory(tmp_path: object) -> None:
    from pathlib import Path

    work = Path(str(tmp_path))
    env = isolated_env(work)
    for key in ("HOME", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME", "HELM_REPOSITORY_CACHE"):
        assert env[key].startswith(str(work)), key
    assert env["HTTPS_PROXY"] == env["HTTP_PROXY"] == "http://127.0.0.1:9"


async def test_the_cache_holds_at_most_max_bytes_of_rendered_text() -> None:
    cache = RenderCache(10, max_bytes=10)
    await cache.get("a", lambda: _value("aaaa"))
    await cache.get("b", lambda: _value("bbbb"))
    await cache.get("c", lambda: _value("cccc"))  # 12 bytes: a goes
    assert len(cache) == 2 and cache.bytes == 8
    _, hit = await cache.get("a", lambda: _value("aaaa"))
    assert not hit
    await cache.get("big", lambda: _value("x" * 11))  # larger than the bound: not kept
    assert cache.bytes <= 10 and (await cache.get("big", lambda: _value("x")))[1] is False
