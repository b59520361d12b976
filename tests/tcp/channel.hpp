// A segment in flight on the simulated channel of the stream tests, and the
// order in which they arrive. Read src/tcp/stream.hpp first.
#pragma once

#include <cstdint>
#include <vector>

#include "iwcm/time.hpp"
#include "wire/tcp.hpp"

namespace iwcm::tcp::test {

struct Packet {
    Instant at;
    std::uint64_t order = 0;  // ties keep sending order
    int to = 0;
    wire::SeqNumber seq;
    wire::SeqNumber ack;
    std::uint8_t flags = 0;
    std::uint16_t window = 0;
    std::vector<std::byte> payload;
};

// For a std::priority_queue whose top is the earliest arrival.
struct Later {
    bool operator()(const Packet& a, const Packet& b) const {
        return a.at != b.at ? a.at > b.at : a.order > b.order;
    }
};

}  // namespace iwcm::tcp::test
