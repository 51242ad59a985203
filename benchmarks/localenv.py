"""What the module benchmarks run on: a KCP and one living runtime with our CRDs, a local OCI
registry and a scratch folder, all stopped (and removed) when the block ends.

The runtime is living (kube-controller-manager, scheduler, kwok nodes): the local system's agent
Deployment becomes Ready only through them (nothing patches its status).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from localrun.kcp import SKR_CRD_PLURALS
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.crds import apply_crds
from tests.registry.server import LocalRegistry


@contextlib.contextmanager
def bench_environment(prefix: str) -> Iterator[tuple[ControlPlane, LocalRegistry, Path]]:
    """(control plane with ``kcp`` and living ``skr-1``, registry, scratch folder)."""
    with (
        ControlPlane(["kcp", "skr-1"], living=["skr-1"]) as plane,
        LocalRegistry() as registry,
        tempfile.TemporaryDirectory(prefix=prefix) as work,
    ):
        apply_crds(plane["kcp"].kubeconfig_path)
        apply_crds(plane["skr-1"].kubeconfig_path, plurals=SKR_CRD_PLURALS)
        yield plane, registry, Path(work)
