module github.com/pyspark-gazette/tests/peers/gazette-main

go 1.25

// Gazette's main branch at e54beb5 (2026-07-22, "broker: add opt-in delete-permission probe to
// FragmentStoreHealth"), 24 commits after v0.103.0. The module proxy does not serve this
// pseudo-version, so `make gazette-main` builds Gazette's own tree at this commit, from the
// source tarball the Makefile names (GAZETTE_MAIN_TARBALL, GAZETTE_MAIN_SHA256) or a checkout
// (GAZETTE_MAIN_SRC); this module records the pin.
require go.gazette.dev/core v0.103.1-0.20260722193110-e54beb5c6e64
