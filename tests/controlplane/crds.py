"""Install our CRDs (manifests/crds) into a real API server, idempotently, and wait until they serve.

Why: many integration tests need the Kyma/Manifest/... and Istio kinds to exist on the KCP API
server. Every such test calls ``install_crds`` (or uses the ``kcp_crds`` fixture); installing twice,
from two tests or two sessions' worth of fixtures, is harmless: an existing CRD is replaced with
the file's content.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]  # tests/controlplane/crds.py -> repo
CRD_DIR = REPO_ROOT / "manifests" / "crds"
SAMPLES_DIR = REPO_ROOT / "manifests" / "samples"

ESTABLISH_TIMEOUT = 30.0
_POLL_INTERVAL = 0.05


def load_documents(path: Path) -> list[dict[str, Any]]:
    with path.open() as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]


def crd_files() -> list[Path]:
    """The CRD files listed in manifests/crds/kustomization.yaml, in order."""
    (kustomization,) = load_documents(CRD_DIR / "kustomization.yaml")
    return [CRD_DIR / name for name in kustomization["resources"]]


def crd_documents(plurals: Collection[str] | None = None) -> list[dict[str, Any]]:
    """Every CRD document, or only those whose ``spec.names.plural`` is in ``plurals``."""
    documents = [doc for path in crd_files() for doc in load_documents(path)]
    if plurals is None:
        return documents
    return [doc for doc in documents if doc["spec"]["names"]["plural"] in plurals]


def sample_documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(SAMPLES_DIR.glob("*.yaml")):
        for doc in load_documents(path):
            yield path, doc


def install_crds(
    api_client: kubernetes.client.ApiClient,
    timeout: float = ESTABLISH_TIMEOUT,
    plurals: Collection[str] | None = None,
) -> list[str]:
    """Create or replace every CRD (or those of ``plurals``), wait until all are Established."""
    extensions = kubernetes.client.ApiextensionsV1Api(api_client)
    names: list[str] = []
    for body in crd_documents(plurals):
        name = body["metadata"]["name"]
        names.append(name)
        try:
            extensions.create_custom_resource_definition(body)
        except kubernetes.client.ApiException as error:
            if error.status != 409:
                raise
            _replace(extensions, name, body)
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        pending = [name for name in pending if not _established(extensions, name)]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not Established after {timeout}s: {', '.join(pending)}")
        time.sleep(_POLL_INTERVAL)
    return names


def apply_crds(
    kubeconfig_path: Path | str,
    timeout: float = ESTABLISH_TIMEOUT,
    plurals: Collection[str] | None = None,
) -> list[str]:
    """``install_crds`` against the API server of a kubeconfig file."""
    api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig_path))
    try:
        return install_crds(api_client, timeout, plurals)
    finally:
        api_client.close()


def _replace(extensions: kubernetes.client.ApiextensionsV1Api, name: str, body: dict[str, Any]) -> None:
    # Retry on conflict: another installer may have replaced it between our read and write.
    for _ in range(5):
        current = extensions.read_custom_resource_definition(name)
        desired = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        try:
            extensions.replace_custom_resource_definition(name, desired)
            return
        except kubernetes.client.ApiException as error:
            if error.status != 409:
                raise
    raise RuntimeError(f"CRD {name} kept changing while it was being replaced")


def _established(extensions: kubernetes.client.ApiextensionsV1Api, name: str) -> bool:
    crd = extensions.read_custom_resource_definition(name)
    conditions = (crd.status.conditions if crd.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)
