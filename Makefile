# jaxport — every entry point a user or CI needs. On a fresh clone: `make demo`, `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# perf_analyzer's venv (make test-perf-analyzer, make test-all)
PERF_VENV := build/perf

# A Python >= 3.12 (JAX 0.12 needs it): $(PYTHON) if given, else the first suitable one found
# on PATH or under pyenv.
define FIND_PYTHON
for c in $${PYTHON:-} python3.13 python3.12 python3 \
         $$HOME/.pyenv/versions/3.13*/bin/python3 $$HOME/.pyenv/versions/3.12*/bin/python3 \
         /root/.pyenv/versions/3.13*/bin/python3 /root/.pyenv/versions/3.12*/bin/python3; do \
  p=$$(command -v "$$c" 2>/dev/null) || continue; \
  "$$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null && { echo "$$p"; exit 0; }; \
done; exit 1
endef
export FIND_PYTHON

.PHONY: help setup demo test test-all test-python lint generate check-generate conformance bench soak clean

help:
	@echo "make demo   - set up .venv, export the bundled example model, verify it, list the artifact"
	@echo "make test   - set up .venv and run the fast tier: lint, drift, pytest (not slow), conformance on the shipped configuration"
	@echo "make test-all - everything: slow tests, the full conformance matrix, Ray/KServe, perf_analyzer (CI)"
	@echo "make setup  - only create .venv, build the front and install the pinned CPU PJRT plugin (PYTHON=/path/to/python3.12+ to choose the interpreter)"
	@echo "make generate / check-generate - regenerate code from proto/ / fail if it drifted"
	@echo "make bench  - benchmarks (not part of make test);  make soak - long load test"
	@echo "make fuzz   - 10,000-case hostile-input campaign against a live bridge (FUZZ_ARGS=--seed S)"
	@echo "make front  - build the native Go front (bridge/front, cgo: its native engine) into .venv/bin/jaxport-front"
	@echo "make client-wheel - the jaxport-client wheel and sdist into dist/client/"
	@echo "make wheel  - the platform wheel of jaxport carrying the native front built with cgo by zig (dist/jaxport/; pip install needs no Go, gcc or cc)"
	@echo "make pjrt-plugin - the pinned CPU PJRT plugin into build/pjrt/ (jaxport pjrt install cpu --dir build/pjrt)"
	@echo "make image / image-native - the container images (podman; IMAGE_ARGS='--build-arg BASE=...')"
	@echo "make conformance-peers - the conformance suite against Triton, KServe and MLServer (report in docs/)"
	@echo "make conformance-dist - the jaxport-conformance wheel (the suite, no JAX) into dist/conformance/"

