# Easel: `make run` starts the whole stack locally; `make test` runs every test.
GO      ?= go
# Two modules: the repository (services, shared packages, tools, tests)
# and the Go SDK, which users import on its own and which has no dependency
# of ours.
MODULES := . sdk/go
# test-short's longest test packages, named first so that they start first:
# go test starts packages in the order named, and these, started last, were
# its tail. Not in make test: under -race, e2e beside these five at once
# overloads two cores (its flows timed out).
SLOW_FIRST := ./e2e ./worker/internal/processor ./worker ./pkg/store ./pkg/quota ./api-gateway
BIN     := bin
# Race detection for every test run. -trimpath keeps the checkout's path out
# of Go's build cache keys, so a fresh clone (CI's every run) reuses the
# packages an earlier clone compiled instead of compiling them all again:
# 80 CPU-seconds against 23 for pkg/... alone on the 2-core machine.
TESTBUILD ?= -race -trimpath
TESTFLAGS ?= $(TESTBUILD) -count=1 -timeout 15m

.PHONY: all build run test test-short proto lint fmt tidy clean help bench bench-go chaos

all: build

help:
	@echo "make run    - the whole stack locally (embedded Redis unless EASEL_REDIS_URL is set)"
	@echo "make test   - every test, with -race (CI runs this)"
	@echo "make test-short - the quick inner loop: every package once, no race detector"
	@echo "make build  - bin/gateway, bin/worker, bin/devstack, bin/easelctl, bin/loadgen, bin/easel"
	@echo "make proto  - regenerate the queue payload code from proto/"
	@echo "make lint   - go vet and staticcheck on every module"
	@echo "make bench  - the benchmark: real gateway and worker against baselines (see BENCHMARKS.md)"

# Static binaries, as the Dockerfiles build them; the tests that run the
# real programs use these when `make test` names them (EASEL_TEST_BIN).
# One go build for all six, so they link side by side; -trimpath, as for
# the tests: a new checkout reuses the cached packages. nodynamic keeps the
# worker's WebP encoder (in the worker and devstack) from linking purego's
# loader, which makes a binary dynamically linked even without cgo.
PROGRAMS := ./api-gateway/cmd/gateway ./worker/cmd/worker ./tools/cmd/devstack ./tools/cmd/easelctl ./tools/cmd/loadgen ./sdk/go/cmd/easel
build: export CGO_ENABLED = 0
build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -tags nodynamic -o $(BIN)/ $(PROGRAMS)

# A fixed development key, so the README's curl examples work as pasted;
# override it with EASEL_DEV_API_KEY=... make run.
EASEL_DEV_API_KEY ?= esk_local_development_key_do_not_deploy_01
run:
	@echo "==> building bin/ (the first time on a cold module cache it downloads and compiles the modules: several minutes)"
	@$(MAKE) --no-print-directory build
	EASEL_DEV_API_KEY=$(EASEL_DEV_API_KEY) ./$(BIN)/devstack

# Every test of both modules with the race detector, S3 and tracing tests
# included (the blob-store contract in pkg/blob and the S3 flow in e2e run
# on a private MinIO, the tracing flow in e2e on a private Jaeger, each
# built once from the Go module proxy and cached: several minutes the first
# time). Alongside the modules' pass, two more processes of the end-to-end
# suite: its fault runs (Redis killed and restarted, a Sentinel failover,
# workers killed -9: mostly waiting out leases and restarts, one after
# another), and its flows again on a 3-master Redis Cluster; their output is
# printed when the modules' pass ends. The cluster pass repeats flows the
# modules' pass has just run under the race detector, so it runs a build
# without it, as the programs are built: with it, its CPU starved the
# modules' pass and its own flows' deadlines. Four test processes at a time in the modules' pass: the end-to-end
# packages mostly wait on their services, not on the CPU.
CLUSTER_E2E := TestConsoleKeysOnEveryGateway|TestAccountWebhookEndToEnd|TestOutputsEndToEnd|TestWaitAndQuoteEndToEnd|TestUpstreamPoolFailover|TestUpstreamBreakerSharedByWorkers|TestFairShareEndToEnd|TestEndToEnd|TestFailedTaskIsRefunded|TestEaselctl|TestConcurrentCreatesNeverOverdraw|TestRecoveryQueuesAndExpires|TestCancelEndToEnd|TestWaitStreamListEndToEnd
FAULT_E2E   := TestRedisOutageThenOneWorkerDeathFailsNoTask|TestCreatesRecoverWhenRedisReturns|TestSentinelFailover|TestTracingEndToEnd
TESTBIN := $(abspath $(BIN))
E2E_ENV := cd e2e && EASEL_TEST_BIN=$(TESTBIN)
E2E_RUN := $(E2E_ENV) $(TESTBIN)/e2e.test -test.count=1 -test.timeout=15m
E2E_RUN_NORACE := $(E2E_ENV) $(TESTBIN)/e2e-norace.test -test.count=1 -test.timeout=15m
test:
	@echo "==> MinIO for the S3 tests, Jaeger for the tracing tests"
	$(GO) run -trimpath ./tools/testkit/cmd/minio-install
	$(GO) run -trimpath ./tools/testkit/cmd/jaeger-install
	@echo "==> the programs, built once for every test that runs them, and the end-to-end suite"
	@set -e; ( $(MAKE) --no-print-directory build && \
	  CGO_ENABLED=0 $(GO) test -c -trimpath -tags nodynamic -o $(BIN)/e2e-norace.test ./e2e ) & b=$$!; \
	$(GO) test -c $(TESTBUILD) -o $(BIN)/e2e.test ./e2e; wait $$b
	@set -e; logs=$$(mktemp -d); t0=$$(date +%s); \
	echo "==> alongside: e2e's fault runs, and its flows on a Redis Cluster (their output follows the others')"; \
	( $(E2E_RUN) -test.run '^($(FAULT_E2E))$$' >$$logs/faults 2>&1 && echo 0 >$$logs/faults.rc || echo 1 >$$logs/faults.rc; \
	  echo "e2e fault runs ended at $$(( $$(date +%s) - t0 )) s" >>$$logs/faults ) & \
	( export EASEL_E2E_REDIS=cluster; $(E2E_RUN_NORACE) -test.run '^($(CLUSTER_E2E))$$' >$$logs/cluster 2>&1 && echo 0 >$$logs/cluster.rc || echo 1 >$$logs/cluster.rc; \
	  echo "e2e on a Redis Cluster ended at $$(( $$(date +%s) - t0 )) s" >>$$logs/cluster ) & \
	rc=0; for m in $(MODULES); do \
		echo "==> go test $$m"; \
		(cd $$m && EASEL_TEST_BIN=$(TESTBIN) $(GO) test $(TESTFLAGS) -skip '^($(FAULT_E2E))$$' -p 4 ./...) || rc=1; \
	done; \
	echo "the modules' pass ended at $$(( $$(date +%s) - t0 )) s"; wait; \
	for p in faults cluster; do \
		echo "==> e2e: $$p"; cat $$logs/$$p; [ "$$(cat $$logs/$$p.rc)" = 0 ] || { echo "FAIL e2e: $$p"; rc=1; }; \
	done; \
	rm -rf $$logs; [ $$rc = 0 ]

