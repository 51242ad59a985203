//go:build tools

// Package tools pins the Go programs the local control plane runs (etcd and kube-apiserver), so that
// `go build` of their main packages resolves against the versions in go.mod.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
)
