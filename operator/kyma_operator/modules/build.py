"""Build a module's OCM component version from a module config (the ``kyma module create`` core).

Why: a module author describes a module in a config file with the fields upstream ``modulectl create``
accepts (name, version, manifest, defaultCR, manager, security, labels, ...). From it we build the
component version (docs/architecture.md, "Module artifacts"): the raw manifest and the default CR
as local blobs (single-file deterministic tars, ``directoryTree`` resources like modulectl's), the
manager image as an ``ociArtifact`` resource, every resource with its digest so the whole version
can be signed. Same input -> same bytes -> same digests. Input is validated first; nothing is written here.

Beyond modulectl, a module's content can be a Helm chart instead of a raw manifest: ``chart`` (a
packaged chart, ``helm package``'s ``.tgz``) becomes the local blob ``helm-chart`` (type
``helmChart``, stored byte for byte) and ``chartValues`` (a YAML file) the optional ``helm-values``
layer; the Manifest controller renders the chart with Helm at install time.

As in modulectl, ``manifest``/``defaultCR`` (and ``chart``/``chartValues``) may be http(s) URLs
(``fetch_module_urls``, with the limits of ``modules.fetch``), and every container image of the
manifest's workloads becomes an ``ociArtifact`` resource (``modules.images``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kyma_operator.modules import constants as c
from kyma_operator.modules.archive import ArchiveError, is_tar, read_tar, tar_files
from kyma_operator.modules.chart import ChartArchiveError, read_chart_archive
from kyma_operator.modules.descriptor import (
    Access,
    Component,
    ComponentDescriptor,
    DigestSpec,
    Label,
    Provider,
    Resource,
)
from kyma_operator.modules.fetch import Fetcher, FetchError, is_url
from kyma_operator.modules.images import ImageError, image_artifact, manifest_images
from kyma_operator.modules.layout import Blob, ComponentVersion
from kyma_operator.modules.reference import ReferenceParseError, parse_image
from kyma_operator.modules.signing import blob_digest_spec

# OCM's component name rule (ocm-spec component-descriptor schema).
_COMPONENT_NAME = re.compile(
    r"^[a-z][-a-z0-9]*([.][a-z][-a-z0-9]*)*[.][a-z]{2,}(/[a-z][-a-z0-9_]*([.][a-z][-a-z0-9_]*)*)+$"
)
_SEMVER = re.compile(r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The ModuleTemplate CRD's rule for spec.moduleName (lower-case words of at least 3 letters).
_CATALOG_MODULE_NAME = re.compile(r"^[a-z]{3,}(-[a-z]{3,})*$")


class ModuleConfigError(ValueError):
    """The module config or a file it names is invalid; the message names the field or file."""


class ManagerConfig(BaseModel):
    """``manager:``: the module's manager workload, recorded in the template's ``spec.manager``."""

    model_config = ConfigDict(extra="forbid")
    group: str
    version: str
    kind: str
    name: str
    namespace: str | None = None

    @field_validator("kind")
    @classmethod
    def _workload(cls, value: str) -> str:
        if value not in ("Deployment", "StatefulSet"):
            raise ValueError("the manager must be a Deployment or a StatefulSet")
        return value


class GroupVersionKindConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group: str
    version: str
    kind: str


def _name_links(value: Any) -> Any:
    """modulectl accepts icons/resources as a map or as a list of ``{name, link}``."""
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            if not isinstance(item, dict) or "name" not in item or "link" not in item:
                raise ValueError("entries need 'name' and 'link'")
            if item["name"] in out:
                raise ValueError(f"duplicate entry {item['name']!r}")
            out[item["name"]] = item["link"]
        return out
    return value


class ModuleConfig(BaseModel):
    """The module config file (``module-config.yaml``), modulectl's fields plus ours (marked)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(description="OCM component name, e.g. kyma-project.io/module/template-operator")
    version: str
    manifest: str | None = Field(
        default=None, description="path of the YAML with everything the module installs"
    )
    # ours: a Helm chart as the module's content instead of ``manifest``, and its values layer
    chart: str | None = Field(default=None, description="path of a packaged Helm chart (helm package)")
    chart_values: str | None = Field(
        default=None, alias="chartValues", description="path of a YAML file of values for the chart"
    )
    default_cr: str | None = Field(default=None, alias="defaultCR")
    repository: str = ""
    documentation: str = ""
    team: str = ""
    icons: dict[str, str] = Field(default_factory=dict)
    security: str | None = None
    security_scan_enabled: bool | None = Field(default=None, alias="securityScanEnabled")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    manager: ManagerConfig | None = None
    associated_resources: list[GroupVersionKindConfig] = Field(
        default_factory=list, alias="associatedResources"
    )
    resources: dict[str, str] = Field(default_factory=dict)
    requires_downtime: bool = Field(default=False, alias="requiresDowntime")
    internal: bool = False
    beta: bool = False
    # ours: the manager image (becomes the ociArtifact resource ``module-image``), the channel the
    # release meta assigns this version to, and whether the module is mandatory.
    manager_image: str | None = Field(default=None, alias="managerImage")
    channel: str = "regular"
    mandatory: bool = False

    _links = field_validator("icons", "resources", mode="before")(_name_links)

    @field_validator("name")
    @classmethod
    def _component_name(cls, value: str) -> str:
        if not _COMPONENT_NAME.match(value):
            raise ValueError("must be an OCM component name like kyma-project.io/module/<module>")
        if not _DNS_LABEL.match(value.rsplit("/", 1)[-1]):
            raise ValueError("the last path segment (the module name) must be a DNS label")
        return value

    @field_validator("version")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not _SEMVER.match(value):
            raise ValueError("must be a semantic version like 1.0.0")
        return value

    @field_validator("channel")
    @classmethod
    def _channel(cls, value: str) -> str:
        if not re.match(r"^[a-z]{3,32}$", value):
            raise ValueError("must be 3-32 lower-case letters")
        return value

    @model_validator(mode="after")
    def _content(self) -> ModuleConfig:
        if (self.manifest is None) == (self.chart is None):
            raise ValueError("give exactly one of 'manifest' (a raw manifest) and 'chart' (a Helm chart)")
        if self.chart_values is not None and self.chart is None:
            raise ValueError("'chartValues' needs 'chart'")
        return self

    @property
    def module_name(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    def check_catalog_name(self) -> None:
        """Raise unless the ModuleTemplate CRD accepts the module name (checked by the CLI up front;
        the library itself also builds modules that are installed without a catalog entry)."""
        if not _CATALOG_MODULE_NAME.match(self.module_name):
            raise ModuleConfigError(
                f"field 'name': module name {self.module_name!r} is not accepted by the ModuleTemplate CRD "
                "(lower-case words of 3+ letters joined by '-', e.g. template-operator)"
            )

    @classmethod
    def load(cls, path: Path) -> ModuleConfig:
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ModuleConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise ModuleConfigError(f"{path}: not valid YAML: {exc}") from exc
        return cls.from_mapping(data, source=str(path))

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "module config") -> ModuleConfig:
        if not isinstance(data, dict):
            raise ModuleConfigError(f"{source}: must be a mapping of fields")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(config)"
            raise ModuleConfigError(f"{source}: field {field!r}: {first['msg']}") from exc


