// Benchmarks of the timing wheel against the irdma driver's walk-every-node tick.
//
// Read first: src/timer/wheel.hpp (the design this measures) and, in the Linux irdma driver
// (drivers/infiniband/hw/irdma/cm.c), irdma_timer_list_prep and irdma_cm_timer_tick (the
// baseline modelled here). Results and the command that produced them: docs/perf.md.
//
// The workload: N pending retransmission timers with deadlines spread uniformly over 1 ms to
// 60 s, a 1 ms tick, and every expired timer re-armed 1 ms to 60 s later so that N stays
// constant; about N / 30000 timers expire per tick. The benchmark time is per tick.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <vector>

#include "timer/wheel.hpp"
#include "timer_workload.hpp"

namespace {

using iwcm::Duration;
using iwcm::Instant;
using iwcm::kInstantZero;
using iwcm::timer::TimerId;
using iwcm::timer::TimerWheel;
using std::chrono::milliseconds;
// The workload's generator and the driver model are shared with `iwarp-cm bench`.
using iwcm::bench::DriverModel;
using iwcm::bench::FastRng;

// Per-tick CPU nanoseconds of the last BM_Tick_Wheel run for each N, for the walk's ratio.
std::map<std::int64_t, double>& wheel_ns_per_tick() {
    static std::map<std::int64_t, double> results;
    return results;
}

// The counters use this thread's CPU time rather than wall time so that other jobs on a
// shared machine distort the walk/wheel ratio less.
using iwcm::bench::thread_cpu_ns;

// One schedule and one cancel of the same entry: the common life of a retransmission timer,
// armed when a frame goes out and cancelled when the peer acknowledges it.
void BM_ScheduleCancel(benchmark::State& state) {
    const auto already_pending = static_cast<std::size_t>(state.range(0));
    TimerWheel wheel;
    FastRng rng(42);
    for (std::size_t i = 0; i < already_pending; ++i) wheel.schedule(kInstantZero + rng.delay(), i);
    std::vector<Instant> deadlines(4096);
    for (auto& d : deadlines) d = kInstantZero + rng.delay();
    std::size_t i = 0;
    for (auto _ : state) {
        const TimerId id = wheel.schedule(deadlines[i & 4095], i);
        benchmark::DoNotOptimize(id);
        const bool cancelled = wheel.cancel(id);
        benchmark::DoNotOptimize(cancelled);
        ++i;
    }
    state.counters["pending"] = static_cast<double>(wheel.pending());
}
BENCHMARK(BM_ScheduleCancel)->Arg(0)->Arg(100'000);

void BM_Tick_Wheel(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    TimerWheel wheel;
    wheel.reserve(n);
    FastRng rng(7);
    for (std::size_t i = 0; i < n; ++i) wheel.schedule(kInstantZero + rng.delay(), i);
    Instant now = kInstantZero;
    std::size_t fired = 0;
    const double start = thread_cpu_ns();
    for (auto _ : state) {
        now += milliseconds(1);
        fired += wheel.advance(
            now, [&](std::uint64_t cookie) { wheel.schedule(now + rng.delay(), cookie); });
    }
    const double ns = thread_cpu_ns() - start;
    const auto ticks = static_cast<double>(state.iterations());
    wheel_ns_per_tick()[state.range(0)] = ns / ticks;
    state.counters["pending"] = static_cast<double>(wheel.pending());
    state.counters["fired/tick"] = static_cast<double>(fired) / ticks;
    state.counters["cpu_ns/tick"] = ns / ticks;
}
BENCHMARK(BM_Tick_Wheel)->Arg(1'000)->Arg(100'000)->Arg(1'000'000);

void BM_Tick_DriverWalk(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    FastRng rng(7);
    DriverModel model(n, rng);
    std::int64_t now = 0;
    std::int64_t next_timeout = 0;
    std::size_t fired = 0;
    const double start = thread_cpu_ns();
    for (auto _ : state) {
        now += 1'000'000;
        fired += model.tick(now, rng, next_timeout);
        benchmark::DoNotOptimize(next_timeout);
    }
    const double ns = thread_cpu_ns() - start;
    const auto ticks = static_cast<double>(state.iterations());
    state.counters["pending"] = static_cast<double>(n);
    state.counters["fired/tick"] = static_cast<double>(fired) / ticks;
    state.counters["cpu_ns/tick"] = ns / ticks;
    const auto wheel = wheel_ns_per_tick().find(state.range(0));
    if (wheel != wheel_ns_per_tick().end() && wheel->second > 0) {
        state.counters["walk/wheel"] = ns / ticks / wheel->second;
    }
}
BENCHMARK(BM_Tick_DriverWalk)->Arg(1'000)->Arg(100'000)->Arg(1'000'000);

}  // namespace
