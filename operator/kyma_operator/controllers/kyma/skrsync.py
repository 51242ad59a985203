"""The runtime's copy of the Kyma (``kyma-system/default``) and the metadata that makes it watched.

Upstream (Kyma reconcile steps 6 and 10, SKR sync context): the sync namespace exists with
``managed-by=kyma``; the runtime Kyma is created from the KCP spec if it is missing, and carries
the labels ``operator.kyma-project.io/watched-by: kyma``, ``operator.kyma-project.io/managed-by:
kyma``, ``kyma-project.io/runtime-id`` (plus global-account and subaccount ids when the KCP Kyma has
them) and the annotation ``deprecated-operator.kyma-project.io/owned-by: <ns>/<kyma>``, applied with
field manager ``kyma-sync-context``. ``watched-by=kyma`` is what the default Watcher's objectSelector
matches, so this is what makes an edit of the runtime Kyma reach KCP as an event.

Steady state costs two GETs, sent together, and no write: the namespace and the metadata are applied only when
something is missing or different. The runtime owns ``spec.modules``/``spec.channel`` of its copy
(it is the source of truth upstream), so the spec is written only on creation.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.errors import AlreadyExists, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.resources import NAMESPACES

COPIED_LABELS = (names.RUNTIME_ID_LABEL, names.GLOBAL_ACCOUNT_ID_LABEL, names.SUBACCOUNT_ID_LABEL)
NAMESPACE_LABELS = {
    names.MANAGED_BY_LABEL: names.MANAGED_BY_KYMA,
    "istio-injection": "enabled",
    names.WARDEN_VALIDATE_LABEL: "enabled",
}


class RemoteSyncError(Exception):
    """The runtime cannot hold a Kyma copy (e.g. no Kyma CRD there); the message says why."""


@dataclass(frozen=True)
class RemoteKyma:
    """The runtime's Kyma after the sync and what the sync had to do."""

    obj: JSON
    created: bool
    metadata_applied: bool
    namespace_applied: bool

    @property
    def spec(self) -> JSON:
        spec = self.obj.get("spec")
        return spec if isinstance(spec, dict) else {}

    def describe_spec(self) -> str:
        modules = [str(m.get("name")) for m in self.spec.get("modules") or [] if isinstance(m, dict)]
        return f"channel={self.spec.get('channel')} modules=[{', '.join(modules)}]"


def _without_none(value: Any) -> Any:
    """``value`` without null map entries (the API server stores none, so compare without them)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def runtime_status(status: JSON, sync_namespace: str, generation: int | None = None) -> JSON:
    """The KCP status as the runtime copy shows it (upstream): template references point into the
    runtime's namespace, Manifest references are dropped (Manifests live in KCP only).

    ``generation``: the runtime copy's ``metadata.generation`` whose spec this status answers; every
    condition gets it as ``observedGeneration`` instead of the KCP Kyma's generation (which says
    nothing about the runtime's spec; the copy is annotated ``STATUS_GENERATION_ANNOTATION``)."""
    copied: JSON = _without_none(status)
    if generation is not None and isinstance(copied.get("conditions"), list):
        copied["conditions"] = [
            {**c, "observedGeneration": generation} if isinstance(c, dict) else c
            for c in copied["conditions"]
        ]
    modules = []
    for entry in copied.get("modules") or []:
        module = {k: v for k, v in entry.items() if k != "manifest"}
        template = module.get("template")
        if isinstance(template, dict):
            meta = dict(template.get("metadata") or {})
            meta["namespace"] = sync_namespace
            module["template"] = {**template, "metadata": meta}
        modules.append(module)
    if "modules" in copied:
        copied["modules"] = modules
    return copied


def sync_labels(kyma: Kyma) -> dict[str, str]:
    labels = {names.WATCHED_BY_LABEL: names.MANAGED_BY_KYMA, names.MANAGED_BY_LABEL: names.MANAGED_BY_KYMA}
    for key in COPIED_LABELS:
        if kyma.labels.get(key):
            labels[key] = kyma.labels[key]
    return labels


def sync_annotations(kyma: Kyma) -> dict[str, str]:
    return {
        names.OWNED_BY_ANNOTATION: f"{kyma.namespace}/{kyma.name}",
        names.STATUS_GENERATION_ANNOTATION: names.STATUS_GENERATION_RUNTIME,
    }


