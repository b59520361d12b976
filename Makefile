# The README's quick start: `make demo` and `make test`. Each installs the missing
# Debian packages of its own set (scripts/deps.sh demo, test, bench), configures
# and builds; CMake does the real work.
BUILD ?= build
DEMO_BUILD ?= build-demo
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps deps-demo deps-bench configure build demo test bench bench-docs bench-wire clean

all: build

# The tests' set: the build in $(BUILD) configures the tests and benchmarks.
deps:
	@scripts/deps.sh test

deps-demo:
	@scripts/deps.sh demo

deps-bench:
	@scripts/deps.sh bench

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The demo: only the demo set's packages, and only the iwarp-cm program and the
# libraries it links, built in a folder of its own ($(DEMO_BUILD), the "demo"
# preset of CMakePresets.json: no tests, benchmarks, examples, AF_XDP or RDMA
# ABI). Not $(BUILD) with the tests off: CMake keeps in its cache what it found
# missing (rdma-core's headers, for one), so a later `make test` there would
# configure without what the test set installed, and turning options back and
# forth in one folder rebuilds what they change. With its own folder `make test`
# after `make demo` configures and builds as it does without it.
$(DEMO_BUILD)/CMakeCache.txt:
	cmake --preset demo -B $(DEMO_BUILD) $(CMAKE_FLAGS)

demo: deps-demo $(DEMO_BUILD)/CMakeCache.txt
	cmake --build $(DEMO_BUILD) -j $(JOBS) --target iwarp-cm
	$(DEMO_BUILD)/bin/iwarp-cm demo

# docs/reliability.md: (a) every test, the seeded simulation among them
# (10,000 seeds); (b) the same under ASan + UBSan in build-asan; (c) the fuzz
# corpus replayed and FUZZ_SECONDS of fuzzing per target in build-fuzz.
FUZZ_SECONDS ?= 25
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	JOBS=$(JOBS) scripts/sanitize.sh
	scripts/fuzz.sh $(FUZZ_SECONDS)

# Performance (docs/perf.md): the whole-system run (setup rate against the
# kernel sockets, scale to 1M, timer tick), its plot, then the micro-benchmarks. They run
# from their own Release build with link-time optimisation (IWCM_LTO) in $(BENCH_BUILD), so
# the figures are those of the optimised program; the tests' build stays as it is.
# The plot goes into that build folder; `make bench UPDATE_DOCS=1` (or
# `make bench-docs`) writes it over docs/perf.svg instead.
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

bench: deps-bench $(BENCH_BUILD)/CMakeCache.txt
	cmake --build $(BENCH_BUILD) -j $(JOBS) --target iwarp-cm iwcm_bench
	$(BENCH_BUILD)/bin/iwarp-cm bench --json-out $(BENCH_BUILD)/perf.json
	python3 bench/plot.py $(BENCH_BUILD)/perf.json $(PERF_SVG)
	$(BENCH_BUILD)/bin/iwcm_bench --benchmark_min_time=0.2

bench-docs:
	$(MAKE) bench UPDATE_DOCS=1

# The same figures on a wire (docs/perf.md "The wire"): iwarp-cm over a veth with native
# XDP and over TAP beside the kernel's TCP on the same veth, with perftest's programs over
# libiwcm_rdma.so. Needs root and what the tests need (AF_XDP, the RDMA library, perftest).
bench-wire: deps $(BENCH_BUILD)/CMakeCache.txt
	cmake --build $(BENCH_BUILD) -j $(JOBS) --target iwarp-cm iwcm_rdma
	$(BENCH_BUILD)/bin/iwarp-cm bench --wire --skip-memory --json-out $(BENCH_BUILD)/perf-wire.json

clean:
	rm -rf $(BUILD) $(DEMO_BUILD) $(BENCH_BUILD)
