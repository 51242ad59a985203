"""``publish_module``: build and push a small but real module to a test registry.

Why: the Manifest controller's and the CLI's integration tests need a module (a CRD, a Namespace, a
manager Deployment and a default CR of the CRD's kind) published exactly as ``kyma module create &&
push && template`` would publish it; this helper goes through the same library code.
"""

from __future__ import annotations

from typing import Any

import yaml
from cryptography.hazmat.primitives.asymmetric import rsa

from kyma_operator.modules.build import ModuleConfig
from kyma_operator.modules.publish import PublishedModule
from kyma_operator.modules.publish import publish_module as _publish
from kyma_operator.modules.reference import RegistryBase
from kyma_operator.modules.registry import RegistryClient
from tests.registry.server import LocalRegistry


def module_name_for(unique: str) -> str:
    """A valid module name (lower-case words of 3+ letters) derived from a unique test name."""
    letters = "".join(
        chr(ord("a") + int(ch, 16)) if ch in "0123456789abcdef" else "" for ch in unique.lower()
    )
    return f"mod-{letters or 'xyz'}"


def sample_manifests(module: str, *, group: str = "operator.kyma-project.io") -> tuple[bytes, bytes]:
    """(raw manifest, default CR) YAML of a module named ``module`` (a DNS label)."""
    kind = "".join(part.capitalize() for part in module.split("-"))
    plural = module.replace("-", "") + "s"
    namespace = f"{module}-system"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": plural[:-1]},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    labels = {"app.kubernetes.io/name": module}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{module}-controller-manager", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "manager", "image": f"example.invalid/{module}:1.0.0"}]},
            },
        },
    }
    default_cr = {
        "apiVersion": f"{group}/v1alpha1",
        "kind": kind,
        "metadata": {"name": f"{module}-default", "namespace": "kyma-system"},
        "spec": {"replicas": 1},
    }
    raw = yaml.safe_dump_all([crd, ns, deployment], sort_keys=True).encode()
    return raw, yaml.safe_dump(default_cr, sort_keys=True).encode()


def sample_config(
    module: str, version: str, *, channel: str = "regular", default_cr: bool = True, **extra: Any
) -> ModuleConfig:
    data: dict[str, Any] = {
        "name": f"kyma-project.io/module/{module}",
        "version": version,
        "manifest": "manifest.yaml",
        "defaultCR": "default-cr.yaml",
        "channel": channel,
        "repository": f"https://example.invalid/{module}",
        "documentation": f"https://example.invalid/{module}/README.md",
        "manager": {
            "group": "apps",
            "version": "v1",
            "kind": "Deployment",
            "name": f"{module}-controller-manager",
            "namespace": f"{module}-system",
        },
        **extra,
    }
    if not default_cr:
        data.pop("defaultCR")
    return ModuleConfig.from_mapping(data)


async def publish_module(
    registry: LocalRegistry,
    module: str,
    version: str = "1.0.0",
    *,
    channel: str = "regular",
    prefix: str = "modules",
    namespace: str = "kcp-system",
    signing_key: rsa.RSAPrivateKey | None = None,
    manifest: bytes | None = None,
    default_cr: bytes | None = None,
    with_default_cr: bool = True,
) -> PublishedModule:
    """Publish ``module`` at ``version`` to ``registry``; returns template, release meta and source.

    ``with_default_cr=False``: a module without a default CR (e.g. one whose manifest has no CRD)."""
    raw, cr = sample_manifests(module)
    config = sample_config(module, version, channel=channel, default_cr=with_default_cr)
    files = {"manifest.yaml": manifest if manifest is not None else raw}
    if with_default_cr:
        files["default-cr.yaml"] = default_cr or cr
    base = RegistryBase(registry.host, prefix)
    credentials = None
    if registry.tls_auth:
        from kyma_operator.modules.auth import Credentials

        credentials = Credentials(registry.username, registry.password)
    async with RegistryClient(
        registry.host,
        insecure=not registry.tls_auth,
        credentials=credentials,
        verify=registry.ssl_context() if registry.tls_auth else True,
    ) as client:
        return await _publish(client, base, config, files, signing_key=signing_key, namespace=namespace)
