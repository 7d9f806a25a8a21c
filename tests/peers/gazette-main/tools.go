//go:build tools

// Package main's tools.go pins Gazette's broker and CLI to a commit of Gazette's main branch (a
// pseudo-version of go.gazette.dev/core after v0.103.0), so that `make gazette-main` builds
// exactly that cmd/gazette and cmd/gazctl: a third real-Gazette peer, ahead of the newest release
// (docs/protocol.md).
package main

import (
	_ "go.gazette.dev/core/cmd/gazctl"
	_ "go.gazette.dev/core/cmd/gazette"
)
