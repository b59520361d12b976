// `iwarp-cm bench`, every core: the setup-rate scaling over threads.
//
// Read first: tools/bench_shards.hpp, bench/shard_setup.hpp.
#include "tools/bench_shards.hpp"

#include <unistd.h>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define IWCM_SHARD_CALLGRIND_TOGGLE() CALLGRIND_TOGGLE_COLLECT
#else
#define IWCM_SHARD_CALLGRIND_TOGGLE() ((void)0)
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>

#include "bench/shard_setup.hpp"
#include "io/threads/shard_net.hpp"
#include "iwcm/assert.hpp"
#include "tools/bench_clock.hpp"

namespace iwcm::tools {

namespace {

double load_average() {
    double l = 0;
    return getloadavg(&l, 1) == 1 ? l : 0;
}

double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// What one thread measured; a cache line each, written by its thread only.
struct alignas(64) ThreadResult {
    std::uint64_t setups = 0;
    double loop_s = 0;  // wall time of its rounds, setups and teardowns
    double cpu_s = 0;   // thread CPU time of the same
    std::uint64_t errors = 0;
};

// The network for n threads, its shards' drivers, and whether pinning worked.
struct Rig {
    std::unique_ptr<io::ShardNet> net;
    std::vector<std::unique_ptr<bench::ShardSetup>> shards;
    bool ok = false;
};

Rig make_rig(std::uint32_t threads, std::size_t pdata) {
    Rig r;
    io::ShardNetConfig cfg;
    cfg.shards = threads;
    cfg.ring_slots = 1024;
    r.net = std::make_unique<io::ShardNet>(cfg, bench::ShardSetup::hosts());
    r.ok = bench::ShardSetup::prepare(*r.net);
    for (std::uint32_t s = 0; s < threads; ++s)
        r.shards.push_back(std::make_unique<bench::ShardSetup>(*r.net, s, pdata, pdata));
    return r;
}

// Every thread runs rounds of `batch` setups (each torn down after it) for
// `seconds`, then keeps its shard moving until all threads are done.
ShardRep run_rep(Rig& rig, std::size_t batch, double seconds, bool& pinned) {
    const auto n = static_cast<std::uint32_t>(rig.shards.size());
    std::vector<ThreadResult> out(n);
    std::vector<std::uint64_t> crossed0(n);
    for (std::uint32_t s = 0; s < n; ++s) crossed0[s] = rig.net->stats(s).sent_across;
    std::atomic<std::uint32_t> done{0};
    const auto start = SteadyClock::now();
    pinned = io::run_pinned(n,
                            [&](std::uint32_t i) {
                                bench::ShardSetup& w = *rig.shards[i];
                                ThreadResult& r = out[i];
                                const std::uint64_t err0 = w.counters().errors;
                                const double c0 = thread_cpu_s();
                                const auto t_start = SteadyClock::now();
                                while (seconds_since(t_start) < seconds) {
                                    r.setups += w.setup_round(batch);
                                    w.teardown_all();
                                }
                                r.loop_s = seconds_since(t_start);
                                r.cpu_s = thread_cpu_s() - c0;
                                done.fetch_add(1, std::memory_order_acq_rel);
                                while (done.load(std::memory_order_acquire) < n) w.step();
                                r.errors = w.counters().errors - err0;
                            }) &&
             pinned;
    ShardRep rep;
    rep.seconds = seconds_since(start);
    // Aggregate: every setup completed (and torn down) over the wall time until the last
    // thread's rounds ended.
    double wall = 0;
    for (std::uint32_t s = 0; s < n; ++s) {
        const ThreadResult& r = out[s];
        rep.setups += r.setups;
        rep.errors += r.errors;
        wall = std::max(wall, r.loop_s);
        if (r.cpu_s > 0) rep.cpu_rate += static_cast<double>(r.setups) / r.cpu_s;
        rep.crossed += rig.net->stats(s).sent_across - crossed0[s];
    }
    if (wall > 0) rep.wall_rate = static_cast<double>(rep.setups) / wall;
    return rep;
}

}  // namespace

double ShardPoint::wall_rate() const {
    std::vector<double> v;
    for (const ShardRep& r : reps) v.push_back(r.wall_rate);
    return median_of(v);
}

double ShardPoint::cpu_rate() const {
    std::vector<double> v;
    for (const ShardRep& r : reps) v.push_back(r.cpu_rate);
    return median_of(v);
}

double ShardPoint::mean_wall_rate() const {
    double sum = 0;
    for (const ShardRep& r : reps) sum += r.wall_rate;
    return reps.empty() ? 0 : sum / static_cast<double>(reps.size());
}

double ShardPoint::best_wall_rate() const {
    double best = 0;
    for (const ShardRep& r : reps) best = std::max(best, r.wall_rate);
    return best;
}

double ShardScaling::speedup(std::uint32_t threads, ShardStat stat) const {
    if (points.empty() || points.front().threads != 1) return 0;
    auto rate = [stat](const ShardPoint& p) {
        switch (stat) {
            case ShardStat::kMean: return p.mean_wall_rate();
            case ShardStat::kMedian: return p.wall_rate();
            case ShardStat::kBest: return p.best_wall_rate();
        }
        return 0.0;
    };
    const double one = rate(points.front());
    for (const ShardPoint& p : points)
        if (p.threads == threads) return one > 0 ? rate(p) / one : 0;
    return 0;
}

std::pair<double, double> ShardScaling::paired_range(std::uint32_t threads) const {
    if (points.empty() || points.front().threads != 1) return {0, 0};
    const std::vector<ShardRep>& one = points.front().reps;
    for (const ShardPoint& p : points) {
        if (p.threads != threads) continue;
        double lo = 0;
        double hi = 0;
        for (std::size_t k = 0; k < std::min(one.size(), p.reps.size()); ++k) {
            if (one[k].wall_rate <= 0) continue;
            const double x = p.reps[k].wall_rate / one[k].wall_rate;
            lo = lo > 0 ? std::min(lo, x) : x;
            hi = std::max(hi, x);
        }
        return {lo, hi};
    }
    return {0, 0};
}

std::uint64_t ShardScaling::errors() const {
    std::uint64_t e = 0;
    for (const ShardPoint& p : points)
        for (const ShardRep& r : p.reps) e += r.errors + (r.crossed > 0 ? 1 : 0);
    return e;
}

ShardScaling run_shard_scaling(std::size_t batch, std::size_t pdata, int reps, double seconds,
                               std::uint32_t max_threads, const ShardProgress& progress) {
    IWCM_ASSERT(reps >= 1);
    IWCM_ASSERT(max_threads >= 1);
    ShardScaling out;
    // 1, 2, 4, ... and the CPUs: every count on a small machine, a few on a big one.
    std::vector<std::uint32_t> counts;
    for (std::uint32_t n = 1; n < max_threads; n *= 2) counts.push_back(n);
    counts.push_back(max_threads);
    std::vector<Rig> rigs;
    for (std::uint32_t n : counts) {
        rigs.push_back(make_rig(n, pdata));
        out.points.push_back(ShardPoint{n, {}});
        bool pinned = true;
        ShardRep warm = run_rep(rigs.back(), batch, std::min(seconds, 0.1), pinned);
        if (!rigs.back().ok || warm.errors > 0)
            out.points.back().reps.push_back({0, 0, 0, 0, 0, 1});
    }
    out.load_before = load_average();
    const std::size_t total = static_cast<std::size_t>(reps) * counts.size();
    std::size_t step = 0;
    for (int rep = 0; rep < reps; ++rep) {
        for (std::size_t i = 0; i < counts.size(); ++i) {
            if (progress)
                progress("setup rate on " + std::to_string(counts[i]) + " threads, repetition",
                         ++step, total);
            bool pinned = true;
            out.points[i].reps.push_back(run_rep(rigs[i], batch, seconds, pinned));
            out.pinned = out.pinned && pinned;
        }
    }
    out.load_after = load_average();
    return out;
}

int run_shard_profile(std::uint64_t setups, std::uint32_t shards, std::size_t batch,
                      std::size_t pdata) {
    Rig rig = make_rig(shards, pdata);
    bench::ShardSetup& w = *rig.shards[0];
    for (std::uint64_t done = 0; done < setups;) {  // warm-up: pools reach size
        done += w.setup_round(batch);
        w.teardown_all();
    }
    std::uint64_t got = 0;
    const std::uint64_t frames0 = w.counters().frames;
    while (got < setups) {
        IWCM_SHARD_CALLGRIND_TOGGLE();
        const std::size_t n = w.setup_round(batch);
        IWCM_SHARD_CALLGRIND_TOGGLE();
        w.teardown_all();
        if (n == 0) break;
        got += n;
    }
    const std::uint64_t errors = w.counters().errors + (rig.ok ? 0 : 1);
    std::printf(
        "profiled %llu setups on shard 0 of %u (%llu frames, setup and teardown), "
        "errors %llu\n",
        static_cast<unsigned long long>(got), shards,
        static_cast<unsigned long long>(w.counters().frames - frames0),
        static_cast<unsigned long long>(errors));
    return errors == 0 && got >= setups ? 0 : 1;
}

void shard_scaling_json(std::ostream& j, const ShardScaling& s) {
    j << "{\"pinned\": " << (s.pinned ? "true" : "false") << ", \"load_before\": " << s.load_before
      << ", \"load_after\": " << s.load_after << ", \"points\": [";
    for (std::size_t i = 0; i < s.points.size(); ++i) {
        const ShardPoint& p = s.points[i];
        const auto [lo, hi] = s.paired_range(p.threads);
        j << (i ? "," : "") << "\n    {\"threads\": " << p.threads
          << ", \"wall_rate_per_s\": " << p.wall_rate() << ", \"cpu_rate_per_s\": " << p.cpu_rate()
          << ", \"mean_wall_rate_per_s\": " << p.mean_wall_rate()
          << ", \"best_wall_rate_per_s\": " << p.best_wall_rate()
          << ", \"speedup\": " << s.speedup(p.threads)
          << ", \"median_speedup\": " << s.speedup(p.threads, ShardStat::kMedian)
          << ", \"best_speedup\": " << s.speedup(p.threads, ShardStat::kBest)
          << ", \"paired_min\": " << lo << ", \"paired_max\": " << hi << ", \"reps\": [";
        for (std::size_t k = 0; k < p.reps.size(); ++k) {
            const ShardRep& r = p.reps[k];
            j << (k ? ", " : "") << "{\"setups\": " << r.setups
              << ", \"wall_rate_per_s\": " << r.wall_rate << ", \"cpu_rate_per_s\": " << r.cpu_rate
              << ", \"seconds\": " << r.seconds << ", \"frames_across_threads\": " << r.crossed
              << ", \"errors\": " << r.errors << "}";
        }
        j << "]}";
    }
    j << "\n  ]}";
}

void print_shard_scaling(const ShardScaling& s) {
    const std::size_t reps = s.points.empty() ? 0 : s.points.front().reps.size();
    std::printf(
        "\nsetup rate on every core (one shard per thread%s; setups and their teardowns "
        "completed per wall second, all threads together; no frame crosses threads; "
        "%zu repetitions interleaved; load %.1f -> %.1f)\n",
        s.pinned ? ", each pinned to its CPU" : ", NOT pinned", reps, s.load_before, s.load_after);
    std::printf("  %7s %12s %8s %8s %8s %13s %14s %8s\n", "threads", "mean/s", "speedup", "median",
                "best", "paired", "CPU setups/s", "per CPU");
    const double one_cpu = s.points.empty() ? 0 : s.points.front().cpu_rate();
    for (const ShardPoint& p : s.points) {
        const auto [lo, hi] = s.paired_range(p.threads);
        std::printf("  %7u %12.0f %7.2fx %7.2fx %7.2fx %5.2fx-%5.2fx %14.0f %7.2fx\n", p.threads,
                    p.mean_wall_rate(), s.speedup(p.threads),
                    s.speedup(p.threads, ShardStat::kMedian),
                    s.speedup(p.threads, ShardStat::kBest), lo, hi, p.cpu_rate(),
                    one_cpu > 0 ? p.cpu_rate() / one_cpu / p.threads : 0);
    }
}

}  // namespace iwcm::tools
