# Mailroom. `make run` for a local server with the sandbox provider,
# `make test` for every test (needs PostgreSQL on 127.0.0.1:5432).

GO       ?= go
# Build with go.mod's toolchain line (a release with its security fixes),
# fetched from the module proxy once, when the installed Go is older.
export GOTOOLCHAIN ?= auto
BIN      := bin/mailroom
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
PKGS     := ./...

.PHONY: run build test bench fuzz lint fmt vet clean reset

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/mailroom

run: build
	MAILROOM_BOOTSTRAP=true $(BIN) serve

test:
	$(GO) test -count=1 -timeout 20m $(PKGS)

# The package benchmarks first, then the figures on real processes
# (internal/benchrun), which end with one line per figure and its goal.
# The figures run even if a package benchmark failed; make still fails.
bench: build
	@status=0; \
	$(GO) test -run '^$$' -bench . -benchtime 3s -count=1 -timeout 30m $$($(GO) list $(PKGS) | grep -v /internal/benchrun) || status=1; \
	MAILROOM_BENCH_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench . -benchtime 1x -count=1 -timeout 30m ./internal/benchrun/ || status=1; \
	exit $$status

# Each fuzz target for FUZZTIME, one after another. `make test` runs only
# their seeds and the inputs kept under testdata/fuzz/; a failure found here
# is kept there too, and fails `make test` until it is fixed.
FUZZTIME ?= 1m
fuzz:
	@set -e; for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		for fn in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "$$pkg $$fn"; \
			$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.6.1 $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

# Removes the build only. ./.mailroom holds the development master key, and
# the mailroom database is sealed under it: without the key `make run`
# refuses that database. `make reset` removes both.
clean:
	rm -rf bin

# Starts development afresh: drops the development database (the default
# MAILROOM_DATABASE_URL's) and removes ./.mailroom, its master key, outbox
# and blobs, together.
DEV_POSTGRES ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
# It refuses, touching nothing, while any setting moves part of that setup
# elsewhere: what it would leave behind could not be read again.
reset:
	@if [ -n "$$MAILROOM_DATABASE_URL$$MAILROOM_EVENTSTORE$$MAILROOM_DATA_DIR$$MAILROOM_BLOB_DIR$$MAILROOM_BLOB_S3_BUCKET$$MAILROOM_SANDBOX_OUTBOX" ]; then \
		echo "make reset resets the default development setup only; unset MAILROOM_DATABASE_URL, MAILROOM_EVENTSTORE, MAILROOM_DATA_DIR, MAILROOM_BLOB_DIR, MAILROOM_BLOB_S3_BUCKET and MAILROOM_SANDBOX_OUTBOX" >&2; exit 1; fi
	rm -rf bin
	psql '$(DEV_POSTGRES)' -qc 'DROP DATABASE IF EXISTS mailroom WITH (FORCE)'
	rm -rf .mailroom
