//go:build tools

// Package main's tools.go pins Gazette's broker and CLI to a commit of Gazette's main branch (a
// pseudo-version of go.gazette.dev/core after v0.103.0): a third real-Gazette peer, ahead of the
// newest release (docs/protocol.md). `make gazette-main` builds cmd/gazette and cmd/gazctl of
// that commit from Gazette's own source tree (see go.mod).
package main

import (
	_ "go.gazette.dev/core/cmd/gazctl"
	_ "go.gazette.dev/core/cmd/gazette"
)
