"""The Kyma controller's settings (on top of the shared ``common.config.ControllerConfig``) and the
one switch of the reconcile's mode that is read from the Kyma itself (``single_cluster``, shared
with the Manifest controller in ``common.clustermode``)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from pydantic import Field

from kyma_operator.api import names
from kyma_operator.controllers.common.clustermode import single_cluster
from kyma_operator.controllers.common.config import ControllerConfig

DEFAULT_HEARTBEAT_SWEEP_INTERVAL: Final = 30.0
"""Seconds between two comparisons of every runtime's agent health with what its Kyma's last
reconcile saw (``heartbeat.HeartbeatSweep``)."""


class KymaControllerConfig(ControllerConfig):
    namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    """Where Kymas and their access Secrets live (upstream: kcp-system)."""
    sync_namespace: str = Field(default=names.SKR_NAMESPACE, min_length=1)
    """The runtime namespace of the Kyma copy and the agent (upstream ``--sync-namespace``)."""
    remote_kyma_name: str = Field(default=names.DEFAULT_REMOTE_KYMA_NAME, min_length=1)
    modules: bool = True
    """Run the module half (``ModuleSync``): Manifests, ``status.modules``, the runtime catalog."""
    restricted_modules: tuple[str, ...] = ()
    """Modules whose ModuleReleaseMeta may restrict them to Kymas by ``kymaSelector``."""
    skr_image_pull_secret: str | None = None
    """``--skr-image-pull-secret``: the KCP Secret copied into every runtime (``pullsecret``)."""
    deletion_interval: float = Field(default=5.0, gt=0)
    """Fallback poll while a deletion waits for Manifests (their removal wakes the Kyma at once)."""
    event_settle_delays: tuple[float, ...] = Field(default=(0.03, 0.5), max_length=3)
    """Re-reads when a runtime event arrived but the runtime Kyma looks unchanged (the event
    overtook its write): a write lands within milliseconds, so the first re-read is early and the
    later ones cover a slow API server."""
    checks_after_write: float = Field(default=1.0, ge=0)
    """A reconcile woken by edits alone (``memory.woken_by_edits``) that writes Manifests leaves the
    runtime's agent and catalog checks to a reconcile this many seconds later, so that they do not
    compete with the new Manifests' install; 0: check in the same reconcile."""
    heartbeat_sweep_interval: float = Field(default=DEFAULT_HEARTBEAT_SWEEP_INTERVAL, gt=0)
    module_rollout_max_delay: float = Field(default=300.0, ge=0)
    """Catalog changes reach the Kymas they concern spread over a random delay up to this (upstream
    ``--module-upgrade-rollout-max-delay``, 5 min); 0: at once."""
    field_manager: str = Field(default=names.FIELD_MANAGER, min_length=1)
    maintenance_policy_file: Path | None = None
    """Upstream's maintenance window policy (JSON); None: no policy (downtime upgrades go Error)."""
    min_maintenance_window_size: float = Field(default=1200.0, ge=0)
    """An ongoing window counts only while it lasts at least this many seconds more."""


__all__ = ["KymaControllerConfig", "single_cluster"]
