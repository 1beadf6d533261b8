# Every target works on a fresh Debian/Ubuntu machine with Go: the database
# the gateway and its tests need is started from the installed MariaDB
# binaries (installed with apt-get when missing).
GO ?= go
# The race detector needs a C compiler; without one the suite still runs.
RACE := $(shell command -v gcc >/dev/null 2>&1 && echo -race)

.PHONY: run test build vet

## run: start the gateway with a private MariaDB, the mock PSP and a demo merchant
run:
	$(GO) run ./cmd/gateway dev

## test: the whole suite against a real MariaDB ($$GATEWAY_TEST_DSN, or a private one)
test:
	$(GO) vet ./...
	$(GO) run ./cmd/withdb -- $(GO) test $(RACE) -count=1 -timeout 15m ./...

## build: a static binary in bin/gateway
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/gateway ./cmd/gateway
