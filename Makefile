# The README's quick start: `make demo` and `make test`. Both install missing
# Debian packages, configure and build; CMake does the real work.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test bench bench-docs clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/bin/iwarp-cm demo

# README.md "Reliability": (a) every test, the seeded simulation among them
# (10,000 seeds); (b) the same under ASan + UBSan in build-asan; (c) the fuzz
# corpus replayed and FUZZ_SECONDS of fuzzing per target in build-fuzz.
FUZZ_SECONDS ?= 25
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	JOBS=$(JOBS) scripts/sanitize.sh
	scripts/fuzz.sh $(FUZZ_SECONDS)

# Performance (README.md ("Performance")): the whole-system run (setup rate against the
# kernel sockets, scale to 1M, timer tick), its plot, then the micro-benchmarks. They run
# from their own Release build with link-time optimisation (IWCM_LTO) in $(BENCH_BUILD), so
# the figures are those of the optimised program; the tests' build stays as it is.
# The plot goes into that build folder; `make bench UPDATE_DOCS=1` (or
# `make bench-docs`) writes it over the README's docs/perf.svg instead.
BENCH_BUILD ?= build-lto
UPDATE_DOCS ?= 0
ifeq ($(UPDATE_DOCS),1)
PERF_SVG := docs/perf.svg
else
PERF_SVG := $(BENCH_BUILD)/perf.svg
endif

$(BENCH_BUILD)/CMakeCache.txt:
	cmake -S . -B $(BENCH_BUILD) -DCMAKE_BUILD_TYPE=Release -DIWCM_LTO=ON \
		-DIWCM_BUILD_TESTS=OFF -DIWCM_BUILD_EXAMPLES=OFF $(CMAKE_FLAGS)

bench: deps $(BENCH_BUILD)/CMakeCache.txt
	cmake --build $(BENCH_BUILD) -j $(JOBS) --target iwarp-cm iwcm_bench
	$(BENCH_BUILD)/bin/iwarp-cm bench --json-out $(BENCH_BUILD)/perf.json
	python3 bench/plot.py $(BENCH_BUILD)/perf.json $(PERF_SVG)
	$(BENCH_BUILD)/bin/iwcm_bench --benchmark_min_time=0.2

bench-docs:
	$(MAKE) bench UPDATE_DOCS=1

clean:
	rm -rf $(BUILD) $(BENCH_BUILD)
