"""Names and media types shared with OCM, modulectl and lifecycle-manager, defined once.

Why: the module artifact is a contract with upstream tools (docs/architecture.md, "Module
artifacts"). Every string that another implementation reads or writes (media types, resource names,
algorithm names) lives here so that the builder, the registry layout, the signer and the Manifest
controller cannot drift apart.
"""

from __future__ import annotations

from typing import Final

# OCI image manifest of a component version (OCM's OCI mapping).
OCI_MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX_MEDIA_TYPE: Final = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST_MEDIA_TYPE: Final = "application/vnd.docker.distribution.manifest.v2+json"
COMPONENT_CONFIG_MEDIA_TYPE: Final = "application/vnd.ocm.software.component.config.v1+json"
COMPONENT_DESCRIPTOR_TAR_MEDIA_TYPE: Final = "application/vnd.ocm.software.component-descriptor.v2+yaml+tar"
COMPONENT_DESCRIPTOR_YAML_MEDIA_TYPE: Final = "application/vnd.ocm.software.component-descriptor.v2+yaml"
COMPONENT_DESCRIPTOR_FILE: Final = "component-descriptor.yaml"
# Repository of a component below the base: `<base>/component-descriptors/<component name>`.
COMPONENT_DESCRIPTORS_PREFIX: Final = "component-descriptors"
COMPONENT_VERSION_ANNOTATION: Final = "software.ocm.componentversion"

# Descriptor schema versions.
SCHEMA_V2: Final = "v2"
API_VERSION_V3: Final = "ocm.software/v3alpha1"
KIND_COMPONENT_VERSION: Final = "ComponentVersion"

# Access types.
ACCESS_LOCAL_BLOB: Final = "localBlob"
ACCESS_OCI_ARTIFACT: Final = "ociArtifact"
ACCESS_NONE: Final = ("none", "None")
REPOSITORY_CONTEXT_OCI: Final = "OCIRegistry"
COMPONENT_NAME_MAPPING: Final = "urlPath"

# Resource types, names and relations as modulectl writes them.
RESOURCE_TYPE_DIRECTORY: Final = "directoryTree"
RESOURCE_TYPE_OCI_ARTIFACT: Final = "ociArtifact"
RAW_MANIFEST: Final = "raw-manifest"
DEFAULT_CR: Final = "default-cr"
MODULE_IMAGE: Final = "module-image"
RELATION_LOCAL: Final = "local"
RELATION_EXTERNAL: Final = "external"
TAR_MEDIA_TYPE: Final = "application/x-tar"
# Helm chart modules (ours): the packaged chart (`helm package`) and an optional values layer.
HELM_CHART: Final = "helm-chart"
HELM_VALUES: Final = "helm-values"
RESOURCE_TYPE_HELM_CHART: Final = "helmChart"
RESOURCE_TYPE_HELM_VALUES: Final = "helmValues"
HELM_CHART_MEDIA_TYPE: Final = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
YAML_MEDIA_TYPE: Final = "application/x-yaml"
HELM_VALUES_FILE: Final = "values.yaml"
# File names inside the single-file tar blobs (what a reader extracts).
RAW_MANIFEST_FILE: Final = "raw-manifest.yaml"
DEFAULT_CR_FILE: Final = "default-cr.yaml"

# Provider and labels.
KYMA_PROVIDER: Final = "kyma-project.io"
BUILT_BY_LABEL: Final = "kyma-project.io/built-by"
BUILT_BY_VALUE: Final = "kyma-lifecycle-cli"
MODULE_COMPONENT_PREFIX: Final = "kyma-project.io/module/"

# Digests and signatures.
HASH_SHA256: Final = "SHA-256"
GENERIC_BLOB_DIGEST: Final = "genericBlobDigest/v1"
OCI_ARTIFACT_DIGEST: Final = "ociArtifactDigest/v1"
JSON_NORMALISATION_V1: Final = "jsonNormalisation/v1"
JSON_NORMALISATION_V2: Final = "jsonNormalisation/v2"
JSON_NORMALISATION_V3: Final = "jsonNormalisation/v3"
JSON_NORMALISATION_V4ALPHA1: Final = "jsonNormalisation/v4alpha1"
RSA_PKCS1_V15: Final = "RSASSA-PKCS1-V1_5"
RSA_SIGNATURE_MEDIA_TYPE: Final = "application/vnd.ocm.signature.rsa"
