// IPv6 headers, without extension headers.
//
// Read first: RFC 8200 sections 3 (the header) and 4 (extension headers).
// A connection manager's TCP segments need none, so any next header other than
// TCP or ICMPv6 is refused rather than walked.
#pragma once

#include <cstdint>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"
#include "wire/checksum.hpp"

namespace iwcm::wire {

constexpr std::uint32_t kFlowLabelMax = 0xFFFFF;

struct Ipv6Repr {
    Ipv6Addr src;
    Ipv6Addr dst;
    std::uint8_t next_header = 6;
    std::uint8_t hop_limit = 64;
    std::uint8_t traffic_class = 0;
    std::uint32_t flow_label = 0;  // 20 bits
    std::uint16_t payload_len = 0;

    static constexpr std::size_t kHeaderLen = 40;
    // Writes the 40-byte header at the start of out.
    void emit(MutBytes out) const;
    friend bool operator==(const Ipv6Repr&, const Ipv6Repr&) = default;
};

struct Ipv6Packet {
    Ipv6Repr repr;
    Bytes payload;  // cut to the payload length
};

// Checks: version 6; payload length not beyond the buffer (a longer buffer is
// cut); next header TCP (6) or ICMPv6 (58), anything else being refused as
// "extension header not supported".
ParseResult<Ipv6Packet> parse_ipv6(Bytes packet);

namespace detail {
// parse_ipv6() writing into its arguments.
DecodeStatus decode_ipv6(Bytes packet, Ipv6Repr& repr, Bytes& payload);
}  // namespace detail

}  // namespace iwcm::wire
