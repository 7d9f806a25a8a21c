# pyspark-gazette developer commands. `make help` lists them.
# Everything installs itself into .venv on first use (a fresh machine needs Python 3.10+, Java 17).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help quickstart wheels test bench-kafka scale scale-plots fuzz-native native-strict test-cluster cluster-python test-unit test-oldest-pyspark test-notebook-delta oldest-pyspark-venv gazette gazette-flow test-gazette-flow gazette-main test-gazette-main dev-cluster azurite emulators lint format protocol protocol-check docs docs-gen docs-serve clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# Two installs into one venv: the quickstart needs only the package and its runtime dependencies
# (RUN_STAMP, ~35 packages); tests, lint and docs need the dev toolchain too (STAMP, ~180 packages).
# pip's own output shows what is being fetched; the lines before it say how long to expect.
RUN_STAMP := $(VENV)/.installed-run

$(VENV)/bin/python:
	@echo "==> creating $(VENV) (a Python virtualenv for this checkout)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# setup.py builds the optional C JSON scanner (pip install -e builds it in place): a changed C
# source re-runs the install, so the scanner tests run against it.
NATIVE_DIR := connector/pyspark_gazette/_native
NATIVE_SRC := $(wildcard $(NATIVE_DIR)/*.c)
NATIVE := setup.py $(NATIVE_SRC) $(wildcard $(NATIVE_DIR)/*.h)

$(RUN_STAMP): pyproject.toml $(NATIVE) | $(VENV)/bin/python
	@echo "==> installing pyspark-gazette and its runtime dependencies into $(VENV) (pyspark, pyarrow, grpcio, ...):"
	@echo "    first run only; about 500 MB to download (pyspark is most of it), typically 1-3 minutes"
	$(PY) -m pip install --progress-bar off -e .
	touch $(RUN_STAMP)

# The development tools install with uv (installed into the venv by pip first): about half pip's
# time for these ~180 packages (docs/benchmarks.md, "The test suite's own time"), bytecode
# compiled as pip does. Should uv fail, pip installs them.
$(STAMP): pyproject.toml $(NATIVE) | $(VENV)/bin/python
	@echo "==> installing pyspark-gazette with its development tools into $(VENV) (tests, lint, docs, notebooks):"
	@echo "    first run only; about 180 packages, typically 2-5 minutes"
	$(PY) -m pip install -q "uv>=0.9"
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode -e ".[dev]" || $(PY) -m pip install -q -e ".[dev]"
	touch $(RUN_STAMP) $(STAMP)

quickstart: $(RUN_STAMP)  ## run the quickstart on an embedded broker (the main job)
	PYSPARK_PYTHON=$(abspath $(PY)) $(VENV)/bin/pyspark-gazette quickstart --data-dir .gazette/quickstart

# Real Gazette (the test peer): gazette and gazctl at the version pinned in the Go peer's go.mod,
# built with cgo (the zstd codec needs gcc) into .bin/, plus our Go peer. `go install pkg@v0.103.0`
# is not used: it asks the module proxy for go.gazette.dev/core's version list, which the proxy
# refuses (403); building inside our module fetches only the pinned version.
GO ?= go
BIN := $(abspath .bin)
PEER := tests/peers/gazette-peer
# etcd: Gazette v0.103.0's etcd client (v3.6) refuses servers older than 3.5 ("etcdclient: old
# cluster version"), and Debian bookworm's etcd-server is 3.4, so etcd 3.6.5 is built from the Go
# module proxy too (tests/peers/etcd: our entry point, etcd's server as a module dependency).
ETCD_PEER := tests/peers/etcd
GO_SOURCES := $(PEER)/go.mod $(PEER)/go.sum $(wildcard $(PEER)/*.go) $(ETCD_PEER)/go.mod $(ETCD_PEER)/go.sum $(ETCD_PEER)/main.go
GAZETTE_STAMP := $(BIN)/.gazette-$(shell cat $(GO_SOURCES) 2>/dev/null | sha1sum | cut -c1-12)

$(GAZETTE_STAMP): $(GO_SOURCES)
	@mkdir -p $(BIN)
	cd $(PEER) && CGO_ENABLED=1 GOBIN=$(BIN) $(GO) install go.gazette.dev/core/cmd/gazette go.gazette.dev/core/cmd/gazctl .
	cd $(ETCD_PEER) && GOBIN=$(BIN) $(GO) install .
	rm -f $(BIN)/.gazette-* && touch $@

gazette: $(GAZETTE_STAMP)  ## build real Gazette (gazette, gazctl v0.103.0), etcd 3.6 and our Go peer into .bin/

# The Gazette that Estuary Flow runs: Flow's go.mod pins go.gazette.dev/core at a commit, not a
# release (tests/peers/gazette-flow/go.mod holds the same pseudo-version). Its gazette and gazctl go
# into .bin/gazette-flow/; the tests run against it with GAZETTE_PEER=flow (etcd from .bin/).
FLOW_PEER := tests/peers/gazette-flow
FLOW_SOURCES := $(FLOW_PEER)/go.mod $(FLOW_PEER)/go.sum $(FLOW_PEER)/tools.go $(FLOW_PEER)/main.go
FLOW_STAMP := $(BIN)/gazette-flow/.stamp-$(shell cat $(FLOW_SOURCES) 2>/dev/null | sha1sum | cut -c1-12)

$(FLOW_STAMP): $(FLOW_SOURCES)
	@mkdir -p $(BIN)/gazette-flow
	cd $(FLOW_PEER) && CGO_ENABLED=1 GOBIN=$(BIN)/gazette-flow $(GO) install go.gazette.dev/core/cmd/gazette go.gazette.dev/core/cmd/gazctl
	rm -f $(BIN)/gazette-flow/.stamp-* && touch $@

gazette-flow: $(FLOW_STAMP)  ## build the Gazette commit Estuary Flow pins (gazette, gazctl) into .bin/gazette-flow/

# Gazette's main branch: tests/peers/gazette-main/go.mod pins a commit of it by pseudo-version; its
# gazette and gazctl go into .bin/gazette-main/ and the tests run against them with
# GAZETTE_PEER=main. The Go module proxy does not serve go.gazette.dev/core at any commit after
# v0.103.0 (403 "not available"), so the build takes Gazette's source at that commit from a tarball,
# GAZETTE_MAIN_TARBALL (gazette-core/ at its top, no .git), checked against GAZETTE_MAIN_SHA256,
# unpacked into .build/gazette-main/ (removed after the build) and built there with Gazette's own
# go.mod (its dependencies come from the module proxy). GAZETTE_MAIN_SRC=DIR builds from a git
# checkout of Gazette at the pinned commit instead. A new pin in go.mod needs a new tarball and sum.
MAIN_PEER := tests/peers/gazette-main
MAIN_COMMIT := $(shell sed -n 's/^require go.gazette.dev\/core v[^ ]*-\([0-9a-f]\{12\}\)$$/\1/p' $(MAIN_PEER)/go.mod)
GAZETTE_MAIN_TARBALL ?= $(CURDIR)/../shared/gazette-main/gazette-core-$(shell printf %.7s "$(MAIN_COMMIT)").tar.gz
GAZETTE_MAIN_SHA256 := 8d81d4c92deb8fe82a391798ade1086fb945c04856a6e9aeed43719530787c1d
GAZETTE_MAIN_SRC ?=
MAIN_BUILD := .build/gazette-main
MAIN_SOURCES := $(MAIN_PEER)/go.mod $(wildcard $(MAIN_PEER)/go.sum) $(MAIN_PEER)/tools.go $(MAIN_PEER)/main.go
MAIN_STAMP := $(BIN)/gazette-main/.stamp-$(shell (cat $(MAIN_SOURCES); echo $(GAZETTE_MAIN_SHA256)) 2>/dev/null | sha1sum | cut -c1-12)

$(MAIN_STAMP): $(MAIN_SOURCES)
	@mkdir -p $(BIN)/gazette-main
ifneq ($(GAZETTE_MAIN_SRC),)
	@head=$$(git -C "$(GAZETTE_MAIN_SRC)" rev-parse HEAD) || exit 1; case "$$head" in $(MAIN_COMMIT)*) ;; \
		*) echo "GAZETTE_MAIN_SRC is at $$head; $(MAIN_PEER)/go.mod pins $(MAIN_COMMIT)" >&2; exit 1 ;; esac
	cd "$(GAZETTE_MAIN_SRC)" && CGO_ENABLED=1 GOBIN=$(BIN)/gazette-main $(GO) install ./cmd/gazette ./cmd/gazctl
else
	@[ -f "$(GAZETTE_MAIN_TARBALL)" ] || { echo "gazette-main: $(GAZETTE_MAIN_TARBALL) not found: Gazette's source at $(MAIN_COMMIT) as a tarball (make gazette-main GAZETTE_MAIN_TARBALL=FILE), or a git checkout of it (GAZETTE_MAIN_SRC=DIR)" >&2; exit 1; }
	@sum=$$(sha256sum < "$(GAZETTE_MAIN_TARBALL)" | cut -c1-64); [ "$$sum" = "$(GAZETTE_MAIN_SHA256)" ] || \
		{ echo "gazette-main: $(GAZETTE_MAIN_TARBALL) has sha256 $$sum, expected $(GAZETTE_MAIN_SHA256) (Gazette's source at $(MAIN_COMMIT)); not building from it" >&2; exit 1; }
	rm -rf $(MAIN_BUILD) && mkdir -p $(MAIN_BUILD)
	tar -xzf "$(GAZETTE_MAIN_TARBALL)" -C $(MAIN_BUILD) --no-same-owner
	cd $(MAIN_BUILD)/gazette-core && CGO_ENABLED=1 GOBIN=$(BIN)/gazette-main $(GO) install -buildvcs=false ./cmd/gazette ./cmd/gazctl
	chmod -R u+w $(MAIN_BUILD) && rm -rf $(MAIN_BUILD) && rmdir --ignore-fail-on-non-empty .build
endif
	rm -f $(BIN)/gazette-main/.stamp-* && touch $@

gazette-main: $(MAIN_STAMP)  ## build the pinned commit of Gazette's main branch (gazette, gazctl) into .bin/gazette-main/

# Both-brokers tests of the client, gazctl, Spark reads, writes and streams, the read-committed
# oracle and Flow collection reads, on the Flow-pinned Gazette ([gazette] ids only; the [embedded] ones ran in `make test`).
FLOW_SUBSET := tests/integration/test_client.py tests/integration/test_client_heads.py tests/gazette \
	tests/spark/test_read.py tests/spark/test_stream_committed.py \
	tests/oracle/test_read_committed_oracle.py tests/oracle/test_flow_collection_oracle.py

# `-m real_gazette` (tests/conftest.py): the [gazette] cases and tests/gazette/ (the [embedded]
# ones ran in `make test`), without the oracle's protobuf-fixed cases.
test-gazette-flow: $(STAMP) $(GAZETTE_STAMP) $(FLOW_STAMP)  ## the both-brokers subset against the Gazette commit Estuary Flow pins
	GAZETTE_PEER=flow PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(FLOW_SUBSET) -m "real_gazette and not protobuf_fixed"

test-gazette-main: $(STAMP) $(GAZETTE_STAMP) $(MAIN_STAMP)  ## the both-brokers subset against the pinned commit of Gazette's main branch
	GAZETTE_PEER=main PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(FLOW_SUBSET) -m "real_gazette and not protobuf_fixed"

dev-cluster: $(STAMP) $(GAZETTE_STAMP)  ## run a real Gazette cluster (etcd + 3 brokers) on loopback until Ctrl-C
	$(PY) tests/realgazette.py

# Without Go, `make test` still runs: the real-Gazette tests skip saying how to get Go.
GAZETTE_IF_GO := $(if $(shell command -v $(GO) 2>/dev/null),$(GAZETTE_STAMP),)

# Object-store emulators for the gs:// and azure:// tests: fake-gcs-server (Go, built from the
# version pinned in tests/peers/fake-gcs-server/go.mod, like `make gazette`) into .bin/, and
# Azurite (npm, the version pinned below) into .tools/azurite/. Tests skip without them.
NPM ?= npm
AZURITE_VERSION := 3.37.0
FAKE_GCS := tests/peers/fake-gcs-server
FAKE_GCS_BIN := $(BIN)/fake-gcs-server
AZURITE_BIN := .tools/azurite/node_modules/.bin/azurite-blob
AZURITE_STAMP := .tools/azurite/.installed-$(AZURITE_VERSION)

$(FAKE_GCS_BIN): $(FAKE_GCS)/go.mod $(FAKE_GCS)/go.sum
	@mkdir -p $(BIN)
	cd $(FAKE_GCS) && GOBIN=$(BIN) $(GO) install github.com/fsouza/fake-gcs-server
	touch $@

$(AZURITE_STAMP):
	@mkdir -p .tools/azurite
	rm -f .tools/azurite/.installed-*
	$(NPM) install --prefix .tools/azurite --no-audit --no-fund --silent azurite@$(AZURITE_VERSION)
	touch $@

azurite: $(AZURITE_STAMP)  ## only Azurite (npm; CI installs it while Go compiles)

emulators: $(FAKE_GCS_BIN) $(AZURITE_STAMP)  ## install the GCS (fake-gcs-server) and Azure (Azurite) emulators the store tests use

EMULATORS_IF_TOOLS := $(if $(shell command -v $(GO) 2>/dev/null),$(FAKE_GCS_BIN),) \
	$(if $(shell command -v $(NPM) 2>/dev/null),$(AZURITE_STAMP),)

# The cluster tier runs in a pytest process of its own: its driver JVM is bound to the tier's test
# network, and pyspark would reuse that JVM for the local sessions of the other tiers.
#
# Everything but the cluster tier runs in TEST_WORKERS processes (pytest-xdist), a test at a
# time (a module sharing a module-scoped fixture, whole; tests/conftest.py): by default one per
# core, at most 4 (each may start a JVM and brokers; CI chooses its own count in .ci/run).
# TEST_WORKERS=0 runs them in this process, one at a time.
# Tests that load the machine on purpose (CPU burners, marked `exclusive`) run alone afterwards, so they
# slow no other test.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); if [ "$$n" -gt 4 ]; then n=4; fi; echo $$n)
# --no-loadscope-reorder: tests start in the order tests/conftest.py sorts them (slow ones and
# whole modules first); by default xdist starts the largest groups first, whatever their length.
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

#
# The cluster tier runs last. Its tests mostly wait on their cluster (workers started, killed and
# restarted), so other suites can run beside it: `make test ALONGSIDE="test-oldest-pyspark
# test-notebook-delta test-gazette-flow"` runs those targets at the same time, each with
# ALONGSIDE_WORKERS pytest-xdist processes (0: in its own process), each target's output shown
# as a block when it ends; any failure fails `make test`.
ALONGSIDE ?=
ALONGSIDE_WORKERS ?= 0

test: $(STAMP) $(GAZETTE_IF_GO) $(EMULATORS_IF_TOOLS)  ## run every test tier (unit, integration, spark, real Gazette, cluster)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest $(XDIST) --ignore=tests/cluster -m "not exclusive"
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest --ignore=tests/cluster -m exclusive
	$(MAKE) --no-print-directory -j$(words test-cluster $(ALONGSIDE)) --output-sync=target test-cluster $(ALONGSIDE) \
		$(if $(ALONGSIDE),TEST_WORKERS=$(ALONGSIDE_WORKERS))

test-cluster: $(STAMP)  ## only the cluster tier (a standalone Spark cluster; needs root for network namespaces)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest tests/cluster

# The executors' virtualenv of the cluster tier (.cluster-python/): the tier makes it when it starts;
# CI makes it ahead, in the background of its set-up.
cluster-python: $(STAMP)  ## only the cluster tier's executor virtualenv
	cd tests && $(abspath $(PY)) -m cluster.standalone

# The oldest PySpark pyproject.toml allows (pyspark>=4.2), in a venv of its own, for a smoke
# subset of the Spark tests (tests/unit/test_packaging.py keeps it equal to the lower bound).
OLDEST_PYSPARK := 4.2.0
OLD_VENV := .venv-oldest
# The Delta Lake release built for it (its PyPI package requires pyspark<=4.2.0; its jar,
# io.delta:delta-spark_4.2_2.13, comes from Maven Central when the notebook starts Spark).
DELTA_SPARK := 4.4.0
OLD_STAMP := $(OLD_VENV)/.installed-$(OLDEST_PYSPARK)-delta$(DELTA_SPARK)
SMOKE := tests/spark/test_read.py tests/spark/test_write.py tests/spark/test_stream_source.py tests/spark/test_user_errors.py
# The smoke subset needs only the runtime and pytest (not the ~180-package dev toolchain); the
# merge notebook on Delta (test-notebook-delta) a Jupyter kernel, the notebook runner and
# delta-spark (34 packages more, 77 in all).
SMOKE_TOOLS := "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.6" "pytest-rerunfailures>=15"
NOTEBOOK_DELTA_TOOLS := "nbclient>=0.10" "nbformat>=5.10" "ipykernel>=6.29" "delta-spark==$(DELTA_SPARK)"

# Installed without the C scanner (PYSPARK_GAZETTE_NATIVE_BUILD=0): CI builds this venv while
# .venv installs, and both editable installs would build the extension into the checkout at once.
$(OLD_STAMP): pyproject.toml
	$(PYTHON) -m venv $(OLD_VENV)
	$(OLD_VENV)/bin/python -m pip install -q --upgrade pip
	PYSPARK_GAZETTE_NATIVE_BUILD=0 $(OLD_VENV)/bin/python -m pip install -q -e . "pyspark==$(OLDEST_PYSPARK)" $(SMOKE_TOOLS) $(NOTEBOOK_DELTA_TOOLS)
	rm -f $(OLD_VENV)/.installed-* && touch $@

oldest-pyspark-venv: $(OLD_STAMP)  ## only the venv of test-oldest-pyspark (CI builds it while Go compiles)

test-oldest-pyspark: $(OLD_STAMP)  ## a smoke subset of the Spark tests on the oldest supported pyspark
	PYSPARK_PYTHON=$(abspath $(OLD_VENV)/bin/python) $(OLD_VENV)/bin/python -m pytest -q -p no:cacheprovider $(XDIST) $(SMOKE) -m "not real_gazette and not slow"

# Spark's Kafka source side by side (docs/benchmarks.md): on the oldest PySpark, the one whose
# spark-sql-kafka jar Maven Central serves; .venv's install builds the C scanner into the
# checkout, which that venv's editable install imports; `gazette` for BENCH_ARGS="--broker gazette".
bench-kafka: $(STAMP) $(OLD_STAMP) gazette  ## bench/bench_kafka.py with BENCH_ARGS (e.g. "--events 200000 --broker gazette")
	PYSPARK_PYTHON=$(abspath $(OLD_VENV)/bin/python) $(OLD_VENV)/bin/python bench/bench_kafka.py $(BENCH_ARGS)

# The scale curves of docs/scale.md with the arguments of its figures, one bench after the other
# on a quiet machine: about an hour and a half (the duration curve alone is an hour); the
# executors curve needs root (network namespaces). Each bench writes docs/scale/<curve>.json and .png.
SCALE_PY = PYSPARK_PYTHON=$(abspath $(VENV)/bin/python) $(VENV)/bin/python
scale: $(STAMP) gazette  ## measure every curve of docs/scale.md (about 90 minutes; see docs/scale.md)
	$(SCALE_PY) bench/scale_bytes.py --sizes 100M,316M,1G,3.16G,10G --journals 1,16 --rounds 1 --baseline-max 1G --gazette-sizes 1G,max
	$(SCALE_PY) bench/scale_fragments.py --rounds 2
	$(SCALE_PY) bench/scale_journals.py --journals 100,300,1000,3000,5000,10000 --rounds 2 --triggers 3
	$(SCALE_PY) bench/scale_executors.py --mib 256 --rounds 2
	$(SCALE_PY) bench/scale_duration.py --minutes 60

scale-plots: $(STAMP)  ## draw docs/scale/*.png again from docs/scale/*.json
	$(VENV)/bin/python bench/scale_plots.py

test-notebook-delta: $(OLD_STAMP)  ## notebook 05 merging into a Delta table (oldest pyspark + delta-spark)
	NOTEBOOK_TABLE_FORMAT=delta PYSPARK_PYTHON=$(abspath $(OLD_VENV)/bin/python) $(OLD_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/notebooks/test_notebooks.py -k "top_to_bottom and 05"

test-unit: $(STAMP)  ## only the unit tests
	$(PY) -m pytest tests/unit

# The C extension under AddressSanitizer and UBSan: built into a temporary copy of the package
# (which PYTHONPATH puts before the checkout's), then the differential fuzz targets of
# tests/fuzz/test_fuzz_native.py run FUZZ_NATIVE_EXAMPLES examples each, for at most
# FUZZ_NATIVE_SECONDS. Python itself is not instrumented, so libasan is preloaded (it must come
# first in the process) and leak checks are off (the interpreter's own allocations would report).
FUZZ_NATIVE_EXAMPLES ?= 3000
FUZZ_NATIVE_SECONDS ?= 600
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

fuzz-native: $(STAMP)  ## fuzz the C scanner and joiner against Python under ASan+UBSan (a few minutes)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp -r connector/pyspark_gazette "$$tmp/"; rm -f "$$tmp"/pyspark_gazette/_jsonscan*.so; \
	inc=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	suffix=$$($(PY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))'); \
	gcc -shared -fPIC -O1 -g $(SANITIZE) -I"$$inc" $(NATIVE_SRC) -o "$$tmp/pyspark_gazette/_jsonscan$$suffix"; \
	export LD_PRELOAD="$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so)"; \
	export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1; \
	PYTHONPATH="$$tmp" $(PY) -c 'import sys, pyspark_gazette._jsonscan as m; print("fuzzing", m.__file__); sys.exit(not m.__file__.startswith(sys.argv[1]))' "$$tmp"; \
	PYTHONPATH="$$tmp" GAZETTE_FUZZ_NATIVE_EXAMPLES=$(FUZZ_NATIVE_EXAMPLES) GAZETTE_FUZZ_REPORT="$$tmp/report.json" \
		timeout $(FUZZ_NATIVE_SECONDS) $(PY) -m pytest -q -p no:randomly -p no:cacheprovider tests/fuzz/test_fuzz_native.py

# The C extension's sources compiled with warnings as errors (the normal install adds no warning
# flags), three times: against the full C API (a build on CPython 3.10), as setup.py builds them
# on 3.11+ (the limited API: abi3), and with GZ_NO_INT128 (the path of compilers without
# unsigned __int128). The second build goes into a temporary copy of the package, and the unit
# tests of the scanner and joiner and a short differential fuzz run against it. Nothing is installed.
NATIVE_WARN := -std=c99 -Wall -Wextra -Wconversion -Wshadow -Werror
NATIVE_TESTS := tests/unit/test_native_kinds.py tests/unit/test_spark_encode.py tests/unit/test_spark_typed.py tests/unit/test_spark_typed_records.py

native-strict: $(STAMP)  ## compile the C extension with -Werror (and its no-__int128 path), and test that build
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp -r connector/pyspark_gazette "$$tmp/"; rm -f "$$tmp"/pyspark_gazette/_jsonscan*.so; \
	inc=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	suffix=$$($(PY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))'); \
	cc=$${CC:-cc}; \
	$$cc -shared -fPIC -O2 $(NATIVE_WARN) -I"$$inc" $(NATIVE_SRC) -o "$$tmp/full-api.so"; \
	$$cc -shared -fPIC -O2 $(NATIVE_WARN) -DPy_LIMITED_API=0x030B0000 -I"$$inc" $(NATIVE_SRC) -o "$$tmp/with-int128.so"; \
	$$cc -shared -fPIC -O2 $(NATIVE_WARN) -DPy_LIMITED_API=0x030B0000 -DGZ_NO_INT128 -I"$$inc" $(NATIVE_SRC) -o "$$tmp/pyspark_gazette/_jsonscan$$suffix"; \
	PYTHONPATH="$$tmp" $(PY) -c 'import sys, pyspark_gazette._jsonscan as m; print("testing", m.__file__); sys.exit(not m.__file__.startswith(sys.argv[1]))' "$$tmp"; \
	PYTHONPATH="$$tmp" $(PY) -m pytest -q -p no:randomly -p no:cacheprovider $(NATIVE_TESTS); \
	PYTHONPATH="$$tmp" GAZETTE_FUZZ_NATIVE_EXAMPLES=200 GAZETTE_FUZZ_REPORT="$$tmp/report.json" $(PY) -m pytest -q -p no:randomly -p no:cacheprovider tests/fuzz/test_fuzz_native.py

# The wheels users install (docs/getting-started.md, "Installing"), into dist/: the pure one
# (PYSPARK_GAZETTE_NATIVE_BUILD=0: py3-none-any, every platform and Python, the Python engines)
# and the native one with the C scanner (cp311-abi3-<platform>: CPython 3.11+ on this platform;
# built by a 3.10 $(PYTHON), for that Python only). Each is built from a clean build/ directory.
WHEEL_VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)

wheels: | $(VENV)/bin/python  ## build the pure wheel and the native (C scanner) wheel into dist/
	@mkdir -p dist
	rm -rf build dist/pyspark_gazette-$(WHEEL_VERSION)-*.whl
	PYSPARK_GAZETTE_NATIVE_BUILD=0 $(PY) -m pip wheel --no-deps --progress-bar off -q -w dist .
	rm -rf build
	$(PY) -m pip wheel --no-deps --progress-bar off -q -w dist .
	rm -rf build
	@ls -1 dist/pyspark_gazette-$(WHEEL_VERSION)-*.whl

lint: $(STAMP)  ## ruff lint + format check, mypy on the package
	$(VENV)/bin/ruff check connector tests tools bench notebooks
	$(VENV)/bin/ruff format --check connector tests tools bench notebooks
	$(VENV)/bin/mypy connector/pyspark_gazette

format: $(STAMP)  ## apply ruff fixes and formatting
	$(VENV)/bin/ruff check --fix connector tests tools bench notebooks
	$(VENV)/bin/ruff format connector tests tools bench notebooks

protocol: $(STAMP)  ## regenerate the protocol stubs from protocol.proto
	$(PY) tools/gen_protocol.py

protocol-check: $(STAMP)  ## fail if the stubs drift from the .proto or from Gazette's wire facts
	$(PY) tools/gen_protocol.py --check
	$(PY) tools/check_protocol_facts.py

docs-gen: $(STAMP)  ## regenerate docs/options.md and the CLI reference from the code
	$(PY) tools/gen_docs.py

docs: $(STAMP)  ## build the MkDocs site into site/ (strict: warnings fail); checks generated pages
	$(PY) tools/gen_docs.py --check
	$(PY) -m mkdocs build --strict -d site

docs-serve: $(STAMP)  ## serve the docs with live reload on http://127.0.0.1:8000
	$(PY) -m mkdocs serve

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) $(OLD_VENV) .pytest_cache .ruff_cache .mypy_cache .gazette .bin .build .tools .ci-cache .ci-logs
