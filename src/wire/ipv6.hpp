// IPv6 headers, with their extension headers walked and skipped.
//
// Read first: RFC 8200 sections 3 (the header) and 4 (extension headers), RFC
// 5095 (type 0 routing headers deprecated), RFC 8021 (atomic fragments
// deprecated). What the parser does with each next header:
//
// - Hop-by-hop options (0, only right after the IPv6 header) and destination
//   options (60): walked option by option (Pad1, PadN and any option whose type's
//   two high bits are 00, "skip over this option"); an unknown option whose high
//   bits ask for the packet to be discarded (01, 10, 11: Jumbo Payload among
//   them) refuses it, kind kBadOption. Nothing is acted on.
// - Routing (43), any type: skipped when Segments Left is 0, so that we are the
//   final destination and the IPv6 destination is the pseudo-header's; with
//   Segments Left above 0 the packet is for a later hop and is refused, kind
//   kBadValue (we forward nothing; RFC 8200 4.4 has a host send a Parameter
//   Problem, which we do not).
// - Fragment (44): refused, kind kFragment, atomic fragments (offset 0, M clear)
//   included: a CM segment is never fragmented and RFC 8021 deprecates them.
// - Anything else ends the walk and is reported as the upper-layer protocol:
//   TCP (6), ICMPv6 (58), but also AH (51) and ESP (50), which we do not
//   verify or decrypt, and No Next Header (59); the caller decides (the frame
//   parser refuses all but TCP as "not TCP").
// - At most kMaxExtensionHeaders headers are walked, each within the payload
//   length; a longer chain is refused (kBadValue), a header running past the
//   payload too (kBadLength).
#pragma once

#include <cstdint>

#include "iwcm/address.hpp"
#include "wire/bytes.hpp"
#include "wire/checksum.hpp"

namespace iwcm::wire {

constexpr std::uint32_t kFlowLabelMax = 0xFFFFF;
constexpr std::size_t kMaxExtensionHeaders = 8;

// Next-header values of the extension headers the parser knows (RFC 8200 4, 4303, 4302).
namespace ipv6_next {
constexpr std::uint8_t kHopByHop = 0;
constexpr std::uint8_t kRouting = 43;
constexpr std::uint8_t kFragment = 44;
constexpr std::uint8_t kEsp = 50;
constexpr std::uint8_t kAh = 51;
constexpr std::uint8_t kNoNextHeader = 59;
constexpr std::uint8_t kDestinationOptions = 60;
}  // namespace ipv6_next

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

// repr is the header as we would write it: next_header is the upper-layer
// protocol found at the end of the walk and payload_len counts the upper-layer
// bytes only, so emitting repr drops the extension headers.
struct Ipv6Packet {
    Ipv6Repr repr;
    Bytes payload;     // the upper-layer bytes, cut to the payload length
    Bytes extensions;  // the extension headers skipped; empty without any
};

// Checks: version 6; payload length not beyond the buffer (a longer buffer is
// cut); the extension headers as the list at the top of this file says.
ParseResult<Ipv6Packet> parse_ipv6(Bytes packet);

namespace detail {
// parse_ipv6() writing into its arguments; the extension headers are the bytes
// from offset 40 to payload.data().
DecodeStatus decode_ipv6(Bytes packet, Ipv6Repr& repr, Bytes& payload);
}  // namespace detail

}  // namespace iwcm::wire
