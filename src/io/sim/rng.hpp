// Deterministic random numbers for the simulator, identical on every standard library.
//
// Read first: docs/design.md "Code style" ("Time and chance") and "Parts". A seed must
// replay a simulation bit for bit on any machine, so nothing here uses the
// standard's distributions (libstdc++ and libc++ map the same engine output to
// different values). The engine is xoshiro256** (Blackman and Vigna, 2018); its
// 256-bit state is filled from the seed by splitmix64, as its authors advise, so
// that nearby seeds (0, 1, 2, ...) give unrelated streams and the state is never
// all zero. Every distribution below is written out here and documented by the
// exact number of engine draws it consumes.
#pragma once

#include <array>
#include <cstdint>

#include "iwcm/assert.hpp"

namespace iwcm::io {

// One splitmix64 step (Steele, Lea and Flood, 2014): advances `state` and
// returns the next output. splitmix64(0) starting from 0 yields 0xe220a8397b1dcdaf.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
    state += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

class Rng {
public:
    explicit constexpr Rng(std::uint64_t seed) {
        std::uint64_t sm = seed;
        for (auto& word : s_) word = splitmix64(sm);
        // splitmix64 is a bijection of its counter, so four consecutive outputs
        // are never all zero; xoshiro's only forbidden state cannot occur.
        IWCM_ASSERT((s_[0] | s_[1] | s_[2] | s_[3]) != 0);
    }

    // One engine draw: the next 64 uniformly distributed bits.
    constexpr std::uint64_t next_u64() {
        const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // Uniform in [0, n), unbiased, for n > 0. Rejection sampling: a draw r is
    // kept only when r >= 2^64 mod n, so the kept range is a whole multiple of n.
    // Usually one draw; more than two is rarer than one in four for any n.
    constexpr std::uint64_t below(std::uint64_t n) {
        IWCM_ASSERT(n > 0);
        const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
        for (;;) {
            const std::uint64_t r = next_u64();
            if (r >= threshold) {
                const std::uint64_t value = r % n;
                IWCM_ASSERT(value < n);
                return value;
            }
        }
    }

    // Uniform in [0, 1) with 53 bits of precision: one draw.
    constexpr double unit() {
        const double value = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
        IWCM_ASSERT(value >= 0.0 && value < 1.0);
        return value;
    }

    // True with probability p, for p in [0, 1]: always exactly one draw, so the
    // stream does not depend on the value of p (chance(0) is never true,
    // chance(1) always).
    constexpr bool chance(double p) {
        IWCM_ASSERT(p >= 0.0 && p <= 1.0);
        return unit() < p;
    }

    // A new generator whose stream is independent of this one's: seeded (through
    // splitmix64) by one draw of this generator, which advances by that draw.
    constexpr Rng fork() { return Rng(next_u64() ^ kForkSalt); }

private:
    static constexpr std::uint64_t kForkSalt = 0x6a09e667f3bcc909ULL;  // sqrt(2) bits

    static constexpr std::uint64_t rotl(std::uint64_t x, int k) {
        return (x << k) | (x >> (64 - k));
    }

    std::array<std::uint64_t, 4> s_{};
};

}  // namespace iwcm::io
