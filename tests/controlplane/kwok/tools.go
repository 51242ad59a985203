//go:build tools

// Package tools pins kwok, the simulated kubelet of the living local cluster. It has its own module
// (not ../go.mod) because kwok pins its own k8s.io/* and OpenTelemetry versions: sharing one module
// would move the dependencies kube-apiserver and kube-controller-manager are built with.
package tools

import (
	_ "sigs.k8s.io/kwok/pkg/kwok/cmd"
)
