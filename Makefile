# bonsai: build, run, test and measure.
#
# `make run` and `make test` each set up what they need on a fresh Debian
# machine (Debian packages through scripts/install-deps.sh, Go modules
# through the module proxy), so nothing has to be installed by hand first.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

# The Go toolchain lives here on the project's machines; a PATH without it
# (CI's environment, sudo) should still find it.
export PATH := $(PATH):/usr/local/go/bin

GO ?= go
BIN := bin/bonsai
DATA_DIR ?= /var/lib/bonsai
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
# -s -w drop the symbol table and DWARF: a third of the binary, and panics
# still print full stack traces. A static binary (no cgo) can be copied
# onto any Linux box.
LDFLAGS := -s -w -X main.version=$(VERSION)
CGO_ENABLED ?= 0

# Debian packages. RUN_DEPS are what `bonsai server` needs on the box
# (containerd, runc, nftables, iproute2 as those parts land); DEPS are what
# the tests and benchmarks need: everything bonsai needs plus its real
# peers and test fixtures (etcd-server, busybox-static, dbus-daemon and
# systemd-logind for graceful node shutdown, the official Python client
# and node for the JavaScript one in the client matrix, ...).
RUN_DEPS := containerd runc
DEPS := $(strip $(RUN_DEPS) etcd-server busybox-static iproute2 nftables docker-registry containernetworking-plugins iptables dbus-daemon systemd python3-kubernetes nodejs curl)
# BENCH_DEPS are what only the benchmarks need: nginx, the reverse proxy
# the built-in Ingress controller is measured against. Kept out of `make
# test`, whose machines need no web server started on port 80.
BENCH_DEPS := nginx

TEST_TIMEOUT ?= 25m
FUZZTIME ?= 20s
FUZZ_PKGS ?= ./store/ ./apiserver/ ./apiserver/encryption/ ./apiserver/authn/ ./apiserver/authz/ ./apiserver/audit/ ./cmd/bonsai/ ./controllers/nodeipam/ ./deploy/
BENCH_FLAGS ?=
CHURN ?= 10m

.PHONY: build run test vet bench wear churn size deps run-deps fuzz clean go-check conformance conformance-build conformance-run

go-check:
	@command -v $(GO) >/dev/null || { echo "Go not found: install Go 1.21 or newer (it fetches the toolchain go.mod asks for through the module proxy)" >&2; exit 1; }

build: go-check
	CGO_ENABLED=$(CGO_ENABLED) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/bonsai

# npm installs the JavaScript client (e2e/testdata/clients/package-lock.json)
# when the client test first runs. Debian's nodejs comes without npm, which
# is Debian's package npm; NodeSource's nodejs carries its own npm and
# conflicts with Debian's, so npm is installed only when none is on PATH.
deps:
	@bash scripts/install-deps.sh $(DEPS)
	@command -v npm >/dev/null || bash scripts/install-deps.sh npm

run-deps:
	@bash scripts/install-deps.sh $(RUN_DEPS)

# ARGS passes extra server flags: make run ARGS='--disable-agent'.
run: run-deps build
	$(BIN) server --data-dir=$(DATA_DIR) $(ARGS)

vet: go-check
	$(GO) vet ./...

# Tests run once (-count=1: a cached pass proves nothing about this
# machine's prerequisites) with a timeout well inside CI's budget.
test: deps vet
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

bench: deps go-check
	@bash scripts/install-deps.sh $(BENCH_DEPS)
	@$(GO) build -o bin/bonsai-bench ./e2e/bench
	@bin/bonsai-bench $(BENCH_FLAGS)

# The idle write rates of a real node, 15 minutes with no pods and 15
# with 30 (too long for make bench's default run): make wear.
wear: deps go-check
	@$(GO) build -o bin/bonsai-bench ./e2e/bench
	bin/bonsai-bench -only wear $(BENCH_FLAGS)

# The store's long garbage-collection test: make churn CHURN=10m.
churn: go-check
	@$(GO) build -o bin/bonsai-bench ./e2e/bench
	bin/bonsai-bench -churn $(CHURN)

size: build
	@bytes=$$(stat -c %s $(BIN)); \
	awk -v b=$$bytes -v f=$(BIN) 'BEGIN { printf "%s: %d bytes (%.1f MB)\n", f, b, b / 1048576 }'

# Runs every Fuzz target of FUZZ_PKGS for FUZZTIME each (go test -fuzz
# takes one target at a time).
fuzz: go-check
	@for pkg in $(FUZZ_PKGS); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) $$pkg; \
		done; \
	done

# Upstream's conformance suite against the real binary, offline
# (docs/conformance.md): e2e/conformance/ is a Go module of its own that
# builds e2e.test, ginkgo, kubectl and agnhost from k8s.io/kubernetes at
# the version bonsai reports (v0.x.y of k8s.io/api is Kubernetes v1.x.y),
# cached in CONFORMANCE_CACHE; the images the tests pull are built from
# Debian packages and that agnhost. The run writes junit.xml, e2e.log,
# failures.txt and summary.txt into bin/conformance/.
# make conformance CONFORMANCE_FOCUS='...' runs a subset.
KUBE_VERSION := $(shell awk '$$1 == "k8s.io/api" { sub(/^v0/, "v1", $$2); print $$2 }' go.mod)
CONFORMANCE_CACHE ?= $(HOME)/.cache/bonsai/conformance/$(KUBE_VERSION)
CONFORMANCE_FOCUS ?= \[Conformance\]
CONFORMANCE_DEPS := $(RUN_DEPS) busybox-static nginx bind9-dnsutils curl iproute2 nftables python3 binutils

conformance: conformance-build conformance-run

conformance-build: go-check build
	@bash scripts/install-deps.sh $(CONFORMANCE_DEPS)
	@bash e2e/conformance/build.sh $(KUBE_VERSION) $(CONFORMANCE_CACHE)

conformance-run:
	@FOCUS='$(CONFORMANCE_FOCUS)' bash e2e/conformance/run.sh $(BIN) $(CONFORMANCE_CACHE) bin/conformance

clean:
	rm -rf bin
