"""The Manifest controller's settings on top of the shared ``common.config.ControllerConfig``."""

from __future__ import annotations

from typing import Final

from pydantic import Field

from kyma_operator.api import names
from kyma_operator.controllers.common.config import ControllerConfig

DEFAULT_WORKLOAD_WATCHES: Final = 256
"""Module workloads followed at once (``workloads.WorkloadWatches``): each holds one connection to
its runtime's API server while its Manifest is Processing, 90-110 KiB of the operator's memory
(measured with 64 and 256 watches on runtime clients of their own, one API server: +6.8 MB and
+22.8 MB RSS), so about 23 MB at this limit during a large rollout and nothing at rest."""

DEFAULT_APPLY_CONCURRENCY: Final = 16
"""Objects of one Manifest written to its runtime at once: 16 (8 until 2026-11-30) puts a module of
up to 16 objects into one wave. Measured with 10 objects (9 ConfigMaps and a Deployment), Manifest
in KCP -> every object in the runtime, 9 enables each: p50 94 ms with 8, 81 ms with 16 (a trace
run for ``benchmarks/results/enable_steps.md``). Upstream starts one goroutine per object, unbounded."""


class ManifestControllerConfig(ControllerConfig):
    namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    sync_namespace: str = Field(default=names.SKR_NAMESPACE, min_length=1)
    """Default namespace of default CRs; never pruned."""
    processing_interval: float = Field(default=5.0, gt=0)
    removal_poll_initial: float = Field(default=0.2, gt=0)
    """First look again while waiting for the runtime to remove what was deleted (a Namespace, a
    CRD, a module CR): doubled on every further wait up to ``removal_poll_max``. Nothing in the
    runtime reports the moment such an object disappears (the namespace controller finalizes it
    without an admission call), so a short bounded backoff stands in for the event; a look costs
    one GET per object still there."""
    removal_poll_max: float = Field(default=1.0, gt=0)
    apply_concurrency: int = Field(default=DEFAULT_APPLY_CONCURRENCY, ge=1, le=256)
    workload_watches: int = Field(default=DEFAULT_WORKLOAD_WATCHES, ge=0, le=100_000)
    """Rolling-out module workloads followed by a watch at once (``workloads``); 0: poll only."""
    crd_established_timeout: float = Field(default=30.0, gt=0)
    field_manager: str = Field(default=names.MANIFEST_APPLIER_FIELD_MANAGER, min_length=1)
    skr_image_pull_secret: str | None = None
    """``--skr-image-pull-secret``: named in every module workload (``pullsecret``)."""
    inject_data_from_kcp: bool = False
    """The deployer module's Secrets annotated ``inject-data-from-kcp`` get their data from KCP
    (on when ``deployer`` is a restricted module)."""