# setup also builds the native front (jaxport serve's default, docs/front.md) and
# jaxport-native-goldens (every golden case through the native engine: `jaxport verify`'s
# pjrt-c-api check) next to the venv's python, rebuilt when their Go sources or the generated
# stubs change, and installs the pinned CPU PJRT plugin (make pjrt-plugin, below) so the front's
# native engine (docs/native-engine.md) has a plugin on a fresh clone.
FRONT := $(VENV)/bin/jaxport-front
NATIVE_GOLDENS := $(VENV)/bin/jaxport-native-goldens
FRONT_SRC := $(wildcard bridge/front/*/*.go bridge/front/*/*/*.go clients/go/gen/inference/*.go clients/go/gen/jaxport/v1/*.go) bridge/front/go.mod bridge/front/go.sum

setup: $(STAMP) $(FRONT) $(NATIVE_GOLDENS)

# Both binaries are built WITH cgo: they link the native engine (bridge/front/engine: the PJRT C
# API through gopjrt, whose cgo part compiles against the pjrt_c_api.h the gopjrt module ships;
# the plugin itself is loaded with dlopen at run time, so building needs no plugin). Without a C
# compiler (`go env CC` not found) they are built CGO_ENABLED=0 with one note: engine/nocgo.go
# then refuses every model, and the front serves them all on the Python workers, as it does on
# a machine without the plugin. The platform wheel's front is built with cgo too, by zig for an
# old glibc (bridge/front/build_wheel.py).
# GO_CGO sets the shell's $cgo to 1, or 0 when `go env CC` is not found; $(call GO_BUILD,OUTPUT,PACKAGE)
GO_CGO = cc=$$(go env CC); cgo=1; command -v "$${cc%% *}" >/dev/null || cgo=0
define GO_BUILD
$(GO_CGO); test $$cgo = 1 || echo "note: no C compiler ($$cc): $(notdir $(1)) built with CGO_ENABLED=0, without the native engine (every model is served by the Python workers)" >&2; \
cd bridge/front && CGO_ENABLED=$$cgo go build -o ../../$(1) $(2)
endef

GO_MISSING := echo "error: make setup builds the native front (jaxport serve's default) and needs Go >= 1.26 (go on PATH); without Go, install jaxport's platform wheel, which carries the front (README, Install)" >&2; exit 1

$(FRONT): $(FRONT_SRC) | $(STAMP)
	@command -v go >/dev/null || { $(GO_MISSING); }
	@$(call GO_BUILD,$@,./cmd/jaxport-front)

$(NATIVE_GOLDENS): $(FRONT_SRC) | $(STAMP)
	@command -v go >/dev/null || { $(GO_MISSING); }
	@$(call GO_BUILD,$@,./cmd/jaxport-native-goldens)

$(STAMP): pyproject.toml clients/python/pyproject.toml
	@py=$$(bash -c "$$FIND_PYTHON") || { \
	  echo "error: jaxport needs Python >= 3.12 (JAX 0.12 requires it) and none was found." >&2; \
	  echo "       Install one (e.g. 'pyenv install 3.12') and re-run, or pass PYTHON=/path/to/python3.12." >&2; \
	  exit 1; }; \
	echo "using $$py ($$($$py --version))"; \
	"$$py" -m venv $(VENV) && \
	$(VENV)/bin/pip install -q --upgrade pip setuptools wheel && \
	$(VENV)/bin/pip install -q -e clients/python -e '.[dev,ray]'
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/python -m jaxport.exporter.demo

# The two tiers (tests/tiers.py says what each phase runs and prints how long each took;
# tests/README.md the rules). make test: lint, generated-code drift, the builds the tests use
# (once, handed over by environment variable: tests/support/binaries.py), go vet + the Go unit
# tests, every pytest test not marked slow, conformance (every runner on the shipped
# configuration, one on the others). make test-all: every test, the full conformance matrix,
# the Ray/KServe suite and perf_analyzer. Any other pytest run goes through
# `tests/tiers.py pytest ARGS` (the same builds and variables first): make test-python.
test: setup
	$(PY) tests/tiers.py fast

test-all: setup $(PERF_VENV)/.installed
	$(PY) tests/tiers.py all

test-python: setup
	$(PY) tests/tiers.py pytest -m 'not slow and not soak'

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/buf lint proto
	$(VENV)/bin/buf breaking proto --against proto/baseline.binpb

generate: setup
	$(PY) proto/generate.py

check-generate: setup
	$(PY) proto/generate.py --check

# The jaxport-client wheel and sdist (PEP 517 through setuptools' backend in .venv, no network)
# into $(CLIENT_DIST), built from a copy of clients/python so the tree stays clean;
# tests/client/test_client_install.py installs the wheel into a fresh venv.
CLIENT_DIST ?= dist/client
.PHONY: client-wheel
client-wheel: setup
	@rm -rf $(CLIENT_DIST) && mkdir -p $(CLIENT_DIST) && tmp=$$(mktemp -d) && \
	cp -r clients/python $$tmp/src && rm -rf $$tmp/src/*.egg-info $$tmp/src/build && \
	(cd $$tmp/src && $(abspath $(PY)) -c "$$CLIENT_BUILD" $(abspath $(CLIENT_DIST))) >$$tmp/log 2>&1 && \
	ls $(CLIENT_DIST)/jaxport_client-*.whl $(CLIENT_DIST)/jaxport_client-*.tar.gz \
	  || { cat $$tmp/log; rm -rf $$tmp; exit 1; }; rm -rf $$tmp
CLIENT_BUILD := import sys; out = sys.argv[1]; from setuptools import build_meta as b; b.build_sdist(out); b.build_wheel(out)
export CLIENT_BUILD

# The platform wheel of jaxport into $(JAXPORT_DIST), with the client wheel into $(CLIENT_DIST)
# (jaxport depends on jaxport-client; `pip install` both). It carries the native front as
# jaxport/bridge/bin/jaxport-front, built with cgo (its native engine) by zig for glibc 2.17
# (the pinned ziglang in build/zig, made on first use) with -trimpath, and tagged
# py3-none-manylinux_2_27_x86_64: the higher of the front's glibc floor and the pinned CPU
# plugin's, which `jaxport pjrt install cpu` fetches (bridge/pjrt.py). Building needs Go; the
# installed wheel needs no Go, gcc or cc. bridge/front/build_wheel.py builds from a copy of the
# tree; tests/front/test_platform_wheel.py installs both wheels into a fresh venv with none of
# go, gcc, cc on PATH, installs the plugin and serves natively.
JAXPORT_DIST ?= dist/jaxport
.PHONY: wheel
wheel: client-wheel
	@rm -rf $(JAXPORT_DIST) && $(PY) bridge/front/build_wheel.py $(JAXPORT_DIST)

# The jaxport-conformance wheel and sdist (issue 29, docs/conformance-suite.md) into
# $(CONFORMANCE_DIST): the conformance runner (tests/conformance/jaxport_conformance), the cases,
# their data, the feature table, the model kit and the generated gRPC stubs; needs grpcio,
# protobuf and numpy only (no JAX, no jaxport). tests/conformance/test_conformance_dist.py
# installs it into a fresh venv and runs it against a live bridge. Needs only the venv (not
# the front: nothing Go goes into the wheel).
CONFORMANCE_DIST ?= dist/conformance
.PHONY: conformance-dist
conformance-dist: | $(STAMP)
	$(PY) tests/conformance/build_dist.py $(CONFORMANCE_DIST)

# Exports the suite models, starts a real bridge, runs the Python, Go (plus go vet/go test) and
# Java (plus JUnit via mvn test) runners over tests/conformance/cases, stops the bridge by PID.
# Fails, naming the tool, when Go or Java/Maven is missing.
conformance: setup
	$(PY) tests/conformance/run.py --tier all

# One run (tests/bench/run.py, ~20 min on 2 cores): the one server (native engine, Python
# workers, batching) beside the grpc-go echo floor and a real Triton 2.51 under ghz, the 1 GiB
# load, issue 33's footprint, 16 MiB, the exporter, the Ray scale-out; every target met or
# missed. Writes bench-results/<UTC timestamp>.{json,md,png} and latest.*; BENCH_ARGS=--quick
# (a smoke run) or --only SECTION,...
bench: setup
	$(PY) -m tests.bench.run $(BENCH_ARGS)

soak: setup
	$(PY) tests/tiers.py pytest -s -m soak -o addopts='' --timeout=900

# Hostile-input fuzz campaign against a live bridge (docs/security.md): 10,000 cases across every
# RPC, streams, shared memory and repository control from 4 threads, then SIGTERM. Not part of
# `make test` (its 400-case smoke is: tests/reliability/test_fuzz_campaign.py).
# FUZZ_ARGS: --cases N --threads T --seed S (replay) --rss-bound-mib M.
.PHONY: fuzz
fuzz: setup
	$(PY) tests/reliability/fuzz_campaign.py $(FUZZ_ARGS)

clean:
	rm -rf $(VENV) demo-out

# The server, `jaxport serve` (issue 33, docs/front.md): one Go process answering every request
# of every model, executing it through its native engine (issue 26, cgo: see GO_BUILD above; no
# plugin is needed to build) or, for a model the engine cannot run, on execution workers it
# starts only then (`python -m jaxport.bridge.worker`, the venv's python beside the binary).
# Built next to the venv's python with jaxport-native-goldens beside it.
.PHONY: front
front:
	@command -v go >/dev/null || { echo "error: make front needs Go >= 1.26 (go on PATH)" >&2; exit 1; }
	mkdir -p $(VENV)/bin
	@$(GO_CGO); cd bridge/front && CGO_ENABLED=$$cgo go vet ./...
	@$(call GO_BUILD,$(FRONT),./cmd/jaxport-front)
	@$(call GO_BUILD,$(NATIVE_GOLDENS),./cmd/jaxport-native-goldens)

# The conformance suite against other OIP servers (issues 19, 39; not part of `make test`):
# Triton Inference Server 2.51 on CPU (the nvidia-pytriton==0.7.0 wheel, --no-deps, in
# build/peers/triton: tests/conformance/peers/triton_server.py), KServe's ModelServer and
# MLServer, each in its own venv under build/peers/ (pinned), serving the suite models from the
# model kit (tests/conformance/kit: numpy reference models, the Triton python-backend repository
# and the kit's adapters, no jaxport in those venvs); jaxport's server too. The runner is the
# jaxport-conformance wheel (make conformance-dist) installed in a venv of its own
# (build/peers/runner: its stubs need protobuf >= 7.35, the peers pin < 7). Writes
# docs/conformance-report.md. Python 3.12 (MLServer 1.7.1 does not install on 3.13;
# PEER_PYTHON=... to choose).
PEERS := build/peers
PEER_PYTHON ?= $(shell for c in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3 /root/.pyenv/versions/3.12*/bin/python3; do p=$$(command -v $$c 2>/dev/null) && $$p -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' 2>/dev/null && { echo $$p; break; }; done)
PEER_SPEC_kserve := kserve==0.21.*
PEER_SPEC_mlserver := mlserver==1.7.1

$(PEERS)/%/.installed:
	@test -n "$(PEER_PYTHON)" || { echo "error: make conformance-peers needs Python 3.12 (PEER_PYTHON=/path/to/python3.12)" >&2; exit 1; }
	rm -rf $(PEERS)/$*
	$(PEER_PYTHON) -m venv $(PEERS)/$*
	$(PEERS)/$*/bin/pip install -q --upgrade pip
	$(PEERS)/$*/bin/pip install -q '$(PEER_SPEC_$*)'
	touch $@

# Triton: a venv of this tree's Python (the wheel bundles a python-backend stub per version),
# the wheel without its Python API's dependencies, numpy for the kit's model.py.
$(PEERS)/triton/.installed: | $(STAMP)
	$(PY) tests/conformance/peers/triton_server.py install $(PEERS)/triton

.PHONY: peers-runner
peers-runner: conformance-dist
	rm -rf $(PEERS)/runner
	$(PY) -m venv $(PEERS)/runner
	$(PEERS)/runner/bin/pip install -q --disable-pip-version-check $(CONFORMANCE_DIST)/jaxport_conformance-*-py3-none-any.whl

.PHONY: conformance-peers
conformance-peers: setup peers-runner $(PEERS)/triton/.installed $(PEERS)/kserve/.installed $(PEERS)/mlserver/.installed
	$(PY) tests/conformance/peers/run_peers.py --work $(PEERS)

# The bridge on Ray Serve across a two-node Ray cluster started on this machine (issue 17,
# docs/scale-out.md): conformance runner, tritonclient goldens and both nodes serving, through
# Serve's gRPC proxy. Not part of `make test`: ~1-2 min and ~2 GB on 2 cores, ~10 Ray processes.
.PHONY: test-scale
test-scale: setup
	$(PY) tests/tiers.py pytest -o addopts='' --timeout=900 tests/scale/scale_ray.py tests/scale/kserve_crds.py

# perf_analyzer (from the tritonclient 2.50.0 wheel) against a real bridge (issue 14,
# tests/bridge/perf_analyzer_run.py): BOOL random data, -b 2/-b 3 without --batching, --streaming,
# --shared-memory system. Needs the apt package libb64-0d. Not part of `make test` (~1 min).
# --no-deps: the binary needs none of tritonclient's Python dependencies (with them pip builds
# numpy<2 from source on Python 3.13).
$(PERF_VENV)/.installed: | $(STAMP)
	@ldconfig -p | grep -q 'libb64\.so\.0d' || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libb64-0d; \
	  else echo "error: perf_analyzer needs the apt package libb64-0d (apt-get install libb64-0d)" >&2; exit 1; fi; }
	$(PY) -m venv $(PERF_VENV)
	$(PERF_VENV)/bin/pip install -q --no-deps tritonclient==2.50.0 nvidia-cuda-runtime-cu12
	touch $@

