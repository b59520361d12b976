// Time as the core sees it: values handed in from outside, never read.
//
// The core never reads a clock (docs/design.md, "Sans-I/O surface"). Every entry point
// takes an Instant; the simulator hands in virtual time, the TAP driver hands
// in steady_clock converted to this epoch. Instants count nanoseconds from an
// arbitrary epoch chosen by whoever drives the core.
#pragma once

#include <chrono>
#include <cstdint>

namespace iwcm {

// A clock type with no now(): it only names the epoch of Instant values.
struct Clock {
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::duration<rep, period>;
    using time_point = std::chrono::time_point<Clock>;
    static constexpr bool is_steady = true;
};

using Duration = Clock::duration;
using Instant = Clock::time_point;

constexpr Instant kInstantZero{};
constexpr Instant kInstantNever{Duration{INT64_MAX}};

constexpr Instant at_ms(std::int64_t ms) {
    return Instant{std::chrono::milliseconds{ms}};
}

}  // namespace iwcm
