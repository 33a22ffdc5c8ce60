# Easel: `make run` starts the whole stack locally; `make test` runs every test.
GO      ?= go
# Two modules: the repository (services, shared packages, tools, tests)
# and the Go SDK, which users import on its own and which has no dependency
# of ours.
MODULES := . sdk/go
BIN     := bin
# Race detection for every test run. -trimpath keeps the checkout's path out
# of Go's build cache keys, so a fresh clone (CI's every run) reuses the
# packages an earlier clone compiled instead of compiling them all again:
# 80 CPU-seconds against 23 for pkg/... alone on the 2-core machine.
TESTFLAGS ?= -race -count=1 -trimpath -timeout 15m

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
# -trimpath, as for the tests: a new checkout reuses the cached packages.
# nodynamic keeps the worker's WebP encoder from linking purego's loader,
# which makes a binary dynamically linked even without cgo.
build: export CGO_ENABLED = 0
build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/gateway ./api-gateway/cmd/gateway
	$(GO) build -trimpath -tags nodynamic -o $(BIN)/worker ./worker/cmd/worker
	$(GO) build -trimpath -o $(BIN)/devstack ./tools/cmd/devstack
	$(GO) build -trimpath -o $(BIN)/easelctl ./tools/cmd/easelctl
	$(GO) build -trimpath -o $(BIN)/loadgen ./tools/cmd/loadgen
	$(GO) build -trimpath -o $(BIN)/easel ./sdk/go/cmd/easel

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
# time); and, alongside, the end-to-end flows again on a 3-master
# Redis Cluster, its output printed when it ends. Four test processes at a
# time: the end-to-end packages mostly wait on their services, not on the
# CPU.
CLUSTER_E2E := TestConsoleKeysOnEveryGateway|TestAccountWebhookEndToEnd|TestOutputsEndToEnd|TestWaitAndQuoteEndToEnd|TestUpstreamPoolFailover|TestUpstreamBreakerSharedByWorkers|TestFairShareEndToEnd|TestEndToEnd|TestFailedTaskIsRefunded|TestEaselctl|TestConcurrentCreatesNeverOverdraw|TestRecoveryQueuesAndExpires|TestCancelEndToEnd|TestWaitStreamListEndToEnd
TESTBIN := $(abspath $(BIN))
test:
	@echo "==> MinIO for the S3 tests, Jaeger for the tracing tests"
	$(GO) run -trimpath ./tools/testkit/cmd/minio-install
	$(GO) run -trimpath ./tools/testkit/cmd/jaeger-install
	@echo "==> the programs, built once for every test that runs them"
	@$(MAKE) --no-print-directory build
	@set -e; log=$$(mktemp); \
	echo "==> go test e2e on a Redis Cluster (alongside; its output follows the others')"; \
	( EASEL_TEST_BIN=$(TESTBIN) EASEL_E2E_REDIS=cluster $(GO) test $(TESTFLAGS) -run '$(CLUSTER_E2E)' ./e2e >$$log 2>&1 && echo 0 >$$log.rc || echo 1 >$$log.rc ) & \
	rc=0; for m in $(MODULES); do \
		echo "==> go test $$m"; \
		(cd $$m && EASEL_TEST_BIN=$(TESTBIN) $(GO) test $(TESTFLAGS) -p 4 ./...) || rc=1; \
	done; \
	wait; echo "==> go test e2e on a Redis Cluster"; cat $$log; \
	crc=$$(cat $$log.rc); rm -f $$log $$log.rc; \
	[ $$rc = 0 ] && [ $$crc = 0 ]

# The inner loop: every package once, no race detector, no cluster pass;
# -short skips the slowest end-to-end tests (browser, failover) and builds
# nothing it does not run: the S3 tests run only if MinIO is built already.
# Four packages and six tests of a package at a time: without -race the
# run mostly waits (on redis-server, simulated generation, timers), not on
# the CPU. The programs are built once, as for make test.
test-short:
	@$(MAKE) --no-print-directory build
	@set -e; for m in $(MODULES); do \
		(cd $$m && EASEL_TEST_BIN=$(TESTBIN) $(GO) test -short -count=1 -trimpath -p 4 -parallel 6 ./...); \
	done

# Faults under load on the real binaries (about 2½ minutes): kill -9 of a
# worker, SIGTERM of a worker, SIGKILL and AOF restart of Redis, kill -9 of
# the gateway; checks nothing is lost, stuck or charged wrong.
chaos:
	$(GO) test -tags chaos -run TestChaos -count=1 -v -timeout 10m ./e2e

# Real services against baselines, side by side, on a private redis-server.
BENCHFLAGS ?=
bench: build
	$(GO) build -trimpath -o $(BIN)/easelbench ./bench/cmd/easelbench
	./$(BIN)/easelbench --bin $(BIN) $(BENCHFLAGS)

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
