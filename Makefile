# Every target works on a fresh Debian/Ubuntu machine with Go: the database
# the gateway and its tests need is started from the installed MariaDB
# binaries (installed with apt-get when missing, saying so). Everything else
# the suite can use (Chromium, node, SPIN, promtool, the OpenAPI linter) is
# installed by one step, make deps; a test whose tool is missing skips and
# says to run it.
GO ?= go
# The race detector needs a C compiler; without one the suite still runs.
RACE := $(shell command -v gcc >/dev/null 2>&1 && echo -race)
# The fuzz targets (package:name, docs/testing.md#fuzzing). make test runs
# their seeds and committed corpora (testdata/fuzz) as ordinary tests; make
# fuzz mutates each for FUZZTIME, make fuzz-long for LONG_FUZZTIME. A new
# input is shrunk for at most FUZZMINIMIZE runs: go's default, 60 s, left
# a target shrinking most of the time instead of fuzzing.
FUZZTIME ?= 10s
FUZZMINIMIZE ?= 1000x
FUZZ_TARGETS := ./api:FuzzParseCreate ./api:FuzzStrictJSON ./api:FuzzListQuery ./api:FuzzEventQuery \
	./api:FuzzKeyHeader ./api:FuzzRefundBody ./api:FuzzConfirmBody ./api:FuzzCaptureBody ./api:FuzzCancelBody \
	./api:FuzzCancelByKeyBody ./api:FuzzEndpointBody ./api:FuzzListCursor \
	./idemkeys:FuzzValidateKey ./idemkeys:FuzzFingerprint ./webhooks:FuzzGuardAddress ./webhooks:FuzzGuardURL \
	./psp/stripe:FuzzStripeSignedBody ./psp/stripe:FuzzStripeSignatureHeader ./psp/toss:FuzzTossNotice \
	./tests/sdk:FuzzVerifyAgrees

# Stripe's own mock, built with go install into the user's cache directory,
# once for every clone (never a dependency in go.mod).
STRIPE_MOCK_VERSION := v0.203.0
STRIPE_MOCK_DIR := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gateway-test-tools/stripe-mock-$(STRIPE_MOCK_VERSION)
STRIPE_MOCK := $(STRIPE_MOCK_DIR)/stripe-mock

# Where the browser tests leave their screenshots (in a browser/ directory).
GATEWAY_ARTIFACTS ?= $(CURDIR)/.artifacts

.PHONY: run test proofs deps test-frontend fuzz fuzz-long build vet bench chaos chaos-cluster stripe-mock-test model

## run: start the gateway with a private MariaDB, the fake PSP and a demo merchant (built, then run
## in make's place, so that Ctrl-C ends it with the gateway's own status)
run:
	@$(GO) build -o bin/gateway ./cmd/gateway
	exec bin/gateway dev

## test: vet, the whole suite against a real MariaDB ($$GATEWAY_TEST_DSN, or a private one) with -short
## (the slow proofs are make proofs; every fuzz target's seeds and corpus run in it; tests/sdk runs the
## Go client against a real gateway), the Go client's own unit tests (clients/go, a module of its own),
## then stripe-mock's check; ends with every skipped test and its reason
test: vet
	GATEWAY_ARTIFACTS="$(GATEWAY_ARTIFACTS)" $(GO) run ./tests/withdb -- \
		$(GO) run ./tests/testsum -- $(GO) test -json -short $(RACE) -count=1 -timeout 15m ./...
	cd clients/go && $(GO) test $(RACE) -count=1 ./...
	$(MAKE) --no-print-directory stripe-mock-test

## proofs: the slow proofs make test leaves out: the 20-second chaos run and its repros, the SPIN model's
## smaller worlds, a three-node Galera cluster, the checkout page in headless Chromium, the benchmark's
## smoke run (bench/, a module of its own)
proofs:
	GATEWAY_ARTIFACTS="$(GATEWAY_ARTIFACTS)" $(GO) run ./tests/withdb -- sh -c '\
		$(GO) run ./tests/testsum -- $(GO) test -json $(RACE) -count=1 -timeout 20m ./tests/chaos ./model ./mysql/... ./demo && \
		cd bench && $(GO) run gateway/tests/testsum -- $(GO) test -json -count=1 -timeout 10m ./...'