.PHONY: test-perf-analyzer
test-perf-analyzer: setup $(PERF_VENV)/.installed
	$(PY) tests/tiers.py pytest -o addopts='' tests/bridge/perf_analyzer_run.py

# ---- C++: the library and the PJRT CPU plugin (issues 26, 40; docs/cpp.md) ------------------
# make pjrt-plugin: XLA's CPU PJRT plugin pjrt_c_api_cpu_plugin.so (XLA of jaxlib 0.11.2, PJRT C
#   API 0.115, StableHLO window 0.9.0..1.20.0) into build/pjrt/ by `jaxport pjrt install cpu
#   --dir build/pjrt` (bridge/pjrt.py: the PyPI wheel lammps-jax-pjrt-cpu, pinned by version
#   and sha256 there, `pip download --no-deps --require-hashes` + unzip of the .so, itself
#   checked against its sha256; never installed: the wheel declares jax<=0.11.2). Re-run when
#   bridge/pjrt.py changes; a no-op while build/pjrt holds what the pins say.
# make cpp: the C++ library clients/cpp (CMake project: libjaxport, jaxport-pjrt-run, its
#   GoogleTest tests) configured and built in build/cpp (Release; Ninja when installed). CMake
#   finds the dependencies (nlohmann_json >= 3.11, OpenSSL >= 3.0, GTest >= 1.12: the apt
#   packages nlohmann-json3-dev, libssl-dev, libgtest-dev, installed when missing and root) and
#   fetches pjrt_c_api.h from the Go module github.com/gomlx/gopjrt (pinned: clients/cpp/cmake/
#   PjrtHeader.cmake; the header is never copied into the tree).
# make cpp-test: ctest in build/cpp (the unit tests; the golden tests need the artifacts
#   `pytest tests/cpp` exports). make cpp-asan: the same build with AddressSanitizer and
#   UndefinedBehaviorSanitizer in build/cpp-asan (-O1 -g; tests/cpp/test_sanitizers.py runs its ctest).
# The plugin target is idempotent (a stamp file says what was fetched and verified); `cmake
# --build` rebuilds only what changed. `make -j2 pjrt-plugin cpp` downloads and compiles in
# parallel.
PJRT_DIR := build/pjrt
PJRT_PLUGIN := $(PJRT_DIR)/pjrt_c_api_cpu_plugin.so
CPP_DIR := build/cpp
CPP_ASAN_DIR := build/cpp-asan
CPP_DEPS_STAMP := build/.cpp-deps
CPP_APT := cmake g++ nlohmann-json3-dev libssl-dev libgtest-dev
CPP_GENERATOR := $(if $(shell command -v ninja 2>/dev/null),-G Ninja,)
, := ,

