"""Which ``AgentInstaller`` serves a Kyma: the feature's one, or (local runs) one per webhook URL.

In a cluster every runtime's API server calls its agent through the ``skr-webhook`` Service, so
one installer (one configuration) serves all runtimes. Locally there is no Service: each runtime's
agent is a process on 127.0.0.1 with its own port, and the webhook configuration must name that
URL (``clientConfig.url``). ``webhook_urls`` maps Kyma names to those URLs; a Kyma with an entry
gets an installer with the same identity store and Watcher cache and only ``webhook_url`` changed.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kyma_operator.agentinstall.installer import AgentInstaller, KymaRef, WatcherCache
from kyma_operator.agentinstall.readiness import AgentStatus
from kyma_operator.api.kyma import Kyma
from kyma_operator.runtime.clock import utc_now
from kyma_operator.runtime.kube import KubeClient


class Installer(Protocol):
    """The two calls the Kyma reconcile makes (``AgentInstaller`` implements them)."""

    async def ensure(self, kyma: Mapping[str, Any] | Kyma | KymaRef, skr: KubeClient) -> AgentStatus: ...

    async def remove(self, kyma: Mapping[str, Any] | Kyma | KymaRef, skr: KubeClient | None) -> None: ...


class Installers(Protocol):
    def for_kyma(self, name: str) -> Installer: ...


class SingleInstaller:
    """Every Kyma is served by the same installer."""

    def __init__(self, installer: Installer) -> None:
        self.installer = installer

    def for_kyma(self, name: str) -> Installer:
        return self.installer


class WebhookUrlInstallers:
    """Per-Kyma webhook URLs (local runs); Kymas without an entry use ``default``."""

    def __init__(
        self,
        default: AgentInstaller,
        watchers: WatcherCache,
        webhook_urls: Mapping[str, str],
        *,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        for kyma, url in webhook_urls.items():
            if not url.startswith("https://"):
                raise ValueError(f"webhook URL of Kyma {kyma} must be https://, got {url!r}")
        self.default = default
        self._watchers = watchers
        self._urls = dict(webhook_urls)
        self._wall_clock = wall_clock
        self._by_url: dict[str, AgentInstaller] = {}

    def for_kyma(self, name: str) -> Installer:
        url = self._urls.get(name)
        if url is None:
            return self.default
        installer = self._by_url.get(url)
        if installer is None:
            installer = AgentInstaller(
                identity=self.default.identity,
                watchers=self._watchers,
                config=self.default.config.model_copy(update={"webhook_url": url}),
                wall_clock=self._wall_clock,
            )
            self._by_url[url] = installer
        return installer


class NoAgentInstallers:
    """The operator runs without the Watcher feature (single-cluster installs, ``kyma install``):
    no agent exists, so only single-cluster Kymas can be served; any other Kyma is told so."""

    def for_kyma(self, name: str) -> Installer:
        return _NoAgent(name)


class _NoAgent:
    def __init__(self, kyma: str) -> None:
        self.kyma = kyma

    async def ensure(self, kyma: Mapping[str, Any] | Kyma | KymaRef, skr: KubeClient) -> AgentStatus:
        return AgentStatus(
            ready=False,
            error=True,
            reason="WatcherDisabled",
            message=f"Kyma {self.kyma} names a runtime, but this operator runs without the Watcher "
            "feature (--watcher-enabled=false): only single-cluster Kymas (label "
            "operator.kyma-project.io/sync=false) are served",
        )

    async def remove(self, kyma: Mapping[str, Any] | Kyma | KymaRef, skr: KubeClient | None) -> None:
        return None
