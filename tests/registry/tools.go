//go:build tools

// Package tools pins the OCI registry the test suite runs (CNCF distribution's `registry` binary), so
// that `go build` of its main package resolves against the version in go.mod.
package tools

import (
	_ "github.com/distribution/distribution/v3/registry"
)
