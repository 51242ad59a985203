"""Helm charts as the Manifest controller's second install source (``spec.install.source.type:
helm-chart``), rendered by the real Helm engine and installed through the same pipeline as raw
manifests.

Why a package: a chart install has four concerns that each need their own tests. ``engine`` runs
``helm template`` (a subprocess with a timeout, its own temp dir and no network); ``hooks`` decides
what happens to Helm hooks; ``charts`` finds and pulls chart archives (OCI registry, chart
repository, OCM local blob), verified and cached by digest; ``source`` ties them together into a
``ManifestSource`` with a render cache. What comes out is plain YAML, so render transforms, SSA
apply, prune, readiness, default CR and uninstall are exactly those of raw manifests.
"""