def _missing(want: dict[str, str], have: dict[str, Any] | None) -> bool:
    have = have or {}
    return any(have.get(key) != value for key, value in want.items())


class RemoteKymaSync:
    """``ensure(kyma, skr)``: namespace and runtime Kyma with the sync metadata; see the module docstring."""

    def __init__(
        self,
        *,
        sync_namespace: str = names.SKR_NAMESPACE,
        remote_name: str = names.DEFAULT_REMOTE_KYMA_NAME,
        field_manager: str = names.KYMA_SYNC_FIELD_MANAGER,
        create_field_manager: str = names.FIELD_MANAGER,
    ) -> None:
        self.sync_namespace = sync_namespace
        self.remote_name = remote_name
        self.field_manager = field_manager
        self.create_field_manager = create_field_manager

    async def ensure(self, kyma: Kyma, skr: KubeClient) -> RemoteKyma:
        # both read at once (one round trip in every full Kyma reconcile); the namespace is still
        # made or mended before the Kyma copy is created or written
        namespace, current = await asyncio.gather(
            skr.get_or_none(NAMESPACES, self.sync_namespace),
            skr.get_or_none(KYMAS, self.remote_name, self.sync_namespace),
        )
        namespace_applied = await self._ensure_namespace(skr, namespace)
        labels, annotations = sync_labels(kyma), sync_annotations(kyma)
        if current is None:
            created = await self._create(kyma, skr, labels, annotations)
            if created is not None:
                return RemoteKyma(created, True, False, namespace_applied)
            current = await skr.get(KYMAS, self.remote_name, self.sync_namespace)  # lost a create race
        meta = current.get("metadata") or {}
        if not _missing(labels, meta.get("labels")) and not _missing(annotations, meta.get("annotations")):
            return RemoteKyma(current, False, False, namespace_applied)
        applied = await skr.apply(
            KYMAS,
            {
                "apiVersion": KYMAS.api_version,
                "kind": KYMAS.kind,
                "metadata": {
                    "name": self.remote_name,
                    "namespace": self.sync_namespace,
                    "labels": labels,
                    "annotations": annotations,
                },
            },
            field_manager=self.field_manager,
            force=True,
        )
        return RemoteKyma(applied, False, True, namespace_applied)

    async def _ensure_namespace(self, skr: KubeClient, namespace: JSON | None) -> bool:
        """Create the sync namespace (``namespace``: as just read, None if missing) or mend its
        labels; True if it was written."""
        if namespace is not None and not _missing(
            NAMESPACE_LABELS, (namespace.get("metadata") or {}).get("labels")
        ):
            return False
        await skr.apply(
            NAMESPACES,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.sync_namespace, "labels": dict(NAMESPACE_LABELS)},
            },
            field_manager=self.create_field_manager,
            force=True,
        )
        return True

    async def _create(
        self, kyma: Kyma, skr: KubeClient, labels: dict[str, str], annotations: dict[str, str]
    ) -> JSON | None:
        spec = kyma.to_object().get("spec") or {}
        body = {
            "apiVersion": KYMAS.api_version,
            "kind": KYMAS.kind,
            "metadata": {
                "name": self.remote_name,
                "namespace": self.sync_namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {key: spec[key] for key in ("channel", "modules") if key in spec},
        }
        try:
            return await skr.create(KYMAS, body, field_manager=self.create_field_manager)
        except AlreadyExists:
            return None
        except NotFound as exc:
            raise RemoteSyncError(
                f"the runtime does not serve {names.KYMA.crd_name} (its CRD is missing): {exc.message}"
            ) from exc

    async def sync_status(self, remote: RemoteKyma, status: JSON, skr: KubeClient) -> bool:
        """Write the KCP status into the runtime copy when it differs (True if written).

        ``remote`` is the copy as read in the round whose spec ``status`` answers: its generation
        goes into the conditions (``runtime_status``)."""
        generation = (remote.obj.get("metadata") or {}).get("generation")
        wanted = runtime_status(
            status, self.sync_namespace, generation if isinstance(generation, int) else None
        )
        current = remote.obj.get("status")
        if current == wanted:
            return False
        patch: JSON = {"status": dict(wanted)}
        for key in (current or {}) if isinstance(current, dict) else ():
            if key not in wanted:
                patch["status"][key] = None
        try:
            await skr.patch_status(KYMAS, self.remote_name, patch, self.sync_namespace)
        except NotFound:
            return False
        return True
