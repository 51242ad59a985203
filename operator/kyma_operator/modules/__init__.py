"""Module artifacts: OCM component versions in OCI registries, their signatures and catalog objects.

Why: one format for the CLI, the catalog and the Manifest controller (docs/architecture.md,
"Module artifacts"). Public API:

- ``descriptor``: ``ComponentDescriptor`` (read v2 / v3alpha1, write both);
- ``build``: ``ModuleConfig``, ``build_component`` (reproducible component versions);
- ``layout``: ``push_component`` / ``pull_component`` (OCM's OCI mapping);
- ``registry``: ``RegistryClient`` (async, digest-verified); ``auth``: Docker config credentials;
- ``normalise`` / ``signing``: OCM normalisation and RSASSA-PKCS1-V1_5 signatures;
- ``template``: ModuleTemplate / ModuleReleaseMeta generation and a Manifest's ``install_source``;
- ``publish``: ``publish_module`` (build + push + template in one call).
"""
