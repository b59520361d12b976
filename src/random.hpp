// Secrets from the kernel's generator, for what a peer must not foresee
// (initial sequence numbers, SYN cookies, STags).
#pragma once

#include <cstddef>
#include <span>

namespace iwcm {

// Fills `out` from getrandom(2), which blocks only before the kernel's pool is
// first ready and fails only on bad arguments.
void fill_random(std::span<std::byte> out);

}  // namespace iwcm
