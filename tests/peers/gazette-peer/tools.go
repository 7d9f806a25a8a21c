//go:build tools

// Package main's tools.go pins Gazette's broker and CLI to the version in go.mod, so that
// `make gazette` builds exactly go.gazette.dev/core v0.103.0's cmd/gazette and cmd/gazctl from
// the module proxy (`go install pkg@version` asks the proxy for the module's version list,
// which it refuses for go.gazette.dev/core; building inside this module does not).
package main

import (
	_ "go.gazette.dev/core/cmd/gazctl"
	_ "go.gazette.dev/core/cmd/gazette"
)
