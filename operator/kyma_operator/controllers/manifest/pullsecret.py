"""Image-pull Secrets in a module's rendered objects (upstream's two render transforms).

Why a module of its own: both steps change what the renderer produced, for reasons outside the
module's content (an operator flag, a Secret in KCP), and one of them reads KCP; keeping them here
leaves ``render`` pure and lets the reconciler hook them in with one call.

1. ``--skr-image-pull-secret <name>`` (upstream ``CreateSkrImagePullSecretTransform``): every
   Deployment and StatefulSet gets ``imagePullSecrets: [{name}]``; the module's manager workload
   (``spec.manager``; every workload when the Manifest names none) also gets the environment
   variable ``SKR_IMG_PULL_SECRET=<name>`` in each container, so the module's operator can hand the
   Secret on to what it deploys. The Kyma controller copies the Secret itself into the runtime's
   ``kyma-system`` (``controllers.kyma.pullsecret``). A raw manifest that sets the variable itself is
   an error (upstream: the module and the operator would disagree about the name).
2. The deployer module's data injection (upstream ``CreateDeployerModuleImagePullSecretTransform``,
   only when the operator lists ``deployer`` in ``--restricted-modules``; upstream: in
   ``--restricted-default-modules``): a Secret of the module annotated
   ``operator.kyma-project.io/inject-data-from-kcp: "true"`` gets the ``data`` of the same-named
   Secret in the KCP namespace, which must carry the label ``operator.kyma-project.io/module-name``
   naming the module (module A never reads module B's Secret). Only for the module named
   ``deployer``; any other module's annotated Secrets are applied as the module ships them. A
   missing KCP Secret, a missing or different label is ``InjectDataError`` with upstream's message;
   the Manifest goes to Error with it and nothing is applied.

The Manifest controller watches the KCP Secrets carrying the module-name label
(``kcp_secret_informer``), so a changed, relabelled or deleted source Secret reaches the runtime, or
the Manifest's status, at once (``deployer_manifests`` maps the event to the Manifests).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from kyma_operator.api import names
from kyma_operator.api.manifest import Manifest
from kyma_operator.api.moduletemplate import Manager
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.informer import Informer, ListWatcher
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import SECRETS

WORKLOAD_KINDS: Final = ("Deployment", "StatefulSet")
INJECT_DATA_FROM_KCP_FAILED: Final = "inject-data-from-kcp transform failed"
"""Upstream's ``ErrInjectDataFromKCP``: every injection error starts with it."""
KCP_SECRETS_INFORMER: Final = "kcp-module-secrets"

SecretGetter = Callable[[str], Awaitable[JSON]]
"""Reads a Secret of the KCP namespace by name; raises ``KubeError`` (``NotFound``)."""


class PullSecretError(ValueError):
    """The rendered objects cannot get the image-pull Secret; the message says why."""


class InjectDataError(PullSecretError):
    """The deployer module's injection failed (upstream ``ErrInjectDataFromKCP``)."""


# -- 1. --skr-image-pull-secret ----------------------------------------------------------------


def _is_manager(obj: JSON, manager: Manager | None) -> bool:
    if manager is None:
        return True
    group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
    meta = obj.get("metadata") or {}
    return (
        manager.name == meta.get("name")
        and (manager.namespace or "") == (meta.get("namespace") or "")
        and manager.group == group
        and manager.version == version
        and manager.kind == obj.get("kind")
    )


def add_skr_pull_secret(objects: Sequence[JSON], secret: str, manager: Manager | None) -> None:
    """Upstream's transform, in place: ``imagePullSecrets`` on every workload, the environment
    variable in the manager's containers. Raises ``PullSecretError`` if a container sets it already."""
    for obj in objects:
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec")
        if not isinstance(pod, dict):
            continue
        refs = pod.get("imagePullSecrets") or []
        if {"name": secret} not in refs:
            pod["imagePullSecrets"] = [*refs, {"name": secret}]
        if not _is_manager(obj, manager):
            continue
        for container in pod.get("containers") or []:
            env = container.get("env") or []
            if any(isinstance(e, dict) and e.get("name") == names.SKR_IMAGE_PULL_SECRET_ENV for e in env):
                raise PullSecretError(
                    f"{obj['kind']} {obj['metadata'].get('name')}: {names.SKR_IMAGE_PULL_SECRET_ENV} "
                    "environment variable already exists in raw manifest"
                )
            container["env"] = [*env, {"name": names.SKR_IMAGE_PULL_SECRET_ENV, "value": secret}]


