//go:build tools

// Package tools pins the GCS emulator the store tests use (fsouza/fake-gcs-server) to the version
// in go.mod, so that `make emulators` builds exactly that version: `go install pkg@version` asks
// the module proxy for version lists, which this project's proxy may refuse; building inside
// this module fetches only the pinned version.
package tools

import (
	_ "github.com/fsouza/fake-gcs-server"
)
