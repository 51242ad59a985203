"""OCM component descriptor model: read schema ``v2`` and ``ocm.software/v3alpha1``, write both.

Why: the descriptor is the one document a module version is made of (docs/architecture.md). lifecycle-manager
embeds it in ModuleTemplates as schema ``v2``; the OCM CLI and the spec's examples also use the
Kubernetes-style ``v3alpha1``. One typed model with lossless conversion lets the builder, the registry
layout, the signer and the Manifest controller share it. Unknown fields are kept (``extra="allow"``) so
a descriptor written by a newer upstream tool survives a read/write round trip; normalisation for
signatures works on the ``v2`` form, as OCM's algorithms define.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from kyma_operator.modules import constants as c


class DescriptorError(ValueError):
    """A document is not a component descriptor we can read; the message says which field is wrong."""


class OcmModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def dump(self) -> dict[str, Any]:
        """camelCase JSON-compatible dict without unset optional fields or empty label lists."""
        data: dict[str, Any] = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        for key in ("labels", "extraIdentity", "srcRefs"):
            if key in data and not data[key]:
                del data[key]
        return data


class Label(OcmModel):
    name: str
    value: Any = None
    version: str | None = None
    signing: bool | None = None


class DigestSpec(OcmModel):
    hash_algorithm: str
    normalisation_algorithm: str
    value: str


class Access(OcmModel):
    """An access specification; only ``type`` is common, the rest depends on it (kept as extras)."""

    type: str

    def field(self, name: str) -> str | None:
        extra = self.model_extra or {}
        value = extra.get(name)
        return value if isinstance(value, str) else None


class Resource(OcmModel):
    name: str
    version: str
    type: str
    relation: str = c.RELATION_LOCAL
    access: Access | None = None
    digest: DigestSpec | None = None
    labels: list[Label] = Field(default_factory=list)
    extra_identity: dict[str, str] | None = None


class Source(OcmModel):
    name: str
    version: str
    type: str
    access: Access | None = None
    labels: list[Label] = Field(default_factory=list)
    extra_identity: dict[str, str] | None = None


class Reference(OcmModel):
    name: str
    component_name: str
    version: str
    digest: DigestSpec | None = None
    labels: list[Label] = Field(default_factory=list)
    extra_identity: dict[str, str] | None = None


class Provider(OcmModel):
    name: str
    labels: list[Label] = Field(default_factory=list)


class SignatureSpec(OcmModel):
    algorithm: str
    value: str
    media_type: str
    issuer: str | None = None


class Signature(OcmModel):
    name: str
    digest: DigestSpec
    signature: SignatureSpec


class Component(OcmModel):
    name: str
    version: str
    provider: Provider
    repository_contexts: list[dict[str, Any]] = Field(default_factory=list)
    resources: list[Resource] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)
    references: list[Reference] = Field(default_factory=list)
    labels: list[Label] = Field(default_factory=list)


def _provider_from_v2(value: Any) -> Any:
    """v2 stores the provider as a string: a plain name or a JSON-encoded ``{name, labels}``."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"name": value}
        return parsed if isinstance(parsed, dict) else {"name": value}
    return value


def _provider_to_v2(provider: Provider) -> str:
    data = provider.dump()
    if set(data) == {"name"}:
        return provider.name
    return json.dumps(data, separators=(",", ":"))


def _error(kind: str, exc: ValidationError) -> DescriptorError:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(document)"
    return DescriptorError(f"invalid {kind}: {where}: {first['msg']}")


