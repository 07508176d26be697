# fencekit — `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 15m
SERVICES  := eval "$$(scripts/services.sh)"
GOLANGCI_VERSION := v2.15.0
GOLANGCI := $(HOME)/.cache/fencekit/bin/golangci-lint-$(GOLANGCI_VERSION)/golangci-lint
# Nested modules (examples and adapters with heavy dependencies keep their own
# go.mod so the main module's dependency list stays lean); each is tested too.
NESTED    := $(sort $(patsubst ./%/go.mod,%,$(shell find . -mindepth 2 -name go.mod -not -path './.services/*' -not -path './out/*')))

.PHONY: help
help: ## list targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_\/-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: services
services: ## start PostgreSQL, MinIO, Redis, MariaDB, NATS if missing; prints export lines
	@scripts/services.sh

.PHONY: test
test: ## run every test (race detector on) against the real services (make services) and PgBouncer: the main module, the nested modules and the exec-mode matrix in lanes at once (scripts/test.sh; TEST_LANES=1: one after another)
	@scripts/install-pgbouncer.sh; scripts/install-ha.sh
	@$(SERVICES); GO=$(GO) TESTFLAGS="$(TESTFLAGS)" PKGS="$(PKGS)" scripts/test.sh

# The exec-mode matrix: TEST_DATABASE_URL gets default_query_exec_mode, so
# every pool and database/sql handle the tests open uses that mode. The text
# modes (exec, simple_protocol) run the lease core subset, pgguard's
# conformance and lock tests and package effects; the describe modes run pgguard's. Every lease
# statement runs in every mode in the main suite (TestEveryStatementInEveryExecMode).
EXECMODES_TEXT   ?= exec simple_protocol
EXECMODES_OTHER  ?= cache_describe describe_exec
LEASE_CORE_RUN   := TestEveryStatement|TestPark|TestResume|TestEarlierReleaseMeetsParkedGrant|TestUnrelatedKeys|TestHeldRejection|TestTokenIncreases|TestTokenDrawnUnderRowLock|TestExpiredTakeover|TestRenewalRejected|TestBatchedRenewal|TestTakeover|TestAcquireWait|TestRelease|TestRun|TestWatch|TestLostReply|TestListener|TestHealth
# Left out of the exec-mode runs: tests that already loop over every exec
# mode themselves, the takeover storms (concurrency, no statement of their
# own; the renewal-mode run keeps them) and effects' chaos tests (processes
# killed and stopped, their statements covered by the other effects tests).
EXECMODES_LEASE_SKIP   := TestEveryStatementInEveryExecMode|TestTakeoverCauseInEveryExecMode|TestTakeoverStorm
EXECMODES_EFFECTS_SKIP := TestChaos
PGGUARD_RUN      := TestConformance|TestWriteAndMarkCommitTogether|TestStaleRollsBackCallerTx|TestConcurrentHolderSerialises|TestFenceContextCancelWhileWaiting|TestLockTimeoutIsBusy|TestDeadlockIsBusy|TestRows

.PHONY: test/execmodes
test/execmodes: ## lease core, pgguard conformance and effects in pgx's other exec modes (exec, simple_protocol, describe modes)
	@$(SERVICES); \
	for mode in $(EXECMODES_TEXT); do echo "== exec mode $$mode"; \
	  TEST_DATABASE_URL="$$TEST_DATABASE_URL$$(case $$TEST_DATABASE_URL in *\?*) echo '&';; *) echo '?';; esac)default_query_exec_mode=$$mode" \
	  $(GO) test $(TESTFLAGS) -run '$(LEASE_CORE_RUN)' -skip '$(EXECMODES_LEASE_SKIP)' ./lease && \
	  TEST_DATABASE_URL="$$TEST_DATABASE_URL$$(case $$TEST_DATABASE_URL in *\?*) echo '&';; *) echo '?';; esac)default_query_exec_mode=$$mode" \
	  $(GO) test $(TESTFLAGS) -run '$(PGGUARD_RUN)' ./guards/pgguard && \
	  TEST_DATABASE_URL="$$TEST_DATABASE_URL$$(case $$TEST_DATABASE_URL in *\?*) echo '&';; *) echo '?';; esac)default_query_exec_mode=$$mode" \
	  $(GO) test $(TESTFLAGS) -skip '$(EXECMODES_EFFECTS_SKIP)' ./effects || exit 1; done; \
	for mode in $(EXECMODES_OTHER); do echo "== exec mode $$mode"; \
	  TEST_DATABASE_URL="$$TEST_DATABASE_URL$$(case $$TEST_DATABASE_URL in *\?*) echo '&';; *) echo '?';; esac)default_query_exec_mode=$$mode" \
	  $(GO) test $(TESTFLAGS) -run '$(PGGUARD_RUN)' ./guards/pgguard || exit 1; done

