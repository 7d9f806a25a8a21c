//go:build tools

// Package main's tools.go pins Gazette's broker and CLI to the commit that Estuary Flow's go.mod
// pins (a pseudo-version of go.gazette.dev/core between v0.100.0 and v0.103.0), so that
// `make gazette-flow` builds exactly that cmd/gazette and cmd/gazctl from the module proxy: the
// Gazette that Flow runs, as a second real-Gazette peer (docs/protocol.md).
package main

import (
	_ "go.gazette.dev/core/cmd/gazctl"
	_ "go.gazette.dev/core/cmd/gazette"
)