def parse_manifest_objects(data: bytes, *, source: str) -> list[dict[str, Any]]:
    """Kubernetes objects of a multi-document YAML; each needs apiVersion, kind and metadata.name."""
    try:
        documents = list(yaml.safe_load_all(data))
    except yaml.YAMLError as exc:
        raise ModuleConfigError(f"{source}: not valid YAML: {exc}") from exc
    objects = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        where = f"{source}: document {index + 1}"
        if not isinstance(doc, dict):
            raise ModuleConfigError(f"{where}: not a Kubernetes object (a mapping)")
        for key in ("apiVersion", "kind"):
            if not isinstance(doc.get(key), str) or not doc[key]:
                raise ModuleConfigError(f"{where}: missing {key}")
        metadata = doc.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            raise ModuleConfigError(f"{where} ({doc['kind']}): missing metadata.name")
        objects.append(doc)
    if not objects:
        raise ModuleConfigError(f"{source}: contains no Kubernetes objects")
    return objects


def read_yaml_blob(data: bytes, file_name: str) -> bytes:
    """The YAML inside a module blob: a tar holding ``file_name`` (or its only file), or plain YAML."""
    if not is_tar(data):
        return data
    try:
        files = read_tar(data, what=file_name)
    except ArchiveError as exc:
        raise ModuleConfigError(str(exc)) from exc
    if file_name in files:
        return files[file_name]
    if len(files) == 1:
        return next(iter(files.values()))
    raise ModuleConfigError(f"blob holds {sorted(files)}, not {file_name}")


