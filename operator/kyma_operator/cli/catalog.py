"""The runtime's view of modules: the synced catalog, the runtime Kyma, and edits of its module list.

Why: ``kyma module list|enable|disable`` work on a runtime (SKR) only: the catalog the operator syncs
into its ``kyma-system`` (ModuleReleaseMetas and ModuleTemplates) and the runtime Kyma
(``kyma-system/default``), whose ``spec.modules`` the runtime admin owns and whose ``status.modules``
the operator reports into. Reading uses the project's CRD models, so ModuleTemplates written by
upstream modulectl are read the same way the operator reads them. Edits are read-modify-write with
the object's resourceVersion (retried on conflicts) and skipped when nothing would change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import CustomResourcePolicy, Kyma
from kyma_operator.api.meta import InvalidObjectError, State
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.resources import resource_for
from kyma_operator.cli.errors import CliError
from kyma_operator.modules.descriptor import ComponentDescriptor, DescriptorError
from kyma_operator.runtime.errors import Conflict, NotFound
from kyma_operator.runtime.kube import KubeClient

KYMAS = resource_for(names.KYMA)
TEMPLATES = resource_for(names.MODULE_TEMPLATE)
RELEASE_METAS = resource_for(names.MODULE_RELEASE_META)
_CONFLICT_RETRIES = 5


@dataclass
class CatalogEntry:
    name: str
    channels: dict[str, str] = field(default_factory=dict)
    versions: set[str] = field(default_factory=set)
    component: str | None = None
    mandatory: str | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class Catalog:
    entries: dict[str, CatalogEntry]

    def get(self, module: str) -> CatalogEntry | None:
        return self.entries.get(module)


def _entry(entries: dict[str, CatalogEntry], name: str) -> CatalogEntry:
    return entries.setdefault(name, CatalogEntry(name))


async def _list(client: KubeClient, info: names.ResourceInfo, namespace: str) -> list[dict[str, Any]]:
    try:
        return (await client.list_all(resource_for(info), namespace=namespace)).items
    except NotFound:  # a list in a missing namespace is empty: only the resource type can be missing
        raise CliError(
            f"this cluster has no CRD {info.crd_name} ({info.kind}): not a Kyma runtime, or run "
            "`kyma install` to install the Kyma CRDs into a single cluster"
        ) from None


async def read_catalog(client: KubeClient, namespace: str) -> Catalog:
    entries: dict[str, CatalogEntry] = {}
    for obj in await _list(client, names.MODULE_RELEASE_META, namespace):
        try:
            meta = ModuleReleaseMeta.from_object(obj)
        except InvalidObjectError:
            continue
        entry = _entry(entries, meta.spec.module_name)
        entry.component = meta.spec.ocm_component_name or entry.component
        entry.channels.update({a.channel: a.version for a in meta.spec.channels})
        if meta.spec.mandatory is not None:
            entry.mandatory = meta.spec.mandatory.version
    for obj in await _list(client, names.MODULE_TEMPLATE, namespace):
        try:
            tpl = ModuleTemplate.from_object(obj)
        except InvalidObjectError:
            continue
        name = tpl.spec.module_name or tpl.labels.get(names.MODULE_NAME_LABEL) or tpl.name
        entry = _entry(entries, name)
        version = tpl.spec.version
        if tpl.spec.descriptor:
            try:
                descriptor = ComponentDescriptor.parse(tpl.spec.descriptor)
                version = version or descriptor.component.version
                entry.component = entry.component or descriptor.component.name
            except DescriptorError as exc:
                entry.problems.append(f"{tpl.name}: {exc}")
        if version:
            entry.versions.add(version)
        if tpl.spec.channel and version:  # legacy channel-based templates
            entry.channels.setdefault(tpl.spec.channel, version)
    return Catalog(entries)


async def read_kyma(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    try:
        return await client.get(KYMAS, name, namespace)
    except NotFound:
        raise CliError(f"no Kyma {namespace}/{name} in this runtime (is it managed by Kyma?)") from None


def list_rows(catalog: Catalog, kyma: dict[str, Any]) -> list[dict[str, Any]]:
    model = Kyma.from_object(kyma)
    rows = []
    enabled_names = {m.name for m in model.spec.modules}
    for name in sorted(set(catalog.entries) | enabled_names):
        entry = catalog.entries.get(name, CatalogEntry(name))
        spec = model.spec.module(name)
        status = model.status.module(name)
        rows.append(
            {
                "name": name,
                "channels": [f"{ch}:{v}" for ch, v in sorted(entry.channels.items())],
                "versions": sorted(entry.versions),
                "mandatory": entry.mandatory,
                "enabled": spec is not None,
                "channel": (spec.channel or model.spec.channel) if spec is not None else None,
                "state": (status.state.value or None) if status is not None else None,
                "installed": status.version if status is not None else None,
                "message": status.message if status is not None else ("; ".join(entry.problems) or None),
            }
        )
    return rows


@dataclass(frozen=True)
class EditResult:
    changed: bool
    kyma: dict[str, Any]


async def _edit(client: KubeClient, namespace: str, name: str, change: Any) -> EditResult:
    for _ in range(_CONFLICT_RETRIES):
        kyma = await read_kyma(client, namespace, name)
        spec = kyma.setdefault("spec", {})
        modules: list[dict[str, Any]] = list(spec.get("modules") or [])
        new_modules = change(modules, spec)
        if new_modules == modules:
            return EditResult(False, kyma)
        spec["modules"] = new_modules
        try:
            return EditResult(True, await client.update(KYMAS, kyma, field_manager="kyma-cli"))
        except Conflict:
            continue
    raise CliError(f"Kyma {namespace}/{name} keeps changing; try again")


class NotInCatalog(CliError):
    """The runtime's catalog has no such module (yet: the operator syncs KCP's catalog into it)."""


async def enable(
    client: KubeClient,
    module: str,
    *,
    namespace: str,
    kyma_name: str,
    channel: str | None,
    policy: CustomResourcePolicy | None,
) -> EditResult:
    catalog = await read_catalog(client, namespace)
    entry = catalog.get(module)
    if entry is None:
        available = ", ".join(sorted(catalog.entries)) or "none"
        raise NotInCatalog(
            f"module {module!r} is not in this runtime's catalog ({namespace}); available: {available}"
        )
    if channel is not None and entry.channels and channel not in entry.channels:
        raise CliError(
            f"module {module!r} has no channel {channel!r} (channels: {', '.join(sorted(entry.channels))})"
        )

    def change(modules: list[dict[str, Any]], spec: dict[str, Any]) -> list[dict[str, Any]]:
        out = [dict(m) for m in modules]
        current = next((m for m in out if m.get("name") == module), None)
        if current is None:
            current = {"name": module}
            out.append(current)
        if channel is not None:
            current["channel"] = channel
        # CreateAndDelete is the default: only written when asked to change an explicit value
        default = policy is CustomResourcePolicy.CREATE_AND_DELETE and "customResourcePolicy" not in current
        if policy is not None and not default:
            current["customResourcePolicy"] = policy.value
        return out

    return await _edit(client, namespace, kyma_name, change)


async def disable(client: KubeClient, module: str, *, namespace: str, kyma_name: str) -> EditResult:
    def change(modules: list[dict[str, Any]], spec: dict[str, Any]) -> list[dict[str, Any]]:
        return [m for m in modules if m.get("name") != module]

    return await _edit(client, namespace, kyma_name, change)


def module_state(kyma: dict[str, Any], module: str) -> tuple[State | None, str | None]:
    status = Kyma.from_object(kyma).status.module(module)
    if status is None:
        return None, None
    return status.state, status.message


def module_channel(kyma: dict[str, Any], module: str) -> str | None:
    """The channel the module's status entry reports (the one its installed version came from)."""
    status = Kyma.from_object(kyma).status.module(module)
    return status.channel if status is not None else None
