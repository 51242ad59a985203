"""Access-Secret selection and the per-Kyma client cache (real ``KubeClient`` objects, never connected)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from kyma_operator.remote import (
    AccessSecret,
    AccessSecretNotFound,
    InvalidAccessSecret,
    MoreThanOneAccessSecret,
    SkrClientCache,
    is_connection_error,
    select_access_secret,
)
from kyma_operator.runtime.errors import Forbidden, KubeTransportError, NotFound, Unauthorized
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import NAMESPACES
from kyma_wire.names import KCP_NAMESPACE

KYMA = Request(KCP_NAMESPACE, "kyma-1")


def kubeconfig(server: str = "https://127.0.0.1:1") -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).encode()


def secret(name: str, *, rv: str = "1", uid: str = "u1", config: bytes | None = None) -> dict[str, Any]:
    data = {} if config is None else {"config": base64.b64encode(config).decode()}
    return {
        "metadata": {"name": name, "namespace": KCP_NAMESPACE, "uid": uid, "resourceVersion": rv},
        "data": data,
    }


# --- selection ----------------------------------------------------------------------------------------


def test_exactly_one_secret_is_selected_with_its_kubeconfig() -> None:
    selected = select_access_secret(KYMA, [secret("kyma-1-kubeconfig", rv="7", config=b"apiVersion: v1")])
    assert selected == AccessSecret(KCP_NAMESPACE, "kyma-1-kubeconfig", "u1", "7", b"apiVersion: v1")


def test_no_secret_names_the_label_that_was_looked_for() -> None:
    with pytest.raises(AccessSecretNotFound) as info:
        select_access_secret(KYMA, [])
    assert info.value.reason == "AccessSecretNotFound"
    assert "operator.kyma-project.io/kyma-name=kyma-1" in info.value.message
    assert KCP_NAMESPACE in info.value.message


def test_two_secrets_are_ambiguous_and_both_are_named() -> None:
    with pytest.raises(MoreThanOneAccessSecret) as info:
        select_access_secret(KYMA, [secret("b", config=b"x"), secret("a", config=b"x")])
    assert info.value.reason == "MoreThanOneAccessSecret"
    assert info.value.message.endswith(": a, b")


@pytest.mark.parametrize(
    ("data", "expected"),
    [({}, "has no data key 'config'"), ({"config": "not base64!"}, "'config' is not base64")],
)
def test_unusable_secret_content_is_reported(data: dict[str, str], expected: str) -> None:
    bad = {"metadata": {"name": "s", "namespace": KCP_NAMESPACE}, "data": data}
    with pytest.raises(InvalidAccessSecret, match=expected):
        select_access_secret(KYMA, [bad])


# --- cache --------------------------------------------------------------------------------------------


class Selector:
    """The Secrets the cache sees; tests change them between calls."""

    def __init__(self) -> None:
        self.secrets: dict[Request, list[dict[str, Any]]] = {}

    def select(self, kyma: Request) -> AccessSecret:
        return select_access_secret(kyma, self.secrets.get(kyma, []))


class Factory:
    def __init__(self) -> None:
        self.built: list[KubeClient] = []

    def __call__(self, data: bytes) -> KubeClient:
        client = KubeClient.from_kubeconfig_bytes(data, max_concurrency=1)
        self.built.append(client)
        return client


async def is_closed(client: KubeClient) -> bool:
    try:
        await client.get(NAMESPACES, "default")
    except KubeTransportError as exc:
        return "closed" in str(exc)
    raise AssertionError("unexpected answer")  # pragma: no cover


@pytest.fixture
def selector() -> Selector:
    selector = Selector()
    selector.secrets[KYMA] = [secret("kyma-1-kubeconfig", config=kubeconfig())]
    return selector


async def test_client_is_reused_until_the_secret_changes(selector: Selector) -> None:
    factory = Factory()
    cache = SkrClientCache(selector, factory=factory)
    first = await cache.get(KYMA)
    assert await cache.get(KYMA) is first
    assert factory.built == [first]
    # a rotated kubeconfig: new resourceVersion -> a new client, the old one is closed
    selector.secrets[KYMA] = [secret("kyma-1-kubeconfig", rv="2", config=kubeconfig("https://127.0.0.1:2"))]
    second = await cache.get(KYMA)
    assert second is not first
    assert second.host == "https://127.0.0.1:2"
    assert await is_closed(first)
    assert (cache.created, cache.evicted) == (2, 1)
    await cache.close()
    assert await is_closed(second)


async def test_auth_and_transport_errors_evict_other_errors_do_not(selector: Selector) -> None:
    registry = CollectorRegistry()
    cache = SkrClientCache(selector, factory=Factory(), registry=registry)
    client = await cache.get(KYMA)
    assert not await cache.evict_on_error(KYMA, NotFound(404, "NotFound", "x"))
    assert not await cache.evict_on_error(KYMA, Forbidden(403, "Forbidden", "rbac"))
    assert KYMA in cache
    assert await cache.evict_on_error(KYMA, Unauthorized(401, "Unauthorized", "token expired"))
    assert KYMA not in cache
    assert await is_closed(client)
    client = await cache.get(KYMA)
    assert await cache.evict_on_error(KYMA, KubeTransportError("handshake", tls=True))
    assert await is_closed(client)
    assert (
        registry.get_sample_value("kyma_operator_skr_client_evictions_total", {"reason": "unauthorized"}) == 1
    )
    assert registry.get_sample_value("kyma_operator_skr_client_evictions_total", {"reason": "transport"}) == 1
    assert registry.get_sample_value("kyma_operator_skr_clients") == 0


async def test_a_secret_that_goes_away_drops_the_cached_client(selector: Selector) -> None:
    cache = SkrClientCache(selector, factory=Factory())
    client = await cache.get(KYMA)
    selector.secrets[KYMA] = []
    with pytest.raises(AccessSecretNotFound):
        await cache.get(KYMA)
    assert KYMA not in cache
    assert await is_closed(client)


async def test_an_unparsable_kubeconfig_is_an_invalid_access_secret(selector: Selector) -> None:
    selector.secrets[KYMA] = [secret("kyma-1-kubeconfig", config=b"- just a list")]
    cache = SkrClientCache(selector, factory=Factory())
    with pytest.raises(InvalidAccessSecret, match="unusable kubeconfig"):
        await cache.get(KYMA)
    assert len(cache) == 0


def test_connection_errors() -> None:
    assert is_connection_error(Unauthorized(401, "Unauthorized", ""))
    assert is_connection_error(KubeTransportError("refused"))
    assert not is_connection_error(NotFound(404, "NotFound", ""))
    assert not is_connection_error(ValueError())