def _local_blob_resource(
    name: str, version: str, blob: Blob, resource_type: str = c.RESOURCE_TYPE_DIRECTORY
) -> Resource:
    return Resource(
        name=name,
        version=version,
        type=resource_type,
        relation=c.RELATION_LOCAL,
        access=Access.model_validate(
            {
                "type": c.ACCESS_LOCAL_BLOB,
                "localReference": blob.digest,
                "mediaType": blob.media_type,
                "referenceName": name,
            }
        ),
        digest=blob_digest_spec(blob.data),
    )


def image_resource(image: str, version: str, manifest_digest: str | None) -> Resource:
    """The manager image as ``ociArtifact`` (digest = its manifest digest, OCM's ociArtifactDigest/v1)."""
    try:
        ref = parse_image(image)
    except ReferenceParseError as exc:
        raise ModuleConfigError(f"field 'managerImage': {exc}") from exc
    digest = manifest_digest or ref.digest
    return Resource(
        name=c.MODULE_IMAGE,
        version=version,
        type=c.RESOURCE_TYPE_OCI_ARTIFACT,
        relation=c.RELATION_EXTERNAL,
        access=Access.model_validate({"type": c.ACCESS_OCI_ARTIFACT, "imageReference": image}),
        digest=DigestSpec(
            hash_algorithm=c.HASH_SHA256,
            normalisation_algorithm=c.OCI_ARTIFACT_DIGEST,
            value=digest.removeprefix("sha256:"),
        )
        if digest
        else None,
    )


def module_images(config: ModuleConfig, files: Mapping[str, bytes]) -> list[str]:
    """The container images of the manifest's Deployments/StatefulSets (not the manager image,
    which is the ``module-image`` resource already)."""
    if config.manifest is None:
        return []
    objects = parse_manifest_objects(files[config.manifest], source=config.manifest)
    try:
        images = manifest_images(objects, source=config.manifest)
    except ImageError as exc:
        raise ModuleConfigError(str(exc)) from exc
    return [image for image in images if image != config.manager_image]


def build_component(
    config: ModuleConfig,
    files: Mapping[str, bytes],
    *,
    image_digest: str | None = None,
    record_images: bool = False,
    image_digests: Mapping[str, str] | None = None,
) -> ComponentVersion:
    """The component version of ``config``; ``files`` holds the bytes of the files the config names.

    ``record_images`` (``kyma module create``'s default, as modulectl): every container image of the
    manifest becomes an ``ociArtifact`` resource, with its digest from ``image_digests`` or its
    reference (a signature needs one). Off, only the manager image is recorded."""
    blobs: dict[str, Blob] = {}
    resources: list[Resource] = []
    if config.manager_image:
        resources.append(image_resource(config.manager_image, config.version, image_digest))
    if config.manifest is not None:
        manifest = files[config.manifest]
        parse_manifest_objects(manifest, source=config.manifest)
        raw = Blob(c.TAR_MEDIA_TYPE, tar_files({c.RAW_MANIFEST_FILE: manifest}))
        blobs[raw.digest] = raw
        resources.append(_local_blob_resource(c.RAW_MANIFEST, config.version, raw))
        for image in module_images(config, files) if record_images else ():
            artifact = image_artifact(image, (image_digests or {}).get(image))
            if all((r.name, r.version) != (artifact.name, artifact.version) for r in resources):
                resources.append(artifact)
    if config.chart is not None:
        for name, blob, kind in _chart_blobs(config, files):
            blobs[blob.digest] = blob
            resources.append(_local_blob_resource(name, config.version, blob, kind))
    if config.default_cr:
        cr = files[config.default_cr]
        objects = parse_manifest_objects(cr, source=config.default_cr)
        if len(objects) != 1:
            raise ModuleConfigError(f"{config.default_cr}: the default CR must be exactly one object")
        cr_blob = Blob(c.TAR_MEDIA_TYPE, tar_files({c.DEFAULT_CR_FILE: cr}))
        blobs[cr_blob.digest] = cr_blob
        resources.append(_local_blob_resource(c.DEFAULT_CR, config.version, cr_blob))
    labels = [Label(name=k, value=v) for k, v in sorted(_security_labels(config).items())]
    component = Component(
        name=config.name,
        version=config.version,
        provider=Provider(
            name=c.KYMA_PROVIDER, labels=[Label(name=c.BUILT_BY_LABEL, value=c.BUILT_BY_VALUE)]
        ),
        resources=resources,
        labels=labels,
    )
    return ComponentVersion(ComponentDescriptor(component=component), blobs)


