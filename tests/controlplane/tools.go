//go:build tools

// Package tools pins the Go programs the local control plane runs (etcd, kube-apiserver and, for a
// living cluster, kube-controller-manager and kube-scheduler), so that `go build` of their main
// packages resolves against the versions in go.mod. kwok has its own module in ./kwok.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
