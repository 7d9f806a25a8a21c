module github.com/pyspark-gazette/tests/peers/gazette-main

go 1.25

// Gazette's main branch at e54beb5 (2026-07-22, "broker: add opt-in delete-permission probe to
// FragmentStoreHealth"), 24 commits after v0.103.0. `make gazette-main` fills in the indirect
// requirements and go.sum when the module proxy serves this pseudo-version (-mod=mod); until
// then it builds from a Gazette checkout at this commit (GAZETTE_MAIN_SRC, see the Makefile).
require go.gazette.dev/core v0.103.1-0.20260722193110-e54beb5c6e64