.PHONY: pjrt-plugin cpp cpp-test cpp-asan
pjrt-plugin: $(PJRT_PLUGIN)

# Staged next to build/pjrt and renamed into place: the .so exists only once its wheel and
# itself matched the pins.
$(PJRT_PLUGIN): bridge/pjrt.py | $(STAMP)
	@$(PY) bridge/pjrt.py install cpu --dir $(PJRT_DIR) && touch $@

# The build's apt packages, installed once when missing (and root), else named.
$(CPP_DEPS_STAMP):
	@missing=$$(for p in $(CPP_APT); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "error: make cpp needs the apt packages: $$missing" >&2; exit 1; fi; fi
	@mkdir -p $(@D) && touch $@

# $(call CPP_BUILD,DIR,EXTRA CMAKE ARGS): configure once (CMake re-runs itself when its files
# change), then build.
define CPP_BUILD
@test -f $(1)/CMakeCache.txt || cmake -S clients/cpp -B $(1) $(CPP_GENERATOR) $(2) >$(1).configure.log 2>&1 || { cat $(1).configure.log; exit 1; }
@cmake --build $(1) --parallel 2 >$(1).build.log 2>&1 || { tail -80 $(1).build.log; exit 1; }
endef

cpp: $(CPP_DEPS_STAMP)
	$(call CPP_BUILD,$(CPP_DIR),-DCMAKE_BUILD_TYPE=Release)

cpp-test: cpp
	ctest --test-dir $(CPP_DIR) -L unit --output-on-failure

cpp-asan: $(CPP_DEPS_STAMP)
	$(call CPP_BUILD,$(CPP_ASAN_DIR),-DCMAKE_BUILD_TYPE=RelWithDebInfo '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g' -DJAXPORT_SANITIZE=address$(,)undefined)

# make setup installs the CPU plugin where its pinned wheel exists (Linux x86_64); elsewhere it
# says once that the native engine has no plugin there (every model served by the workers; a
# plugin can still be named with jaxport serve --pjrt-plugin PATH).
ifeq ($(shell uname -s)-$(shell uname -m),Linux-x86_64)
setup: $(PJRT_PLUGIN)
else
setup: pjrt-plugin-unavailable
.PHONY: pjrt-plugin-unavailable
pjrt-plugin-unavailable:
	@echo "note: no pinned CPU PJRT plugin for $$(uname -s) $$(uname -m) (the pinned wheel is Linux x86_64, bridge/pjrt.py): jaxport serve runs every model on the Python workers unless --pjrt-plugin names one"
endif

# ---- Container images (bridge/deploy/kserve/Containerfile*, docs/scale-out.md) ---------------
# make image: jaxport serve in a container (the cgo front built by zig as `make wheel` builds
#   it, the pinned CPU plugin, the Python workers; non-root; what the KServe runtimes name).
# make image-native: the Python-free image (the front and the plugin on a C/C++ runtime base)
#   for repositories the native engine serves whole.
# IMAGE_ARGS passes build arguments, e.g. IMAGE_ARGS='--build-arg BASE=...'; PODMAN the engine
# (docker works too). tests/deploy/test_images.py builds and runs them with podman from bases
# made of Debian packages (no registry needed; the Python-free one once the front serves
# without Python, issue 33); make image-tools installs what it needs.
IMAGE ?= jaxport-serve:0.1.0
IMAGE_NATIVE ?= jaxport-front:0.1.0
IMAGE_ARGS ?=
PODMAN ?= podman
IMAGE_APT := podman runc mmdebstrap uidmap
.PHONY: image image-native image-tools
image:
	$(PODMAN) build -f bridge/deploy/kserve/Containerfile -t $(IMAGE) $(IMAGE_ARGS) .

image-native:
	$(PODMAN) build -f bridge/deploy/kserve/Containerfile.native -t $(IMAGE_NATIVE) $(IMAGE_ARGS) .

image-tools:
	@missing=$$(for p in $(IMAGE_APT); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "error: the image tests need the apt packages: $$missing" >&2; exit 1; fi; fi
