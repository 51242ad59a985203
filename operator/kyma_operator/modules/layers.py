"""A Manifest's ``install.source`` and ``localizedImages`` from a component descriptor, as upstream.

Why a module of its own: the Manifest the Kyma controller writes must equal the one
lifecycle-manager writes for the same module, field by field, or taking over a control plane
rewrites every Manifest. Upstream derives both from the descriptor
(``internal/manifest/img/parse.go``, ``internal/service/manifest/parser/template_to_module.go``):

* the ``raw-manifest`` resource (a local blob) becomes ``{repo, name, ref, type}``: ``repo`` is the
  registry lifecycle-manager reads descriptors from (``--oci-registry-host`` or the credentials
  Secret's registry, plus ``--modules-repository-subpath``), without scheme; ``name`` the component;
  ``ref`` the blob's ``localReference``; ``type`` ``oci-dir`` when the blob's media type is
  ``application/x-tar`` (a tar holding the YAML), else ``oci-ref`` (the YAML itself). Without a
  configured registry the descriptor's effective (last) OCI repository context is used, ``baseUrl``
  plus ``subPath`` (where upstream's descriptor was found);
* every resource with access type ``ociArtifact`` contributes its ``imageReference`` to
  ``localizedImages``, in descriptor order (the images as mirrored into the module's registry).
"""

from __future__ import annotations

from kyma_operator.api.manifest import ImageSpec, RefType
from kyma_operator.modules import constants as c
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.template import oci_context, repository_base

_SCHEMES = ("https://", "http://", "oci://")


def registry_reference(value: str) -> str:
    """``host[:port][/path]`` of a registry as upstream records it: scheme and trailing ``/`` dropped."""
    text = value.strip()
    for scheme in _SCHEMES:
        text = text.removeprefix(scheme)
    return text.rstrip("/")


def context_registry(descriptor: ComponentDescriptor) -> str:
    """The registry of the descriptor's effective repository context (the last OCI one):
    ``baseUrl`` (without scheme) plus ``/<subPath>`` when it has one (a transferred component)."""
    context = oci_context(descriptor)
    mapping = context.get("componentNameMapping")
    if mapping not in (None, "", c.COMPONENT_NAME_MAPPING):
        raise ValueError(
            f"{descriptor.component.name}: componentNameMapping {mapping!r} is not supported "
            f"(only {c.COMPONENT_NAME_MAPPING!r})"
        )
    registry = repository_base(context)
    if not registry or registry.startswith("/"):
        raise ValueError(f"{descriptor.component.name}: its OCI repository context has no baseUrl")
    return registry


def raw_manifest_source(descriptor: ComponentDescriptor, registry: str | None = None) -> ImageSpec:
    """``spec.install.source`` for the descriptor's ``raw-manifest`` resource (see the module
    docstring); ``registry``: the configured registry (host[/subpath]) the descriptor came from."""
    component = descriptor.component.name
    resource = descriptor.resource(c.RAW_MANIFEST)
    if resource is None or resource.access is None or resource.access.type != c.ACCESS_LOCAL_BLOB:
        raise ValueError(f"{component}: no local blob resource {c.RAW_MANIFEST!r}")
    ref = resource.access.field("localReference")
    if not ref:
        raise ValueError(f"{component}: resource {c.RAW_MANIFEST!r} has no localReference")
    kind = RefType.OCI_DIR if resource.access.field("mediaType") == c.TAR_MEDIA_TYPE else RefType.OCI_REF
    repo = registry_reference(registry) if registry else context_registry(descriptor)
    return ImageSpec(repo=repo, name=component, ref=ref, type=kind.value)


def localized_images(descriptor: ComponentDescriptor) -> list[str]:
    """``imageReference`` of every ``ociArtifact`` resource, in descriptor order."""
    images: list[str] = []
    for resource in descriptor.component.resources:
        access = resource.access
        if access is None or access.type != c.ACCESS_OCI_ARTIFACT:
            continue
        reference = access.field("imageReference")
        if reference:
            images.append(reference)
    return images
