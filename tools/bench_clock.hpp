// The two clocks of `iwarp-cm bench`: wall time since a start, and the CPU
// time of the calling thread.
//
// Read first: docs/perf.md (why rates are given per second of
// wall time and per second of CPU time). Used by tools/bench.cpp and
// tools/bench_shards.cpp.
#pragma once

#include <chrono>
#include <ctime>

namespace iwcm::tools {

using SteadyClock = std::chrono::steady_clock;

// Wall time since `t`, in seconds.
inline double seconds_since(SteadyClock::time_point t) {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// CPU time of this thread, in seconds: on a machine shared with other work it
// counts only what this thread ran, kernel time included (softirq work of the
// loopback device is charged to the thread that caused it on this kernel).
inline double thread_cpu_s() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace iwcm::tools
