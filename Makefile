GO ?= go
PKGS := ./...

.PHONY: all build test test-short bench lint run fuzz limits

all: lint build test

build:
	$(GO) build $(PKGS)

# The full suite, race detector on (CI runs this).
test:
	$(GO) test -race -count=1 -timeout 9m $(PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

# Benchmarks of the data path, state and whole jobs. Compare with the
# machine's limits: make limits
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./buffer/ ./network/... ./state/... ./codec/ . ./connectors/kafka/

limits:
	$(GO) -C ../shared/bench/limits run .

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The main example job.
run:
	$(GO) run ./examples/wordcount

# Short fuzzing runs of every fuzz target.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReadFrame -fuzztime 30s ./network/wire/
	$(GO) test -run '^$$' -fuzz FuzzDecodeEvent -fuzztime 30s ./network/wire/
	$(GO) test -run '^$$' -fuzz FuzzDeserializer -fuzztime 30s ./network/
