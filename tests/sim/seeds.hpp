// The seed loop of the seeded simulation tests (stream_bulk_test.cpp,
// rdma_sim_test.cpp): seeds 1 to n, or one seed alone, each failure
// reported with its seed so that it replays.
//
// Read first: src/io/sim/sim.hpp (a seed replays a run exactly).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

namespace iwcm::test {

// Runs run_seed(seed) for seeds 1 to `default_seeds` (the environment
// variable `count_env` changes n; `one_env` runs that seed alone). The
// outcome has `ok` and `why`; the loop stops after five failures.
template <class RunSeed>
void run_seeds(const char* count_env, const char* one_env, std::uint64_t default_seeds,
               RunSeed run_seed) {
    const char* only = std::getenv(one_env);
    const char* count = std::getenv(count_env);
    const std::uint64_t first = only != nullptr ? std::strtoull(only, nullptr, 10) : 1;
    const std::uint64_t last = only != nullptr    ? first
                               : count != nullptr ? std::strtoull(count, nullptr, 10)
                                                  : default_seeds;
    std::uint64_t failures = 0;
    for (std::uint64_t seed = first; seed <= last; ++seed) {
        const auto o = run_seed(seed);
        if (!o.ok) {
            ++failures;
            ADD_FAILURE() << "seed " << seed << ": " << o.why;
            if (failures >= 5) break;
        }
    }
    EXPECT_EQ(failures, 0u);
}

}  // namespace iwcm::test