# The inner loop: every package once, no race detector, no cluster pass;
# -short skips the slowest end-to-end tests (browser, failover) and builds
# nothing it does not run: the S3 tests run only if MinIO is built already.
# Four packages and six tests of a package at a time: without -race the
# run mostly waits (on redis-server, simulated generation, timers), not on
# the CPU. The programs are built once, as for make test; the SDK's module
# runs alongside the root module's, its output printed after.
SHORTFLAGS := -short -count=1 -trimpath -p 4 -parallel 6
test-short:
	@$(MAKE) --no-print-directory build
	@logs=$$(mktemp -d); \
	( cd sdk/go && EASEL_TEST_BIN=$(TESTBIN) $(GO) test $(SHORTFLAGS) ./... >$$logs/sdk 2>&1; echo $$? >$$logs/sdk.rc ) & \
	rc=0; EASEL_TEST_BIN=$(TESTBIN) $(GO) test $(SHORTFLAGS) $(SLOW_FIRST) ./... || rc=1; wait; \
	echo "==> go test sdk/go"; cat $$logs/sdk; [ "$$(cat $$logs/sdk.rc)" = 0 ] || rc=1; \
	rm -rf $$logs; [ $$rc = 0 ]

# Faults under load on the real binaries (about 2½ minutes): kill -9 of a
# worker, SIGTERM of a worker, SIGKILL and AOF restart of Redis, kill -9 of
# the gateway; checks nothing is lost, stuck or charged wrong.
chaos:
	$(GO) test -tags chaos -run TestChaos -count=1 -v -timeout 10m ./e2e

# Real services against baselines, side by side, on a private redis-server:
# easelbench's default set, and from its scale part what a task and an
# account cost Redis (an idle account at 100,000 accounts, a task pending
# and completed, a long generation with progress). BENCHFLAGS adds flags
# (a later --only replaces the set); results in bench/results/make-bench.json.
BENCHSET ?= --only http,drain,pickup,downloads,scale --scale-parts idle,progress,bytes --scale-accounts 100000 --scale-bytes 5000
BENCHFLAGS ?=
bench: build
	$(GO) build -trimpath -o $(BIN)/easelbench ./bench/cmd/easelbench
	./$(BIN)/easelbench --bin $(BIN) $(BENCHSET) --json bench/results/make-bench.json $(BENCHFLAGS)

# The Go benchmarks of the hot functions, for benchstat:
#   make bench-go > old.txt; (change); make bench-go > new.txt; benchstat old.txt new.txt
BENCHCOUNT ?= 6
bench-go:
	@$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./pkg/... ./api-gateway/... ./worker/... | grep -E '^(Benchmark|goos|goarch|pkg|cpu)'

# buf and protoc-gen-go are pinned by go.mod's tool directives.
proto:
	cd proto && $(GO) tool buf lint && $(GO) tool buf generate

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "not gofmt'd (make fmt):"; echo "$$unformatted"; exit 1; fi
	@set -e; for m in $(MODULES); do \
		echo "==> lint $$m"; \
		(cd $$m && $(GO) vet ./... && $(GO) tool staticcheck ./...); \
	done

fmt:
	gofmt -w $$(git ls-files '*.go')

tidy:
	@set -e; for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy); done; $(GO) work sync

clean:
	rm -rf $(BIN)