def _chart_blobs(config: ModuleConfig, files: Mapping[str, bytes]) -> list[tuple[str, Blob, str]]:
    """The chart archive (checked, stored as is) and the optional values layer (a YAML mapping)."""
    assert config.chart is not None
    archive = files[config.chart]
    try:
        read_chart_archive(archive, source=config.chart)
    except ChartArchiveError as exc:
        raise ModuleConfigError(str(exc)) from exc
    out = [(c.HELM_CHART, Blob(c.HELM_CHART_MEDIA_TYPE, archive), c.RESOURCE_TYPE_HELM_CHART)]
    if config.chart_values is not None:
        values = files[config.chart_values]
        try:
            parsed = yaml.safe_load(values)
        except yaml.YAMLError as exc:
            raise ModuleConfigError(f"{config.chart_values}: not valid YAML: {exc}") from exc
        if parsed is not None and not isinstance(parsed, dict):
            raise ModuleConfigError(f"{config.chart_values}: chart values must be a mapping")
        out.append((c.HELM_VALUES, Blob(c.YAML_MEDIA_TYPE, values), c.RESOURCE_TYPE_HELM_VALUES))
    return out


def _security_labels(config: ModuleConfig) -> dict[str, str]:
    out = {}
    if config.security and config.security_scan_enabled is not False:
        out["kyma-project.io/security-config"] = config.security
    if config.team:
        out["kyma-project.io/team"] = config.team
    return out


def _named_files(config: ModuleConfig) -> tuple[tuple[str, str | None], ...]:
    return (
        ("manifest", config.manifest),
        ("chart", config.chart),
        ("chartValues", config.chart_values),
        ("defaultCR", config.default_cr),
    )


async def fetch_module_urls(config: ModuleConfig, fetcher: Fetcher) -> dict[str, bytes]:
    """The contents of the files the config names by http(s) URL; one error naming field and URL."""
    fetched: dict[str, bytes] = {}
    for field, name in _named_files(config):
        if name and is_url(name) and name not in fetched:
            try:
                fetched[name] = await fetcher.get(name)
            except FetchError as exc:
                raise ModuleConfigError(f"field {field!r}: {exc}") from exc
    return fetched


def load_module_files(
    config: ModuleConfig, base_dir: Path, fetched: Mapping[str, bytes] | None = None
) -> dict[str, bytes]:
    """Read the files the config names (relative to ``base_dir``), with one clear error per file;
    URLs are taken from ``fetched`` (``fetch_module_urls``)."""
    files: dict[str, bytes] = {}
    for field, name in _named_files(config):
        if not name:
            continue
        if is_url(name):
            if fetched is None or name not in fetched:
                raise ModuleConfigError(f"field {field!r}: {name} was not fetched")
            files[name] = fetched[name]
            continue
        path = (base_dir / name) if not Path(name).is_absolute() else Path(name)
        try:
            files[name] = path.read_bytes()
        except OSError as exc:
            raise ModuleConfigError(f"field {field!r}: cannot read {path}: {exc.strerror or exc}") from exc
    return files
