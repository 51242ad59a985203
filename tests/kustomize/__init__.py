"""kustomize, built from its Go module, for the suite's ``kustomize build manifests/kcp`` check."""