## deps: install, once, what the suite and the proofs can use (Debian packages with apt-get as root or
## through sudo -n, the OpenAPI linter with npm); without it their tests skip and say so
deps:
	@tests/deps.sh

## test-frontend: the browser client's node tests and the checkout page in headless Chromium, alone
test-frontend:
	GATEWAY_ARTIFACTS="$(GATEWAY_ARTIFACTS)" $(GO) run ./tests/withdb -- $(GO) test $(RACE) -count=1 -v ./clients/js ./demo

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd clients/go && $(GO) vet ./...

## fuzz: mutate each fuzz target for FUZZTIME (10 s unless set) against a real MariaDB, as make test's
## suite does; an input that fails is written to the target's testdata/fuzz
fuzz:
	@$(GO) run ./tests/withdb -- sh -c 'set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test $$pkg -run "^$$" -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE); \
	done'

## fuzz-long: each fuzz target for LONG_FUZZTIME (2 minutes unless set)
fuzz-long:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(or $(LONG_FUZZTIME),2m)

## stripe-mock-test: every request the Stripe adapter sends, checked against stripe-mock (Stripe's mock
## generated from its OpenAPI specification), built once into STRIPE_MOCK_DIR
## (~/.cache/gateway-test-tools/stripe-mock-v0.203.0); skipped when it cannot be built
stripe-mock-test:
	@if [ ! -x "$(STRIPE_MOCK)" ] || [ "$$(cat "$(STRIPE_MOCK).version" 2>/dev/null)" != "$(STRIPE_MOCK_VERSION)" ]; then \
		echo "building stripe-mock $(STRIPE_MOCK_VERSION) into $(STRIPE_MOCK_DIR)"; \
		if GOBIN="$(STRIPE_MOCK_DIR)" $(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION); then \
			echo "$(STRIPE_MOCK_VERSION)" > "$(STRIPE_MOCK).version"; \
		else \
			echo "SKIP stripe-mock-test: stripe-mock $(STRIPE_MOCK_VERSION) could not be built (is the Go module proxy reachable?)"; \
			exit 0; \
		fi; \
	fi; \
	STRIPE_MOCK_BIN="$(STRIPE_MOCK)" $(GO) test -count=1 -run '^TestStripeMock$$' -v ./psp/stripe/

## bench: the gateway against a raw-SQL floor measured in the same run (private MariaDB unless
## $$GATEWAY_BENCH_DSN or $$GATEWAY_TEST_DSN is set); pass flags with BENCH_ARGS='--duration 30s --json bench.json'
bench:
	cd bench && $(GO) run . $(BENCH_ARGS)

## chaos: the gateway under faults (DB resets, outages and a partition, PSP errors, replica kills and
## pauses), then every invariant of design §7 checked against the PSP ledger and the database; 3 minutes
## by default. Pass flags with CHAOS_ARGS='--duration 10m --seed 42 --json chaos.json'
chaos:
	$(GO) run ./tests/chaos $(CHAOS_ARGS)

## model: check the SPIN model of the payment protocol (model/): every property over every
## interleaving, then every mutant, which must be caught; installs spin when missing. Pass flags
## with MODEL_ARGS='-run mutant/ -trail' (-quick: the smaller worlds go test checks)
model:
	@model/ensure-spin.sh
	$(GO) run ./model/cmd/modelcheck $(MODEL_ARGS)

## chaos-cluster: the same, against a private three-node MariaDB Galera cluster started from the installed
## binaries (mariadb-server, galera-4, rsync; installed with apt-get when missing), one replica per node, adding
## node kills and restarts and a node cut off from the others; invariant 7 checks that no node outside the
## primary component accepted a write. Pass flags with CHAOS_ARGS='--duration 60s --seed 42'
chaos-cluster:
	$(GO) run ./tests/chaos --cluster $(CHAOS_ARGS)

## build: a static binary in bin/gateway
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/gateway ./cmd/gateway
