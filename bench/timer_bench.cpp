// Benchmarks of the timing wheel against the irdma driver's walk-every-node tick.
//
// Read first: src/timer/wheel.hpp (the design this measures) and, in the Linux irdma driver
// (drivers/infiniband/hw/irdma/cm.c), irdma_timer_list_prep and irdma_cm_timer_tick (the
// baseline modelled here). Results and the command that produced them: docs/timer-bench.md.
//
// The workload: N pending retransmission timers with deadlines spread uniformly over 1 ms to
// 60 s, a 1 ms tick, and every expired timer re-armed 1 ms to 60 s later so that N stays
// constant; about N / 30000 timers expire per tick. The benchmark time is per tick.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "timer/wheel.hpp"

namespace {

using iwcm::Duration;
using iwcm::Instant;
using iwcm::kInstantZero;
using iwcm::timer::TimerId;
using iwcm::timer::TimerWheel;
using std::chrono::milliseconds;

constexpr std::int64_t kSpreadMs = 60'000;

// A small, fast generator for the benchmark's own choices (xorshift64*); not for tests.
class FastRng {
public:
    explicit FastRng(std::uint64_t seed) : state_(seed | 1) {}
    std::uint64_t next() {
        state_ ^= state_ >> 12;
        state_ ^= state_ << 25;
        state_ ^= state_ >> 27;
        return state_ * 0x2545F4914F6CDD1DULL;
    }
    // A delay of 1 ms to 60 s; the modulo bias is irrelevant here.
    Duration delay() { return milliseconds(1 + static_cast<std::int64_t>(next() % kSpreadMs)); }

private:
    std::uint64_t state_;
};

// Per-tick CPU nanoseconds of the last BM_Tick_Wheel run for each N, for the walk's ratio.
std::map<std::int64_t, double>& wheel_ns_per_tick() {
    static std::map<std::int64_t, double> results;
    return results;
}

// This thread's CPU time in nanoseconds. The counters use CPU time rather than wall time so
// that other jobs on a shared machine distort the walk/wheel ratio less.
double thread_cpu_ns() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

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
        fired += wheel.advance(now, [&](std::uint64_t cookie) {
            wheel.schedule(now + rng.delay(), cookie);
        });
    }
    const double ns = thread_cpu_ns() - start;
    const auto ticks = static_cast<double>(state.iterations());
    wheel_ns_per_tick()[state.range(0)] = ns / ticks;
    state.counters["pending"] = static_cast<double>(wheel.pending());
    state.counters["fired/tick"] = static_cast<double>(fired) / ticks;
    state.counters["cpu_ns/tick"] = ns / ticks;
}
BENCHMARK(BM_Tick_Wheel)->Arg(1'000)->Arg(100'000)->Arg(1'000'000);

// The driver's data structures, reduced to what its tick touches. A node is one heap
// allocation hashed into cm_hash_tbl (an hlist per bucket); its send entry is a second heap
// allocation. The real irdma_cm_node is larger still (it carries a 512-byte private-data
// buffer, MPA frames and the TCP context), so this model if anything flatters the walk.
struct DriverTimerEntry {
    std::int64_t timetosend = 0;  // Nanoseconds, where the driver uses jiffies.
    void* sqbuf = nullptr;
    std::uint32_t retranscount = 8;
    std::uint32_t retrycount = 64;
    int send_retrans = 1;
    int close_when_complete = 0;
};

struct DriverNode {
    DriverNode* hash_next = nullptr;   // The hlist of its hash bucket.
    DriverNode* timer_next = nullptr;  // timer_entry: the tick's private list.
    int refcnt = 1;
    int state = 0;
    DriverTimerEntry* send_entry = nullptr;
    DriverTimerEntry* close_entry = nullptr;
    unsigned char rest[448] = {};  // Addresses, TCP context, MPA state, private data, ...
};

constexpr std::size_t kDriverHashBuckets = 1024;  // IRDMA_CM_HASHTABLE_SIZE.

struct DriverModel {
    std::vector<DriverNode*> buckets = std::vector<DriverNode*>(kDriverHashBuckets, nullptr);
    std::vector<std::unique_ptr<DriverNode>> nodes;
    std::vector<std::unique_ptr<DriverTimerEntry>> entries;

    DriverModel(std::size_t n, FastRng& rng) {
        nodes.reserve(n);
        entries.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            // Interleave the two allocations as node creation and the first send do.
            nodes.push_back(std::make_unique<DriverNode>());
            entries.push_back(std::make_unique<DriverTimerEntry>());
            DriverNode* node = nodes.back().get();
            node->send_entry = entries.back().get();
            node->send_entry->timetosend = rng.delay().count();
            // The 4-tuple hash scatters nodes over buckets regardless of creation order.
            const std::size_t bucket = rng.next() % kDriverHashBuckets;
            node->hash_next = buckets[bucket];
            buckets[bucket] = node;
        }
    }

    // irdma_cm_timer_tick: irdma_timer_list_prep takes a reference on every node with an
    // entry and links it on a private list; the second pass checks each node's close and
    // send entries against now, resends and re-arms what is due, and tracks the earliest
    // remaining deadline for the next kernel timer. Returns how many entries were due.
    std::size_t tick(std::int64_t now, FastRng& rng, std::int64_t& next_timeout) {
        DriverNode* timer_list = nullptr;
        for (DriverNode* bucket : buckets) {
            for (DriverNode* node = bucket; node != nullptr; node = node->hash_next) {
                if ((node->close_entry != nullptr || node->send_entry != nullptr) &&
                    node->refcnt != 0) {
                    ++node->refcnt;
                    node->timer_next = timer_list;
                    timer_list = node;
                }
            }
        }
        std::size_t due = 0;
        next_timeout = now + 2'000'000'000;  // IRDMA_LONG_TIME.
        for (DriverNode* node = timer_list; node != nullptr; node = node->timer_next) {
            if (node->close_entry != nullptr && node->close_entry->timetosend > now) {
                next_timeout = std::min(next_timeout, node->close_entry->timetosend);
            }
            DriverTimerEntry* send = node->send_entry;
            if (send != nullptr) {
                if (send->timetosend > now) {
                    next_timeout = std::min(next_timeout, send->timetosend);
                } else {
                    // Resend and re-arm; N stays constant as in the wheel benchmark.
                    ++due;
                    send->timetosend = now + rng.delay().count();
                    next_timeout = std::min(next_timeout, send->timetosend);
                }
            }
            --node->refcnt;
        }
        return due;
    }
};

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
