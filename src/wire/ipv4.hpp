// IPv4 headers, without options and without fragments.
//
// Read first: RFC 791 section 3.1 (the header), RFC 1071 (its checksum),
// RFC 6864 (the identification field of atomic datagrams). A connection
// manager's segments are small and sent with DF set, so a fragment or a header
// with options is refused rather than reassembled or skipped.
#pragma once

#include <cstdint>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"
#include "wire/checksum.hpp"

namespace iwcm::wire {

struct Ipv4Repr {
    Ipv4Addr src;
    Ipv4Addr dst;
    std::uint8_t protocol = kIpProtoTcp;
    std::uint8_t ttl = 64;
    std::uint8_t tos = 0;  // DSCP and ECN, the whole byte
    std::uint16_t ident = 0;
    bool dont_fragment = true;
    std::uint16_t payload_len = 0;

    static constexpr std::size_t kHeaderLen = 20;
    // Writes the 20-byte header, its checksum included, at the start of out.
    void emit(MutBytes out) const;
    friend bool operator==(const Ipv4Repr&, const Ipv4Repr&) = default;
};

struct Ipv4Packet {
    Ipv4Repr repr;
    Bytes payload;  // cut to the total length
};

// Checks: version 4; IHL 5 (options refused); total length at least 20 and not
// beyond the buffer (a longer buffer is Ethernet padding and is cut off); MF
// clear and fragment offset zero; the header checksum. The reserved flag bit is
// ignored (RFC 791 gives it no meaning to act on).
ParseResult<Ipv4Packet> parse_ipv4(Bytes packet);

namespace detail {
// parse_ipv4() writing into its arguments.
DecodeStatus decode_ipv4(Bytes packet, Ipv4Repr& repr, Bytes& payload);
}  // namespace detail

}  // namespace iwcm::wire