# -- 2. the deployer module's injection --------------------------------------------------------


def _injectable(obj: JSON) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return (
        obj.get("kind") == "Secret"
        and annotations.get(names.INJECT_DATA_FROM_KCP_ANNOTATION) == names.ENABLE_LABEL_VALUE
    )


async def inject_from_kcp(objects: Sequence[JSON], module: str, namespace: str, get: SecretGetter) -> None:
    """Upstream's deployer transform, in place (the caller checks the module is the deployer).

    Each annotated Secret gets the ``data`` of the KCP Secret of its name in ``namespace``; its
    ``stringData`` goes (it would override the injected data). Raises ``InjectDataError``."""
    for obj in objects:
        if not _injectable(obj):
            continue
        name = str(obj["metadata"]["name"])
        try:
            source = await get(name)
        except KubeError as exc:
            raise InjectDataError(
                f"{INJECT_DATA_FROM_KCP_FAILED}: failed to fetch kcp secret {_quoted(name)}: "
                f"failed to get secret {name}-{namespace}: {exc.message}"
            ) from None
        labels = (source.get("metadata") or {}).get("labels") or {}
        if names.MODULE_NAME_LABEL not in labels:
            raise InjectDataError(
                f"{INJECT_DATA_FROM_KCP_FAILED}: kcp source secret is missing the required "
                f"{names.MODULE_NAME_LABEL} label: secret={name}"
            )
        if labels[names.MODULE_NAME_LABEL] != module:
            raise InjectDataError(
                f"{INJECT_DATA_FROM_KCP_FAILED}: kcp source secret {names.MODULE_NAME_LABEL} label does "
                f"not match the manifest module: secret={name} expected={module} "
                f"actual={labels[names.MODULE_NAME_LABEL]}"
            )
        obj.pop("stringData", None)
        obj["data"] = dict(source.get("data") or {})  # base64 as stored, as the API server checked it


def _quoted(text: str) -> str:
    """Go's ``%q`` for the plain names used here."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- the hook the reconciler calls ---------------------------------------------------------------


class PullSecrets:
    """Both steps for one operator's configuration (``None`` / ``False``: the step is off)."""

    def __init__(self, *, skr_secret: str | None, inject: bool, namespace: str, get: SecretGetter) -> None:
        self.skr_secret = skr_secret
        self.inject = inject
        self.namespace = namespace
        self._get = get

    @property
    def enabled(self) -> bool:
        return bool(self.skr_secret) or self.inject

    async def apply(self, manifest: Manifest, objects: Sequence[JSON]) -> None:
        """Change the rendered ``objects`` in place; raises ``PullSecretError``."""
        if self.skr_secret:
            add_skr_pull_secret(objects, self.skr_secret, manifest.spec.manager)
        if self.inject and manifest.module_name() == names.DEPLOYER_MODULE_NAME:
            await inject_from_kcp(objects, names.DEPLOYER_MODULE_NAME, self.namespace, self._get)


def kcp_secret_informer(client: ListWatcher, namespace: str, *, clock: Clock | None = None) -> Informer:
    """The KCP Secrets that name a module (the deployer's injection sources): their changes, a
    relabelling and a deletion each reach the Manifests at once."""
    return Informer(
        client,
        SECRETS,
        namespace=namespace,
        label_selector=names.MODULE_NAME_LABEL,
        clock=clock,
        name=KCP_SECRETS_INFORMER,
    )


def deployer_manifests(manifests: Informer) -> Callable[[JSON], list[Request]]:
    """Mapper: a module-labelled KCP Secret changed -> the deployer module's Manifests (the only ones
    that read such Secrets), in the Secret's namespace."""

    def requests_for(secret: JSON) -> list[Request]:
        namespace = (secret.get("metadata") or {}).get("namespace") or ""
        found = []
        for obj in manifests.list():
            meta = obj.get("metadata") or {}
            if (meta.get("labels") or {}).get(names.MODULE_NAME_LABEL) != names.DEPLOYER_MODULE_NAME:
                continue
            if meta.get("namespace") == namespace:
                found.append(Request.for_object(obj))
        return found

    return requests_for
