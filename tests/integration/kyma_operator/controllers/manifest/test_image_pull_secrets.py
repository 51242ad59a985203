"""Image-pull Secrets, translated from upstream's e2e scenarios, on the real KCP and SKR API servers
with modules from the real registry and the Kyma and Manifest controllers running.

* ``skr_image_pull_secret_sync_test.go``: with ``--skr-image-pull-secret`` the KCP Secret is copied
  into the runtime's sync namespace; a module enabled in the runtime's Kyma (the Kyma controller's
  module half, the agent's event, the Manifest controller, the registry) gets it in its workloads'
  ``imagePullSecrets`` and as ``SKR_IMG_PULL_SECRET`` in its manager, and so does the agent's ``skr-webhook``
  Deployment; (ours, on top) a change of the KCP Secret reaches the runtime at once (its own
  trigger, the safety nets are minutes), a deleted one is an Error with condition
  ``SKRImagePullSecretSync`` False, and a recreated one recovers.
* ``deployer_module_image_pull_secret_injection_test.go`` and its ``.mk`` / ``testdata``: the deployer
  module's annotated Secret receives the KCP Secret's data, updates follow, a Secret without the
  annotation keeps its data; label mismatch, missing label and a deleted KCP Secret are reported on
  the Manifest with upstream's messages.
* ``block_non_deployer_module_image_pull_secret_injection_test.go``: another module's annotated Secret
  is never injected.

Upstream enables the deployer as a restricted *default* module (``--restricted-default-modules``,
auto-enabled for the Kymas its release meta selects); that is not what these scenarios test, so
the Manifest is created directly here, and ``deployer`` is listed in ``--restricted-modules``
(which switches the injection on, as upstream's flag does).
"""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.kyma import KymaConditionType
from kyma_operator.api.resources import MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.config import load_config
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS, DEPLOYMENTS, NAMESPACES, SECRETS, Resource
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.harness import KYMA, Setup, manifest_setup
from tests.integration.kyma_operator.harness import KYMAS
from tests.polling import eventually
from tests.registry.modules import module_name_for, publish_module, sample_manifests
from tests.registry.server import LocalRegistry

JSON = dict[str, Any]
SKR_PULL_SECRET = "some-special-image-pull-secret"
IMAGE_PULL_SECRET = "image-pull-secret"
NON_INJECT_SECRET = "non-inject-pull-secret"
# upstream testdata: the KCP Secrets' and the module's Secrets' .dockerconfigjson
KCP_DOCKERCONFIG = b'{"auths":{"e2e-test.example.com":{"username":"test","password":"test"}}}\n'
UPDATED_DOCKERCONFIG = b'{"auths":{"e2e-test.example.com":{"username":"updated","password":"updated"}}}\n'
MODULE_DOCKERCONFIG = b'{"auths": {}}\n'
INJECT_FAILED = "inject-data-from-kcp transform failed"
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")


def _dockerconfig_secret(name: str, namespace: str, value: bytes, **meta: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(value).decode()},
    }


def kcp_secret(name: str, namespace: str, module: str, value: bytes = KCP_DOCKERCONFIG) -> JSON:
    """Upstream ``testdata/kcp-*-pull-secret.yaml``."""
    return _dockerconfig_secret(name, namespace, value, labels={names.MODULE_NAME_LABEL: module})


def module_secret(name: str, namespace: str, *, inject: bool) -> JSON:
    """Upstream ``testdata/skr-deployer-*-pull-secret.yaml``."""
    annotations = {names.INJECT_DATA_FROM_KCP_ANNOTATION: "true"} if inject else {}
    meta = {"annotations": annotations} if annotations else {}
    return _dockerconfig_secret(name, namespace, MODULE_DOCKERCONFIG, **meta)


async def _secret_data(
    skr: KubeClient, name: str, namespace: str, key: str = ".dockerconfigjson"
) -> bytes | None:
    try:
        secret = await skr.get(SECRETS, name, namespace)
    except NotFound:
        return None
    encoded = (secret.get("data") or {}).get(key)
    return base64.b64decode(encoded) if encoded else None


async def _data_equals(skr: KubeClient, name: str, namespace: str, value: bytes) -> bool:
    return await _secret_data(skr, name, namespace) == value


def _pod_spec(workload: JSON) -> JSON:
    spec: JSON = workload["spec"]["template"]["spec"]
    return spec


async def _kyma_condition(s: Setup, condition: str) -> JSON | None:
    kyma = await s.kcp.get(KYMAS, KYMA, s.ns)
    found = [c for c in (kyma.get("status") or {}).get("conditions") or [] if c["type"] == condition]
    return found[0] if found else None


