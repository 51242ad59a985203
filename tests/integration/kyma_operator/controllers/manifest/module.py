"""A test module: its raw manifest (CRD, ConfigMaps, ServiceAccount, Deployment or StatefulSet),
its default CR, and the Manifest that installs it.

Every test gets its own CRD group (CRDs are cluster-scoped and the runtimes are shared by the
session) and its own module namespace in the runtime.
"""

from __future__ import annotations

from typing import Any

import yaml

from kyma_operator.api import names
from tests.integration.kyma_operator.controllers.manifest.published import Published

JSON = dict[str, Any]
KIND = "Sample"
PLURAL = "samples"
VERSION = "v1alpha1"


def group_for(test_namespace: str) -> str:
    return f"{test_namespace}.modules.test"


def crd(group: str) -> JSON:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": KIND, "plural": PLURAL, "singular": "sample", "listKind": f"{KIND}List"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def deployment(
    namespace: str, name: str = "sample-operator", image: str = "example.io/sample/op:1.0"
) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "manager", "image": image}]},
            },
        },
    }


def statefulset(namespace: str, name: str = "sample-db") -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "db", "image": "example.io/sample/db:1.0"}]},
            },
        },
    }


def configmap(namespace: str, name: str, value: str = "1") -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"value": value},
    }


def module_objects(
    group: str,
    namespace: str,
    *,
    configmaps: tuple[str, ...] = ("sample-config",),
    workload: str = "Deployment",
    extra: tuple[JSON, ...] = (),
) -> list[JSON]:
    objects: list[JSON] = [crd(group)]
    objects += [configmap(namespace, name) for name in configmaps]
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "sample-operator", "namespace": namespace},
        }
    )
    if workload == "Deployment":
        objects.append(deployment(namespace))
    elif workload == "StatefulSet":
        objects.append(statefulset(namespace))
    objects += list(extra)
    return objects


def raw_manifest(objects: list[JSON]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


def default_cr(group: str, name: str = "default", namespace: str | None = None) -> JSON:
    meta: JSON = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": f"{group}/{VERSION}", "kind": KIND, "metadata": meta, "spec": {"size": 1}}


def manifest_body(
    name: str,
    namespace: str,
    kyma: str,
    published: Published,
    *,
    resource: JSON | None = None,
    policy: str = "CreateAndDelete",
    module: str = "sample",
) -> JSON:
    spec: JSON = {
        "remote": True,
        "install": {"name": "raw-manifest", "source": source(published)},
        "customResourcePolicy": policy,
        "version": published.version,
    }
    if resource is not None:
        spec["resource"] = resource
    return {
        "apiVersion": f"{names.OPERATOR_GROUP}/{names.OPERATOR_VERSION}",
        "kind": "Manifest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {names.KYMA_NAME_LABEL: kyma, names.MODULE_NAME_LABEL: module},
        },
        "spec": spec,
    }


def source(published: Published) -> JSON:
    """``spec.install.source`` of a published module version."""
    return {"repo": published.repo, "name": published.component, "ref": published.digest, "type": "oci-ref"}


def version_patch(published: Published) -> JSON:
    """The Manifest patch that moves it to another published version (as the Kyma controller does)."""
    return {"spec": {"install": {"source": source(published)}, "version": published.version}}


def deployment_available() -> JSON:
    """The status a Deployment controller writes once the rollout is complete."""
    return {
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "updatedReplicas": 1,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "MinimumReplicasAvailable",
                    "message": "ok",
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "NewReplicaSetAvailable",
                    "message": "ok",
                },
            ],
        }
    }
