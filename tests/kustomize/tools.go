//go:build tools

// Package tools pins kustomize, which builds manifests/kcp in the test suite exactly as a cluster
// operator would (`kustomize build`). Its own module: kustomize's dependencies must not move those of
// the control plane's binaries.
package tools

import (
	_ "sigs.k8s.io/kustomize/kustomize/v5/commands"
)