class ComponentDescriptor(BaseModel):
    """A component version's descriptor, independent of its serialisation."""

    model_config = ConfigDict(extra="forbid")

    component: Component
    signatures: list[Signature] = Field(default_factory=list)

    # -- reading -----------------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: Any) -> ComponentDescriptor:
        """Read a descriptor in either schema (dict from YAML/JSON)."""
        if not isinstance(data, dict):
            raise DescriptorError("a component descriptor must be a mapping")
        if data.get("apiVersion") == c.API_VERSION_V3 or data.get("kind") == c.KIND_COMPONENT_VERSION:
            return cls.from_v3(data)
        return cls.from_v2(data)

    @classmethod
    def from_yaml(cls, text: str | bytes) -> ComponentDescriptor:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise DescriptorError(f"component descriptor is not valid YAML: {exc}") from exc
        return cls.parse(data)

    @classmethod
    def from_v2(cls, data: dict[str, Any]) -> ComponentDescriptor:
        meta = data.get("meta") or {}
        schema = meta.get("schemaVersion") if isinstance(meta, dict) else None
        if schema not in (c.SCHEMA_V2, None):
            raise DescriptorError(f"unsupported component descriptor schema {schema!r}")
        component = data.get("component")
        if not isinstance(component, dict):
            raise DescriptorError("invalid component descriptor: component: missing")
        body = dict(component)
        body["provider"] = _provider_from_v2(body.get("provider"))
        body["references"] = body.pop("componentReferences", None) or []
        for key in ("resources", "sources", "repositoryContexts", "labels"):
            if body.get(key) is None:
                body.pop(key, None)
        try:
            return cls(component=Component.model_validate(body), signatures=data.get("signatures") or [])
        except ValidationError as exc:
            raise _error("component descriptor", exc) from exc

    @classmethod
    def from_v3(cls, data: dict[str, Any]) -> ComponentDescriptor:
        metadata = data.get("metadata")
        if not isinstance(metadata, dict):
            raise DescriptorError("invalid component descriptor: metadata: missing")
        spec = data.get("spec") or {}
        body: dict[str, Any] = {
            "name": metadata.get("name"),
            "version": metadata.get("version"),
            "provider": metadata.get("provider"),
            "labels": metadata.get("labels") or [],
            "repositoryContexts": data.get("repositoryContexts") or [],
            "resources": spec.get("resources") or [],
            "sources": spec.get("sources") or [],
            "references": spec.get("references") or [],
        }
        try:
            return cls(component=Component.model_validate(body), signatures=data.get("signatures") or [])
        except ValidationError as exc:
            raise _error("component descriptor", exc) from exc

    # -- writing -----------------------------------------------------------------------------------

    def to_v2(self) -> dict[str, Any]:
        """The ``v2`` serialisation (what ModuleTemplates embed and the OCI layer carries)."""
        comp = self.component
        extra = dict(comp.model_extra or {})
        component: dict[str, Any] = {
            **extra,
            "name": comp.name,
            "version": comp.version,
            "provider": _provider_to_v2(comp.provider),
            "repositoryContexts": list(comp.repository_contexts),
            "resources": [r.dump() for r in comp.resources],
            "sources": [s.dump() for s in comp.sources],
            "componentReferences": [r.dump() for r in comp.references],
        }
        if comp.labels:
            component["labels"] = [label.dump() for label in comp.labels]
        out: dict[str, Any] = {"meta": {"schemaVersion": c.SCHEMA_V2}, "component": component}
        if self.signatures:
            out["signatures"] = [s.dump() for s in self.signatures]
        return out

    def to_v3(self) -> dict[str, Any]:
        comp = self.component
        metadata: dict[str, Any] = {
            "name": comp.name,
            "version": comp.version,
            "provider": comp.provider.dump(),
        }
        if comp.labels:
            metadata["labels"] = [label.dump() for label in comp.labels]
        spec: dict[str, Any] = {"resources": [r.dump() for r in comp.resources]}
        if comp.sources:
            spec["sources"] = [s.dump() for s in comp.sources]
        if comp.references:
            spec["references"] = [r.dump() for r in comp.references]
        out: dict[str, Any] = {
            "apiVersion": c.API_VERSION_V3,
            "kind": c.KIND_COMPONENT_VERSION,
            "metadata": metadata,
            "repositoryContexts": list(comp.repository_contexts),
            "spec": spec,
        }
        if self.signatures:
            out["signatures"] = [s.dump() for s in self.signatures]
        return out

    def to_yaml(self) -> str:
        """Deterministic ``v2`` YAML (sorted keys), the bytes stored in the descriptor layer."""
        return yaml.safe_dump(self.to_v2(), sort_keys=True, default_flow_style=False)

    # -- queries -----------------------------------------------------------------------------------

    def resource(self, name: str) -> Resource | None:
        return next((r for r in self.component.resources if r.name == name), None)

    def with_repository_context(self, base_url: str) -> ComponentDescriptor:
        """A copy whose last repository context is the OCI registry ``base_url`` (OCM appends on transfer)."""
        context = {
            "baseUrl": base_url,
            "componentNameMapping": c.COMPONENT_NAME_MAPPING,
            "type": c.REPOSITORY_CONTEXT_OCI,
        }
        contexts = [ctx for ctx in self.component.repository_contexts if ctx != context]
        contexts.append(context)
        component = self.component.model_copy(update={"repository_contexts": contexts})
        return self.model_copy(update={"component": component})