# The lease core subset again with per-lease renewal (lease.RenewalPerLease):
# the main suite runs the heartbeat, the default; TEST_LEASE_RENEWAL switches
# every Manager whose Config leaves Renewal zero.
.PHONY: test/renewalmodes
test/renewalmodes: ## lease core subset in per-lease renewal mode (the main suite runs the heartbeat)
	@$(SERVICES); echo "== lease renewal per-lease"; \
	  TEST_LEASE_RENEWAL=per-lease $(GO) test $(TESTFLAGS) -run '$(LEASE_CORE_RUN)|TestRevoke|TestList|TestRollingDeploy|TestMigration9' ./lease

.PHONY: test/interop
test/interop: ## MCP interop: the TypeScript SDK clients (1.x) and the MCP conformance suite against examples/mcpserver (node, npm)
	@$(SERVICES); cd examples/mcpserver && $(GO) test $(TESTFLAGS) -run 'TestTypeScriptInterop|TestConformance' .

.PHONY: test/short
test/short: ## unit tests only: needs no service (with -short, tests and examples that need one skip)
	$(GO) test -short -count=1 $(PKGS)

.PHONY: demo
demo: ## run the two-devices scenario end to end (picture: out/timeline.svg; DEMOFLAGS=--help for more)
	@mkdir -p out; $(SERVICES); $(GO) run ./cmd/fence-demo --timeline out/timeline.svg $(DEMOFLAGS)

.PHONY: demo-mcp
demo-mcp: ## the two-devices story over MCP: two MCP clients of one conversation, the desktop's late call refused (examples/mcpserver)
	@$(SERVICES); cd examples/mcpserver && DATABASE_URL="$$TEST_DATABASE_URL" $(GO) run . demo

.PHONY: lint
lint: ## gofmt, go vet and golangci-lint (pinned, installed on first use) on every module; doc snippets; package lease's API budget
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@for m in $(NESTED); do (cd $$m && $(GO) vet ./...); done
	@if [ ! -x $(GOLANGCI) ]; then GOBIN=$(dir $(GOLANGCI)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION); fi
	$(GOLANGCI) run $(PKGS)
	@for m in $(NESTED); do echo "golangci-lint: $$m"; (cd $$m && $(GOLANGCI) run ./...) || exit 1; done
	$(GO) run ./internal/tools/docsnippets
	$(GO) run ./internal/tools/apisurface -max 143 lease

.PHONY: fuzz
fuzz: ## run every Go fuzz target briefly (FUZZTIME=5s each; FUZZ_PKG=dir filter)
	@$(SERVICES); FUZZTIME=$${FUZZTIME:-5s} integration/scripts/fuzz.sh $(FUZZ_PKG)

.PHONY: chaos
chaos: ## chaos soak: CHAOS_DURATION=10m (default 5m), CHAOS_SEED=, CHAOS_FAULTS=default, CHAOS_FLAGS=-chaos.pgrestart
	@$(SERVICES); $(GO) test -race -count=1 -timeout 0 -tags soak ./integration/chaos -run '^TestChaosSoak$$' -v -args \
		-chaos.soak=$${CHAOS_DURATION:-5m} -chaos.seed=$${CHAOS_SEED:-0} -chaos.faults=$${CHAOS_FAULTS:-default} $${CHAOS_FLAGS:-} \
		| grep -v '^=== RUN' 

.PHONY: bench
bench: ## run cmd/fence-bench against the real services (BENCH_QUICK=1: about 90 s; BENCHFLAGS=-only=lease_cycle, -growth.million); chart in out/bench.svg
	@scripts/install-pgbouncer.sh; scripts/install-ha.sh
	@$(SERVICES); mkdir -p out; $(GO) run ./cmd/fence-bench -chart out/bench.svg $(BENCHFLAGS)

.PHONY: bench-mcp
bench-mcp: ## make bench's mcp_call case alone: a fenced MCP tool call vs the same tool unfenced over streamable HTTP (p50/p99, ratio, stages)
	@$(SERVICES); mkdir -p out; $(GO) run ./cmd/fence-bench -only mcp_call $(BENCHFLAGS)

.PHONY: migrations
migrations: ## regenerate the goose and golang-migrate files of sql/migrations
	$(GO) generate ./sql/migrations

.PHONY: ha
ha: ## Patroni + etcd + HAProxy harness (integration/ha; installs the Debian packages when missing)
	@scripts/install-ha.sh; $(SERVICES); $(GO) test -race -count=1 -timeout 15m -v -run '^TestPatroni$$' ./integration/ha | grep -E '^(---|===|ok|FAIL|PASS)|ha_test.go'

.PHONY: model
model: ## spin: exhaustive check of the protocol models (lease, heartbeat, effects), and a counterexample from every broken variant (docs/model.md, docs/effects.md)
	@scripts/install-spin.sh; model/check.sh
