// Initial sequence numbers, RFC 6528 section 3:
//   ISN = M + F(localip, localport, remoteip, remoteport, secretkey)
// M is a clock ticking every 4 microseconds (here: the `now` handed in), F a
// keyed pseudo-random function (here SipHash-2-4, Aumasson and Bernstein,
// over the 4-tuple with a 128-bit key supplied by the configuration).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "iwcm/address.hpp"
#include "iwcm/time.hpp"

namespace iwcm::cm {

std::uint64_t siphash24(const std::array<std::uint8_t, 16>& key,
                        std::span<const std::uint8_t> data);

std::uint32_t initial_sequence(const std::array<std::uint8_t, 16>& secret, const Endpoint& local,
                               const Endpoint& remote, Instant now);

}  // namespace iwcm::cm