async def _set_data(kcp: KubeClient, name: str, namespace: str, value: bytes) -> None:
    patch = {"data": {".dockerconfigjson": base64.b64encode(value).decode()}}
    await kcp.patch(SECRETS, name, patch, namespace)


# -- skr_image_pull_secret_sync_test.go --------------------------------------------------------------


async def test_skr_image_pull_secret_sync(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    # When some Secret is created as SKR Image Pull Secret in the KCP Cluster
    await kcp_client.create(SECRETS, _dockerconfig_secret(SKR_PULL_SECRET, ns, KCP_DOCKERCONFIG))
    # And skr-image-pull-secret flag is set (the flag as upstream spells it)
    flagged = load_config(["--skr-image-pull-secret", SKR_PULL_SECRET, "--namespace", ns], {})
    assert flagged.skr_image_pull_secret == SKR_PULL_SECRET
    # the module in the catalog (upstream: template-operator; its manager Deployment
    # <module>-controller-manager in <module>-system, here with a StatefulSet beside it)
    module = module_name_for(ns)
    module_ns = f"{module}-system"
    raw, _ = sample_manifests(module)
    raw += b"---\n" + yaml.safe_dump(m.statefulset(module_ns), sort_keys=True).encode()
    published = await publish_module(
        oci_registry, module, "1.0.0", manifest=raw, with_default_cr=False, namespace=ns
    )
    await kcp_client.create(MODULE_TEMPLATES, published.template)
    await kcp_client.create(MODULE_RELEASE_METAS, published.release_meta)
    try:
        async with manifest_setup(
            kcp_client,
            ns,
            skr_client,
            skr_crds[0].kubeconfig,
            oci_registry,
            tmp_path,
            with_agent=True,
            kyma_modules=True,
            skr_image_pull_secret=SKR_PULL_SECRET,
        ) as s:
            await _skr_image_pull_secret_sync(s, module, module_ns)
    finally:
        for resource, name in (
            (NAMESPACES, module_ns),
            (CRDS, f"{module.replace('-', '')}s.{names.OPERATOR_GROUP}"),
        ):
            with contextlib.suppress(NotFound):
                await skr_client.delete(resource, name)


async def _skr_image_pull_secret_sync(s: Setup, module: str, module_ns: str) -> None:
    ns = s.ns
    sync_ns = s.running.sync_namespace
    # Then SKR cluster should have that Secret synced
    await eventually(
        lambda: _data_equals(s.skr, SKR_PULL_SECRET, sync_ns, KCP_DOCKERCONFIG),
        "the pull Secret copied into the runtime's sync namespace",
    )
    copy = await s.skr.get(SECRETS, SKR_PULL_SECRET, sync_ns)
    assert copy["type"] == "kubernetes.io/dockerconfigjson"
    condition = await eventually(
        lambda: _kyma_condition(s, KymaConditionType.SKR_IMAGE_PULL_SECRET_SYNC.value),
        "condition SKRImagePullSecretSync",
    )
    assert condition["status"] == "True"
    assert condition["message"] == "skr image pull secret is synchronized"

    # When Kyma Module is enabled on SKR Kyma CR
    await s.skr.patch(
        KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, {"spec": {"modules": [{"name": module}]}}, sync_ns
    )

    async def workload(resource: Resource, name: str) -> JSON | None:
        try:
            return await s.skr.get(resource, name, module_ns)
        except NotFound:
            return None

    # Then imagePullSecrets in Deployment should contain the SKR image pull Secret
    # And env in Deployment containers have the SKR_IMG_PULL_SECRET var (the manager only)
    env_entry = {"name": names.SKR_IMAGE_PULL_SECRET_ENV, "value": SKR_PULL_SECRET}
    manager = await eventually(
        lambda: workload(DEPLOYMENTS, f"{module}-controller-manager"), "the module's manager installed"
    )
    assert _pod_spec(manager)["imagePullSecrets"] == [{"name": SKR_PULL_SECRET}]
    for container in _pod_spec(manager)["containers"]:
        assert env_entry in container["env"]
    statefulset = await eventually(lambda: workload(STATEFULSETS, "sample-db"), "the StatefulSet installed")
    assert _pod_spec(statefulset)["imagePullSecrets"] == [{"name": SKR_PULL_SECRET}]
    assert all("env" not in c for c in _pod_spec(statefulset)["containers"])

    # And SKR image pull Secret is added to runtime-watcher deployment as imagePullSecrets
    agent = await s.skr.get(DEPLOYMENTS, "skr-webhook", sync_ns)
    assert {"name": SKR_PULL_SECRET} in _pod_spec(agent)["imagePullSecrets"]

    # (ours) a changed KCP Secret reaches the runtime at once, through its own trigger
    mark = len(s.running.reports)
    await _set_data(s.kcp, SKR_PULL_SECRET, ns, UPDATED_DOCKERCONFIG)
    await eventually(
        lambda: _data_equals(s.skr, SKR_PULL_SECRET, sync_ns, UPDATED_DOCKERCONFIG),
        "the updated pull Secret in the runtime",
    )
    await eventually(
        lambda: any(KymaTrigger.IMAGE_PULL_SECRET in r.triggers for r in s.running.reports[mark:]),
        "the reconcile woken by the pull Secret's change reported",
    )

    # (ours, upstream's reconcile error) deleted in KCP -> the Kyma is in Error, condition False
    await s.kcp.delete(SECRETS, SKR_PULL_SECRET, ns)

    async def failing() -> JSON | None:
        kyma = await s.kcp.get(KYMAS, KYMA, ns)
        status = kyma.get("status") or {}
        found = await _kyma_condition(s, KymaConditionType.SKR_IMAGE_PULL_SECRET_SYNC.value)
        return status if status.get("state") == "Error" and found and found["status"] == "False" else None

    status = await eventually(failing, "the Kyma in Error for the missing pull Secret")
    assert (
        "could not sync image pull secret: image pull secret not found"
        in (status["lastOperation"]["operation"])
    )
    registry = s.running.operator.manager.registry
    labels = {"requeue_reason": "image_pull_secret_sync", "requeue_type": "unexpected"}
    await eventually(
        lambda: (registry.get_sample_value("lifecycle_mgr_requeue_reason_total", labels) or 0) >= 1,
        "upstream's requeue reason image_pull_secret_sync counted",
    )
    # recreated -> synced again
    await s.kcp.create(SECRETS, _dockerconfig_secret(SKR_PULL_SECRET, ns, KCP_DOCKERCONFIG))

    async def recovered() -> bool:
        found = await _kyma_condition(s, KymaConditionType.SKR_IMAGE_PULL_SECRET_SYNC.value)
        return bool(found and found["status"] == "True") and await _data_equals(
            s.skr, SKR_PULL_SECRET, sync_ns, KCP_DOCKERCONFIG
        )

    await eventually(recovered, "the pull Secret synced again")


# -- deployer_module_image_pull_secret_injection_test.go -------------------------------------------


async def test_deployer_module_image_pull_secret_injection(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    module = names.DEPLOYER_MODULE_NAME
    # the .mk: KCP Secrets (both labelled for the deployer); only the annotated SKR one is injected
    await kcp_client.create(SECRETS, kcp_secret(IMAGE_PULL_SECRET, ns, module))
    await kcp_client.create(SECRETS, kcp_secret(NON_INJECT_SECRET, ns, module))
    async with manifest_setup(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0].kubeconfig,
        oci_registry,
        tmp_path,
        restricted_modules=(module,),
    ) as s:
        extra = (
            module_secret(IMAGE_PULL_SECRET, s.module_ns, inject=True),
            module_secret(NON_INJECT_SECRET, s.module_ns, inject=False),
        )
        published = await s.publish(extra=extra)
        await s.create(published, module=module)
        # the Module Operator Deployment is ready on the SKR cluster
        await s.make_available_when_created()
        await s.wait_state("Ready")

        # Then the image-pull-secret on the SKR has data injected from KCP
        assert await _secret_data(s.skr, IMAGE_PULL_SECRET, s.module_ns) == KCP_DOCKERCONFIG
        # Then the non-annotated pull secret on the SKR retains its original data
        assert await _secret_data(s.skr, NON_INJECT_SECRET, s.module_ns) == MODULE_DOCKERCONFIG

        # Then a change to the KCP secret data propagates to the SKR (at once: its own trigger)
        mark = len(s.running.manifest_reports)
        await _set_data(s.kcp, IMAGE_PULL_SECRET, ns, UPDATED_DOCKERCONFIG)
        await eventually(
            lambda: _data_equals(s.skr, IMAGE_PULL_SECRET, s.module_ns, UPDATED_DOCKERCONFIG),
            "the updated data at the SKR image-pull-secret",
        )
        await eventually(
            lambda: any(ManifestTrigger.KCP_SECRET in r.triggers for r in s.running.manifest_reports[mark:]),
            "the reconcile woken by the KCP Secret's change reported",
        )
        assert await _secret_data(s.skr, NON_INJECT_SECRET, s.module_ns) == MODULE_DOCKERCONFIG

        # the module-name label changed to a non-matching value -> a module label mismatch error
        await s.kcp.patch(
            SECRETS,
            IMAGE_PULL_SECRET,
            {"metadata": {"labels": {names.MODULE_NAME_LABEL: "not-deployer"}}},
            ns,
        )
        mismatch = (
            f"{INJECT_FAILED}: kcp source secret {names.MODULE_NAME_LABEL} label does not match the manifest "
            f"module: secret={IMAGE_PULL_SECRET} expected=deployer actual=not-deployer"
        )
        await s.wait_state("Error", saying=mismatch)
        # nothing applied meanwhile: the runtime keeps the last injected data
        assert await _secret_data(s.skr, IMAGE_PULL_SECRET, s.module_ns) == UPDATED_DOCKERCONFIG

        # the label removed entirely -> a missing module label error
        await s.kcp.patch(
            SECRETS, IMAGE_PULL_SECRET, {"metadata": {"labels": {names.MODULE_NAME_LABEL: None}}}, ns
        )
        missing = (
            f"{INJECT_FAILED}: kcp source secret is missing the required {names.MODULE_NAME_LABEL} label: "
            f"secret={IMAGE_PULL_SECRET}"
        )
        await s.wait_state("Error", saying=missing)

        # the KCP secret deleted -> a failure to fetch the KCP secret
        await s.kcp.delete(SECRETS, IMAGE_PULL_SECRET, ns)
        not_found = (
            f'{INJECT_FAILED}: failed to fetch kcp secret "{IMAGE_PULL_SECRET}": failed to get secret '
            f'{IMAGE_PULL_SECRET}-{ns}: secrets "{IMAGE_PULL_SECRET}" not found'
        )
        manifest = await s.wait_state("Error", saying=not_found)
        assert manifest["status"]["lastOperation"]["operation"] == not_found

        # (ours) the Secret back with its label -> the Manifest recovers
        await s.kcp.create(SECRETS, kcp_secret(IMAGE_PULL_SECRET, ns, module))
        await s.wait_state("Ready")
        assert await _secret_data(s.skr, IMAGE_PULL_SECRET, s.module_ns) == KCP_DOCKERCONFIG


# -- block_non_deployer_module_image_pull_secret_injection_test.go ---------------------------------


async def test_block_non_deployer_module_image_pull_secret_injection(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    # the .mk: both restricted, the KCP Secret labelled for not-deployer
    await kcp_client.create(SECRETS, kcp_secret(IMAGE_PULL_SECRET, ns, "not-deployer"))
    async with manifest_setup(
        kcp_client,
        ns,
        skr_client,
        skr_crds[0].kubeconfig,
        oci_registry,
        tmp_path,
        restricted_modules=(names.DEPLOYER_MODULE_NAME, "not-deployer"),
    ) as s:
        published = await s.publish(extra=(module_secret(IMAGE_PULL_SECRET, s.module_ns, inject=True),))
        await s.create(published, module="not-deployer")
        await s.make_available_when_created()
        manifest = await s.wait_state("Ready")
        # Then the annotated image-pull-secret on the SKR is not patched
        assert await _secret_data(s.skr, IMAGE_PULL_SECRET, s.module_ns) == MODULE_DOCKERCONFIG
        synced = {(e["kind"], e["name"]) for e in manifest["status"]["synced"]}
        assert ("Secret", IMAGE_PULL_SECRET) in synced
        # a change of the KCP Secret does not reach it either: a full reconcile after it (woken by
        # a Manifest change) leaves the module's Secret as the module ships it
        await _set_data(s.kcp, IMAGE_PULL_SECRET, ns, UPDATED_DOCKERCONFIG)
        mark = len(s.running.manifest_reports)
        await s.kcp.patch(s.manifests, "sample", {"metadata": {"annotations": {"test/touch": "1"}}}, ns)
        await eventually(
            lambda: any(
                ManifestTrigger.MANIFEST_CHANGED in r.triggers and r.outcome == "Ready"
                for r in s.running.manifest_reports[mark:]
            ),
            "a reconcile after the KCP Secret changed",
        )
        assert await _secret_data(s.skr, IMAGE_PULL_SECRET, s.module_ns) == MODULE_DOCKERCONFIG
