GO ?= go
# bash with pipefail: a failing command piped into a filter fails the recipe.
SHELL := bash
.SHELLFLAGS := -o pipefail -c
PKGS := ./...
# Per-package test timeout; raise it on a loaded machine (make test TEST_TIMEOUT=30m).
TEST_TIMEOUT ?= 9m

.PHONY: all build test test-short bench bench-state-10m baseline lint run fuzz soak soak-ha nexmark

all: lint build test

build:
	$(GO) build $(PKGS)

# The full suite, race detector on (CI runs this).
test:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

# The fault-injection soak (not part of test): SOAK_RUNS seeds of a
# five-stage job under weirtest's fault plans, in-process and over TCP,
# aligned and unaligned, and on pebble with incremental checkpoints; each
# configuration's totals, then its faults by kind.
SOAK_RUNS ?= 1000

soak:
	$(GO) test -tags soak -run '^TestSoak$$' -count=1 -timeout 3h -v ./weirtest/ -weirtest.runs $(SOAK_RUNS) | grep -E '^(soak|--- FAIL|FAIL|ok|panic)|failed|harness'

# The coordinator-kill soak (not part of test): SOAK_HA_RUNS seeded runs of
# examples/cluster -ha, each SIGKILLing the leading coordinator 1 to 3
# times at a random point after one of its checkpoints, the counts checked
# exactly; then the totals and the failover times.
SOAK_HA_RUNS ?= 20

soak-ha:
	$(GO) test -tags soak -run '^TestSoakHA$$' -count=1 -timeout 3h -v ./examples/cluster/ -soak.runs $(SOAK_HA_RUNS) | grep -E '^(soak|--- FAIL|FAIL|ok|panic)|seed'

# Benchmarks of the data path, state and whole jobs, with the in-repo
# baselines among them; the last line is the in-process exchange's ratio to
# the ideal pipeline measured in the same run.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./buffer/ ./network/... ./state/... ./codec/ ./eventtime/... . ./connectors/kafka/ ./connectors/nats/ | awk -f scripts/ratio.awk

# BenchmarkStateBackend with 10 M keys (pebble's cache=1% case caches
# 100,000 of them): not part of bench, loading the keys takes minutes.
bench-state-10m:
	$(GO) test -run '^$$' -bench '^BenchmarkStateBackend$$' -benchmem -timeout 2h ./state/pebble/ -args -state.keys=10000000

# The in-repo baselines, what the data path is measured against on this
# machine: BenchmarkIdealPipeline (the in-process exchange reduced to
# encoding, one channel send per 32 KiB buffer and decoding) alternated with
# BenchmarkExchangeInProcess, and BenchmarkTCPRecordPipeline (the loopback
# TCP exchange reduced to encoding, one write per 32 KiB buffer and
# decoding) with BenchmarkTCPExchange/16B, BASELINE_COUNT times from one
# test binary, so load from others on a shared machine hits all alike, then
# the ratios of their medians; then the root package's BenchmarkBaseline*
# benchmarks.
BASELINE_COUNT ?= 6

baseline:
	@mkdir -p bin
	$(GO) test -c -o bin/network.test ./network/
	@cd network && for i in $$(seq $(BASELINE_COUNT)); do \
		for b in 'IdealPipeline$$' 'ExchangeInProcess$$' 'TCPRecordPipeline$$' 'TCPExchange$$/^16B$$'; do \
			../bin/network.test -test.run '^$$' -test.bench "^Benchmark$$b" -test.benchmem || exit 1; \
		done; \
	done | grep -v '^\(goos\|goarch\|pkg\|cpu\|PASS\)' | awk -f ../scripts/ratio.awk
	$(GO) test -run '^$$' -bench '^BenchmarkBaseline' -benchmem .

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The Nexmark benchmark (examples/nexmark): every query on NEXMARK_EVENTS
# events, on the heap and the pebble backends at p = 1 and p = 2,
# exactly-once checkpoints every 10 s, each run verified against the batch
# computation; then one table of events/s per core beside Flink's
# published figures.
NEXMARK_EVENTS ?= 1000000

nexmark:
	@mkdir -p bin
	$(GO) build -o bin/nexmark ./examples/nexmark
	@for b in heap pebble; do for p in 1 2; do \
		./bin/nexmark -query all -events $(NEXMARK_EVENTS) -backend $$b -p $$p || exit 1; \
	done; done | grep '^nexmark ' | awk -f scripts/nexmark.awk

# The main example job.
run:
	$(GO) run ./examples/wordcount

# Short fuzzing runs of every fuzz target.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReadFrame -fuzztime 30s ./network/wire/
	$(GO) test -run '^$$' -fuzz FuzzDecodeEvent -fuzztime 30s ./network/wire/
	$(GO) test -run '^$$' -fuzz FuzzDeserializer -fuzztime 30s ./network/
