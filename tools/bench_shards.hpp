// `iwarp-cm bench`, every core: the setup rate on 1, 2, 4, ... threads and on
// as many as the CPUs, one shard per thread, each pinned to its own CPU.
//
// Read first: bench/shard_setup.hpp (one shard's work), src/io/threads/shard_net.hpp
// (the network on N threads), docs/perf.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace iwcm::tools {

// One repetition at one thread count.
struct ShardRep {
    std::uint64_t setups = 0;
    double wall_rate = 0;       // all threads' setups / the wall time until the last one's rounds
                                // (setup and teardown) ended
    double cpu_rate = 0;        // sum over threads of setups / thread CPU time of their rounds
    double seconds = 0;         // wall time of the whole repetition
    std::uint64_t crossed = 0;  // frames that went from one thread to another
    std::uint64_t errors = 0;
};

struct ShardPoint {
    std::uint32_t threads = 0;
    std::vector<ShardRep> reps;
    double wall_rate() const;  // median
    double mean_wall_rate() const;
    double best_wall_rate() const;
    double cpu_rate() const;  // median
};

// How a point's repetitions make one rate.
enum class ShardStat {
    kMean,    // the bench's target: every repetition counts, each as long as the others
    kMedian,  // the middle repetition
    kBest,    // the fastest repetition
};

struct ShardScaling {
    std::vector<ShardPoint> points;  // threads 1, 2, 4, ... and the CPUs
    bool pinned = true;              // every thread was pinned to its own CPU
    double load_before = 0;          // 1-minute load average around the phase
    double load_after = 0;
    // The wall rate at `threads` over the one-thread rate of the same run, each
    // made by `stat`. The target is the mean over many short repetitions,
    // interleaved: on a VM whose vCPUs speed up and slow down each on its own, a
    // best repetition of one thread needs one vCPU fast and one of two threads
    // needs both at once, so best over best leans low (docs/perf.md, "Every core").
    double speedup(std::uint32_t threads, ShardStat stat = ShardStat::kMean) const;
    // The lowest and highest ratio of a repetition at `threads` to the one-thread
    // repetition run just before it; {0, 0} without such pairs.
    std::pair<double, double> paired_range(std::uint32_t threads) const;
    std::uint64_t errors() const;
};

using ShardProgress = std::function<void(const std::string& phase, std::size_t, std::size_t)>;

// Repetitions interleaved across thread counts, so that every count sees the
// same machine.
ShardScaling run_shard_scaling(std::size_t batch, std::size_t pdata, int reps, double seconds,
                               std::uint32_t max_threads, const ShardProgress& progress);
// Callgrind mode: shard 0 of a `shards`-shard network, in this thread, with
// only `setups` setups' worth of rounds collected (after a warm-up). Prints
// the count; returns the exit code.
int run_shard_profile(std::uint64_t setups, std::uint32_t shards, std::size_t batch,
                      std::size_t pdata);
void shard_scaling_json(std::ostream& j, const ShardScaling& s);
void print_shard_scaling(const ShardScaling& s);

}  // namespace iwcm::tools
