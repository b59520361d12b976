// The timer workload of bench/timer_bench.cpp: the timing wheel's tick against the irdma
// driver's walk-every-node tick, as plain functions that `iwarp-cm bench` calls at the scale
// benchmark's N.
//
// Read first: bench/timer_bench.cpp and docs/perf.md (the Google benchmarks of the
// same workload, and the reasoning behind the driver model), src/timer/wheel.hpp, and in the
// Linux irdma driver irdma_timer_list_prep and irdma_cm_timer_tick.
//
// The workload: N pending retransmission timers with deadlines spread uniformly over 1 ms to
// 60 s, a 1 ms tick, and every expired timer re-armed 1 ms to 60 s later so that N stays
// constant; about N / 30000 timers expire per tick. The figure is nanoseconds per tick.
//
// FastRng and DriverModel are the timer benchmark's own, moved here so that both benchmarks
// measure the very same thing; timer_bench.cpp can include this header instead of keeping
// its copy.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <vector>

#include "timer/wheel.hpp"

namespace iwcm::bench {

constexpr std::int64_t kTimerSpreadMs = 60'000;

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
    Duration delay() {
        return std::chrono::milliseconds(1 + static_cast<std::int64_t>(next() % kTimerSpreadMs));
    }

private:
    std::uint64_t state_;
};

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

struct TickResult {
    std::size_t n = 0;
    std::uint64_t ticks = 0;
    double ns_per_tick = 0;  // thread CPU time
    double fired_per_tick = 0;
};

// CPU time of this thread (as the timer benchmark counts it: the machine is shared).
inline double thread_cpu_ns() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// Ticks until `budget` of thread CPU time has passed (at least `min_ticks`, at most `max_ticks`).
template <class TickFn>
TickResult run_ticks(std::size_t n, std::chrono::nanoseconds budget, std::uint64_t min_ticks,
                     std::uint64_t max_ticks, TickFn&& tick) {
    TickResult r;
    r.n = n;
    std::uint64_t fired = 0;
    const double start = thread_cpu_ns();
    double elapsed = 0;
    // Reads the clock after 1, 2, 4, ... ticks, so that neither a 10 ns tick is swamped by
    // the clock nor a 500 ms one overshoots the budget.
    std::uint64_t step = 1;
    while (r.ticks < max_ticks &&
           (r.ticks < min_ticks || elapsed < static_cast<double>(budget.count()))) {
        for (std::uint64_t i = 0; i < step && r.ticks < max_ticks; ++i, ++r.ticks) fired += tick();
        elapsed = thread_cpu_ns() - start;
        if (step < 4096) step *= 2;
    }
    r.ns_per_tick = elapsed / static_cast<double>(r.ticks);
    r.fired_per_tick = static_cast<double>(fired) / static_cast<double>(r.ticks);
    return r;
}

// The wheel with n pending entries, ticked every 1 ms of virtual time.
inline TickResult wheel_tick(std::size_t n, std::chrono::nanoseconds budget) {
    timer::TimerWheel wheel;
    wheel.reserve(n);
    FastRng rng(7);
    for (std::size_t i = 0; i < n; ++i) wheel.schedule(kInstantZero + rng.delay(), i);
    Instant now = kInstantZero;
    return run_ticks(n, budget, 64, 1u << 22, [&] {
        now += std::chrono::milliseconds(1);
        return wheel.advance(
            now, [&](std::uint64_t cookie) { wheel.schedule(now + rng.delay(), cookie); });
    });
}

// The driver model with n nodes, each with a send entry, ticked every 1 ms.
inline TickResult walk_tick(std::size_t n, std::chrono::nanoseconds budget) {
    FastRng rng(7);
    DriverModel model(n, rng);
    std::int64_t now = 0;
    std::int64_t next_timeout = 0;
    TickResult r = run_ticks(n, budget, 4, 1u << 22, [&] {
        now += 1'000'000;
        return model.tick(now, rng, next_timeout);
    });
    if (next_timeout < 0) r.ticks = 0;  // keeps next_timeout observable
    return r;
}

}  // namespace iwcm::bench
